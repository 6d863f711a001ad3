"""Rules: ``np.histogram``, ``np.histogram_bin_edges``, ``np.histogramdd`` and ``np.histogram2d``.

A histogram's counts are piecewise constant in the samples ``a``, so what carries a
derivative is:

- the **weights**: ``hist = bincount(bin, weights)`` is linear in them (with
  ``density=True``, divided by their in-range sum and the bin widths);
- the **edges**, returned, and with ``density=True`` dividing the heights by the
  widths. They come from ``bins`` when it is an array of edges; else they are
  ``np.linspace(first, last, n + 1)``, ``(first, last)`` being ``range``, or the smallest
  and largest sample when no range is given (so those two samples move them).

In ``D`` dimensions each axis has its own edges, placed the same way, and the cells'
volumes take the widths' place. The value is NumPy's own, bit for bit; the derivatives
are written in NumPy calls that have rules, so second derivatives trace through them.

    a, weights --np.histogram--> (hist, edges)

The rules are written for real values: complex samples or weights are refused.
"""

import numpy as np

from ..tangents import NoTangent, ZeroTangent, is_zero
from ._compose import composed
from ..tangents import dense
from ._utils import numpy_frule, numpy_rrule, tangent_at
from .indexing import scatter_add


class _Cells:
    """Which cell (a bin, in ``D`` dimensions a tuple of bins) each sample fell in:
    ``cell``, flat into ``shape``, and whether it fell in any (``inside``)."""

    inside: np.ndarray
    cell: np.ndarray
    shape: tuple

    def counts(self, weights):
        """The raw (weighted) counts, from ``weights`` or their tangent."""
        w = np.where(self.inside, np.ravel(weights), 0.0)
        return np.reshape(np.bincount(self.cell, w, minlength=int(np.prod(self.shape))), self.shape)

    def total(self, weights):
        """The in-range weights' sum (the count without weights)."""
        return np.sum(self.inside) if weights is None else np.sum(np.where(self.inside, np.ravel(weights), 0.0))

    def gather(self, per_cell, shape):
        """``per_cell[cell of each sample]``, 0 for the samples outside every cell."""
        return np.reshape(np.where(self.inside, np.ravel(per_cell)[self.cell], 0.0), shape)


def _diff_adjoint(g_width):
    """The edges' cotangent from the widths' (``width = np.diff(edges)``)."""
    return np.concatenate([[0.0], g_width]) - np.concatenate([g_width, [0.0]])


def _volumes(edges):
    """Each cell's volume: the outer product of the axes' widths."""
    out = np.ones(())
    for e in edges:
        out = np.multiply.outer(out, np.diff(e))
    return out


def _other_axes(n, d):
    return tuple(k for k in range(n) if k != d)


def _heights_pullback(cells, hist, edges, g_hist, g_edges, density, weights):
    """``(w̄eights, [ēdges of each axis])``: ``hist`` is the (weighted) counts ``c``, or
    with ``density`` ``c / (S volume)``, ``S = Σ c`` and the volumes made of the widths."""
    g_weights, g_edges = ZeroTangent(), list(g_edges)
    if is_zero(g_hist):
        return g_weights, g_edges
    g_counts = g_hist
    if density:
        g_hist_hist = g_hist * hist
        g_counts = (g_hist / _volumes(edges) - np.sum(g_hist_hist)) / cells.total(weights)
        for d, e in enumerate(edges):
            g_width = -np.sum(g_hist_hist, axis=_other_axes(len(edges), d)) / np.diff(e)
            g_edges[d] = g_edges[d] + _diff_adjoint(g_width)
    if weights is not None:
        g_weights = cells.gather(g_counts, np.shape(weights))
    return g_weights, g_edges


def _heights_tangent(cells, hist, edges, d_edges, density, weights, d_weights):
    """The heights' tangent from the weights' and each axis's edges' (see ``_heights_pullback``)."""
    d_hist = ZeroTangent()
    if weights is not None and not is_zero(d_weights):
        d_hist = cells.counts(d_weights)
        if density:
            total = cells.total(weights)
            d_hist = d_hist / (total * _volumes(edges)) - hist * (np.sum(d_hist) / total)
    if density:  # each axis's widths scale the cells' volumes
        for d, (e, de) in enumerate(zip(edges, d_edges)):
            if not is_zero(de):
                shape = [1] * len(edges)
                shape[d] = -1
                d_hist = d_hist - hist * np.reshape(np.diff(de) / np.diff(e), shape)
    return d_hist


