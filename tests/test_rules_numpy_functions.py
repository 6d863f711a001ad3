"""NumPy functions that take functions or fit polynomials, and the odd elementwise ones,
against finite differences (reverse and forward mode) and NumPy's own values: unwrap,
trim_zeros, i0, piecewise, apply_along_axis, apply_over_axes, polyfit, poly, and the
segment extrema maximum.reduceat / minimum.reduceat."""

import warnings

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_grads, check_rules


def _x(*shape, low=-1.0, high=1.0, seed=0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


# ---- NumPy: unwrap, trim_zeros, i0 ----------------------------------------------------------------------------
def test_unwrap():
    p = np.array([0.1, 3.0, 6.5, -3.0, 3.3, 9.8])
    check_rules(np.unwrap, p)
    check_rules(np.unwrap, p, 2.0)
    check_rules(np.unwrap, np.stack([p, p[::-1]]), None, 0)
    check_rules(np.unwrap, p, fkwargs={"period": 4.0})
    (g,) = ad.gradient(lambda v: np.sum(np.unwrap(v) * np.arange(6.0)), p)
    np.testing.assert_array_equal(g, np.arange(6.0))


@pytest.mark.parametrize("trim", ["fb", "f", "b", "BF"])
def test_trim_zeros_1d(trim):
    a = np.array([0.3, 0.7, 1.5, 0.4, -2.0, 0.9])
    mask = np.array([0.0, 0.0, 1.0, 0.0, 1.0, 0.0])  # the zeros stay zero under finite differences
    check_grads(lambda v: np.trim_zeros(v * mask, trim), a)
    y, _ = ad.pullback(lambda v: np.trim_zeros(v * mask, trim), a)
    np.testing.assert_array_equal(y, np.trim_zeros(a * mask, trim))


@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)])
def test_trim_zeros_nd(axis):
    b = np.array([[0, 0, 2.0, 3, 0, 0], [0, 1, 0, 3, 0, 0], [0, 0, 0, 0, 0, 0]])
    a = _x(3, 6, seed=1)
    try:
        expected = np.trim_zeros(a * (b != 0), "fb", axis)
    except TypeError:  # NumPy 2.2 takes one axis only
        pytest.skip("this NumPy's trim_zeros takes no tuple of axes")
    y, _ = ad.pullback(lambda v: np.trim_zeros(v * (b != 0), "fb", axis), a)
    np.testing.assert_array_equal(y, expected)
    check_grads(lambda v: np.trim_zeros(v * (b != 0), "fb", axis), a)
    zeros = ad.pullback(lambda v: np.trim_zeros(0.0 * v, axis=axis), a)[0]
    assert zeros.shape == np.trim_zeros(np.zeros((3, 6)), axis=axis).shape


def test_i0():
    pytest.importorskip("scipy.special", reason="its rule uses scipy.special.i1, an optional extra")
    check_rules(np.i0, np.array([-2.0, 0.0, 0.5, 3.0]))
    (g,) = ad.gradient(lambda v: np.sum(np.i0(v)), np.array([0.0, 1.0]))
    np.testing.assert_allclose(g, [0.0, 0.5651591039924851], rtol=1e-14)  # I1(1)


# ---- NumPy: piecewise ---------------------------------------------------------------------------------------------
X_PIECES = np.array([-1.5, -0.4, 0.2, 0.6, 1.2, 2.5])  # away from the conditions' edges


def _same_as_numpy(f, *args):
    y, _ = ad.pullback(f, *args)
    np.testing.assert_allclose(y, f(*args), rtol=1e-15, atol=0)


def test_piecewise_otherwise_and_scalar_entries():
    def f(v):
        return np.piecewise(v, [v < 0, v > 1.0], [lambda t: t ** 2, lambda t: np.sqrt(t), 0.5])

    _same_as_numpy(f, X_PIECES)
    check_grads(f, X_PIECES)
    np.testing.assert_array_equal(ad.gradient(lambda v: np.sum(f(v)), X_PIECES)[0],
                                  [-3.0, -0.8, 0.0, 0.0, 0.5 / np.sqrt(1.2), 0.5 / np.sqrt(2.5)])


