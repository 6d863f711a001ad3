"""Rules: reductions (sums, means, products, extrema, moments, traces), cumulative ops,
and the ufunc methods ``logaddexp.reduce`` (log-sum-exp), ``maximum.accumulate`` (running
extrema), ``add.reduceat`` (segment sums) and ``maximum.reduceat`` / ``minimum.reduceat``
(segment extrema).

A reduction's pullback spreads the output cotangent back over the reduced axes
(``_expand``) and weights it by each element's share of the result; its frule reduces
the tangent the same way. Every rule takes ``axis`` (None, an int, negative, a tuple)
and ``keepdims`` like NumPy, passed positionally or by keyword; pullbacks are written
in NumPy calls with rules of their own, so they are traced again for higher
derivatives. Non-float scalars (counts, ``2.0 / n``) stay Python numbers so float32
stays float32.

Complex values (ChainRules' convention): sums, means, traces and cumulative sums are linear
with real coefficients and need nothing more; products multiply a cotangent by the conjugate
of their partials (``_conj``, which leaves real arrays alone); ``var`` and ``std`` of complex
values are real (``mean(|z - mean z|**2)``), their tangents ``Re(conj(z - mean) ż)``. Extrema
select elements by NumPy's order of complex numbers (real part, then imaginary part): real
coefficients again. Running extrema and log-sum-exp are written for real values and refuse
complex ones.
"""

import numpy as np

from ..registry import ComplexRuleError, conj_if_complex as _conj
from ..tangents import NoTangent, ZeroTangent, is_zero
from ._utils import normalize_axes, numpy_frule, numpy_rrule, tangent_at
from .indexing import along_axis_index, scatter_add

_EXACT_ZEROS = 2  # zeros per group split off exactly in prod/cumprod rules; see _product_of_others


def _broadcast_back(g, x, axis, keepdims):
    """Cotangent ``g`` of a reduction of ``x`` over ``axis``, spread back to ``x``'s shape."""
    return _expand_to(g, np.shape(x), axis, keepdims)


def _expand_to(g, shape, axis, keepdims):
    """``_broadcast_back`` from the reduced array's shape alone: a pullback that needs nothing else
    of its input keeps only the shape, so the input can be freed after the forward pass."""
    if not keepdims and axis is not None:
        g = np.expand_dims(g, normalize_axes(axis, len(shape)))
    if not isinstance(g, (np.ndarray, np.generic)) or _size(shape) >= _BIG_ELEMENTS:
        # A read-only broadcast view: no pass over memory. Gradients handed to users are
        # made fresh and writeable by the API (api._fresh).
        return np.broadcast_to(g, shape)
    return np.full(shape, g) if g.ndim == 0 else g * np.ones(shape, g.dtype)  # small: quicker in C


_BIG_ELEMENTS = 1 << 16


def _size(shape):
    n = 1
    for k in shape:
        n *= k
    return n


def _masked(dx, where):
    """``dx`` with zeros where NumPy's ``where=`` left elements out of the reduction."""
    return dx if where is True else np.where(where, dx, 0.0)


def _count(x, axis, where=True):
    """How many elements each output of a reduction over ``axis`` gathers (keepdims-shaped with ``where``)."""
    axes = normalize_axes(axis, np.ndim(x))
    if where is True:
        return _size([np.shape(x)[a] for a in axes])
    return np.sum(np.broadcast_to(where, np.shape(x)), axis=axes, keepdims=True)


def _check_no_where(fname, kwargs):
    if "where" in kwargs:
        raise NotImplementedError(f"{fname}(..., where=...) has no derivative rule; "
                                  f"pass np.where(mask, x, np.nan) instead of where=mask.")


def _is_complex(x):
    return getattr(x, "dtype", None) is not None and x.dtype.kind == "c"


def _in_dtype(dx, dtype):
    """The tangent of a sum taken in ``dtype``: its real part when complex values are summed in
    a real dtype (NumPy drops their imaginary parts first)."""
    if dtype is not None and _is_complex(dx) and np.dtype(dtype).kind != "c":
        return np.real(dx)
    return dx


