"""Rules: functions that move, pick or generate elements, composed from other shape rules.

``rot90``, ``rollaxis``, ``append``, ``meshgrid``, ``linspace`` (traced endpoints),
``partition``, ``broadcast_arrays``, ``unstack``, ``diagflat``, ``full_like``, ``logspace``, ``geomspace``,
``compress``/``extract``/``delete``/``insert``, ``trim_zeros``, ``resize``, ``cumulative_sum``/``cumulative_prod`` and the
``pad`` modes ``wrap``, ``edge``, ``reflect``, ``symmetric``: each is an implementation in NumPy calls that have
rules (flip, transpose, concatenate, take...), registered with ``composite_rule``.
The extra ``pad`` modes extend the existing ``pad`` rule: each is one ``np.take`` along
each axis with the index map the mode describes.

Complex values go through the rules each implementation calls (each checks itself); where
NumPy treats them apart (``geomspace`` rotates ``start`` onto the positive reals, ``insert``
casts values to the array's dtype), the implementation does the same.
"""

import numpy as np
from numpy.lib.array_utils import normalize_axis_tuple

from .. import ops
from ..registry import non_differentiable
from ._compose import composite_rule, extend_rule


# ---- rotations and axis moves -----------------------------------------------------------------
def rot90(m, k=1, axes=(0, 1)):
    k %= 4
    a0, a1 = axes
    if k == 0:
        return m[...]
    if k == 2:
        return np.flip(np.flip(m, a0), a1)
    order = list(range(np.ndim(m)))
    order[a0], order[a1] = order[a1], order[a0]
    return np.transpose(np.flip(m, a1), order) if k == 1 else np.flip(np.transpose(m, order), a1)


def rollaxis(a, axis, start=0):
    n = np.ndim(a)
    axis, start = axis % n, start + n if start < 0 else start
    if axis < start:
        start -= 1
    order = [d for d in range(n) if d != axis]
    order.insert(start, axis)
    return np.transpose(a, order)


# ---- joins and grids -------------------------------------------------------------------------------
def append(arr, values, axis=None):
    if axis is None:
        return np.concatenate([np.ravel(arr), np.ravel(values)])
    return np.concatenate([arr, values], axis)


def meshgrid(*xi, copy=True, sparse=False, indexing="xy"):
    ndim = len(xi)
    ones = (1,) * ndim
    shapes = [ones[:i] + (-1,) + ones[i + 1:] for i in range(ndim)]
    if indexing == "xy" and ndim > 1:
        shapes[0], shapes[1] = (1, -1) + ones[2:], (-1, 1) + ones[2:]
    out = [np.reshape(x, s) for x, s in zip(xi, shapes)]
    if not sparse:
        full = np.broadcast_shapes(*(np.shape(o) for o in out))
        out = [np.broadcast_to(o, full) for o in out]
    return tuple(out)


def linspace(start, stop, num=50, endpoint=True, retstep=False, dtype=None, axis=0, **kwargs):
    div = (num - 1) if endpoint else num
    fractions = np.arange(num) / max(div, 1)
    span = np.broadcast_shapes(np.shape(start), np.shape(stop))
    fractions = np.reshape(fractions, (-1,) + (1,) * len(span))
    y = start * (1.0 - fractions) + stop * fractions  # exact at both endpoints
    y = np.moveaxis(y, 0, axis) if axis != 0 and span else y
    if dtype is not None:
        y = ops.astype(y, dtype)
    if retstep:
        return y, (stop - start) / div if div > 0 else np.nan * (stop - start)
    return y


def broadcast_arrays(*args, subok=False):
    shape = np.broadcast_shapes(*(np.shape(a) for a in args))
    return tuple(np.broadcast_to(a, shape) for a in args)


def unstack(x, /, *, axis=0):
    moved = np.moveaxis(x, axis, 0)
    return tuple(moved[i] for i in range(np.shape(moved)[0]))


