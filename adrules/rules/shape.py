"""Rules: shape functions (views, joins and splits, repeats, flips, pads, diagonals).

These functions move elements without changing them, so each pullback moves the
cotangent back (reshape undoes reshape, split undoes concatenate, a run sum undoes
repeat) and each frule moves the tangent the same way as the primal. Pullbacks call
only NumPy functions that have rules themselves, so they are traced again for
higher derivatives.

Rules follow the convention of ``_utils.py`` for optional trailing arguments.

Moving elements is linear with real coefficients, so every rule here is right for
complex values as it stands (``complex=True``): nothing to conjugate. A real array joined
with a complex one gets the real part of its cotangent (projection).
"""

import numpy as np

from ..projection import unbroadcast
from ..registry import primitive
from ..tangents import NoTangent
from ..tangents import dense
from ._utils import numpy_frule, numpy_rrule


def _split_sizes(g, sizes, axis):
    """``g`` cut along ``axis`` into consecutive pieces of the given sizes (undoes concatenate)."""
    return np.split(g, np.cumsum(sizes)[:-1].tolist(), axis)


def _unjoin(g, shapes, axis, joined_shapes=None):
    """Cotangents of the arrays joined into ``g`` along ``axis`` (each first reshaped to
    ``joined_shapes``); ``axis=None`` means they were flattened first."""
    if axis is None:
        pieces = _split_sizes(g, [int(np.prod(s)) for s in shapes], 0)
    else:
        joined = joined_shapes or shapes
        pieces = _split_sizes(g, [s[axis] for s in joined], axis)
    return [np.reshape(p, s) for p, s in zip(pieces, shapes)]


def _as_list(cotangents, arrays):
    """The list's cotangent, or the array's when one array stood for the whole sequence."""
    return cotangents if isinstance(arrays, (list, tuple)) else np.stack(cotangents)


def _dense_all(tangents, arrays):
    if not isinstance(arrays, (list, tuple)):
        return tangents
    return [dense(dx, x) for dx, x in zip(tangents, arrays)]


def _crop(g, widths):
    """``g`` without ``widths[d] = (before, after)`` elements at the ends of each axis (undoes pad)."""
    for axis, (before, after) in enumerate(widths):
        if before or after:
            g = np.split(g, [before, np.shape(g)[axis] - after], axis)[1]
    return g


def _pad_pairs(pad_width, ndim):
    """``np.pad``'s pad_width as one (before, after) pair of ints per axis."""
    if isinstance(pad_width, dict):
        pairs = [(0, 0)] * ndim
        for axis, width in pad_width.items():
            pairs[axis] = (width, width) if np.ndim(width) == 0 else tuple(width)
        return [(int(b), int(a)) for b, a in pairs]
    return [(int(b), int(a)) for b, a in np.broadcast_to(np.asarray(pad_width, dtype=int), (ndim, 2))]


def _negated(shift):
    return -shift if np.ndim(shift) == 0 else tuple(-s for s in shift)


def _check_order(fname, order):
    if order not in ("C", "F"):
        raise NotImplementedError(
            f"{fname}(..., order={order!r}): only order='C' and order='F' have derivative rules, "
            f"since 'A' and 'K' depend on the memory layout; pass order='C' or 'F'.")


@primitive
def _sum_runs(g, counts, axis):
    """Sum of each run of ``counts[i]`` consecutive elements of ``g`` along ``axis``
    (the cotangent of ``np.repeat(x, counts, axis)``).

    >>> _sum_runs(np.arange(6.0), np.array([2, 0, 3, 1]), 0)
    array([1., 0., 9., 5.])
    """
    counts = np.asarray(counts)
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    pad_shape = list(np.shape(g))
    pad_shape[axis] = 1  # one zero at the end so every start is a valid index (empty last runs)
    padded = np.concatenate([g, np.zeros(pad_shape, dtype=np.result_type(g))], axis)
    runs = np.add.reduceat(padded, starts, axis)
    keep = np.reshape(counts > 0, [-1 if d == axis % np.ndim(g) else 1 for d in range(np.ndim(g))])
    return runs * keep  # reduceat gives g[start] for an empty run: zero those


def _repeat_counts(x, repeats, axis):
    n = np.size(x) if axis is None else np.shape(x)[axis]
    return np.broadcast_to(repeats, (n,))


def _tile_reps(x, reps):
    """``np.tile``'s reps and x's shape, both padded with leading ones to one length."""
    reps = (reps,) if np.ndim(reps) == 0 else tuple(reps)
    shape = np.shape(x)
    d = max(len(reps), len(shape))
    return (1,) * (d - len(reps)) + reps, (1,) * (d - len(shape)) + shape