def _no_real_dtype(fname, a, dtype):
    """Products and moments of complex values computed in a real dtype are refused: NumPy
    drops the imaginary parts before multiplying, which these rules do not follow."""
    if dtype is not None and _is_complex(a) and np.dtype(dtype).kind != "c":
        raise ComplexRuleError(f"{fname}(a, dtype={np.dtype(dtype)}): complex values in a real dtype "
                               f"lose their imaginary parts first; its rule does not follow that. "
                               f"Pass np.real(a) explicitly instead of dtype=.")


def _reverse_cumsum(g, axis):
    """``g[i] + g[i+1] + ...`` along ``axis`` (the adjoint of cumsum)."""
    return np.flip(np.cumsum(np.flip(g, axis), axis), axis)


def _first_in_group(mask, axes):
    """The first True of ``mask`` in each group reduced over ``axes`` (C order), as plain bools."""
    mask = np.asarray(mask)  # a plain bool array: comparisons carry no derivative
    last = tuple(range(mask.ndim - len(axes), mask.ndim))
    moved = np.moveaxis(mask, axes, last)
    flat = moved.reshape(moved.shape[:mask.ndim - len(axes)] + (-1,))
    first = flat & (np.cumsum(flat, axis=-1) == 1)
    return np.moveaxis(first.reshape(moved.shape), last, axes)


def _product_of_others(x, axes, depth=_EXACT_ZEROS):
    """For each element, the product of the other elements of its group over ``axes``
    (keepdims-shaped), without dividing by zero.

    The first zero of a group is split off as a factor: others(x) = x_z * others(x with
    x_z set to 1) away from it, and prod(x with x_z set to 1) at it. With ``depth`` levels
    the derivatives of prod up to order ``depth`` are exact at any input; higher orders
    are exact for groups with at most ``depth`` zeros (each level costs one more pass)."""
    zero = x == 0
    if depth == 0 or not np.any(zero):
        return np.prod(x, axes, keepdims=True) / np.where(zero, 1.0, x)
    first = _first_in_group(zero, axes)
    x1 = np.where(first, 1.0, x)
    x_z = np.sum(np.where(first, x, 0.0), axes, keepdims=True) + ~np.any(zero, axes, keepdims=True)
    return np.where(first, np.prod(x1, axes, keepdims=True), x_z * _product_of_others(x1, axes, depth - 1))


def _cumprod_cotangent(x, g, axis, depth=_EXACT_ZEROS):
    """``x̄_i = sum_{j>=i} g_j prod_{k<=j, k!=i} x_k`` along ``axis``, without dividing by zero.

    Before a lane's first zero z this is revcumsum(g y) / x; at z it is revcumsum(g y1)
    with y1 = cumprod(x with x_z set to 1); after z it is x_z times the same cotangent for
    that x1 (as in ``_product_of_others``)."""
    zero = x == 0
    y = np.cumprod(x, axis)
    if depth == 0 or not np.any(zero):
        return _reverse_cumsum(g * y, axis) / np.where(zero, 1.0, x)
    seen = np.cumsum(zero, axis)
    before, first = seen == 0, zero & (seen == 1)
    x1 = np.where(first, 1.0, x)
    x_z = np.sum(np.where(first, x, 0.0), axis, keepdims=True)
    at_or_after = np.where(first, _reverse_cumsum(g * np.cumprod(x1, axis), axis),
                           x_z * _cumprod_cotangent(x1, g, axis, depth - 1))
    return np.where(before, _reverse_cumsum(g * y, axis) / np.where(before, x, 1.0), at_or_after)


def _cumprod_tangent(x, dx, axis, depth=_EXACT_ZEROS):
    """``ẏ_j = sum_{i<=j} ẋ_i prod_{k<=j, k!=i} x_k`` along ``axis``, without dividing by zero
    (the first zero z of a lane is split off as in ``_cumprod_cotangent``)."""
    zero = x == 0
    y = np.cumprod(x, axis)
    if depth == 0 or not np.any(zero):
        return y * np.cumsum(dx / np.where(zero, 1.0, x), axis)
    seen = np.cumsum(zero, axis)
    before, first = seen == 0, zero & (seen == 1)
    x1, dx1 = np.where(first, 1.0, x), np.where(first, 0.0, dx)
    x_z = np.sum(np.where(first, x, 0.0), axis, keepdims=True)
    dx_z = np.sum(np.where(first, dx, 0.0), axis, keepdims=True)
    at_or_after = x_z * _cumprod_tangent(x1, dx1, axis, depth - 1) + dx_z * np.cumprod(x1, axis)
    return np.where(before, y * np.cumsum(dx / np.where(before, x, 1.0), axis), at_or_after)


