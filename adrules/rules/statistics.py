"""Rules: order statistics, ranges and the NaN-ignoring reductions.

Quantiles are read off the sorted lanes: ``take_along_axis`` of ``np.sort`` at the two
neighbouring ranks, blended by the fractional rank, so the cotangent goes to the one or
two elements the quantile is made of (and to ``q`` itself through the blend). The
``nan*`` reductions replace NaNs by the reduction's identity (or drop them from the
count) before calling the plain reduction. Each function is an implementation in NumPy
calls that have rules, registered with ``composite_rule``.

Zero spread: ``nanstd`` of a constant lane has derivative 0 (the minimum-norm
subgradient of the convex function std), the same in both modes, like ``np.std``.

Complex values: ``nanvar``/``nanstd`` are real (``|z - mean|**2``) and ``cov`` is
``X X^H``, as NumPy's; the order statistics and ``ptp`` compare, and refuse complex values
through the rules they are made of (``sort``, ``max``).
"""

import numpy as np

from ..registry import non_differentiable
from ._compose import composite_rule


def _lanes(a, axis):
    """``a`` with the reduced axes moved last and merged into one; the kept shape."""
    if axis is None:
        return np.reshape(a, (-1,)), ()
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    axes = tuple(sorted(d % np.ndim(a) for d in axes))
    kept = [d for d in range(np.ndim(a)) if d not in axes]
    moved = np.transpose(a, kept + list(axes))
    kept_shape = tuple(np.shape(a)[d] for d in kept)
    return np.reshape(moved, kept_shape + (-1,)), kept_shape


def _keepdims_shape(a, axis, q_shape):
    if axis is None:
        return q_shape + (1,) * np.ndim(a)
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    axes = {d % np.ndim(a) for d in axes}
    return q_shape + tuple(1 if d in axes else n for d, n in enumerate(np.shape(a)))


_METHODS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile(a, q, axis, method, keepdims, ignore_nan):
    if method not in _METHODS:
        raise NotImplementedError(
            f"numpy.quantile(..., method={method!r}) has no derivative rule; use one of {_METHODS}.")
    lanes, kept = _lanes(a, axis)
    q_shape = np.shape(q)
    missing = np.isnan(lanes)
    count = np.sum(~missing, -1, keepdims=True) if ignore_nan else np.shape(lanes)[-1]
    ordered = np.broadcast_to(np.sort(lanes, -1), q_shape + np.shape(lanes))  # NaNs sort last
    rank = np.reshape(q, q_shape + (1,) * len(kept) + (1,)) * (count - 1)
    low = np.clip(np.floor(rank), 0, np.maximum(count - 1, 0)).astype(np.intp)
    high = np.minimum(low + 1, np.maximum(count - 1, 0))
    frac = rank - low
    if method == "lower":
        high, frac = low, 0.0 * frac
    elif method == "higher":
        low = high = np.where(frac > 0, high, low)
    elif method == "nearest":  # NumPy rounds half to even
        low = high = np.where(np.around(rank) > low, high, low)
    elif method == "midpoint":
        frac = np.where(frac > 0, 0.5, 0.0)
    below = np.take_along_axis(ordered, np.broadcast_to(low, q_shape + kept + (1,)), -1)
    above = np.take_along_axis(ordered, np.broadcast_to(high, q_shape + kept + (1,)), -1)
    y = np.reshape(below + frac * (above - below), q_shape + kept)
    if not ignore_nan:
        y = np.where(np.reshape(np.any(missing, -1), kept), np.nan, y)
    return np.reshape(y, _keepdims_shape(a, axis, q_shape)) if keepdims else y


def _check_weights(weights):
    if weights is not None:
        raise NotImplementedError("numpy.quantile(..., weights=...) has no derivative rule.")


def quantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
             *, weights=None, interpolation=None):
    _check_weights(weights)
    return _quantile(a, q, axis, interpolation or method, keepdims, False)


def percentile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
               *, weights=None, interpolation=None):
    _check_weights(weights)
    return _quantile(a, np.divide(q, 100.0), axis, interpolation or method, keepdims, False)


def nanquantile(a, q, axis=None, out=None, overwrite_input=False, method="linear", keepdims=False,
                *, weights=None, interpolation=None):
    _check_weights(weights)
    return _quantile(a, q, axis, interpolation or method, keepdims, True)


def nanpercentile(a, q, axis=None, out=None, overwrite_input=False, method="linear",
                  keepdims=False, *, weights=None, interpolation=None):
    _check_weights(weights)
    return _quantile(a, np.divide(q, 100.0), axis, interpolation or method, keepdims, True)


