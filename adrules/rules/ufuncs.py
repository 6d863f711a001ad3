"""Rules: elementwise functions (NumPy ufuncs and their kin).

One ``scalar_rule`` line per function gives its rrule and its frule. Partials are
called as ``d(x1, ..., xn, y)`` with the output ``y`` last, and are written in NumPy
so they are traced in turn: that is what makes higher derivatives work.
"""

import numpy as np

from .. import ops
from ..registry import ONE, frule, rrule, scalar_rule
from ..tangents import NoTangent


def _minus_one(*args):
    return -1.0


def _replace_zero(x, value):
    return np.where(x != 0, x, value)


def _balanced_eq(x, z, other):
    """1 where x is the extremum, 1/2 where tied with ``other`` (a fair subgradient)."""
    return (x == z) / (1.0 + (x == other))


# ---- arithmetic ------------------------------------------------------------
scalar_rule(np.add, ONE, ONE, complex=True)
scalar_rule(np.subtract, ONE, _minus_one, complex=True)
scalar_rule(np.multiply, lambda a, b, y: b, lambda a, b, y: a, complex=True)
scalar_rule(np.true_divide, lambda a, b, y: 1.0 / b, lambda a, b, y: -y / b, complex=True)
scalar_rule(np.negative, _minus_one, complex=True)
scalar_rule(np.positive, ONE, complex=True)
scalar_rule(np.reciprocal, lambda x, y: -(y * y), complex=True)
scalar_rule(np.remainder, ONE, lambda a, b, y: -np.floor_divide(a, b))
scalar_rule(np.fmod, ONE, lambda a, b, y: -np.trunc(a / b))

def _tanh_partial(x, y):
    """1 - y*y; for a big plain array computed in the buffer of y*y (NumPy does not elide a
    temporary on the right of ``-``): one full-size allocation, not two."""
    t = y * y
    if type(t) is np.ndarray and t.size >= 1 << 12:
        return np.subtract(1.0, t, out=t)
    return 1.0 - t


# ---- powers and roots --------------------------------------------------------
def _power_base_partial(a, b, y):
    if type(b) in (int, float):  # the common x ** 2: no np.where over the exponent
        return 2.0 * a if b == 2 else (b * a ** (b - 1) if b != 0 else 0.0 * a)
    return b * a ** np.where(b != 0, b - 1, 1.0)


scalar_rule(np.power,
            _power_base_partial,
            lambda a, b, y: y * np.log(_replace_zero(a, 1.0)), complex=True)
scalar_rule(np.float_power,
            lambda a, b, y: b * np.float_power(a, np.where(b != 0, b - 1, 1.0)),
            lambda a, b, y: y * np.log(_replace_zero(a, 1.0)), complex=True)
scalar_rule(np.square, lambda x, y: 2.0 * x, complex=True)
scalar_rule(np.sqrt, lambda x, y: 0.5 / y, complex=True)
scalar_rule(np.cbrt, lambda x, y: 1.0 / (3.0 * y * y))

# ---- exponentials and logarithms --------------------------------------------
scalar_rule(np.exp, lambda x, y: y, complex=True)
scalar_rule(np.exp2, lambda x, y: y * np.log(2.0), complex=True)
scalar_rule(np.expm1, lambda x, y: y + 1.0, complex=True)
scalar_rule(np.log, lambda x, y: 1.0 / x, complex=True)
scalar_rule(np.log2, lambda x, y: 1.0 / (x * np.log(2.0)), complex=True)
scalar_rule(np.log10, lambda x, y: 1.0 / (x * np.log(10.0)), complex=True)
scalar_rule(np.log1p, lambda x, y: 1.0 / (1.0 + x), complex=True)
scalar_rule(np.logaddexp, lambda a, b, y: np.exp(a - y), lambda a, b, y: np.exp(b - y))
scalar_rule(np.logaddexp2, lambda a, b, y: np.exp2(a - y), lambda a, b, y: np.exp2(b - y))

