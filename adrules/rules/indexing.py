"""Rules: indexing, gathers and sorting.

Every function here reads ``x[index]`` for some index it can name (``take``,
``take_along_axis``, ``sort``, ``diagonal`` only compute that index), so every pullback
is the same scatter, ``scatter_add(x.shape, index, g)``; the overlapping windows of
``sliding_window_view`` add up in ``window_sum``. Both are primitives of their own, with
the gather (the windows) as their pullback, so second derivatives trace through them.

    x --getitem(·, index)--> y          ȳ --scatter_add(shape, index, ·)--> x̄

Optional trailing arguments (``axis``, ``mode``, ``UPLO``...) follow ``_utils.py``: rules
take NumPy's own parameters and ``numpy_rrule`` fits each pullback to the call.

Gathers and scatters are linear with real coefficients: right for complex values as they
are (``complex=True``). ``sort`` orders values, which complex numbers do not have (NumPy
orders them lexicographically), and ``bincount`` takes real weights only: both refuse.
"""

import numpy as np

from .. import ops
from ..registry import frule, primitive, rrule
from ..tangents import NoTangent, ZeroTangent, is_zero, unthunk
from ._utils import numpy_frule, numpy_rrule, tangent_at


def _has_int_array(index):
    """True when ``index`` holds an integer array, the only kind that can repeat a position."""
    parts = index if type(index) is tuple else (index,)
    return any(isinstance(p, (list, np.ndarray)) and np.asarray(p).dtype.kind in "iu" for p in parts)


def _along(values, position, ndim):
    """``values`` (1-D) reshaped to lie along axis ``position`` of ``ndim`` axes, for broadcasting."""
    return np.reshape(values, [-1 if d == position else 1 for d in range(ndim)])


# ---- the scatter: adjoint of every gather -----------------------------------------
@primitive
def scatter_add(shape, index, values):
    """A zero array of ``shape`` with ``values`` added at ``index``; repeated positions add up.

    The adjoint of ``x[index]``: the pullback of every gather in this module.

    >>> scatter_add((3,), np.array([0, 2, 0]), np.array([1.0, 2.0, 3.0]))
    array([4., 0., 2.])
    """
    out = np.zeros(shape, dtype=np.result_type(values))
    if _has_int_array(index):
        np.add.at(out, index, values)
    else:  # slices, integers and masks never repeat a position: plain assignment is faster
        out[index] = values
    return out


@rrule.register(scatter_add, complex=True)
def scatter_add_rrule(shape, index, values):
    def scatter_add_pullback(g):
        g = unthunk(g)
        return NoTangent(), NoTangent(), NoTangent(), ops.getitem(g, index)

    return scatter_add(shape, index, values), scatter_add_pullback


@frule.register(scatter_add, complex=True)
def scatter_add_frule(tangents, shape, index, values):
    dvalues = tangents[3]
    dy = ZeroTangent() if is_zero(dvalues) else scatter_add(shape, index, dvalues)
    return scatter_add(shape, index, values), dy


# ---- x[index] ---------------------------------------------------------------------
@rrule.register(ops.getitem, complex=True)
def getitem_rrule(x, index):
    shape = np.shape(x)

    def getitem_pullback(g):
        g = unthunk(g)
        return NoTangent(), scatter_add(shape, index, g), NoTangent()

    return ops.getitem(x, index), getitem_pullback


@frule.register(ops.getitem, complex=True)
def getitem_frule(tangents, x, index):
    dx = tangents[1]
    return ops.getitem(x, index), ZeroTangent() if is_zero(dx) else ops.getitem(dx, index)


# ---- gathers: each computes the index it reads --------------------------------------
def _take_index(shape, indices, axis, mode):
    """The index with ``x[index] == np.take(x, indices, axis, mode=mode)``."""
    n = int(np.prod(shape)) if axis is None else shape[axis]
    # mode="raise" was checked by np.take itself, so wrapping only turns -1 into n - 1 there
    indices = np.clip(indices, 0, n - 1) if mode == "clip" else np.mod(indices, n)
    if axis is None:
        return np.unravel_index(indices, shape)
    return (slice(None),) * (axis % len(shape)) + (indices,)


