"""rules/signal.py against finite differences (rrule, frule, second order) and against
NumPy's own values: diff, ediff1d, gradient, trapezoid, interp, convolve, correlate, cross."""

import importlib.util
import pathlib

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_grads, check_rules

trapezoid = np.trapezoid if hasattr(np, "trapezoid") else np.trapz


def _x(shape, dtype=np.float64, seed=0):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(dtype)


_check_all = check_rules


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("shape, n, axis", [((5,), 1, -1), ((3, 4), 2, 0), ((2, 3, 4), 1, 1)])
def test_diff(shape, n, axis, dtype):
    _check_all(np.diff, _x(shape, dtype), n, axis)


def test_diff_prepend_append_and_keywords():
    x = _x((3, 4))
    _check_all(np.diff, x, fkwargs={"axis": 0, "prepend": 0.5, "append": np.ones((1, 4))})
    check_grads(lambda a, p: np.diff(a, 1, 1, p), x, _x((3, 1), seed=1))  # traced prepend


def test_ediff1d():
    _check_all(np.ediff1d, _x((2, 3)), fkwargs={"to_begin": [9.0], "to_end": 1.0})


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_uniform_and_per_axis(edge_order):
    x = _x((4, 5))
    _check_all(np.gradient, x, fkwargs={"edge_order": edge_order})
    _check_all(np.gradient, x, 0.5, fkwargs={"axis": 1, "edge_order": edge_order})
    _check_all(np.gradient, x, 0.5, 2.0, fkwargs={"edge_order": edge_order})


@pytest.mark.parametrize("edge_order", [1, 2])
def test_gradient_coordinates_are_differentiable(edge_order):
    f, t = _x((6,)), np.array([0.0, 0.3, 0.7, 1.2, 1.5, 2.4])
    _check_all(np.gradient, f, t, fkwargs={"edge_order": edge_order})
    _check_all(np.gradient, np.float32(1) * f.astype(np.float32), fkwargs={"edge_order": edge_order})


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_trapezoid(dtype):
    y = _x((3, 5), dtype)
    _check_all(trapezoid, y)
    _check_all(trapezoid, y, fkwargs={"dx": 0.3, "axis": 0})
    if dtype == np.float64:
        _check_all(trapezoid, y, np.array([0.0, 0.2, 0.5, 0.9, 1.4]))  # 1-d x, differentiable
        _check_all(trapezoid, y, np.cumsum(np.full((3, 5), 0.3), axis=1))  # x like y


def test_interp_in_fp_x_and_xp():
    xp = np.array([0.0, 0.5, 1.2, 2.0])
    fp = np.array([1.0, -0.5, 0.3, 2.0])
    x = np.array([-0.3, 0.1, 0.7, 1.9, 2.5])
    _check_all(np.interp, x, xp, fp)
    _check_all(np.interp, x, xp, fp, fkwargs={"left": -1.0, "right": 3.0})
    _check_all(np.interp, 0.8, xp, fp)


def test_interp_period_says_what_to_do():
    with pytest.raises(NotImplementedError, match="period"):
        ad.gradient(lambda f: np.interp(0.5, [0.0, 1.0], f, period=1.0), np.ones(2))


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n, m", [(5, 3), (3, 5), (4, 4), (4, 1)])
def test_convolve_and_correlate(n, m, mode):
    a, v = _x((n,), seed=1), _x((m,), seed=2)
    _check_all(np.convolve, a, v, mode)
    _check_all(np.correlate, a, v, mode)


def test_convolve_float32_keeps_dtype():
    a, v = _x((5,), np.float32), _x((3,), np.float32)
    _check_all(np.convolve, a, v)
    assert ad.gradient(lambda p: np.sum(np.convolve(p, v)), a)[0].dtype == np.float32


@pytest.mark.filterwarnings("ignore:Arrays of 2-dimensional vectors:DeprecationWarning")
@pytest.mark.parametrize("sa, sb, kwargs", [
    ((3,), (3,), {}), ((4, 3), (3,), {}), ((2, 1, 3), (4, 3), {}), ((3, 2), (2, 3), {"axisa": 0}),
    ((3, 4), (3, 4), {"axis": 0}), ((4, 3), (4, 3), {"axisc": 0}),
    pytest.param((2,), (3,), {}, marks=pytest.mark.skipif(
        tuple(int(p) for p in np.__version__.split(".")[:2]) >= (2, 5),
        reason="NumPy 2.5 removed cross products of 2-dimensional vectors")),
])
def test_cross(sa, sb, kwargs):
    _check_all(np.cross, _x(sa, seed=1), _x(sb, seed=2), fkwargs=kwargs)


def test_cross_float32():
    _check_all(np.cross, _x((2, 3), np.float32), _x((3,), np.float32))


def test_polyval_in_coefficients_and_points():
    _check_all(np.polyval, _x((4,)), _x((2, 3), seed=1))
    _check_all(np.polyval, _x((1,)), 0.7)


@pytest.mark.parametrize("kwargs", [{}, {"N": 4}, {"increasing": True}])
def test_vander(kwargs):
    _check_all(np.vander, _x((3,)), fkwargs=kwargs)


