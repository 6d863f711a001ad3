"""Rules: ``np.histogram`` and ``np.histogram_bin_edges``.

A histogram's counts are piecewise constant in the samples ``a``, so what carries a
derivative is:

- the **weights**: ``hist = bincount(bin, weights)`` is linear in them (with
  ``density=True``, divided by their in-range sum and the bin widths);
- the **edges**, returned, and with ``density=True`` dividing the heights by the
  widths. They come from ``bins`` when it is an array of edges; else they are
  ``np.linspace(first, last, n + 1)``, ``(first, last)`` being ``range``, or the smallest
  and largest sample when no range is given (so those two samples move them).

The value is NumPy's own, bit for bit; the derivatives are written in NumPy calls that
have rules, so second derivatives trace through them.

    a, weights --np.histogram--> (hist, edges)
"""

import numpy as np

from ..tangents import NoTangent, ZeroTangent, is_zero
from ._utils import forward_rule, reverse_rule, tangent_at
from .indexing import scatter_add


class _Binned:
    """Which bin each sample fell in (as NumPy counts it: the last bin includes its right
    edge), and where the edges came from."""

    def __init__(self, a, bins, range, edges):
        a = np.ravel(a)
        self.n_bins = len(edges) - 1
        index = np.searchsorted(edges, a, side="right") - 1
        index = np.where(a == edges[-1], self.n_bins - 1, index)
        self.inside = (index >= 0) & (index < self.n_bins)
        self.index = np.where(self.inside, index, 0)
        self.from_bins = np.ndim(bins) == 1
        self.from_data = not self.from_bins and range is None and a.size > 0
        if self.from_data:  # the samples that placed the first and last edges
            self.lowest, self.highest = int(np.argmin(a)), int(np.argmax(a))
        self.k = np.arange(self.n_bins + 1) / self.n_bins  # edge k = first + k (last - first)

    def counts(self, weights):
        """The raw (weighted) counts, from ``weights`` or their tangent."""
        w = np.where(self.inside, np.ravel(weights), 0.0)
        return np.bincount(self.index, w, minlength=self.n_bins)

    def total(self, weights):
        """The in-range weights' sum (the count without weights)."""
        return np.sum(self.inside) if weights is None else np.sum(np.where(self.inside, np.ravel(weights), 0.0))

    def gather(self, per_bin, shape):
        """``per_bin[bin of each sample]``, 0 for the samples outside every bin."""
        return np.reshape(np.where(self.inside, per_bin[self.index], 0.0), shape)

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


@reverse_rule(np.histogram)
def histogram_rrule(a, bins=10, range=None, density=None, weights=None):
    hist, edges = np.histogram(a, bins, range, density, weights)
    binned = _Binned(a, bins, range, edges)

    def histogram_pullback(g):
        g_hist, g_edges = g if type(g) in (list, tuple) else (g, ZeroTangent())
        g_weights = ZeroTangent()
        if not is_zero(g_hist):
            g_counts = g_hist
            if density:  # hist_i = c_i / (S w_i), S = Σ c, w = diff(edges)
                width = np.diff(edges)
                g_counts = (g_hist / width - np.sum(g_hist * hist)) / binned.total(weights)
                g_width = -g_hist * hist / width
                g_edges = g_edges + (np.concatenate([[0.0], g_width]) - np.concatenate([g_width, [0.0]]))
            if weights is not None:
                g_weights = binned.gather(g_counts, np.shape(weights))
        g_a, g_bins, g_range = binned.route(g_edges, np.shape(a))
        return (NoTangent(), g_a, _slot(g_bins, bins), _slot(g_range, range), NoTangent(),
                _slot(g_weights, weights))

    return (hist, edges), histogram_pullback


@forward_rule(np.histogram)
def histogram_frule(tangents, a, bins=10, range=None, density=None, weights=None):
    hist, edges = np.histogram(a, bins, range, density, weights)
    binned = _Binned(a, bins, range, edges)
    dweights = tangent_at(tangents, 4)
    d_edges = binned.edges_tangent(tangent_at(tangents, 0), tangent_at(tangents, 1), tangent_at(tangents, 2))
    d_hist = ZeroTangent()
    if weights is not None and not is_zero(dweights):
        d_hist = binned.counts(dweights)
        if density:
            total = binned.total(weights)
            d_hist = d_hist / (total * np.diff(edges)) - hist * (np.sum(d_hist) / total)
    if density and not is_zero(d_edges):  # the heights shrink as the widths grow
        d_hist = d_hist - hist * (np.diff(d_edges) / np.diff(edges))
    if is_zero(d_hist) and is_zero(d_edges):
        return (hist, edges), ZeroTangent()
    return (hist, edges), (d_hist, d_edges)


@reverse_rule(np.histogram_bin_edges)
def histogram_bin_edges_rrule(a, bins=10, range=None, weights=None):
    edges = np.histogram_bin_edges(a, bins, range, weights)
    binned = _Binned(a, bins, range, edges)

    def histogram_bin_edges_pullback(g):
        g_a, g_bins, g_range = binned.route(g, np.shape(a))
        return NoTangent(), g_a, _slot(g_bins, bins), _slot(g_range, range), _slot(ZeroTangent(), weights)

    return edges, histogram_bin_edges_pullback


@forward_rule(np.histogram_bin_edges)
def histogram_bin_edges_frule(tangents, a, bins=10, range=None, weights=None):
    edges = np.histogram_bin_edges(a, bins, range, weights)
    binned = _Binned(a, bins, range, edges)
    return edges, binned.edges_tangent(tangent_at(tangents, 0), tangent_at(tangents, 1), tangent_at(tangents, 2))
