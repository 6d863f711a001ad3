"""rules/elementwise.py against finite differences: rrule, frule and second order over
scalar, vector and matrix shapes in float64 and float32, and ``ufunc.outer``."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule


def _wide(rng, shape):
    return rng.uniform(-1.5, 1.5, size=shape)


def _angles(rng, shape):
    return rng.uniform(-3.0, 3.0, size=shape)


UNARY = [
    (np.degrees, _angles), (np.radians, _angles), (np.sinc, _wide), (np.conjugate, _wide),
    (np.imag, _wide), (np.angle, _wide), (np.real_if_close, _wide), (np.nan_to_num, _wide),
]


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("f, sample", UNARY, ids=[c[0].__name__ for c in UNARY])
def test_unary(f, sample, shape, dtype):
    x = np.asarray(sample(np.random.default_rng(1), shape), dtype=dtype)
    check_rrule(f, x)
    check_frule(f, x)
    if dtype == np.float64:
        check_grads(lambda v: f(v), x, order=2)


def test_sinc_at_zero_has_the_right_first_and_second_derivative():
    # sinc(x) = 1 - (pi x)^2 / 6 + ...: derivative 0, second derivative -pi^2/3
    assert ad.gradient(np.sinc, 0.0)[0] == 0.0
    second = ad.gradient(lambda v: ad.gradient(np.sinc, v)[0], 0.0)[0]
    assert np.isclose(second, -np.pi ** 2 / 3)


def test_nan_to_num_passes_no_gradient_to_replaced_entries():
    x = np.array([1.0, np.nan, np.inf, -2.0])
    g = ad.gradient(lambda v: np.sum(np.nan_to_num(v, nan=5.0, posinf=7.0) * np.arange(1.0, 5.0)), x)[0]
    np.testing.assert_array_equal(g, [1.0, 0.0, 0.0, 4.0])
    _, dy = ad.jvp(lambda v: np.nan_to_num(v, posinf=9.0), (x,), (np.ones(4),))
    np.testing.assert_array_equal(dy, [1.0, 0.0, 0.0, 1.0])


def test_angle_in_degrees_and_imag_are_constant_on_the_real_line():
    x = np.array([-1.0, 2.0])
    assert np.all(ad.gradient(lambda v: np.sum(np.angle(v, True)), x)[0] == 0.0)
    assert np.all(ad.gradient(lambda v: np.sum(np.imag(v) + v), x)[0] == 1.0)


@pytest.mark.skipif(not hasattr(np, "astype"), reason="np.astype is NumPy 2")
def test_astype_function():
    x = np.array([0.5, 1.5])
    check_grads(lambda v: np.astype(v, np.float64) * 2.0, x, order=2)
    _, dy = ad.jvp(lambda v: np.astype(v, np.float32), (x,), (np.ones(2),))
    assert dy.dtype == np.float32


OUTER = [np.add, np.subtract, np.multiply, np.true_divide, np.power, np.arctan2, np.hypot,
         np.logaddexp, np.maximum, np.minimum]


@pytest.mark.parametrize("shapes", [((3,), (4,)), ((2, 2), (3,)), ((), (2,))])
@pytest.mark.parametrize("ufunc", OUTER, ids=[u.__name__ for u in OUTER])
def test_ufunc_outer(ufunc, shapes):
    rng = np.random.default_rng(2)
    a = rng.uniform(0.5, 2.0, size=shapes[0])
    b = rng.uniform(0.5, 2.0, size=shapes[1]) + 0.01  # no ties for maximum/minimum
    check_rrule(ufunc.outer, a, b)
    check_frule(ufunc.outer, a, b)
    check_grads(lambda x, y: ufunc.outer(x, y), a, b, order=2)


def test_ufunc_outer_float32_and_comparisons():
    a, b = np.array([1.0, 2.0], np.float32), np.array([0.5, 1.5, 3.0], np.float32)
    check_rrule(np.multiply.outer, a, b)
    mask = ad.gradient(lambda x: np.sum(np.where(np.less.outer(x, b), x[:, None], 0.0)), a)[0]
    np.testing.assert_allclose(mask, [2.0, 1.0])


def test_copysign_and_ldexp():
    a, b = np.array([-0.7, 0.4, 1.2]), np.array([0.5, -0.3, -1.1])
    check_rrule(np.copysign, a, b)
    check_frule(np.copysign, a, b)
    check_grads(np.copysign, a, b, order=2)
    e = np.array([1, -2, 3])
    check_rrule(np.ldexp, a, e)
    check_frule(np.ldexp, a, e)
    check_grads(lambda x: np.ldexp(x, e), a, order=2)


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_frexp_modf_divmod(dtype):
    x = np.array([-2.7, 0.3, 5.5], dtype=dtype)
    y = np.array([1.3, 0.7, 2.1], dtype=dtype)
    check_rrule(np.frexp, x)
    check_frule(np.frexp, x)
    check_rrule(np.modf, x)
    check_frule(np.modf, x)
    check_rrule(np.divmod, x, y)
    check_frule(np.divmod, x, y)
    if dtype == np.float64:
        check_grads(lambda v: np.frexp(v)[0] * np.modf(v)[0], x, order=2)
        check_grads(lambda a, b: np.divmod(a, b)[1], x, y, order=2)