def along_axis_index(shape, indices, axis):
    """The index with ``x[index] == np.take_along_axis(x, indices, axis)``: the other axes
    are broadcast ranges, so the gather keeps the layout of ``indices``."""
    if axis is None:
        return np.unravel_index(np.mod(indices, int(np.prod(shape))), shape)
    axis, ndim = axis % len(shape), len(shape)
    return tuple(indices if d == axis else _along(np.arange(n), d, ndim) for d, n in enumerate(shape))


def _diagonal_index(shape, offset, axis1, axis2):
    """The index with ``x[index] == np.diagonal(x, offset, axis1, axis2)`` (diagonal last)."""
    ndim = len(shape)
    axis1, axis2 = axis1 % ndim, axis2 % ndim
    k = max(0, min(shape[axis1] + min(offset, 0), shape[axis2] - max(offset, 0)))
    rest = [d for d in range(ndim) if d not in (axis1, axis2)]
    index = [None] * ndim
    for position, d in enumerate(rest):
        index[d] = _along(np.arange(shape[d]), position, ndim - 1)
    index[axis1] = _along(np.arange(k) + max(-offset, 0), ndim - 2, ndim - 1)
    index[axis2] = _along(np.arange(k) + max(offset, 0), ndim - 2, ndim - 1)
    return tuple(index)


@numpy_rrule(np.take, complex=True)
def take_rrule(a, indices, axis=None, out=None, mode="raise"):
    shape, index = np.shape(a), _take_index(np.shape(a), indices, axis, mode)

    def take_pullback(g):
        return NoTangent(), scatter_add(shape, index, g)

    return np.take(a, indices, axis, mode=mode), take_pullback


@numpy_frule(np.take, complex=True)
def take_frule(tangents, a, indices, axis=None, out=None, mode="raise"):
    da = tangents[1]
    y = np.take(a, indices, axis, mode=mode)
    return y, ZeroTangent() if is_zero(da) else np.take(da, indices, axis, mode=mode)


@numpy_rrule(np.bincount)
def bincount_rrule(x, weights=None, minlength=0):
    """A sum by index (np.add.at's out-of-place form): linear in ``weights``."""
    y = np.bincount(x, weights, minlength)

    def bincount_pullback(g):
        return NoTangent(), NoTangent(), NoTangent() if weights is None else g[x], NoTangent()

    return y, bincount_pullback


@numpy_frule(np.bincount)
def bincount_frule(tangents, x, weights=None, minlength=0):
    dw = tangent_at(tangents, 1)
    y = np.bincount(x, weights, minlength)
    return y, ZeroTangent() if weights is None or is_zero(dw) else np.bincount(x, dw, minlength)


@numpy_rrule(np.take_along_axis, complex=True)
def take_along_axis_rrule(arr, indices, axis=-1):
    shape, index = np.shape(arr), along_axis_index(np.shape(arr), indices, axis)

    def take_along_axis_pullback(g):
        return NoTangent(), scatter_add(shape, index, g)

    return np.take_along_axis(arr, indices, axis), take_along_axis_pullback


@numpy_frule(np.take_along_axis, complex=True)
def take_along_axis_frule(tangents, arr, indices, axis=-1):
    darr = tangents[1]
    y = np.take_along_axis(arr, indices, axis)
    return y, ZeroTangent() if is_zero(darr) else np.take_along_axis(darr, indices, axis)


def _sort_index(a, axis):
    """The index with ``a[index] == np.sort(a, axis)`` (stable, so ties keep their order)."""
    order = np.argsort(a, axis=axis, kind="stable")
    return along_axis_index(np.shape(a), order, axis)