# ---- trigonometric -----------------------------------------------------------
scalar_rule(np.sin, lambda x, y: np.cos(x), complex=True)
scalar_rule(np.cos, lambda x, y: -np.sin(x), complex=True)
scalar_rule(np.tan, lambda x, y: 1.0 + y * y, complex=True)
scalar_rule(np.arcsin, lambda x, y: 1.0 / np.sqrt(1.0 - x * x), complex=True)
scalar_rule(np.arccos, lambda x, y: -1.0 / np.sqrt(1.0 - x * x), complex=True)
scalar_rule(np.arctan, lambda x, y: 1.0 / (1.0 + x * x), complex=True)
scalar_rule(np.arctan2, lambda a, b, y: b / (a * a + b * b), lambda a, b, y: -a / (a * a + b * b))
scalar_rule(np.hypot, lambda a, b, y: a / y, lambda a, b, y: b / y)
scalar_rule(np.deg2rad, lambda x, y: np.pi / 180.0)
scalar_rule(np.rad2deg, lambda x, y: 180.0 / np.pi)

# ---- hyperbolic ----------------------------------------------------------------
scalar_rule(np.sinh, lambda x, y: np.cosh(x), complex=True)
scalar_rule(np.cosh, lambda x, y: np.sinh(x), complex=True)
scalar_rule(np.tanh, _tanh_partial, complex=True)
scalar_rule(np.arcsinh, lambda x, y: 1.0 / np.sqrt(x * x + 1.0), complex=True)
scalar_rule(np.arccosh, lambda x, y: 1.0 / np.sqrt(x * x - 1.0), complex=True)
scalar_rule(np.arctanh, lambda x, y: 1.0 / (1.0 - x * x), complex=True)

# ---- piecewise ------------------------------------------------------------------
def _abs_partial(x, y):
    """sign(x) for real x; for complex z, ∂|z|/∂x - i ∂|z|/∂y = conj(z) / |z| (0 at 0), written
    with z itself rather than np.sign so second derivatives see how it moves."""
    if type(x) is complex:  # a Python complex has no dtype (np.sign(z) would be z / |z|)
        x = np.complex128(x)
    if getattr(x, "dtype", None) is None or x.dtype.kind != "c":
        return np.sign(x)
    return np.conjugate(x) / np.where(y == 0, np.inf, y)


scalar_rule(np.absolute, _abs_partial, complex=True)
scalar_rule(np.fabs, lambda x, y: np.sign(x))
scalar_rule(np.maximum, lambda a, b, y: _balanced_eq(a, y, b), lambda a, b, y: _balanced_eq(b, y, a))
scalar_rule(np.minimum, lambda a, b, y: _balanced_eq(a, y, b), lambda a, b, y: _balanced_eq(b, y, a))
scalar_rule(np.fmax, lambda a, b, y: _balanced_eq(a, y, b), lambda a, b, y: _balanced_eq(b, y, a))
scalar_rule(np.fmin, lambda a, b, y: _balanced_eq(a, y, b), lambda a, b, y: _balanced_eq(b, y, a))
# the condition as booleans: NumPy takes any truthy value (a float mask) as the condition
scalar_rule(np.where, None, lambda c, a, b, y: np.asarray(c, dtype=bool),
            lambda c, a, b, y: ~np.asarray(c, dtype=bool), complex=True)
scalar_rule(np.clip,
            lambda x, lo, hi, y: (x == y),
            lambda x, lo, hi, y: (lo == y) & (x != y),
            lambda x, lo, hi, y: (hi == y) & (x != y) & (lo != y))
scalar_rule(np.real, ONE, complex=True)
scalar_rule(np.copy, ONE, complex=True)


# ---- dtype casts ------------------------------------------------------------------
@rrule.register(ops.astype, complex=True)
def astype_rrule(x, dtype, **kwargs):
    y = ops.astype(x, dtype, **kwargs)

    def astype_pullback(g):
        # projection casts g back to x's dtype: a real x keeps the real part of a complex g
        return NoTangent(), g, NoTangent()

    return y, astype_pullback


@frule.register(ops.astype, complex=True)
def astype_frule(tangents, x, dtype, **kwargs):
    y = ops.astype(x, dtype, **kwargs)
    if np.dtype(dtype).kind not in "fc":
        return y, NoTangent()
    dx = tangents[1]
    if np.dtype(dtype).kind == "f":  # complex to real keeps the real part (NumPy warns)
        dx = np.real(dx)
    return y, ops.astype(dx, dtype)