def _extremum_share(x, y, axis, keepdims, where):
    """1/(number of ties) where ``x`` attains its group's extremum ``y``, else 0 (as autograd)."""
    if not keepdims and axis is not None:
        y = np.expand_dims(y, normalize_axes(axis, np.ndim(x)))
    hits = (x == y) & np.asarray(where)  # plain bools: comparisons carry no derivative
    ties = np.maximum(np.sum(hits, axis=normalize_axes(axis, hits.ndim), keepdims=True), 1)
    return (hits / ties).astype(np.result_type(x))


def _weights_along(weights, a, axis):
    """np.average's weights reshaped to broadcast against ``a``, and the map that takes a
    cotangent of ``a``'s shape back to the weights' shape."""
    if np.shape(weights) == np.shape(a):
        return weights, lambda dw: dw
    given = tuple(ax % np.ndim(a) for ax in ((axis,) if np.ndim(axis) == 0 else axis))
    order = np.argsort(given).tolist()
    spread = [np.shape(a)[d] if d in given else 1 for d in range(np.ndim(a))]
    others = tuple(d for d in range(np.ndim(a)) if d not in given)
    sorted_shape = [np.shape(a)[d] for d in sorted(given)]

    def weights_cotangent(dw):
        dw = np.reshape(np.sum(dw, others, keepdims=True), sorted_shape)
        return np.transpose(dw, np.argsort(order).tolist())

    return np.reshape(np.transpose(weights, order), spread), weights_cotangent