@numpy_rrule(np.sort)
def sort_rrule(a, axis=-1, kind=None, order=None, **kwargs):
    shape, index = np.shape(a), _sort_index(a, axis)

    def sort_pullback(g):
        return NoTangent(), scatter_add(shape, index, g)

    return ops.getitem(a, index), sort_pullback


@numpy_frule(np.sort)
def sort_frule(tangents, a, axis=-1, kind=None, order=None, **kwargs):
    da, index = tangents[1], _sort_index(a, axis)
    return ops.getitem(a, index), ZeroTangent() if is_zero(da) else ops.getitem(da, index)


@numpy_rrule(np.diagonal, complex=True)
def diagonal_rrule(a, offset=0, axis1=0, axis2=1):
    shape = np.shape(a)
    index = _diagonal_index(shape, offset, axis1, axis2)

    def diagonal_pullback(g):
        return NoTangent(), scatter_add(shape, index, g)

    return np.diagonal(a, offset, axis1, axis2), diagonal_pullback


@numpy_frule(np.diagonal, complex=True)
def diagonal_frule(tangents, a, offset=0, axis1=0, axis2=1):
    da = tangents[1]
    y = np.diagonal(a, offset, axis1, axis2)
    return y, ZeroTangent() if is_zero(da) else np.diagonal(da, offset, axis1, axis2)


# ---- sliding windows ------------------------------------------------------------------
def _window_slices(shape, window_shape, axis):
    """For each position in the window, (its index in the windows' last axes, the slice of
    ``x`` that position reads across all windows). An axis may be windowed twice."""
    ndim = len(shape)
    axes = list(range(ndim)) if axis is None else [a % ndim for a in np.atleast_1d(axis).tolist()]
    window = [int(w) for w in np.atleast_1d(window_shape).tolist()]
    lengths = list(shape)
    for a, w in zip(axes, window):
        lengths[a] -= w - 1  # the number of windows along a
    for offset in np.ndindex(*window):
        starts = [0] * ndim
        for a, o in zip(axes, offset):
            starts[a] += o
        yield (Ellipsis, *offset), tuple(slice(s, s + n) for s, n in zip(starts, lengths))