@pytest.mark.parametrize("n1, n2", [(3, 3), (2, 4), (4, 1)])
def test_polynomial_arithmetic(n1, n2):
    a, b = _x((n1,), seed=1), _x((n2,), seed=2)
    _check_all(np.polyadd, a, b)
    _check_all(np.polysub, a, b)
    _check_all(np.polymul, a, b)


@pytest.mark.parametrize("m", [1, 2, 4])
def test_polyder_polyint(m):
    p = _x((4,))
    _check_all(np.polyder, p, m)
    _check_all(np.polyint, p, m)
    _check_all(np.polyint, p, m, _x((m,), seed=3))  # the integration constants are differentiable


# ---- complex values: central differences along real and imaginary directions -------------------
_spec = importlib.util.spec_from_file_location("_complex_fd", pathlib.Path(__file__).with_name("_complex_fd.py"))
fd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fd)


@pytest.mark.parametrize("mode", ["full", "same", "valid"])
@pytest.mark.parametrize("n, m", [(5, 3), (3, 5), (4, 4), (4, 1)])
@pytest.mark.parametrize("name", ["convolve", "correlate"])
def test_convolve_and_correlate_complex(name, n, m, mode):
    f = getattr(np, name)
    a, v = fd.random_like((n,), True, seed=1), fd.random_like((m,), True, seed=2)
    fd.check_both_modes(lambda z: f(z, v, mode), a, h=1e-3)
    fd.check_both_modes(lambda z: f(a, z, mode), v, h=1e-3)
    fd.check_both_modes(lambda x: f(x, v, mode), np.real(a), h=1e-3)  # real signal, complex kernel
    fd.check_both_modes(lambda x: f(a, x, mode), np.real(v), h=1e-3)


@pytest.mark.parametrize("name, mode", [("convolve", "same"), ("correlate", "full"), ("correlate", "valid")])
def test_convolve_and_correlate_complex_second_order(name, mode):
    f = getattr(np, name)
    v = fd.random_like((3,), True, seed=2)
    fd.check_second_order(lambda z: np.sum(np.abs(f(z, v, mode)) ** 4), fd.random_like((5,), True, seed=1))
    fd.check_second_order(lambda z: np.sum(np.abs(f(v, z, mode)) ** 4), fd.random_like((4,), True, seed=3))


@pytest.mark.parametrize("f, shape", [
    (lambda z: np.diff(z, 2), (5,)),
    (lambda z: trapezoid(z, dx=0.3), (5,)),
    (lambda z: np.interp(np.array([-0.3, 0.1, 0.7, 2.5]), np.array([0.0, 0.5, 1.2, 2.0]), z), (4,)),
    (lambda z: np.polyval(z, 0.3 + 0.2j), (4,)),
    (lambda z: np.polyval(np.array([1.0, 2j, 3.0]), z), (3,)),
    (lambda z: np.polyder(z, 2), (4,)),
    (lambda z: np.polymul(z, np.array([1j, 2.0])), (3,)),
], ids=["diff", "trapezoid", "interp", "polyval-p", "polyval-x", "polyder", "polymul"])
def test_composites_on_complex_values(f, shape):
    fd.check_both_modes(f, fd.random_like(shape, True, seed=4), h=1e-4, atol=1e-8)


def test_poly_of_conjugate_pairs_is_real_as_numpys():
    from adrules.rules import signal

    roots = np.array([0.5 + 0.3j, 0.5 - 0.3j, -0.2 + 0.0j])
    assert not np.iscomplexobj(signal.poly(roots))
    np.testing.assert_allclose(signal.poly(roots), np.poly(roots), rtol=1e-12)
    assert np.iscomplexobj(signal.poly(roots[:2] + 0.1j))
    ybar = np.array([0.3, -1.0, 0.5, 2.0])
    try:  # np.concatenate's rule takes complex values or refuses them
        y, back = ad.pullback(np.poly, roots)
    except ad.registry.ComplexRuleError as e:
        assert "numpy." in str(e)
        return
    expected = fd.fd_gradient(lambda w: np.sum(ybar * np.real(np.poly(w))), roots, 1e-6)
    np.testing.assert_allclose(back(ybar)[0], expected, atol=1e-8)


def test_interp_of_complex_x_or_xp_is_refused_as_numpy_does():
    with pytest.raises(TypeError, match=r"numpy\.interp: x and xp must be real"):
        ad.gradient(lambda x: np.abs(np.interp(x * (1 + 1j), np.array([0.0, 1.0]), np.array([1.0, 2.0]))), 0.5)


def test_convolve_of_a_number():
    # NumPy takes a number as a 1-element signal: y = s * v, so sum(y**2)' = 2 s |v|^2 and 2 s^2 v
    v = np.array([1.0, 2.0, 3.0])
    gs, gv = ad.gradient(lambda s, v: np.sum(np.convolve(s, v, "same") ** 2), 1.5, v)
    np.testing.assert_allclose(gs, 2 * 1.5 * np.sum(v * v))
    np.testing.assert_allclose(gv, 2 * 1.5 ** 2 * v)
