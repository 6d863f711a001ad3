"""rules/scipy_linalg.py: solve_triangular, cholesky, cho_factor, cho_solve,
solve_sylvester, sqrtm and expm against finite differences in both modes to second order
(finite differences of SciPy's own functions, which read one triangle where they do),
and against closed forms."""

import numpy as np
import pytest

sl = pytest.importorskip("scipy.linalg", reason="SciPy is an optional extra: pip install adrules[scipy]")

import adrules as ad  # noqa: E402
from adrules.testing import check_grads  # noqa: E402

RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 3)) + 3.0 * np.eye(3)
SPD = A @ A.T
B, b = RNG.normal(size=(3, 2)), RNG.normal(size=3)


@pytest.mark.parametrize("trans", [0, 1, "T", "C"])
@pytest.mark.parametrize("lower", [True, False])
@pytest.mark.parametrize("unit_diagonal", [False, True])
@pytest.mark.parametrize("rhs", [b, B], ids=["vector", "matrix"])
def test_solve_triangular(trans, lower, unit_diagonal, rhs):
    check_grads(lambda a, b: sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=unit_diagonal),
                A, rhs, order=2)


def _scipy_solves_stacks():
    try:
        sl.solve_triangular.__wrapped__(np.stack([A, A]), np.ones((2, 3, 2)), lower=True)
        return True
    except ValueError:  # SciPy 1.15: one matrix at a time
        return False


@pytest.mark.skipif(not _scipy_solves_stacks(), reason="this SciPy's solve_triangular takes one matrix")
def test_solve_triangular_of_a_stack():
    check_grads(lambda a, b: sl.solve_triangular(a, b, 0, True), np.stack([A, A.T + 1.0]),
                RNG.normal(size=(2, 3, 2)), order=2)


def test_solve_triangular_positional_and_by_hand():
    check_grads(lambda a, b: sl.solve_triangular(a, b, 0, True), A, B, order=2)
    # x = L^-1 b: b's cotangent L^-T g, a's -tril(b̄ x^T)
    L = np.tril(A)
    g_a, g_b = ad.gradient(lambda a, b: np.sum(sl.solve_triangular(a, b, lower=True)), A, b)
    x = np.linalg.solve(L, b)
    b_bar = np.linalg.solve(L.T, np.ones(3))
    np.testing.assert_allclose(g_b, b_bar, rtol=1e-12)
    np.testing.assert_allclose(g_a, np.tril(-np.outer(b_bar, x)), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("lower", [False, True])
def test_cholesky_factors_and_solves(lower):
    check_grads(lambda a: sl.cholesky(a, lower=lower), SPD, order=2)
    check_grads(lambda a: sl.cho_factor(a, lower=lower)[0], SPD, order=2)
    check_grads(lambda a, b: sl.cho_solve(sl.cho_factor(a, lower=lower), b), SPD, B, order=2)
    check_grads(lambda a, b: sl.cho_solve(sl.cho_factor(a, lower), b), SPD, b, order=2)
    factor = np.linalg.cholesky(SPD, upper=not lower)
    check_grads(lambda c, b: sl.cho_solve((c, lower), b), factor, b, order=2)


def test_cho_solve_gradient_on_symmetric_matrices_by_hand():
    # x = A^-1 b: b's gradient A^-1 1; A's along a symmetric direction E is -(A^-1 1)^T E x
    g_a, g_b = ad.gradient(lambda a, b: np.sum(sl.cho_solve(sl.cho_factor(a), b)), SPD, b)
    ones = np.linalg.solve(SPD, np.ones(3))
    x = np.linalg.solve(SPD, b)
    np.testing.assert_allclose(g_b, ones, rtol=1e-12)
    e = RNG.normal(size=(3, 3))
    e = e + e.T
    assert np.sum(g_a * e) == pytest.approx(-ones @ e @ x, rel=1e-10)


def test_solve_sylvester_sqrtm_expm():
    check_grads(lambda a, b, q: sl.solve_sylvester(a, b, q), A, RNG.normal(size=(2, 2)) + 4.0 * np.eye(2),
                RNG.normal(size=(3, 2)), order=2)
    check_grads(lambda a: sl.sqrtm(a), SPD, order=2)
    check_grads(lambda a: sl.expm(a), 0.5 * A, order=2)
    check_grads(lambda a: sl.expm(a), 0.3 * np.stack([A, A.T]), order=2)
    check_grads(lambda t: sl.expm(t * A[:2, :2]), 0.4, order=2)


def test_expm_and_sqrtm_by_hand():
    # d/dt expm(t M) = M expm(t M); sqrtm(X)^2 = X, so sum(sqrtm) of a diagonal is sum(sqrt)
    M = 0.3 * A
    (g,) = ad.gradient(lambda t: np.sum(sl.expm(t * M)), 0.7)
    assert g == pytest.approx(np.sum(M @ sl.expm(0.7 * M)), rel=1e-10)
    d = np.array([1.0, 4.0, 9.0])
    (g,) = ad.gradient(lambda d: np.sum(sl.sqrtm(np.diag(d))), d)
    np.testing.assert_allclose(g, 0.5 / np.sqrt(d), rtol=1e-10)


def _dense(lower, upper, ab):
    m = ab.shape[1]
    return np.array([[ab[upper + i - j, j] if 0 <= upper + i - j <= lower + upper else 0.0 for j in range(m)]
                     for i in range(m)])


@pytest.mark.parametrize("l_and_u", [(1, 1), (2, 0), (0, 2), (1, 2)])
@pytest.mark.parametrize("rhs_shape", [(5,), (5, 2)], ids=["vector", "matrix"])
def test_solve_banded(l_and_u, rhs_shape):
    lower, upper = l_and_u
    ab = RNG.normal(size=(lower + upper + 1, 5))
    ab[upper] += 4.0  # the diagonal: well conditioned
    rhs = RNG.normal(size=rhs_shape)
    check_grads(lambda ab, b: sl.solve_banded(l_and_u, ab, b), ab, rhs, order=2)
    # against the dense solve: ab's cotangent is the dense one's band, 0 in the unread corners
    g_ab, g_b = ad.gradient(lambda ab, b: np.sum(sl.solve_banded(l_and_u, ab, b) ** 2), ab, rhs)
    g_a, g_b2 = ad.gradient(lambda a, b: np.sum(np.linalg.solve(a, b) ** 2), _dense(lower, upper, ab), rhs)
    np.testing.assert_allclose(g_b, g_b2, rtol=1e-10)
    for k in range(lower + upper + 1):
        for j in range(5):
            i = j + k - upper
            assert g_ab[k, j] == pytest.approx(g_a[i, j] if 0 <= i < 5 else 0.0, rel=1e-9, abs=1e-12)