class _Binned(_Cells):
    """Which bin each sample fell in (as NumPy counts it: the last bin includes its right
    edge), and where the edges came from."""

    def __init__(self, a, bins, range, edges):
        a = np.ravel(a)
        self.n_bins = len(edges) - 1
        index = np.searchsorted(edges, a, side="right") - 1
        index = np.where(a == edges[-1], self.n_bins - 1, index)
        self.inside = (index >= 0) & (index < self.n_bins)
        self.index = self.cell = np.where(self.inside, index, 0)
        self.shape = (self.n_bins,)
        self.from_bins = np.ndim(bins) == 1
        self.from_data = not self.from_bins and range is None and a.size > 0
        if self.from_data:  # the samples that placed the first and last edges
            self.lowest, self.highest = int(np.argmin(a)), int(np.argmax(a))
        self.k = np.arange(self.n_bins + 1) / self.n_bins  # edge k = first + k (last - first)

    def edges_tangent(self, da, dbins, drange):
        """The edges' tangent from the tangent of where they came from."""
        if self.from_bins:
            return dbins
        if self.from_data and not is_zero(da):
            flat = np.ravel(da)
            return flat[self.lowest] * (1.0 - self.k) + flat[self.highest] * self.k
        if not self.from_data and not is_zero(drange):
            return drange[0] * (1.0 - self.k) + drange[1] * self.k
        return ZeroTangent()

    def route(self, g_edges, a_shape):
        """``(ā, b̄ins, r̄ange)`` from the edges' cotangent: to where they came from."""
        if is_zero(g_edges):
            return ZeroTangent(), ZeroTangent(), ZeroTangent()
        if self.from_bins:
            return ZeroTangent(), g_edges, ZeroTangent()
        g_first, g_last = np.sum(g_edges * (1.0 - self.k)), np.sum(g_edges * self.k)
        if not self.from_data:
            return ZeroTangent(), ZeroTangent(), np.stack([g_first, g_last])
        return (scatter_add(a_shape, np.unravel_index(self.lowest, a_shape), g_first)
                + scatter_add(a_shape, np.unravel_index(self.highest, a_shape), g_last)), ZeroTangent(), ZeroTangent()


def _slot(cotangent, arg):
    """An argument's slot: NoTangent for options (None, counts, rule names), else its cotangent."""
    if arg is None or np.ndim(arg) == 0:
        return NoTangent()
    return cotangent


@numpy_rrule(np.histogram)
def histogram_rrule(a, bins=10, range=None, density=None, weights=None):
    hist, edges = np.histogram(a, bins, range, density, weights)
    binned = _Binned(a, bins, range, edges)

    def histogram_pullback(g):
        g_hist, g_edges = g if type(g) in (list, tuple) else (g, ZeroTangent())
        g_weights, (g_edges,) = _heights_pullback(binned, hist, [edges], g_hist, [g_edges], density, weights)
        g_a, g_bins, g_range = binned.route(g_edges, np.shape(a))
        return (NoTangent(), g_a, _slot(g_bins, bins), _slot(g_range, range), NoTangent(),
                _slot(g_weights, weights))

    return (hist, edges), histogram_pullback


@numpy_frule(np.histogram)
def histogram_frule(tangents, a, bins=10, range=None, density=None, weights=None):
    hist, edges = np.histogram(a, bins, range, density, weights)
    binned = _Binned(a, bins, range, edges)
    d_edges = binned.edges_tangent(tangent_at(tangents, 0), tangent_at(tangents, 1), tangent_at(tangents, 2))
    d_hist = _heights_tangent(binned, hist, [edges], [d_edges], density, weights, tangent_at(tangents, 4))
    if is_zero(d_hist) and is_zero(d_edges):
        return (hist, edges), ZeroTangent()
    return (hist, edges), (d_hist, d_edges)


@numpy_rrule(np.histogram_bin_edges)
def histogram_bin_edges_rrule(a, bins=10, range=None, weights=None):
    edges = np.histogram_bin_edges(a, bins, range, weights)
    binned = _Binned(a, bins, range, edges)

    def histogram_bin_edges_pullback(g):
        g_a, g_bins, g_range = binned.route(g, np.shape(a))
        return NoTangent(), g_a, _slot(g_bins, bins), _slot(g_range, range), _slot(ZeroTangent(), weights)

    return edges, histogram_bin_edges_pullback


@numpy_frule(np.histogram_bin_edges)
def histogram_bin_edges_frule(tangents, a, bins=10, range=None, weights=None):
    edges = np.histogram_bin_edges(a, bins, range, weights)
    binned = _Binned(a, bins, range, edges)
    return edges, binned.edges_tangent(tangent_at(tangents, 0), tangent_at(tangents, 1), tangent_at(tangents, 2))


# ---- D dimensions ---------------------------------------------------------------------------
def _axes(sample):
    """The sample's coordinates along each axis, as NumPy reads it: a list of ``D`` arrays
    of the points' coordinates, or an ``(N, D)`` array."""
    if isinstance(sample, (list, tuple)):
        return list(sample)
    if np.ndim(sample) == 1:
        return [sample]
    return [sample[:, d] for d in range(np.shape(sample)[1])]