# ---- sums and means ------------------------------------------------------------------
@numpy_rrule(np.sum, complex=True)
def sum_rrule(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    shape = a.shape if type(a) is np.ndarray else np.shape(a)

    def sum_pullback(g):
        return NoTangent(), _masked(_expand_to(g, shape, axis, keepdims), kwargs.get("where", True))

    if type(a) is np.ndarray and not kwargs:  # skip np.sum's Python wrapper: the common case
        return np.add.reduce(a, axis, dtype, None, keepdims), sum_pullback
    return np.sum(a, axis, dtype, keepdims=keepdims, **kwargs), sum_pullback


@numpy_frule(np.sum, complex=True)
def sum_frule(tangents, a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    dy = np.sum(_in_dtype(tangents[1], dtype), axis, keepdims=keepdims, where=kwargs.get("where", True))
    return np.sum(a, axis, dtype, keepdims=keepdims, **kwargs), dy


@numpy_rrule(np.add.reduce, complex=True)
def add_reduce_rrule(array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
    return sum_rrule(array, axis, dtype, out, keepdims, **kwargs)


@numpy_frule(np.add.reduce, complex=True)
def add_reduce_frule(tangents, array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
    return sum_frule(tangents, array, axis, dtype, out, keepdims, **kwargs)


@numpy_rrule(np.nansum, complex=True)
def nansum_rrule(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    def nansum_pullback(g):
        dx = np.where(np.isnan(a), 0.0, _broadcast_back(g, a, axis, keepdims))
        return NoTangent(), _masked(dx, kwargs.get("where", True))

    return np.nansum(a, axis, dtype, keepdims=keepdims, **kwargs), nansum_pullback


@numpy_frule(np.nansum, complex=True)
def nansum_frule(tangents, a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    dx = np.where(np.isnan(a), 0.0, _in_dtype(tangents[1], dtype))
    dy = np.sum(dx, axis, keepdims=keepdims, where=kwargs.get("where", True))
    return np.nansum(a, axis, dtype, keepdims=keepdims, **kwargs), dy


@numpy_rrule(np.mean, complex=True)
def mean_rrule(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    where = kwargs.get("where", True)
    shape, n = np.shape(a), _count(a, axis, where)

    def mean_pullback(g):
        if where is True:  # divide before spreading: one full-size pass fewer
            return NoTangent(), _expand_to(g / n, shape, axis, keepdims)
        return NoTangent(), _masked(_expand_to(g, shape, axis, keepdims), where) / n

    return np.mean(a, axis, dtype, keepdims=keepdims, **kwargs), mean_pullback


@numpy_frule(np.mean, complex=True)
def mean_frule(tangents, a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    dy = np.mean(_in_dtype(tangents[1], dtype), axis, keepdims=keepdims, where=kwargs.get("where", True))
    return np.mean(a, axis, dtype, keepdims=keepdims, **kwargs), dy


@numpy_rrule(np.nanmean, complex=True)
def nanmean_rrule(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    _check_no_where("numpy.nanmean", kwargs)
    present = ~np.isnan(a)

    def nanmean_pullback(g):
        share = present / np.sum(present, normalize_axes(axis, np.ndim(a)), keepdims=True)
        return NoTangent(), _broadcast_back(g, a, axis, keepdims) * share.astype(np.result_type(a))

    return np.nanmean(a, axis, dtype, keepdims=keepdims), nanmean_pullback


@numpy_frule(np.nanmean, complex=True)
def nanmean_frule(tangents, a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    _check_no_where("numpy.nanmean", kwargs)
    dx = np.where(np.isnan(a), np.nan, _in_dtype(tangents[1], dtype))  # the mean of the same entries as the primal's
    return np.nanmean(a, axis, dtype, keepdims=keepdims), np.nanmean(dx, axis, keepdims=keepdims)


@numpy_rrule(np.average, complex=True)
def average_rrule(a, axis=None, weights=None, returned=False, **kwargs):
    keepdims = kwargs.get("keepdims", False)
    y = np.average(a, axis, weights, returned, **kwargs)
    if weights is None:
        def average_pullback(g):
            g = g[0] if returned else g
            return NoTangent(), _broadcast_back(g, a, axis, keepdims) / _count(a, axis)

        return y, average_pullback
    w, weights_cotangent = _weights_along(weights, a, axis)
    axes = normalize_axes(axis, np.ndim(a))

    def weighted_average_pullback(g):
        g_avg, g_total = g if returned else (g, ZeroTangent())
        total = np.sum(w * np.ones_like(a), axes, keepdims=True)
        avg = np.sum(a * w, axes, keepdims=True) / total
        g_avg = _broadcast_back(g_avg, a, axis, keepdims) / _conj(total)  # conjugate partials
        dw = g_avg * _conj(a - avg) + (0.0 if is_zero(g_total) else _broadcast_back(g_total, a, axis, keepdims))
        return NoTangent(), g_avg * _conj(w), NoTangent(), weights_cotangent(dw)

    return y, weighted_average_pullback


@numpy_frule(np.average, complex=True)
def average_frule(tangents, a, axis=None, weights=None, returned=False, **kwargs):
    y = np.average(a, axis, weights, returned, **kwargs)
    shape = np.shape(y[0] if returned else y)
    da, dweights = tangents[1], tangent_at(tangents, 2)
    if weights is None:
        dy = np.mean(da, axis, keepdims=kwargs.get("keepdims", False))
        return y, (dy, ZeroTangent()) if returned else dy
    w, _ = _weights_along(weights, a, axis)
    dw = _weights_along(dweights, a, axis)[0] if not is_zero(dweights) else 0.0 * w
    axes = normalize_axes(axis, np.ndim(a))
    total = np.sum(w * np.ones_like(a), axes, keepdims=True)
    avg = np.sum(a * w, axes, keepdims=True) / total
    dy = np.reshape(np.sum(da * w + dw * (a - avg), axes, keepdims=True) / total, shape)
    if not returned:
        return y, dy
    return y, (dy, np.reshape(np.sum(dw * np.ones_like(a), axes, keepdims=True), shape))


# ---- moments ---------------------------------------------------------------------------
def _center(a, axis, kwargs):
    """``a`` minus the mean the variance was taken about (the user's ``mean=`` if given)."""
    if "mean" in kwargs:
        return a - kwargs["mean"]
    return a - np.mean(a, axis, keepdims=True, where=kwargs.get("where", True))


def _real_dot(dx, centered):
    """``dx * centered``, for complex values ``Re(conj(centered) dx)``: the tangent of
    ``|centered|**2 / 2``, real as the variance is."""
    if getattr(centered, "dtype", None) is not None and centered.dtype.kind == "c":
        return np.real(np.conjugate(centered) * dx)
    return dx * centered


@numpy_rrule(np.var, complex=True)
def var_rrule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    _no_real_dtype("numpy.var", a, dtype)
    where, dof = kwargs.get("where", True), kwargs.get("correction", ddof)

    def var_pullback(g):
        dx = _masked(_broadcast_back(g, a, axis, keepdims) * _center(a, axis, kwargs), where)
        return NoTangent(), dx * (2.0 / (_count(a, axis, where) - dof))

    return np.var(a, axis, dtype, ddof=ddof, keepdims=keepdims, **kwargs), var_pullback


@numpy_frule(np.var, complex=True)
def var_frule(tangents, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    _no_real_dtype("numpy.var", a, dtype)
    where, dof = kwargs.get("where", True), kwargs.get("correction", ddof)
    y = np.var(a, axis, dtype, ddof=ddof, keepdims=keepdims, **kwargs)
    dy = np.sum(_masked(_real_dot(tangents[1], _center(a, axis, kwargs)), where), axis, keepdims=True)
    return y, np.reshape(dy * (2.0 / (_count(a, axis, where) - dof)), np.shape(y))


def _inverse_or_zero(y):
    """1/y, and 0 where y is 0. Zero spread: std is not differentiable where all elements
    are equal (it grows like |t| along every direction); both modes take the subgradient 0,
    the smallest one, so a 0-d or constant input gets derivative 0, never NaN."""
    spread = y != 0
    return np.where(spread, 1.0 / np.where(spread, y, 1.0), 0.0)


@numpy_rrule(np.std, complex=True)
def std_rrule(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    _no_real_dtype("numpy.std", a, dtype)
    where, dof = kwargs.get("where", True), kwargs.get("correction", ddof)
    y = np.std(a, axis, dtype, ddof=ddof, keepdims=keepdims, **kwargs)

    def std_pullback(g):
        dx = _masked(_broadcast_back(g * _inverse_or_zero(y), a, axis, keepdims) * _center(a, axis, kwargs), where)
        return NoTangent(), dx / (_count(a, axis, where) - dof)

    return y, std_pullback


@numpy_frule(np.std, complex=True)
def std_frule(tangents, a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    _no_real_dtype("numpy.std", a, dtype)
    where, dof = kwargs.get("where", True), kwargs.get("correction", ddof)
    y = np.std(a, axis, dtype, ddof=ddof, keepdims=keepdims, **kwargs)
    dy = np.sum(_masked(_real_dot(tangents[1], _center(a, axis, kwargs)), where), axis, keepdims=True)
    return y, np.reshape(dy / (_count(a, axis, where) - dof), np.shape(y)) * _inverse_or_zero(y)


# ---- products ------------------------------------------------------------------------------
def _prod_factors(a, kwargs):
    """The elements prod multiplies (ones where ``where=`` leaves them out) and its ``initial``."""
    where = kwargs.get("where", True)
    return (a if where is True else np.where(where, a, 1.0)), kwargs.get("initial", 1)


@numpy_rrule(np.prod, complex=True)
def prod_rrule(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    _no_real_dtype("numpy.prod", a, dtype)
    def prod_pullback(g):
        x, initial = _prod_factors(a, kwargs)
        others = _product_of_others(x, normalize_axes(axis, np.ndim(a))) * initial
        return NoTangent(), _masked(_broadcast_back(g, a, axis, keepdims) * _conj(others), kwargs.get("where", True))

    return np.prod(a, axis, dtype, keepdims=keepdims, **kwargs), prod_pullback


@numpy_frule(np.prod, complex=True)
def prod_frule(tangents, a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    _no_real_dtype("numpy.prod", a, dtype)
    x, initial = _prod_factors(a, kwargs)
    others = _product_of_others(x, normalize_axes(axis, np.ndim(a))) * initial
    dy = np.sum(_masked(tangents[1] * others, kwargs.get("where", True)), axis, keepdims=keepdims)
    return np.prod(a, axis, dtype, keepdims=keepdims, **kwargs), dy


@numpy_rrule(np.multiply.reduce, complex=True)
def multiply_reduce_rrule(array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
    return prod_rrule(array, axis, dtype, out, keepdims, **kwargs)


@numpy_frule(np.multiply.reduce, complex=True)
def multiply_reduce_frule(tangents, array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
    return prod_frule(tangents, array, axis, dtype, out, keepdims, **kwargs)


# ---- extrema (ties share the cotangent equally) -----------------------------------------------
# Complex values: NumPy orders them by real part, then imaginary part; the extremum selects
# elements (real coefficients, no conjugate), so the rules hold as they are.
def _register_extremum(f, *keys, default_axis=None):
    @numpy_rrule(*keys, complex=True)
    def extremum_rrule(a, axis=default_axis, out=None, keepdims=False, **kwargs):
        y = f(a, axis, keepdims=keepdims, **kwargs)

        def extremum_pullback(g):
            share = _extremum_share(a, y, axis, keepdims, kwargs.get("where", True))
            return NoTangent(), _broadcast_back(g, a, axis, keepdims) * share

        return y, extremum_pullback

    @numpy_frule(*keys, complex=True)
    def extremum_frule(tangents, a, axis=default_axis, out=None, keepdims=False, **kwargs):
        y = f(a, axis, keepdims=keepdims, **kwargs)
        share = _extremum_share(a, y, axis, keepdims, kwargs.get("where", True))
        return y, np.sum(tangents[1] * share, axis, keepdims=keepdims)


_register_extremum(np.max, np.max, np.amax)  # distinct objects in NumPy 2
_register_extremum(np.min, np.min, np.amin)
_register_extremum(np.max, np.maximum.reduce, default_axis=0)
_register_extremum(np.min, np.minimum.reduce, default_axis=0)


# ---- cumulative ------------------------------------------------------------------------------
def _flat_axis(a, axis):
    """NumPy's cumulative functions flatten for ``axis=None``."""
    return (np.ravel(a), 0) if axis is None else (a, axis)


@numpy_rrule(np.cumsum, complex=True)
def cumsum_rrule(a, axis=None, dtype=None, out=None):
    def cumsum_pullback(g):
        return NoTangent(), np.reshape(_reverse_cumsum(g, 0 if axis is None else axis), np.shape(a))

    return np.cumsum(a, axis, dtype), cumsum_pullback


@numpy_frule(np.cumsum, complex=True)
def cumsum_frule(tangents, a, axis=None, dtype=None, out=None):
    return np.cumsum(a, axis, dtype), np.cumsum(_in_dtype(tangents[1], dtype), axis)


@numpy_rrule(np.cumprod, complex=True)
def cumprod_rrule(a, axis=None, dtype=None, out=None):
    _no_real_dtype("numpy.cumprod", a, dtype)
    def cumprod_pullback(g):
        x, along = _flat_axis(a, axis)
        if getattr(x, "dtype", None) is not None and x.dtype.kind == "c":  # conj(Jᵀ conj(g)) = Jᴴ g
            return NoTangent(), np.reshape(np.conjugate(_cumprod_cotangent(x, np.conjugate(g), along)), np.shape(a))
        return NoTangent(), np.reshape(_cumprod_cotangent(x, g, along), np.shape(a))

    return np.cumprod(a, axis, dtype), cumprod_pullback


@numpy_frule(np.cumprod, complex=True)
def cumprod_frule(tangents, a, axis=None, dtype=None, out=None):
    _no_real_dtype("numpy.cumprod", a, dtype)
    x, along = _flat_axis(a, axis)
    return np.cumprod(a, axis, dtype), _cumprod_tangent(x, _flat_axis(tangents[1], axis)[0], along)


@numpy_rrule(np.add.accumulate, complex=True)
def add_accumulate_rrule(array, axis=0, dtype=None, out=None):
    return cumsum_rrule(array, axis, dtype)


@numpy_frule(np.add.accumulate, complex=True)
def add_accumulate_frule(tangents, array, axis=0, dtype=None, out=None):
    return cumsum_frule(tangents, array, axis, dtype)


@numpy_rrule(np.multiply.accumulate, complex=True)
def multiply_accumulate_rrule(array, axis=0, dtype=None, out=None):
    return cumprod_rrule(array, axis, dtype)


@numpy_frule(np.multiply.accumulate, complex=True)
def multiply_accumulate_frule(tangents, array, axis=0, dtype=None, out=None):
    return cumprod_frule(tangents, array, axis, dtype)


# ---- log-sum-exp reductions: each element's share is exp(x - y) -----------------------------
def _register_logaddexp_reduce(ufunc, exp):
    @numpy_rrule(ufunc.reduce)
    def logaddexp_reduce_rrule(array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
        y = ufunc.reduce(array, axis, dtype, None, keepdims, **kwargs)

        def logaddexp_reduce_pullback(g):
            share = exp(array - _kept(y, array, axis, keepdims))  # in (0, 1]: no overflow
            return NoTangent(), _masked(_broadcast_back(g, array, axis, keepdims) * share, kwargs.get("where", True))

        return y, logaddexp_reduce_pullback

    @numpy_frule(ufunc.reduce)
    def logaddexp_reduce_frule(tangents, array, axis=0, dtype=None, out=None, keepdims=False, **kwargs):
        y = ufunc.reduce(array, axis, dtype, None, keepdims, **kwargs)
        share = exp(array - _kept(y, array, axis, keepdims))
        dy = np.sum(_masked(tangents[1] * share, kwargs.get("where", True)), axis, keepdims=keepdims)
        return y, dy


def _kept(y, x, axis, keepdims):
    """A reduction's output ``y`` with the reduced axes of ``x`` back as length-1 axes."""
    return y if keepdims or axis is None else np.expand_dims(y, normalize_axes(axis, np.ndim(x)))


_register_logaddexp_reduce(np.logaddexp, np.exp)
_register_logaddexp_reduce(np.logaddexp2, np.exp2)


# ---- running extrema: each output is one element of x, picked by comparisons -------------------
def _running_pick(x, y, axis):
    """Where ``y = np.maximum.accumulate(x, axis)`` (or minimum) reads each output: the last
    element so far equal to the running extremum (a tie's cotangent goes to the latest)."""
    positions = np.reshape(np.arange(np.shape(x)[axis]), [-1 if d == axis % np.ndim(x) else 1
                                                         for d in range(np.ndim(x))])
    return np.maximum.accumulate(np.where(x == y, positions, 0), axis)  # plain ints: no derivative


def _register_running_extremum(ufunc):
    @numpy_rrule(ufunc.accumulate)
    def running_extremum_rrule(array, axis=0, dtype=None, out=None):
        y = ufunc.accumulate(array, axis, dtype)
        shape, index = np.shape(array), along_axis_index(np.shape(array), _running_pick(array, y, axis), axis)

        def running_extremum_pullback(g):
            return NoTangent(), scatter_add(shape, index, g)

        return y, running_extremum_pullback

    @numpy_frule(ufunc.accumulate)
    def running_extremum_frule(tangents, array, axis=0, dtype=None, out=None):
        y = ufunc.accumulate(array, axis, dtype)
        return y, np.take_along_axis(tangents[1], _running_pick(array, y, axis), axis)


_register_running_extremum(np.maximum)
_register_running_extremum(np.minimum)


# ---- segment sums ------------------------------------------------------------------------------
def _segments(indices, n):
    """(positions, owners) for ``np.add.reduceat(x, indices)`` along an axis of length ``n``:
    output k sums x at the positions whose owner is k (x[i_k] alone where i_k >= i_k+1)."""
    starts = np.asarray(indices, dtype=np.intp)
    ends = np.append(starts[1:], n)
    ends = np.where(ends > starts, ends, starts + 1)
    owners = np.repeat(np.arange(len(starts)), ends - starts)
    positions = np.arange(len(owners)) - np.repeat(np.cumsum(ends - starts) - ends, ends - starts)
    return positions, owners


def _reduceat_options(options, kwargs):
    """(indices, axis, dtype) of ``np.add.reduceat(array, *options, **kwargs)``. Through
    ``__array_ufunc__`` an ``indices=`` keyword arrives twice: as an input and as a keyword."""
    def options_of(indices, axis=0, dtype=None, out=None):
        return indices, axis, dtype

    if options:
        kwargs = {k: v for k, v in kwargs.items() if k != "indices"}
    return options_of(*options, **kwargs)


@numpy_rrule(np.add.reduceat, complex=True)
def add_reduceat_rrule(array, *options, **kwargs):
    indices, axis, dtype = _reduceat_options(options, kwargs)
    shape = np.shape(array)
    positions, owners = _segments(indices, shape[axis])
    index = (slice(None),) * (axis % len(shape)) + (positions,)

    def add_reduceat_pullback(g):
        return NoTangent(), scatter_add(shape, index, np.take(g, owners, axis))

    return np.add.reduceat(array, indices, axis, dtype), add_reduceat_pullback


@numpy_frule(np.add.reduceat, complex=True)
def add_reduceat_frule(tangents, array, *options, **kwargs):
    indices, axis, dtype = _reduceat_options(options, kwargs)
    return np.add.reduceat(array, indices, axis, dtype), np.add.reduceat(tangents[1], indices, axis)



def _register_segment_extremum(ufunc):
    """``maximum.reduceat`` / ``minimum.reduceat``: each output's derivative goes to the
    elements of its segment that attain it, shared among ties (as ``np.max``'s rule does)."""
    def shares(array, y, indices, axis):
        axis = axis % np.ndim(array)
        positions, owners = _segments(indices, np.shape(array)[axis])
        gathered = np.take(array, positions, axis)
        hits = (gathered == np.take(y, owners, axis)).astype(np.result_type(array))  # plain: no derivative
        starts = np.concatenate([[0], np.cumsum(np.bincount(owners))[:-1]])
        ties = np.add.reduceat(hits, starts, axis)
        return positions, owners, starts, hits / np.take(ties, owners, axis), axis

    @numpy_rrule(ufunc.reduceat)
    def segment_extremum_rrule(array, *options, **kwargs):
        indices, axis, dtype = _reduceat_options(options, kwargs)
        y = ufunc.reduceat(array, indices, axis, dtype)
        shape = np.shape(array)
        positions, owners, _, share, axis = shares(array, y, indices, axis)
        index = (slice(None),) * axis + (positions,)

        def segment_extremum_pullback(g):
            return NoTangent(), scatter_add(shape, index, np.take(g, owners, axis) * share)

        return y, segment_extremum_pullback

    @numpy_frule(ufunc.reduceat)
    def segment_extremum_frule(tangents, array, *options, **kwargs):
        indices, axis, dtype = _reduceat_options(options, kwargs)
        y = ufunc.reduceat(array, indices, axis, dtype)
        positions, _, starts, share, axis = shares(array, y, indices, axis)
        return y, np.add.reduceat(np.take(tangents[1], positions, axis) * share, starts, axis)


_register_segment_extremum(np.maximum)
_register_segment_extremum(np.minimum)


# ---- trace ------------------------------------------------------------------------------------
def _eye_along(a, offset, axis1, axis2):
    """The 0/1 mask of diagonal ``offset`` of ``a`` over ``(axis1, axis2)``, size 1 on other axes."""
    ndim = np.ndim(a)
    ax1, ax2 = axis1 % ndim, axis2 % ndim
    eye = np.eye(np.shape(a)[ax1], np.shape(a)[ax2], offset, dtype=np.result_type(a))
    eye = eye if ax1 < ax2 else eye.T
    return np.reshape(eye, [np.shape(a)[d] if d in (ax1, ax2) else 1 for d in range(ndim)])


@numpy_rrule(np.trace, complex=True)
def trace_rrule(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    def trace_pullback(g):
        axes = tuple(sorted((axis1 % np.ndim(a), axis2 % np.ndim(a))))
        return NoTangent(), np.expand_dims(g, axes) * _eye_along(a, offset, axis1, axis2)

    return np.trace(a, offset, axis1, axis2, dtype), trace_pullback


@numpy_frule(np.trace, complex=True)
def trace_frule(tangents, a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    return np.trace(a, offset, axis1, axis2, dtype), np.trace(tangents[1], offset, axis1, axis2)