def _untile(g, reps, shape):
    """Sum of the tiles of ``g`` (the cotangent of ``np.tile``)."""
    interleaved = [n for pair in zip(reps, shape) for n in pair]
    return np.sum(np.reshape(g, interleaved), axis=tuple(range(0, 2 * len(shape), 2)))


def _diagonal_matrix(g, k, shape):
    """A matrix of ``shape`` that is zero except for ``g`` on diagonal ``k`` (undoes np.diag of a matrix)."""
    m, n = shape
    length = np.shape(g)[0]
    eye = np.eye(m, n, k, dtype=np.result_type(g))
    if k >= 0:  # diagonal element i sits in row i
        return np.reshape(np.pad(g, (0, m - length)), (m, 1)) * eye
    return np.reshape(np.pad(g, (0, n - length)), (1, n)) * eye  # ... else in column i


def _atleast_shape(shape, nd):
    """The shape ``np.atleast_{nd}d`` gives an array of ``shape``."""
    if len(shape) >= nd:
        return shape
    if nd == 3:
        return {0: (1, 1, 1), 1: (1,) + shape + (1,), 2: shape + (1,)}[len(shape)]
    return (1,) * (nd - len(shape)) + shape


# ---- views: reshape, ravel, transpose, axes ----------------------------------------
@numpy_rrule(np.reshape, complex=True)
def reshape_rrule(a, shape=None, order="C", **kwargs):
    _check_order("numpy.reshape", order)
    y = np.reshape(a, shape, order=order, **kwargs)

    def reshape_pullback(g):
        return NoTangent(), np.reshape(g, np.shape(a), order=order)

    return y, reshape_pullback


@numpy_frule(np.reshape, complex=True)
def reshape_frule(tangents, a, shape=None, order="C", **kwargs):
    return np.reshape(a, shape, order=order, **kwargs), np.reshape(tangents[1], shape, order=order)


@numpy_rrule(np.ravel, complex=True)
def ravel_rrule(a, order="C"):
    _check_order("numpy.ravel", order)

    def ravel_pullback(g):
        return NoTangent(), np.reshape(g, np.shape(a), order=order)

    return np.ravel(a, order), ravel_pullback


@numpy_frule(np.ravel, complex=True)
def ravel_frule(tangents, a, order="C"):
    return np.ravel(a, order), np.ravel(tangents[1], order)


@numpy_rrule(np.transpose, complex=True)
def transpose_rrule(a, axes=None):
    inverse = None if axes is None else tuple(np.argsort([ax % np.ndim(a) for ax in axes]).tolist())

    def transpose_pullback(g):
        return NoTangent(), np.transpose(g, inverse)

    return np.transpose(a, axes), transpose_pullback


@numpy_frule(np.transpose, complex=True)
def transpose_frule(tangents, a, axes=None):
    return np.transpose(a, axes), np.transpose(tangents[1], axes)


@numpy_rrule(np.swapaxes, complex=True)
def swapaxes_rrule(a, axis1, axis2):
    def swapaxes_pullback(g):
        return NoTangent(), np.swapaxes(g, axis1, axis2)

    return np.swapaxes(a, axis1, axis2), swapaxes_pullback


@numpy_frule(np.swapaxes, complex=True)
def swapaxes_frule(tangents, a, axis1, axis2):
    return np.swapaxes(a, axis1, axis2), np.swapaxes(tangents[1], axis1, axis2)


@numpy_rrule(np.moveaxis, complex=True)
def moveaxis_rrule(a, source, destination):
    def moveaxis_pullback(g):
        return NoTangent(), np.moveaxis(g, destination, source)

    return np.moveaxis(a, source, destination), moveaxis_pullback


@numpy_frule(np.moveaxis, complex=True)
def moveaxis_frule(tangents, a, source, destination):
    return np.moveaxis(a, source, destination), np.moveaxis(tangents[1], source, destination)


@numpy_rrule(np.expand_dims, complex=True)
def expand_dims_rrule(a, axis):
    def expand_dims_pullback(g):
        return NoTangent(), np.reshape(g, np.shape(a))

    return np.expand_dims(a, axis), expand_dims_pullback


@numpy_frule(np.expand_dims, complex=True)
def expand_dims_frule(tangents, a, axis):
    return np.expand_dims(a, axis), np.expand_dims(tangents[1], axis)


@numpy_rrule(np.squeeze, complex=True)
def squeeze_rrule(a, axis=None):
    def squeeze_pullback(g):
        return NoTangent(), np.reshape(g, np.shape(a))

    return np.squeeze(a, axis), squeeze_pullback


@numpy_frule(np.squeeze, complex=True)
def squeeze_frule(tangents, a, axis=None):
    return np.squeeze(a, axis), np.squeeze(tangents[1], axis)


@numpy_rrule(np.broadcast_to, complex=True)
def broadcast_to_rrule(array, shape, subok=False):
    def broadcast_to_pullback(g):
        return NoTangent(), unbroadcast(g, np.shape(array))

    return np.broadcast_to(array, shape, subok), broadcast_to_pullback