def _for_all_axes(option):
    """A ``bins`` or ``range`` that holds one setting for every axis (a count, None)."""
    return option is None or not isinstance(option, (list, tuple)) and np.ndim(option) == 0


def _of_axis(option, d):
    """``bins`` or ``range`` for axis ``d``: NumPy takes one for all axes or one each."""
    return option if _for_all_axes(option) else option[d]


class _BinnedDD(_Cells):
    """Each axis binned as ``_Binned`` bins one; the cell each point fell in."""

    def __init__(self, sample, bins, range, edges):
        self.axes = [_Binned(x, _of_axis(bins, d), _of_axis(range, d), e)
                     for d, (x, e) in enumerate(zip(_axes(sample), edges))]
        self.shape = tuple(b.n_bins for b in self.axes)
        self.inside = np.logical_and.reduce([b.inside for b in self.axes])
        self.cell = np.ravel_multi_index([b.index for b in self.axes], self.shape)


def _per_axis_cotangents(option, cotangents):
    """``bins``' or ``range``'s cotangent from each axis's: NoTangent where it held no
    numbers to move (a count, None), one entry an axis where it was given per axis."""
    if _for_all_axes(option) or all(_for_all_axes(o) for o in option):
        return NoTangent()
    if isinstance(option, np.ndarray):  # one array holding every axis's setting
        return np.stack([dense(g, o) for o, g in zip(option, cotangents)])
    return [NoTangent() if _for_all_axes(o) else g for o, g in zip(option, cotangents)]


@numpy_rrule(np.histogramdd)
def histogramdd_rrule(sample, bins=10, range=None, density=None, weights=None):
    hist, edges = np.histogramdd(sample, bins, range, density, weights)
    binned = _BinnedDD(sample, bins, range, edges)

    def histogramdd_pullback(g):
        g_hist, g_edges = g if type(g) in (list, tuple) else (g, ZeroTangent())
        g_edges = g_edges if type(g_edges) in (list, tuple) else [ZeroTangent()] * len(edges)
        g_weights, g_edges = _heights_pullback(binned, hist, edges, g_hist, g_edges, density, weights)
        routed = [b.route(ge, np.shape(b.index)) for b, ge in zip(binned.axes, g_edges)]
        g_axes = [ga for ga, _, _ in routed]
        if isinstance(sample, (list, tuple)):
            g_sample = g_axes
        elif all(is_zero(ga) for ga in g_axes):
            g_sample = ZeroTangent()
        else:
            g_sample = np.reshape(np.stack([dense(ga, b.index) for ga, b in zip(g_axes, binned.axes)], axis=-1),
                                  np.shape(sample))
        return (NoTangent(), g_sample, _per_axis_cotangents(bins, [gb for _, gb, _ in routed]),
                _per_axis_cotangents(range, [gr for _, _, gr in routed]), NoTangent(), _slot(g_weights, weights))

    return (hist, edges), histogramdd_pullback


@numpy_frule(np.histogramdd)
def histogramdd_frule(tangents, sample, bins=10, range=None, density=None, weights=None):
    hist, edges = np.histogramdd(sample, bins, range, density, weights)
    binned = _BinnedDD(sample, bins, range, edges)
    d_sample, d_bins, d_range, d_weights = (tangent_at(tangents, i) for i in (0, 1, 2, 4))
    d_axes = (list(d_sample) if isinstance(d_sample, (list, tuple))
              else [ZeroTangent()] * len(edges) if is_zero(d_sample) else _axes(d_sample))
    d_edges = [b.edges_tangent(da, _of_axis(d_bins, d) if not is_zero(d_bins) else ZeroTangent(),
                               _of_axis(d_range, d) if not is_zero(d_range) else ZeroTangent())
               for d, (b, da) in enumerate(zip(binned.axes, d_axes))]
    d_hist = _heights_tangent(binned, hist, edges, d_edges, density, weights, d_weights)
    if is_zero(d_hist) and all(is_zero(de) for de in d_edges):
        return (hist, edges), ZeroTangent()
    return (hist, edges), (d_hist, [dense(de, e) for de, e in zip(d_edges, edges)])


def histogram2d(x, y, bins=10, range=None, density=None, weights=None):
    """NumPy's own ``histogram2d``, as ``histogramdd`` of the points ``(x, y)``."""
    try:
        n = len(bins)
    except TypeError:
        n = 1
    if n != 1 and n != 2:  # one array of edges for both axes
        bins = [bins, bins]
    hist, (x_edges, y_edges) = np.histogramdd([x, y], bins, range, density, weights)
    return hist, x_edges, y_edges


composed(np.histogram2d, histogram2d)