def diagflat(v, k=0):
    return np.diag(np.ravel(v), k)


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, **kwargs):
    shape = np.shape(a) if shape is None else shape
    dtype = np.result_type(a) if dtype is None else dtype
    return ops.astype(np.broadcast_to(fill_value, shape), dtype)


def geomspace(start, stop, num=50, endpoint=True, dtype=None, axis=0):
    if np.iscomplexobj(start) or np.iscomplexobj(stop):
        # NumPy turns start onto the positive real axis, takes the principal logs, turns back;
        # start's direction moves with start, so it is computed from it (np.sign has no derivative)
        sign = start / np.abs(start)
        lo, hi = np.log(np.abs(start)), np.log(stop / sign)
    else:  # start and stop share their sign
        sign, lo, hi = np.sign(start), np.log(np.abs(start)), np.log(np.abs(stop))
    y = sign * np.exp(linspace(lo, hi, num, endpoint, axis=axis))
    return y if dtype is None else ops.astype(y, dtype)


def logspace(start, stop, num=50, endpoint=True, base=10.0, dtype=None, axis=0):
    y = np.power(base, linspace(start, stop, num, endpoint, axis=axis))
    return y if dtype is None else ops.astype(y, dtype)


# ---- selection ---------------------------------------------------------------------------------------
def partition(a, kth, axis=-1, kind="introselect", order=None):
    if axis is None:
        a, axis = np.ravel(a), 0
    return np.take_along_axis(a, np.argpartition(a, kth, axis, kind, order), axis)


def _kept_along(a, axis):
    """``a`` flattened when ``axis`` is None, and the axis to select along."""
    return (np.ravel(a), 0) if axis is None else (a, axis)


def compress(condition, a, axis=None, out=None):
    a, axis = _kept_along(a, axis)
    return np.take(a, np.flatnonzero(condition), axis)


def extract(condition, arr):
    return np.take(np.ravel(arr), np.flatnonzero(condition))


def delete(arr, obj, axis=None):
    arr, axis = _kept_along(arr, axis)
    return np.take(arr, np.delete(np.arange(np.shape(arr)[axis]), obj), axis)


def insert(arr, obj, values, axis=None):
    # NumPy's own insert, run on positions, says where each output element comes from
    # (values broadcast and moved the way NumPy moves them); -1 marks the other source
    if axis is None:
        arr, axis = np.ravel(arr), 0
    if np.iscomplexobj(values) and not np.iscomplexobj(arr):  # NumPy casts values to arr's dtype
        values = ops.astype(np.real(values), np.result_type(arr))
    from_arr = np.insert(np.reshape(np.arange(np.size(arr)), np.shape(arr)), obj, np.full(np.shape(values), -1), axis)
    from_values = np.insert(np.full(np.shape(arr), -1), obj,
                            np.reshape(np.arange(np.size(values)), np.shape(values)), axis)
    return np.where(from_arr >= 0, np.ravel(arr)[np.maximum(from_arr, 0)],
                    np.ravel(values)[np.maximum(from_values, 0)])


def trim_zeros(filt, trim="fb", axis=None):
    """The slice NumPy's trim_zeros takes: the box around the nonzero values, along ``axis``."""
    trim = trim.lower()
    if trim not in {"fb", "bf", "f", "b"}:
        raise ValueError(f"unexpected character(s) in `trim`: {trim!r}")
    ndim = np.ndim(filt)
    axes = range(ndim) if axis is None else normalize_axis_tuple(axis, ndim, argname="axis")
    if not axes:
        return filt
    nonzero = np.argwhere(filt)
    if nonzero.size == 0:  # all zeros: an empty slice along each trimmed axis
        start = stop = [0] * ndim
    else:
        start = nonzero.min(axis=0) if "f" in trim else [None] * ndim
        stop = nonzero.max(axis=0) + 1 if "b" in trim else [None] * ndim
    return filt[tuple(slice(start[a], stop[a]) if a in axes else slice(None) for a in range(ndim))]