@numpy_frule(np.broadcast_to, complex=True)
def broadcast_to_frule(tangents, array, shape, subok=False):
    return np.broadcast_to(array, shape, subok), np.broadcast_to(tangents[1], shape)


def _register_atleast(f, nd):
    @numpy_rrule(f, complex=True)
    def atleast_rrule(*arys):
        y = f(*arys)

        def atleast_pullback(g):
            gs = (g,) if len(arys) == 1 else g
            return (NoTangent(), *(np.reshape(gi, np.shape(a)) for gi, a in zip(gs, arys)))

        return y, atleast_pullback

    @numpy_frule(f, complex=True)
    def atleast_frule(tangents, *arys):
        dys = [np.reshape(dense(dx, a), _atleast_shape(np.shape(a), nd)) for dx, a in zip(tangents[1:], arys)]
        return f(*arys), dys[0] if len(arys) == 1 else tuple(dys)


_register_atleast(np.atleast_1d, 1)
_register_atleast(np.atleast_2d, 2)
_register_atleast(np.atleast_3d, 3)


# ---- joins: concatenate, stack and friends -------------------------------------------
@numpy_rrule(np.concatenate, complex=True)
def concatenate_rrule(arrays, axis=0, out=None, **kwargs):
    shapes = [np.shape(a) for a in arrays]

    def concatenate_pullback(g):
        return NoTangent(), _as_list(_unjoin(g, shapes, axis), arrays)

    return np.concatenate(arrays, axis, **kwargs), concatenate_pullback


@numpy_frule(np.concatenate, complex=True)
def concatenate_frule(tangents, arrays, axis=0, out=None, **kwargs):
    return np.concatenate(arrays, axis, **kwargs), np.concatenate(_dense_all(tangents[1], arrays), axis)


@numpy_rrule(np.stack, complex=True)
def stack_rrule(arrays, axis=0, out=None, **kwargs):
    n = len(arrays)

    def stack_pullback(g):
        return NoTangent(), _as_list([np.squeeze(p, axis) for p in np.split(g, n, axis)], arrays)

    return np.stack(arrays, axis, **kwargs), stack_pullback


@numpy_frule(np.stack, complex=True)
def stack_frule(tangents, arrays, axis=0, out=None, **kwargs):
    return np.stack(arrays, axis, **kwargs), np.stack(_dense_all(tangents[1], arrays), axis)


def _register_join(f, nd, axis_for):
    """Rules for a join that promotes each array with ``np.atleast_{nd}d`` (column_stack:
    nd=-2, 1-D arrays become columns) and concatenates along ``axis_for(promoted[0])``."""

    def promoted(shape):
        if nd == -2 and len(shape) < 2:
            return (shape[0] if shape else 1, 1)
        return _atleast_shape(shape, abs(nd))

    @numpy_rrule(f, complex=True)
    def join_rrule(tup, **kwargs):
        shapes = [np.shape(a) for a in tup]
        joined = [promoted(s) for s in shapes]

        def join_pullback(g):
            return NoTangent(), _as_list(_unjoin(g, shapes, axis_for(joined[0]), joined), tup)

        return f(tup, **kwargs), join_pullback

    @numpy_frule(f, complex=True)
    def join_frule(tangents, tup, **kwargs):
        return f(tup, **kwargs), f(_dense_all(tangents[1], tup))


_register_join(np.hstack, 1, lambda shape: 0 if len(shape) == 1 else 1)
_register_join(np.vstack, 2, lambda shape: 0)
_register_join(np.dstack, 3, lambda shape: 2)
_register_join(np.column_stack, -2, lambda shape: 1)


# ---- splits (multiple outputs: the pullback gets one cotangent per piece) ------------
def _register_split(f, axis_for):
    @numpy_rrule(f, complex=True)
    def split_rrule(ary, indices_or_sections, *args, **kwargs):
        axis = axis_for(np.ndim(ary), *args, **kwargs)

        def split_pullback(gs):
            return NoTangent(), np.concatenate(gs, axis)

        return f(ary, indices_or_sections, *args, **kwargs), split_pullback

    @numpy_frule(f, complex=True)
    def split_frule(tangents, ary, indices_or_sections, *args, **kwargs):
        dys = f(tangents[1], indices_or_sections, *args, **kwargs)
        return f(ary, indices_or_sections, *args, **kwargs), dys


_register_split(np.split, lambda ndim, axis=0: axis)
_register_split(np.array_split, lambda ndim, axis=0: axis)
_register_split(np.hsplit, lambda ndim: 1 if ndim > 1 else 0)
_register_split(np.vsplit, lambda ndim: 0)
_register_split(np.dsplit, lambda ndim: 2)