@primitive
def window_sum(shape, window_shape, axis, g):
    """An array of ``shape`` to which each window of ``g`` (shaped as
    ``sliding_window_view(x, window_shape, axis)`` of an ``x`` of ``shape``) adds its
    values where it read them: the adjoint of the windows, and their pullback.

    >>> window_sum((4,), 2, None, np.array([[1.0, 2.0], [10.0, 20.0], [100.0, 200.0]]))
    array([  1.,  12., 120., 200.])
    """
    out = np.zeros(shape, dtype=np.result_type(g))
    if not out.ndim:
        return out
    # Block by block along the first axis, every window position within a block: a
    # position's slice of g is strided (one number a window), so a pass over the whole of
    # g for each position would read all of g from memory as many times as the window is
    # long; a block of g small enough to stay in cache is read from memory once.
    rows = g.shape[0]
    block = max(1, _WINDOW_BLOCK_BYTES // max(1, g[:1].nbytes))
    slices = list(_window_slices(shape, window_shape, axis))
    for r0 in range(0, rows, block):
        r1 = min(r0 + block, rows)
        g_rows = g[r0:r1]
        for position, part in slices:
            first = part[0]
            out[(slice(first.start + r0, first.start + r1),) + part[1:]] += g_rows[position]
    return out


_WINDOW_BLOCK_BYTES = 2**18


@rrule.register(window_sum, complex=True)
def window_sum_rrule(shape, window_shape, axis, g):
    def window_sum_pullback(h):
        h = unthunk(h)
        return NoTangent(), NoTangent(), NoTangent(), NoTangent(), np.lib.stride_tricks.sliding_window_view(
            h, window_shape, axis)

    return window_sum(shape, window_shape, axis, g), window_sum_pullback


@frule.register(window_sum, complex=True)
def window_sum_frule(tangents, shape, window_shape, axis, g):
    dg = tangents[4]
    y = window_sum(shape, window_shape, axis, g)
    return y, ZeroTangent() if is_zero(dg) else window_sum(shape, window_shape, axis, dg)


@numpy_rrule(np.lib.stride_tricks.sliding_window_view, complex=True)
def sliding_window_view_rrule(x, window_shape, axis=None, **kwargs):
    shape = np.shape(x)

    def sliding_window_view_pullback(g):
        return NoTangent(), window_sum(shape, window_shape, axis, unthunk(g))

    # always read-only (writeable=True would let an in-place write reach x through the view)
    return np.lib.stride_tricks.sliding_window_view(x, window_shape, axis), sliding_window_view_pullback


@numpy_frule(np.lib.stride_tricks.sliding_window_view, complex=True)
def sliding_window_view_frule(tangents, x, window_shape, axis=None, **kwargs):
    dx = tangents[1]
    y = np.lib.stride_tricks.sliding_window_view(x, window_shape, axis)
    return y, ZeroTangent() if is_zero(dx) else np.lib.stride_tricks.sliding_window_view(dx, window_shape, axis)


# ---- picks among several arrays ----------------------------------------------------
def _zero_to_scalar(dx):
    return 0.0 if is_zero(dx) else dx


def _per_choice(choices, g, masks):
    """Cotangents of a list of choices (a list back) or of one stacked array (an array back)."""
    if isinstance(choices, (list, tuple)):
        return [g * m for m in masks]
    return g * masks


def _choose_masks(a, n, mode, ndim):
    """masks[j]: where ``np.choose(a, choices, mode=mode)`` takes choice j."""
    picks = np.clip(a, 0, n - 1) if mode == "clip" else np.mod(a, n) if mode == "wrap" else np.asarray(a)
    return picks == _along(np.arange(n), 0, ndim + 1)


@numpy_rrule(np.choose, complex=True)
def choose_rrule(a, choices, out=None, mode="raise"):
    y = np.choose(a, choices, mode=mode)
    masks = _choose_masks(a, len(choices), mode, np.ndim(y))

    def choose_pullback(g):
        return NoTangent(), NoTangent(), _per_choice(choices, g, masks)

    return y, choose_pullback


@numpy_frule(np.choose, complex=True)
def choose_frule(tangents, a, choices, out=None, mode="raise"):
    dchoices = tangents[2]
    y = np.choose(a, choices, mode=mode)
    if is_zero(dchoices):
        return y, ZeroTangent()
    if isinstance(dchoices, (list, tuple)):
        dchoices = [_zero_to_scalar(d) for d in dchoices]
    return y, np.choose(a, dchoices, mode=mode)


def _select_masks(condlist):
    """(masks, rest): where ``np.select`` takes each choice, and where it takes the default."""
    taken, masks = False, []
    for cond in condlist:
        masks.append(np.logical_and(cond, np.logical_not(taken)))
        taken = np.logical_or(taken, cond)
    return np.array(np.broadcast_arrays(*masks)), np.logical_not(taken)


@numpy_rrule(np.select, complex=True)
def select_rrule(condlist, choicelist, default=0):
    y = np.select(condlist, choicelist, default)
    masks, rest = _select_masks(condlist)

    def select_pullback(g):
        return NoTangent(), NoTangent(), _per_choice(choicelist, g, masks), g * rest

    return y, select_pullback


@numpy_frule(np.select, complex=True)
def select_frule(tangents, condlist, choicelist, default=0):
    dchoices, ddefault = tangents[2], tangent_at(tangents, 2)
    y = np.select(condlist, choicelist, default)
    if is_zero(dchoices) and is_zero(ddefault):
        return y, ZeroTangent()
    if is_zero(dchoices) or isinstance(dchoices, (list, tuple)):
        dchoices = [_zero_to_scalar(dchoices[j]) for j in range(len(choicelist))]
    return y, np.select(condlist, dchoices, _zero_to_scalar(ddefault))