def test_piecewise_later_conditions_win_and_no_otherwise():
    def f(v):  # overlapping conditions; elements in none of them are 0
        return np.piecewise(v, [v < 1.0, v > -1.0, v > 2.0], [np.sin, lambda t: t ** 3, lambda t: -t])

    _same_as_numpy(f, X_PIECES)
    check_grads(f, X_PIECES)


def test_piecewise_functions_see_only_their_values():
    # sqrt of the negative values would make nan derivatives if it were evaluated everywhere
    def f(v):
        return np.piecewise(v, [v >= 0], [np.sqrt, lambda t: t * t])

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (g,) = ad.gradient(lambda v: np.sum(f(v)), X_PIECES)
    assert np.all(np.isfinite(g))
    check_grads(f, X_PIECES)


def test_piecewise_arguments_closures_and_scalars():
    def f(v, a):
        return np.piecewise(v, [v < 0, v > 0.4], [lambda t, s, k=1.0: a * t * s * k, lambda t, s, k=1.0: np.sqrt(t) * a,
                                                   lambda t, s, k=1.0: np.sin(t) + a + k], 2.0, k=3.0)

    _same_as_numpy(f, X_PIECES, 1.7)
    check_grads(f, X_PIECES, 1.7)
    check_grads(lambda v: np.piecewise(v, [v < 0], [lambda t: t ** 3, lambda t: np.exp(t)]), 0.7)
    _same_as_numpy(lambda v: np.piecewise(v, [v < 0], [lambda t: t ** 3, lambda t: np.exp(t)]), 0.7)


def test_piecewise_condition_over_leading_axes():
    rows = np.array([True, False, True])

    def f(v):
        return np.piecewise(v, [rows], [lambda t: t * np.array([1.0, 2.0]), lambda t: -t])

    x = _x(3, 2, seed=2)
    _same_as_numpy(f, x)
    check_grads(f, x)


# ---- NumPy: apply_along_axis, apply_over_axes ----------------------------------------------------------------------
FUNCS_1D = {"scalar": lambda r: np.sum(r ** 2), "same length": lambda r: r * np.sum(r),
            "matrix": lambda r: np.outer(r, r[:2])}


@pytest.mark.parametrize("axis", [0, 1, -1])
@pytest.mark.parametrize("kind", list(FUNCS_1D))
def test_apply_along_axis(axis, kind):
    func1d = FUNCS_1D[kind]
    a = _x(3, 4, 2, seed=3)

    def f(v):
        return np.apply_along_axis(func1d, axis, v)

    y, _ = ad.pullback(f, a)
    assert y.shape == f(a).shape
    np.testing.assert_allclose(y, f(a), rtol=1e-15, atol=0)
    check_grads(f, a, order=1)


def test_apply_along_axis_arguments_and_closures():
    a = _x(3, 4, seed=4)

    def f(v, w):
        return np.apply_along_axis(lambda r, s, k: np.sum(np.sin(r * w)) * s + k, 1, v, 2.0, k=0.5)

    _same_as_numpy(f, a, 0.3)
    check_grads(f, a, 0.3, order=2)
    _same_as_numpy(lambda v: np.apply_along_axis(np.cumsum, 0, v), _x(5, seed=4))
    with pytest.raises(ValueError, match="iteration dimensions are 0"):
        ad.pullback(lambda v: np.apply_along_axis(np.sum, 1, v), np.zeros((0, 3)))


@pytest.mark.parametrize("axes", [0, [0, 2], (-1,)])
def test_apply_over_axes(axes):
    a = _x(3, 4, 2, seed=6)
    for func in (np.sum, lambda v, axis: np.max(v, axis, keepdims=True) ** 2):
        _same_as_numpy(lambda v: np.apply_over_axes(func, v, axes), a)
        check_grads(lambda v: np.apply_over_axes(func, v, axes), a)