# ---- copies: tile, repeat ------------------------------------------------------------
@numpy_rrule(np.tile, complex=True)
def tile_rrule(A, reps):
    full_reps, shape = _tile_reps(A, reps)

    def tile_pullback(g):
        return NoTangent(), np.reshape(_untile(g, full_reps, shape), np.shape(A))

    return np.tile(A, reps), tile_pullback


@numpy_frule(np.tile, complex=True)
def tile_frule(tangents, A, reps):
    return np.tile(A, reps), np.tile(tangents[1], reps)


@numpy_rrule(np.repeat, complex=True)
def repeat_rrule(a, repeats, axis=None):
    counts = _repeat_counts(a, repeats, axis)

    def repeat_pullback(g):
        return NoTangent(), np.reshape(_sum_runs(g, counts, 0 if axis is None else axis), np.shape(a))

    return np.repeat(a, repeats, axis), repeat_pullback


@numpy_frule(np.repeat, complex=True)
def repeat_frule(tangents, a, repeats, axis=None):
    return np.repeat(a, repeats, axis), np.repeat(tangents[1], repeats, axis)


@numpy_rrule(_sum_runs, complex=True)
def sum_runs_rrule(g, counts, axis):
    def sum_runs_pullback(h):
        return NoTangent(), np.repeat(h, counts, axis)

    return _sum_runs(g, counts, axis), sum_runs_pullback


@numpy_frule(_sum_runs, complex=True)
def sum_runs_frule(tangents, g, counts, axis):
    return _sum_runs(g, counts, axis), _sum_runs(tangents[1], counts, axis)


# ---- reordering: flip, roll -------------------------------------------------------------
@numpy_rrule(np.flip, complex=True)
def flip_rrule(m, axis=None):
    def flip_pullback(g):
        return NoTangent(), np.flip(g, axis)

    return np.flip(m, axis), flip_pullback


@numpy_frule(np.flip, complex=True)
def flip_frule(tangents, m, axis=None):
    return np.flip(m, axis), np.flip(tangents[1], axis)


def _register_self_adjoint(f):
    """Rules for a linear ``f(x)`` that is its own adjoint (a flip, a triangle mask)."""

    @numpy_rrule(f, complex=True)
    def self_adjoint_rrule(m, *args, **kwargs):
        def self_adjoint_pullback(g):
            return NoTangent(), f(g, *args, **kwargs)

        return f(m, *args, **kwargs), self_adjoint_pullback

    @numpy_frule(f, complex=True)
    def self_adjoint_frule(tangents, m, *args, **kwargs):
        return f(m, *args, **kwargs), f(tangents[1], *args, **kwargs)


_register_self_adjoint(np.fliplr)
_register_self_adjoint(np.flipud)


@numpy_rrule(np.roll, complex=True)
def roll_rrule(a, shift, axis=None):
    def roll_pullback(g):
        return NoTangent(), np.roll(g, _negated(shift), axis)

    return np.roll(a, shift, axis), roll_pullback


@numpy_frule(np.roll, complex=True)
def roll_frule(tangents, a, shift, axis=None):
    return np.roll(a, shift, axis), np.roll(tangents[1], shift, axis)


# ---- padding -------------------------------------------------------------------------------
def _check_pad_mode(mode):
    if mode != "constant":
        name = getattr(mode, "__name__", mode)
        raise NotImplementedError(
            f"numpy.pad(..., mode={name!r}): only mode='constant' has a derivative rule. Build "
            f"other modes from np.concatenate and np.flip of slices, which are differentiable.")


@numpy_rrule(np.pad, complex=True)
def pad_rrule(array, pad_width, mode="constant", **kwargs):
    _check_pad_mode(mode)
    widths = _pad_pairs(pad_width, np.ndim(array))

    def pad_pullback(g):
        return NoTangent(), _crop(g, widths)

    return np.pad(array, pad_width, mode, **kwargs), pad_pullback


@numpy_frule(np.pad, complex=True)
def pad_frule(tangents, array, pad_width, mode="constant", **kwargs):
    _check_pad_mode(mode)
    return np.pad(array, pad_width, mode, **kwargs), np.pad(tangents[1], pad_width)


# ---- diagonals and triangles ---------------------------------------------------------------
@numpy_rrule(np.diag, complex=True)
def diag_rrule(v, k=0):
    shape = np.shape(v)

    def diag_pullback(g):
        return NoTangent(), np.diag(g, k) if len(shape) == 1 else _diagonal_matrix(g, k, shape)

    return np.diag(v, k), diag_pullback


@numpy_frule(np.diag, complex=True)
def diag_frule(tangents, v, k=0):
    return np.diag(v, k), np.diag(tangents[1], k)


_register_self_adjoint(np.triu)
_register_self_adjoint(np.tril)
