"""Every elementwise rule in rules/ufuncs.py against finite differences: rrule, frule and
second order, over scalar, vector, matrix and broadcastable shapes, float64 and float32.

One line per primitive: the function and a sampler of valid inputs (inside its domain,
away from kinks where the derivative jumps).
"""

import numpy as np
import pytest

import adrules as ad
from adrules import ops
from adrules.testing import check_frule, check_grads, check_rrule


def _u(lo, hi):
    return lambda rng, shape: rng.uniform(lo, hi, size=shape)


def _away_from_zero(rng, shape):
    return rng.uniform(0.3, 1.5, size=shape) * rng.choice([-1.0, 1.0], size=shape)


def _wide(rng, shape):
    return rng.uniform(-1.5, 1.5, size=shape)


UNARY = [
    (np.negative, _wide), (np.positive, _wide), (np.reciprocal, _away_from_zero),
    (np.square, _wide), (np.sqrt, _u(0.5, 2.0)), (np.cbrt, _u(0.5, 2.0)),
    (np.exp, _wide), (np.exp2, _wide), (np.expm1, _wide), (np.log, _u(0.5, 2.0)),
    (np.log2, _u(0.5, 2.0)), (np.log10, _u(0.5, 2.0)), (np.log1p, _u(-0.5, 2.0)),
    (np.sin, _wide), (np.cos, _wide), (np.tan, _u(-1.0, 1.0)), (np.arcsin, _u(-0.8, 0.8)),
    (np.arccos, _u(-0.8, 0.8)), (np.arctan, _wide), (np.sinh, _wide), (np.cosh, _wide),
    (np.tanh, _wide), (np.arcsinh, _wide), (np.arccosh, _u(1.2, 3.0)),
    (np.arctanh, _u(-0.8, 0.8)), (np.deg2rad, _wide), (np.rad2deg, _wide),
    (np.absolute, _away_from_zero), (np.fabs, _away_from_zero), (np.real, _wide),
    (np.copy, _wide),
]

BINARY = [
    (np.add, _wide, _wide), (np.subtract, _wide, _wide), (np.multiply, _wide, _wide),
    (np.true_divide, _wide, _away_from_zero), (np.power, _u(0.5, 2.0), _wide),
    (np.float_power, _u(0.5, 2.0), _wide), (np.arctan2, _away_from_zero, _away_from_zero),
    (np.hypot, _away_from_zero, _away_from_zero), (np.logaddexp, _wide, _wide),
    (np.logaddexp2, _wide, _wide), (np.remainder, _u(0.1, 0.9), _u(1.1, 2.0)),
    (np.fmod, _u(0.1, 0.9), _u(1.1, 2.0)),
]

MINMAX = [np.maximum, np.minimum, np.fmax, np.fmin]

SHAPES = [((), ()), ((4,), (4,)), ((2, 3), (2, 3)), ((2, 3), (3,)), ((3, 1), (1, 4)), ((2, 3), ())]


def _ids(cases):
    return [c[0].__name__ for c in cases]


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("f, sample", UNARY, ids=_ids(UNARY))
def test_unary_rules(f, sample, shape, dtype):
    rng = np.random.default_rng(0)
    x = np.asarray(sample(rng, shape), dtype=dtype)
    check_rrule(f, x)
    check_frule(f, x)
    g = ad.gradient(lambda x: np.sum(f(x)), x)[0]
    assert g.dtype == dtype and g.shape == x.shape


@pytest.mark.parametrize("f, sample", UNARY, ids=_ids(UNARY))
def test_unary_second_order(f, sample):
    x = sample(np.random.default_rng(1), (3,))
    check_grads(lambda x: np.sum(f(x) * x), x, modes=("fwd", "rev"), order=2)


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("f, sample_a, sample_b", BINARY, ids=_ids(BINARY))
def test_binary_rules_broadcast(f, sample_a, sample_b, shapes, dtype):
    rng = np.random.default_rng(2)
    a = np.asarray(sample_a(rng, shapes[0]), dtype=dtype)
    b = np.asarray(sample_b(rng, shapes[1]), dtype=dtype)
    check_rrule(f, a, b)
    check_frule(f, a, b)
    ga, gb = ad.gradient(lambda a, b: np.sum(f(a, b)), a, b)
    assert ga.shape == a.shape and gb.shape == b.shape  # un-broadcast by projection
    assert ga.dtype == dtype and gb.dtype == dtype


