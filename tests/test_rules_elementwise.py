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


# ---- complex values -------------------------------------------------------------------------------
def _complex_checks():
    import _complex_checks  # tests/_complex_checks.py, which conftest.py loads

    return _complex_checks


def _z(shape, seed=0):
    rng = np.random.default_rng(seed)
    im = rng.uniform(0.2, 0.6, size=shape) * rng.choice([-1.0, 1.0], size=shape)
    return _wide(rng, shape) + 1j * im


# sinc is holomorphic; conj is neither holomorphic nor real-valued (rules of its own); imag,
# angle and real_if_close are real-valued (or the identity when the imaginary part is large).
COMPLEX_UNARY = [np.sinc, np.conjugate, np.imag, np.angle, lambda z: np.angle(z, True), np.real_if_close]


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("f", COMPLEX_UNARY, ids=["sinc", "conjugate", "imag", "angle", "angle-deg", "real_if_close"])
def test_complex_values_both_modes_and_second_order(f, shape):
    checks = _complex_checks()
    z = np.asarray(_z(shape))
    if f.__name__ == "<lambda>":
        checks.check_both(np.angle, z, True)
    else:
        checks.check_both(f, z)
    loss = checks.real_loss(lambda v: f(v) * v)
    checks.check_gradient(loss, z)
    checks.check_hvp(loss, z)


def test_real_if_close_of_nearly_real_values_is_the_real_part():
    """Imaginary parts within tolerance are dropped: the result is Re(z), whose cotangent
    is real (no derivative along the imaginary part) and whose tangent is Re(ż)."""
    z = np.array([1.0 + 1e-15j, 2.0 - 1e-15j])
    (g,) = ad.gradient(lambda v: np.sum(np.real_if_close(v) ** 2), z)
    np.testing.assert_allclose(g, 2 * z.real)
    assert np.all(g.imag == 0)
    y, dy = ad.jvp(np.real_if_close, (z,), (np.array([1 + 2j, 3 - 1j]),))
    assert np.isrealobj(y) and np.isrealobj(dy)
    np.testing.assert_allclose(dy, [1.0, 3.0])


def test_iscomplexobj_of_traced_values_branches_without_a_derivative():
    def f(v):
        return np.sum(np.abs(v) ** 2) if np.iscomplexobj(v) else np.sum(v ** 3)

    z = np.array([1 + 2j, 3 - 1j])
    np.testing.assert_allclose(ad.gradient(f, z)[0], 2 * z)
    np.testing.assert_allclose(ad.gradient(f, z.real)[0], 3 * z.real ** 2)
    assert ad.jvp(lambda v: np.isrealobj(v), (z,), (z,))[0] is False


@pytest.mark.parametrize("to", [np.complex128, np.complex64, np.float64])
def test_astype_to_and_from_complex(to):
    """x.astype(complex) and back: a real input through a complex intermediate keeps the
    real part of its cotangent; complex to real drops the imaginary part, as NumPy does."""
    import warnings

    checks = _complex_checks()
    x, z = _wide(np.random.default_rng(5), (3,)), _z((3,), seed=6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        for v in (x, z):
            loss = checks.real_loss(lambda u: u.astype(to) * (1 + 2j) * u)
            checks.check_gradient(loss, v, rtol=2e-3 if to is np.complex64 else 1e-6, atol=1e-4 if to is np.complex64 else 1e-7)
            if hasattr(np, "astype"):
                checks.check_both(np.astype, v, to)
    (g,) = ad.gradient(lambda u: np.sum(np.abs(u.astype(np.complex128) * 1j + 2.0) ** 2), x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * x)


def test_nan_to_num_refuses_complex_values():
    """nan_to_num of complex values replaces the real and imaginary parts separately, which
    its rule does not follow: it refuses, in both modes."""
    z = _z((3,))
    with pytest.raises(ad.registry.ComplexRuleError, match="nan_to_num"):
        ad.gradient(lambda v: np.sum(np.abs(np.nan_to_num(v))), z)
    with pytest.raises(ad.registry.ComplexRuleError, match="nan_to_num"):
        ad.jvp(np.nan_to_num, (z,), (z,))
