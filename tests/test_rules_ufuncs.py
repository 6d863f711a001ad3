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