def resize(a, new_shape):
    n = int(np.prod(new_shape))
    if np.size(a) == 0:
        return np.zeros(new_shape, dtype=np.result_type(a))
    return np.reshape(np.take(np.ravel(a), np.arange(n) % np.size(a)), new_shape)  # a repeated, cut off


# ---- cumulative (array API names) ----------------------------------------------------------------------
def _cumulative(accumulate, identity):
    def cumulative(x, /, *, axis=None, dtype=None, out=None, include_initial=False):
        axis = 0 if axis is None else axis
        y = accumulate(x, axis) if dtype is None else accumulate(ops.astype(x, dtype), axis)
        if not include_initial:
            return y
        shape = list(np.shape(y))
        shape[axis] = 1
        return np.concatenate([np.full(shape, identity, dtype=np.result_type(y)), y], axis)

    return cumulative


# ---- pad modes: one take per axis --------------------------------------------------------------------------
def _pad_index(n, before, after, mode):
    """Where each padded position reads from, along an axis of length ``n``."""
    j = np.arange(-before, n + after)
    if mode == "edge":
        return np.clip(j, 0, n - 1)
    if mode == "wrap":
        return j % n
    if mode == "symmetric":
        j = j % (2 * n)
        return np.where(j < n, j, 2 * n - 1 - j)
    if n == 1:  # reflect
        return np.zeros_like(j)
    j = j % (2 * n - 2)
    return np.where(j < n, j, 2 * n - 2 - j)


def _pad_widths(pad_width, ndim):
    widths = np.asarray(pad_width, dtype=int)
    if widths.ndim < 2:
        widths = np.reshape(widths, (1, -1))
    return np.broadcast_to(widths, (ndim, 2)).tolist()


def _pad_by_index(pad_width, mode):
    def pad_by_index(array, *ignored):
        for axis, (before, after) in enumerate(_pad_widths(pad_width, np.ndim(array))):
            if before or after:
                n = np.shape(array)[axis]
                array = np.take(array, _pad_index(n, before, after, mode), axis)
        return array

    return pad_by_index


def _pad_rewrite(previous, array, pad_width, mode="constant", **kwargs):
    if mode in ("wrap", "edge", "symmetric", "reflect") and kwargs.get("reflect_type", "even") == "even":
        return _pad_by_index(pad_width, mode)
    return None


# ---- the table ------------------------------------------------------------------------------------------------
composite_rule(np.rot90, rot90)
composite_rule(np.rollaxis, rollaxis)
composite_rule(np.append, append)
composite_rule(np.meshgrid, meshgrid)
composite_rule(np.linspace, linspace)
composite_rule(np.partition, partition)
composite_rule(np.broadcast_arrays, broadcast_arrays)
composite_rule(np.diagflat, diagflat)
composite_rule(np.full_like, full_like)
composite_rule(np.logspace, logspace)
composite_rule(np.geomspace, geomspace)
composite_rule(np.compress, compress)
composite_rule(np.extract, extract)
composite_rule(np.delete, delete)
composite_rule(np.insert, insert)
composite_rule(np.trim_zeros, trim_zeros)
composite_rule(np.resize, resize)
if hasattr(np, "unstack"):  # NumPy 2.1
    composite_rule(np.unstack, unstack)
if hasattr(np, "matrix_transpose"):  # NumPy 2
    composite_rule(np.matrix_transpose, lambda x, /: np.swapaxes(x, -1, -2))
non_differentiable(np.argpartition, np.lexsort, np.isin, np.ravel_multi_index, np.diag_indices_from,
                   np.tril_indices_from, np.triu_indices_from, np.einsum_path,
                   np.array2string, np.array_repr, np.array_str)
if hasattr(np, "cumulative_sum"):  # NumPy 2.1
    composite_rule(np.cumulative_sum, _cumulative(np.cumsum, 0))
    composite_rule(np.cumulative_prod, _cumulative(np.cumprod, 1))
extend_rule(np.pad, _pad_rewrite)
