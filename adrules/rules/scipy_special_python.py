"""Rules: scipy.special's functions written in Python, which call ``np.asarray`` on their
arguments: ``logsumexp`` (its whole signature: ``axis``, ``b``, ``keepdims``,
``return_sign``), ``softmax``, ``log_softmax``, ``polygamma``, ``multigammaln``,
``zeta`` and ``factorial``, the rest of what autograd's and JAX's ``scipy.special`` cover.

Each name in ``scipy.special`` becomes an ``@adrules.primitive`` of SciPy's function
(``_scipy_entry.replace_function``), which computes every value, so values are SciPy's.
Derivatives are NumPy and scipy.special calls that have rules: derivatives of
derivatives work. Real inputs only. ``logsumexp``'s derivative is ``sign * b * exp(a - y)``
(``y`` the result), 0 where ``y`` is -inf (every term zero); the ``sign`` output of
``return_sign=True`` has none. ``polygamma`` and ``multigammaln`` are differentiable in
``x`` and ``a`` (their order and dimension are integers), ``zeta(x, q)`` in ``q`` (SciPy
has no derivative in ``x``), ``factorial(n)`` (``exact=False``, gamma(n + 1)) in ``n``.
"""

import numpy as np
import scipy.special as sp

from ..registry import scalar_rule
from ..tangents import NoTangent, ZeroTangent, is_zero
from ._scipy_entry import replace_function
from .scipy_special import hurwitz_zeta, no_derivative
from ._utils import numpy_frule, normalize_axes, numpy_rrule, tangent_at

logsumexp = replace_function(sp, "logsumexp")
softmax = replace_function(sp, "softmax")
log_softmax = replace_function(sp, "log_softmax")
polygamma = replace_function(sp, "polygamma")
multigammaln = replace_function(sp, "multigammaln")
zeta = replace_function(sp, "zeta")
factorial = replace_function(sp, "factorial")


# ---- logsumexp ------------------------------------------------------------------------------
def _kept(shape, axis, keepdims):
    """The shape of the reduced output with the reduced axes of ``shape`` back as 1s (to
    broadcast against the input), or None where it broadcasts already."""
    if keepdims or axis is None:  # (a number, for axis=None)
        return None
    axes = normalize_axes(axis, len(shape))
    return tuple(1 if i in axes else n for i, n in enumerate(shape))


def _lse_parts(a, b, y, sign, axis, keepdims):
    """``(e, shape, kept)``: ``exp(a - y)`` times the sign (the derivative in b), 0 where y
    is -inf; ``shape`` a and b broadcast, the shape SciPy reduces; ``kept`` (``_kept``)."""
    shape = np.broadcast_shapes(np.shape(a), np.shape(b)) if b is not None else np.shape(a)
    kept = _kept(shape, axis, keepdims)
    finite = np.isfinite(y)
    if not np.all(finite):
        y = np.where(finite, y, 0.0)  # every term zero: exp(a - y) is 0, not nan
    e = np.exp(a - (y if kept is None else np.reshape(y, kept)))
    if sign is not None:
        e = e * (sign if kept is None else np.reshape(sign, kept))
    return e, shape, kept


@numpy_rrule(logsumexp)
def logsumexp_rrule(a, axis=None, b=None, keepdims=False, return_sign=False):
    out = logsumexp(a, axis, b, keepdims, return_sign)
    y, sign = out if return_sign else (out, None)

    def logsumexp_pullback(g):
        gy = g[0] if return_sign else g
        if is_zero(gy):
            return NoTangent(), ZeroTangent(), NoTangent(), ZeroTangent()
        e, shape, kept = _lse_parts(a, b, y, sign, axis, keepdims)
        ge = (gy if kept is None else np.reshape(gy, kept)) * e
        if b is None:
            return NoTangent(), ge, NoTangent(), NoTangent()
        return NoTangent(), ge * b, NoTangent(), ge if np.shape(ge) == shape else np.broadcast_to(ge, shape)

    return out, logsumexp_pullback


@numpy_frule(logsumexp)
def logsumexp_frule(tangents, a, axis=None, b=None, keepdims=False, return_sign=False):
    out = logsumexp(a, axis, b, keepdims, return_sign)
    y, sign = out if return_sign else (out, None)
    da, db = tangent_at(tangents, 0), tangent_at(tangents, 2)
    dy = ZeroTangent()
    if not (is_zero(da) and is_zero(db)):
        e = _lse_parts(a, b, y, sign, axis, keepdims)[0]
        inner = (0.0 if is_zero(da) else da * (e if b is None else e * b)) + (0.0 if is_zero(db) else db * e)
        dy = np.sum(inner, axis=axis, keepdims=keepdims)
    return out, ((dy, ZeroTangent()) if return_sign else dy)


# ---- softmax and log_softmax ----------------------------------------------------------------
@numpy_rrule(softmax)
def softmax_rrule(x, axis=None):
    y = softmax(x, axis)

    def softmax_pullback(g):
        return NoTangent(), y * (g - np.sum(g * y, axis=axis, keepdims=True))

    return y, softmax_pullback


@numpy_frule(softmax)
def softmax_frule(tangents, x, axis=None):
    y, dx = softmax(x, axis), tangent_at(tangents, 0)
    return y, (ZeroTangent() if is_zero(dx) else y * (dx - np.sum(dx * y, axis=axis, keepdims=True)))


@numpy_rrule(log_softmax)
def log_softmax_rrule(x, axis=None):
    y = log_softmax(x, axis)

    def log_softmax_pullback(g):
        return NoTangent(), g - np.exp(y) * np.sum(g, axis=axis, keepdims=True)

    return y, log_softmax_pullback


@numpy_frule(log_softmax)
def log_softmax_frule(tangents, x, axis=None):
    y, dx = log_softmax(x, axis), tangent_at(tangents, 0)
    return y, (ZeroTangent() if is_zero(dx) else dx - np.sum(np.exp(y) * dx, axis=axis, keepdims=True))


# ---- elementwise functions written in Python --------------------------------------------------
def _multigammaln_partial(a, d, y):
    return sum(sp.digamma(a - 0.5 * j) for j in range(int(d)))


def _factorial_partial(n, exact, extend, y):
    return np.where(n >= 0, y * sp.digamma(n + 1.0), 0.0)  # extend="zero": 0 below 0


scalar_rule(polygamma, None, lambda n, x, y: polygamma(n + 1, x))
scalar_rule(multigammaln, _multigammaln_partial, None)
scalar_rule(zeta, no_derivative("zeta", "x"), lambda x, q, out, y: -x * hurwitz_zeta(x + 1.0, q), None)
scalar_rule(factorial, _factorial_partial, None, None)
