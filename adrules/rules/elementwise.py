"""Rules: more elementwise functions, and ``ufunc.outer`` for the ufuncs that have rules.

One ``scalar_rule`` line per function, as in ``ufuncs.py``; partials are called as
``d(x1, ..., xn, y)`` (trailing options such as ``deg`` or ``nan=`` included, hence
the ``*options``). The parts of a complex number (``imag``, ``angle``, ``conj``) follow
ChainRules: a real-valued function's partial is ``∂f/∂x - i ∂f/∂y`` (``scalar_rule``'s
``complex=True``), and ``conj``, neither holomorphic nor real, has rules of its own. ``i0``'s derivative is ``scipy.special.i1``: it has
a rule when SciPy is installed (imported at the first derivative, not with adrules).
"""

import numpy as np

from .. import ops
from ..registry import ONE, frule, non_differentiable, rrule, scalar_rule
from ..tangents import NoTangent, ZeroTangent, is_zero
from ._compose import composite_rule
from ._optional import is_installed
from ._utils import numpy_frule, numpy_rrule


def _zero(x, *options):
    return 0.0 * x


def _sinc_partial(x, y):
    safe = np.where(x == 0, 1.0, x)
    # At 0 the first derivative is 0 and the second -pi^2/3: this branch has both.
    return np.where(x == 0, -(np.pi ** 2 / 3.0) * x, (np.cos(np.pi * x) - y) / safe)


# ---- angles and sinc -------------------------------------------------------------------
scalar_rule(np.degrees, lambda x, y: 180.0 / np.pi)
scalar_rule(np.radians, lambda x, y: np.pi / 180.0)
scalar_rule(np.sinc, _sinc_partial, complex=True)  # sin(πz)/(πz) is holomorphic: the same formula


# ---- phase unwrapping: the multiples of the period it adds are locally constant -------------
@numpy_rrule(np.unwrap)
def unwrap_rrule(p, discont=None, axis=-1, *, period=2 * np.pi):
    def unwrap_pullback(g):
        return NoTangent(), g

    return np.unwrap(p, discont, axis, period=period), unwrap_pullback


@numpy_frule(np.unwrap)
def unwrap_frule(tangents, p, discont=None, axis=-1, *, period=2 * np.pi):
    return np.unwrap(p, discont, axis, period=period), tangents[1]


# ---- the modified Bessel function i0 --------------------------------------------------------
def _i0_partial(x, y):
    from scipy.special import i1  # at the first derivative: import adrules never imports SciPy

    return i1(x)


if is_installed("scipy"):
    scalar_rule(np.i0, _i0_partial)

# ---- parts of a complex number ---------------------------------------------------------
def _imag_partial(x, y):
    return -1j  # imag(x + iy) = y: ∂/∂x - i ∂/∂y = -i


def _angle_partial(z, *options):
    """angle(z) = Im(log z): -i / z, times 180/π for degrees (0 at z = 0, where it jumps).
    Called as (z, y) or (z, deg, y)."""
    safe = np.where(z == 0, 1.0, z)
    d = np.where(z == 0, 0.0, -1j / safe)
    return d * (180.0 / np.pi) if len(options) == 2 and options[0] else d


scalar_rule(np.imag, _imag_partial, complex=True)
scalar_rule(np.angle, _angle_partial, None, complex=True)  # (z, deg)
scalar_rule(np.real_if_close, ONE, _zero, complex=True)  # (a, tol)


@rrule.register(np.conjugate, complex=True)  # np.conj is the same ufunc
def conjugate_rrule(x, **kwargs):
    def conjugate_pullback(g):
        return NoTangent(), np.conjugate(g)

    return np.conjugate(x, **kwargs), conjugate_pullback


@frule.register(np.conjugate, complex=True)
def conjugate_frule(tangents, x, **kwargs):
    return np.conjugate(x, **kwargs), np.conjugate(tangents[1])

# ---- cleaning -------------------------------------------------------------------------
scalar_rule(np.nan_to_num,  # (x, copy, nan, posinf, neginf): each replacement value where it lands
            lambda x, *options: np.isfinite(x), None,
            lambda x, copy, nan, *options: np.isnan(x),
            lambda x, copy, nan, posinf, *options: np.isposinf(x),
            lambda x, copy, nan, posinf, neginf, y: np.isneginf(x))

# ---- sign and exponent manipulation ------------------------------------------------------
scalar_rule(np.copysign, lambda a, b, y: np.sign(a) * np.sign(y), _zero)  # |a| with b's sign
scalar_rule(np.ldexp, lambda x, e, y: np.exp2(e), None)  # e is an integer
non_differentiable(np.spacing, np.nextafter, np.isneginf, np.isposinf, np.iscomplex, np.isreal)

# ---- ufuncs with two outputs: (fraction, integer part) pairs -----------------------------------
@rrule.register(np.frexp)
def frexp_rrule(x, **kwargs):
    mantissa, exponent = np.frexp(x, **kwargs)

    def frexp_pullback(g):  # x = mantissa * 2**exponent, the exponent piecewise constant
        return NoTangent(), g[0] * np.exp2(-exponent)

    return (mantissa, exponent), frexp_pullback


@frule.register(np.frexp)
def frexp_frule(tangents, x, **kwargs):
    mantissa, exponent = np.frexp(x, **kwargs)
    dx = tangents[1]
    return (mantissa, exponent), (ZeroTangent() if is_zero(dx) else dx * np.exp2(-exponent), NoTangent())


@rrule.register(np.modf)
def modf_rrule(x, **kwargs):
    def modf_pullback(g):  # the integral part is piecewise constant
        return NoTangent(), g[0]

    return np.modf(x, **kwargs), modf_pullback


@frule.register(np.modf)
def modf_frule(tangents, x, **kwargs):
    return np.modf(x, **kwargs), (tangents[1], ZeroTangent())


composite_rule(np.divmod, lambda a, b, **kwargs: (np.floor_divide(a, b, **kwargs), np.remainder(a, b, **kwargs)))


# ---- casts ----------------------------------------------------------------------------------
if hasattr(np, "astype"):  # NumPy 2
    composite_rule(np.astype, lambda x, dtype, **kwargs: ops.astype(x, dtype, **kwargs))


# ---- ufunc.outer: the ufunc on ``a`` reshaped to broadcast against ``b`` --------------------
def _outer_of(ufunc):
    def ufunc_outer(a, b, **kwargs):
        return ufunc(np.reshape(a, np.shape(a) + (1,) * np.ndim(b)), b, **kwargs)

    return ufunc_outer


for _ufunc in (np.add, np.subtract, np.multiply, np.true_divide, np.power, np.float_power,
               np.arctan2, np.hypot, np.logaddexp, np.logaddexp2, np.maximum, np.minimum,
               np.fmax, np.fmin, np.remainder, np.fmod):
    composite_rule(_ufunc.outer, _outer_of(_ufunc))

non_differentiable(*(u.outer for u in (
    np.equal, np.not_equal, np.less, np.less_equal, np.greater, np.greater_equal,
    np.logical_and, np.logical_or, np.logical_xor, np.floor_divide, np.heaviside)))