def median(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _quantile(a, 0.5, axis, "linear", keepdims, False)


def nanmedian(a, axis=None, out=None, overwrite_input=False, keepdims=False):
    return _quantile(a, 0.5, axis, "linear", keepdims, True)


# ---- covariance ------------------------------------------------------------------------------
def _variables_as_rows(x, rowvar):
    x = np.atleast_2d(x)
    return np.transpose(x) if not rowvar and np.shape(x)[0] != 1 else x


def cov(m, y=None, rowvar=True, bias=False, ddof=None, fweights=None, aweights=None, *, dtype=None):
    if fweights is not None or aweights is not None:
        raise NotImplementedError("numpy.cov(..., fweights=/aweights=) has no derivative rule.")
    x = _variables_as_rows(m, rowvar)
    if y is not None:
        x = np.concatenate([x, _variables_as_rows(y, rowvar)], 0)
    ddof = (0 if bias else 1) if ddof is None else ddof
    centred = x - np.mean(x, 1, keepdims=True)
    other = np.transpose(centred)
    if np.iscomplexobj(centred):  # NumPy's X X^H
        other = np.conjugate(other)
    return np.squeeze(centred @ other / (np.shape(x)[1] - ddof))


def corrcoef(x, y=None, rowvar=True, *, dtype=None):
    c = cov(x, y, rowvar)
    if np.ndim(c) == 0:
        return c / c
    scale = np.sqrt(np.diagonal(c))
    return c / scale[:, None] / scale[None, :]  # NumPy also clips to [-1, 1]: off by rounding only


# ---- ranges --------------------------------------------------------------------------------
def ptp(a, axis=None, out=None, keepdims=False):
    return np.max(a, axis, keepdims=keepdims) - np.min(a, axis, keepdims=keepdims)


# ---- NaN-ignoring reductions ------------------------------------------------------------------
def _nan_extremum(extremum, fill):
    def nan_extremum(a, axis=None, out=None, keepdims=False, **kwargs):
        missing = np.isnan(a)
        y = extremum(np.where(missing, fill, a), axis, keepdims=keepdims, **kwargs)
        return np.where(np.all(missing, axis, keepdims=keepdims), np.nan, y)  # all-NaN lanes

    return nan_extremum


def nanprod(a, axis=None, dtype=None, out=None, keepdims=False, **kwargs):
    return np.prod(np.where(np.isnan(a), 1.0, a), axis, dtype, keepdims=keepdims, **kwargs)


def nancumsum(a, axis=None, dtype=None, out=None):
    return np.cumsum(np.where(np.isnan(a), 0.0, a), axis, dtype)


def nancumprod(a, axis=None, dtype=None, out=None):
    return np.cumprod(np.where(np.isnan(a), 1.0, a), axis, dtype)


def nanvar(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    if "where" in kwargs or "mean" in kwargs:
        raise NotImplementedError("numpy.nanvar(..., where=/mean=) has no derivative rule.")
    ddof = kwargs.get("correction", ddof)
    present = ~np.isnan(a)
    count = np.sum(present, axis, keepdims=True)
    centred = np.where(present, a - np.nansum(a, axis, keepdims=True) / count, 0.0)
    squares = np.real(centred * np.conjugate(centred)) if np.iscomplexobj(centred) else centred * centred
    var = np.sum(squares, axis, keepdims=True) / (count - ddof)
    return var if keepdims else np.reshape(var, np.shape(np.nansum(present, axis)))


def nanstd(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, **kwargs):
    var = nanvar(a, axis, dtype, out, ddof, keepdims, **kwargs)
    spread = var > 0
    return np.where(spread, np.sqrt(np.where(spread, var, 1.0)), 0.0 * var)


# ---- the table ------------------------------------------------------------------------------------
composite_rule(np.quantile, quantile)
composite_rule(np.percentile, percentile)
composite_rule(np.nanquantile, nanquantile)
composite_rule(np.nanpercentile, nanpercentile)
composite_rule(np.median, median)
composite_rule(np.nanmedian, nanmedian)
composite_rule(np.ptp, ptp)
composite_rule(np.cov, cov)
composite_rule(np.corrcoef, corrcoef)
composite_rule(np.nanmax, _nan_extremum(np.max, -np.inf))
composite_rule(np.nanmin, _nan_extremum(np.min, np.inf))
composite_rule(np.nanprod, nanprod)
composite_rule(np.nancumsum, nancumsum)
composite_rule(np.nancumprod, nancumprod)
composite_rule(np.nanvar, nanvar)
composite_rule(np.nanstd, nanstd)
non_differentiable(np.nanargmax, np.nanargmin)