# ---- NumPy: polyfit, poly ------------------------------------------------------------------------------------------
X_FIT = np.linspace(-1.0, 2.0, 9)
Y_FIT = np.sin(X_FIT) + 0.1 * _x(9, seed=7)
W_FIT = _x(9, low=0.5, high=2.0, seed=8)


@pytest.mark.parametrize("y, deg, kwargs", [
    (Y_FIT, 0, {}), (Y_FIT, 2, {}), (Y_FIT, 3, {"w": W_FIT}),
    (np.stack([Y_FIT, np.cos(X_FIT)], 1), 2, {}), (np.stack([Y_FIT, np.cos(X_FIT)], 1), 1, {"w": W_FIT}),
], ids=["deg0", "deg2", "weights", "2d", "2d-weights"])
def test_polyfit(y, deg, kwargs):
    c, _ = ad.pullback(lambda v: np.polyfit(X_FIT, v, deg, **kwargs), y)
    np.testing.assert_allclose(c, np.polyfit(X_FIT, y, deg, **kwargs), rtol=1e-10, atol=1e-12)
    check_rules(np.polyfit, X_FIT, y, deg, fkwargs=kwargs, order=1)  # w.r.t. x, y (and w)
    check_grads(lambda v: np.polyfit(list(X_FIT), v, deg, **kwargs), y, order=2)  # x a constant list


def test_polyfit_rank_warning_and_refused_options():
    with pytest.warns(np.exceptions.RankWarning):
        ad.pullback(lambda v: np.polyfit(np.array([0.0, 0.0, 1.0, 1.0]), v, 2), _x(4, seed=9))
    for option in ("full", "cov"):
        with pytest.raises(NotImplementedError, match=f"polyfit\\(\\.\\.\\., {option}=True\\)"):
            ad.pullback(lambda v: np.polyfit(X_FIT, v, 2, **{option: True}), Y_FIT)


@pytest.mark.parametrize("roots", [np.array([0.3]), np.array([1.0, -2.0, 0.5]), np.array([2.0, 2.0, -1.0, 0.0])])
def test_poly(roots):
    y, _ = ad.pullback(np.poly, roots)
    np.testing.assert_allclose(y, np.poly(roots), rtol=1e-15, atol=1e-15)
    check_rules(np.poly, roots)


def test_poly_edge_cases():
    assert ad.pullback(np.poly, np.zeros(0))[0] == np.poly(np.zeros(0)) == 1.0
    y, _ = ad.pullback(np.poly, np.array([0.5, -1.0], np.float32))
    assert y.dtype == np.poly(np.array([0.5, -1.0], np.float32)).dtype
    with pytest.raises(NotImplementedError, match="characteristic polynomial"):
        ad.pullback(np.poly, np.eye(2))


# ---- segment extrema: maximum.reduceat / minimum.reduceat ------------------------------------
@pytest.mark.parametrize("ufunc", [np.maximum, np.minimum])
@pytest.mark.parametrize("axis", [0, 1, -1])
def test_segment_extrema_against_finite_differences(ufunc, axis):
    x = np.random.default_rng(3).normal(size=(6, 7))
    idx = [0, 2, 2, 5, 3]  # an empty segment (2, 2) and a decreasing index (5, 3): x[i] alone
    w = np.random.default_rng(4).normal(size=ufunc.reduceat(x, idx, axis=axis).shape)
    check_grads(lambda x: np.sum(ufunc.reduceat(x, idx, axis=axis) * w), x, order=2)
    check_grads(lambda x: np.sum(ufunc.reduceat(x, idx, axis) ** 2), x, order=1)


def test_segment_maximum_shares_ties_as_np_max_does():
    x = np.array([1.0, 3.0, 3.0, 2.0, 5.0])
    g, = ad.gradient(lambda x: np.sum(np.maximum.reduceat(x, [0, 4])), x)
    expected, = ad.gradient(lambda x: np.max(x[:4]) + np.max(x[4:]), x)
    np.testing.assert_array_equal(g, expected)
    np.testing.assert_array_equal(g, [0.0, 0.5, 0.5, 0.0, 1.0])