@pytest.mark.parametrize("f, sample_a, sample_b", BINARY, ids=_ids(BINARY))
def test_binary_second_order(f, sample_a, sample_b):
    rng = np.random.default_rng(3)
    check_grads(lambda a, b: np.sum(f(a, b) * a), sample_a(rng, (3,)), sample_b(rng, (3,)),
                modes=("fwd", "rev"), order=2)


@pytest.mark.parametrize("f", MINMAX, ids=[f.__name__ for f in MINMAX])
def test_extrema_without_ties(f):
    a = np.array([0.1, 2.0, -1.0, 0.7])
    b = np.array([0.5, 1.0, -2.0, 0.3])
    check_rrule(f, a, b)
    check_frule(f, a, b)


@pytest.mark.parametrize("f", MINMAX, ids=[f.__name__ for f in MINMAX])
def test_extrema_share_the_gradient_at_ties(f):
    ga, gb = ad.gradient(lambda a, b: np.sum(f(a, b)), np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    assert ga[0] == 0.5 and gb[0] == 0.5  # a fair subgradient, as HIPS autograd gives


def test_power_with_integer_and_python_exponents():
    x = np.array([0.5, 1.5, 2.0])
    for p in (2, 3, 0.5, 1, 0):
        g, = ad.gradient(lambda x: np.sum(x ** p), x)
        np.testing.assert_allclose(g, p * x ** (p - 1) if p else np.zeros(3))
    assert ad.gradient(lambda x: np.sum(x ** 2), np.array([0.0]))[0][0] == 0.0


def test_where_and_clip():
    x = np.array([-2.0, -0.5, 0.5, 2.0])
    lo, hi = np.full(4, -1.0), np.full(4, 1.0)
    check_rrule(np.clip, x, lo, hi)
    check_frule(np.clip, x, lo, hi)
    check_rrule(np.where, x > 0, x, 2.0 * x)
    gx, = ad.gradient(lambda x: np.sum(np.clip(x, -1.0, 1.0)), x)
    np.testing.assert_array_equal(gx, [0.0, 1.0, 1.0, 0.0])
    gx, = ad.gradient(lambda x: np.sum(np.where(x > 0, x ** 2, -x)), x)
    np.testing.assert_array_equal(gx, [-1.0, -1.0, 1.0, 4.0])


def test_astype_keeps_gradients_between_floats_and_stops_at_ints():
    x = np.array([0.25, 1.5], dtype=np.float32)
    g, = ad.gradient(lambda x: np.sum(x.astype(np.float64) ** 2), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * x)
    g, = ad.gradient(lambda x: np.sum(x * x.astype(int)), np.array([1.5, 2.5]))
    np.testing.assert_allclose(g, [1.0, 2.0])  # the int cast is a constant
    check_frule(ops.astype, np.array([0.5, 1.0]), np.float32)


@pytest.mark.parametrize("f", [np.floor, np.ceil, np.sign, np.rint, np.round, np.argmax, np.isfinite])
def test_non_differentiable_functions_stop_gradients(f):
    g, = ad.gradient(lambda x: np.sum(x * f(x)), np.array([0.3, 1.7, -2.2]))
    expected = np.asarray(f(np.array([0.3, 1.7, -2.2])), dtype=float) * np.ones(3)
    np.testing.assert_allclose(g, expected)


# ---- complex values -------------------------------------------------------------------------------
def _complex_checks():
    import _complex_checks  # tests/_complex_checks.py, which conftest.py loads

    return _complex_checks


def _z(sample):
    """Complex values whose real parts ``sample`` draws and imaginary parts are ±0.2..0.6,
    away from the branch cuts on the real axis (log, sqrt, arcsin, arccosh, arctanh)."""
    def draw(rng, shape):
        im = rng.uniform(0.2, 0.6, size=shape) * rng.choice([-1.0, 1.0], size=shape)
        return sample(rng, shape) + 1j * im

    return draw


# Holomorphic (the pullback multiplies by conj(f'(z))) and not (abs, real: real-valued of z).
COMPLEX_UNARY = [(f, sample) for f, sample in UNARY if f not in (np.cbrt, np.deg2rad, np.rad2deg, np.fabs)]
COMPLEX_BINARY = [(f, a, b) for f, a, b in BINARY if f in (np.add, np.subtract, np.multiply, np.true_divide,
                                                           np.power, np.float_power)]


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("f, sample", COMPLEX_UNARY, ids=_ids(COMPLEX_UNARY))
def test_unary_rules_at_complex_values(f, sample, shape):
    checks = _complex_checks()
    z = np.asarray(_z(sample)(np.random.default_rng(0), shape))
    checks.check_both(f, z)
    if shape == (4,):
        checks.check_both(f, z.astype(np.complex64))
        g = ad.gradient(lambda v: np.sum(np.abs(f(v))), z.astype(np.complex64))[0]
        assert g.dtype == np.complex64


@pytest.mark.parametrize("f, sample", COMPLEX_UNARY, ids=_ids(COMPLEX_UNARY))
def test_unary_second_order_at_complex_values(f, sample):
    """Forward over reverse along a complex direction against differences of the gradient,
    for a real loss with a holomorphic and a non-holomorphic part."""
    checks = _complex_checks()
    z = _z(sample)(np.random.default_rng(1), (3,))
    loss = checks.real_loss(lambda v: f(v) * v)
    checks.check_gradient(loss, z)
    checks.check_hvp(loss, z)


@pytest.mark.parametrize("shapes", [((4,), (4,)), ((2, 3), (3,)), ((3, 1), ())])
@pytest.mark.parametrize("f, sa, sb", COMPLEX_BINARY, ids=_ids(COMPLEX_BINARY))
def test_binary_rules_at_complex_values(f, sa, sb, shapes):
    """Both complex, and one real beside one complex (the real one's cotangent is real)."""
    checks = _complex_checks()
    rng = np.random.default_rng(2)
    a, b = _z(sa)(rng, shapes[0]), _z(sb)(rng, shapes[1])
    ra, rb = sa(rng, shapes[0]), sb(rng, shapes[1])
    for args in ((a, b), (ra, b), (a, rb)):
        checks.check_both(f, *(np.asarray(x) for x in args))
    loss = checks.real_loss(lambda v: f(v, b) * f(a, v))
    checks.check_hvp(loss, np.asarray(a) if np.shape(a) == np.shape(b) else np.asarray(b))


@pytest.mark.parametrize("exponent", [2, 3, 0.5, -1, 2.5j])
def test_power_of_complex_by_a_python_number(exponent):
    checks = _complex_checks()
    z = _z(_u(0.5, 2.0))(np.random.default_rng(3), (3,))
    loss = checks.real_loss(lambda v: v ** exponent)
    checks.check_gradient(loss, z)
    checks.check_hvp(loss, z)


@pytest.mark.parametrize("f", [
    lambda x: np.sum(np.abs(x * (1 + 2j)) ** 2),
    lambda x: np.sum(np.imag(np.exp(1j * x))),
    lambda x: np.abs(np.sum(np.exp(1j * x))),
    lambda x: np.sum(np.real((x * (1 + 2j)) * np.conj(x * (1 + 2j)))),
    lambda x: np.sum(np.angle(np.sqrt(x + 1j) * np.tanh(x - 0.5j))),
    lambda x: np.real(np.sum(np.log(x + 2j) ** 2 / np.cosh(1j * x))),
], ids=["abs2", "imag-exp", "abs-sum", "z-conj-z", "angle", "log-cosh"])
def test_real_inputs_through_complex_intermediates(f):
    """Real inputs, complex values inside, a real result: gradient, jvp and hvp against
    finite differences (the imaginary parts' contribution is not lost)."""
    checks = _complex_checks()
    x = np.array([0.3, 0.4, -0.7])
    checks.check_gradient(f, x)
    v = np.array([0.5, -1.0, 0.25])
    _, dy = ad.jvp(f, (x,), (v,))
    assert np.isrealobj(dy)
    np.testing.assert_allclose(dy, checks.grad_fd(f, x) @ v, rtol=1e-6)
    checks.check_hvp(f, x)


@pytest.mark.parametrize("f", MINMAX + [np.clip], ids=[f.__name__ for f in MINMAX + [np.clip]])
def test_comparisons_refuse_complex_values(f):
    """NumPy orders complex numbers lexicographically: maximum, minimum and clip compare, so
    their rules refuse complex values, in both modes, naming the function."""
    z = _z(_wide)(np.random.default_rng(4), (3,))
    args = (z, z[::-1]) if f is not np.clip else (z, 0.0, 1.0)
    name = f.__name__
    with pytest.raises(ad.registry.ComplexRuleError, match=name):
        ad.gradient(lambda v: np.sum(np.real(f(v, *args[1:]))), z)
    with pytest.raises(ad.registry.ComplexRuleError, match=name):
        ad.jvp(lambda v: f(v, *args[1:]), (z,), (z,))
    with pytest.raises(ad.registry.ComplexRuleError, match=name):
        ad.gradient(lambda v: np.sum(np.real(f(v * 1j, *args[1:]))), z.real)  # a complex intermediate
