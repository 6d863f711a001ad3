"""jacobian, hessian and hvp nested inside each other and inside gradient / jvp, in
forward and reverse modes, against derivatives worked out by hand."""

import numpy as np
import pytest

import adrules as ad

X = np.array([1.5, -0.5])


def quartic(x):
    """f(x) = x0^4 + 2 x0 x1^2 + x1^3."""
    return x[0] ** 4 + 2.0 * x[0] * x[1] ** 2 + x[1] ** 3


def hessian_by_hand(x):
    return np.array([[12 * x[0] ** 2, 4 * x[1]],
                     [4 * x[1], 4 * x[0] + 6 * x[1]]])


def third_by_hand(x):
    """T[i, j, k] = d^3 f / dx_i dx_j dx_k."""
    t = np.zeros((2, 2, 2))
    t[0, 0, 0] = 24 * x[0]
    t[0, 1, 1] = t[1, 0, 1] = t[1, 1, 0] = 4.0
    t[1, 1, 1] = 6.0
    return t


@pytest.mark.parametrize("outer", ["fwd", "rev"])
@pytest.mark.parametrize("inner", ["fwd", "rev"])
def test_jacobian_of_jacobian(outer, inner):
    """x -> x^3 elementwise: the Jacobian is diag(3x^2), its Jacobian is 6x on the diagonal."""
    x = np.array([1.0, 2.0, -3.0])
    (t,) = ad.jacobian(lambda v: ad.jacobian(lambda u: u ** 3, v, mode=inner)[0], x, mode=outer)
    expected = np.zeros((3, 3, 3))
    for i in range(3):
        expected[i, i, i] = 6 * x[i]
    np.testing.assert_allclose(t, expected)


@pytest.mark.parametrize("inner", ["fwd", "rev"])
def test_jacobian_of_gradient_and_of_hessian(inner):
    np.testing.assert_allclose(
        ad.jacobian(lambda v: ad.jacobian(quartic, v, mode=inner)[0], X)[0], hessian_by_hand(X))
    for outer in ("fwd", "rev"):
        (t,) = ad.jacobian(lambda v: ad.hessian(quartic, v), X, mode=outer)
        np.testing.assert_allclose(t, third_by_hand(X))


def test_hessian_of_a_hessian_entry_and_of_a_gradient_entry():
    # d^2/dx^2 of H00 = 12 x0^2 is [[24, 0], [0, 0]]
    np.testing.assert_allclose(ad.hessian(lambda v: ad.hessian(quartic, v)[0, 0], X), [[24.0, 0], [0, 0]])
    # d^2/dx^2 of df/dx1 = 4 x0 x1 + 3 x1^2 is [[0, 4], [4, 6]]
    np.testing.assert_allclose(ad.hessian(lambda v: ad.jacobian(quartic, v)[0][1], X), [[0.0, 4], [4, 6]])


def test_hessian_and_hvp_inside_gradient():
    # sum of H = 12 x0^2 + 8 x1 + 4 x0 + 6 x1: gradient [24 x0 + 4, 14]
    expected = [24 * X[0] + 4, 14.0]
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(ad.hessian(quartic, v)), X)[0], expected)
    ones = np.ones(2)
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(ad.hvp(quartic, v, ones)), X)[0], expected)
    # d/dx of jacobian row sum is the Hessian's column sums
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(ad.jacobian(quartic, v)[0]), X)[0],
                               hessian_by_hand(X).sum(axis=0))


@pytest.mark.parametrize("outer", ["fwd", "rev"])
def test_jacobian_of_hvp_contracts_the_third_derivative(outer):
    w = np.array([0.5, 2.0])
    (t,) = ad.jacobian(lambda v: ad.hvp(quartic, v, w), X, mode=outer)
    np.testing.assert_allclose(t, np.einsum("ijk,j->ik", third_by_hand(X), w))


def test_hvp_along_a_traced_direction_and_inside_jvp():
    w = np.array([0.5, 2.0])
    # d/dw of sum(H w) is the Hessian's column sums
    np.testing.assert_allclose(ad.gradient(lambda u: np.sum(ad.hvp(quartic, X, u)), w)[0],
                               hessian_by_hand(X).sum(axis=0))
    _, dh = ad.jvp(lambda v: ad.hessian(quartic, v), (X,), (w,))
    np.testing.assert_allclose(dh, np.einsum("ijk,k->ij", third_by_hand(X), w))
    _, dj = ad.jvp(lambda v: ad.jacobian(lambda u: u ** 3, v)[0], (X,), (w,))
    np.testing.assert_allclose(dj, np.diag(6 * X * w))


def test_jacobian_of_a_closure_over_a_traced_value():
    """f captures the outer variable w: d/dw sum(J) with J = diag(2 w x) is sum(2x)."""
    x = np.array([1.0, 2.0, 4.0])
    for mode in ("fwd", "rev"):
        (g,) = ad.gradient(lambda w: np.sum(ad.jacobian(lambda u: w * u ** 2, x, mode=mode)[0]), 3.0)
        assert g == pytest.approx(np.sum(2 * x))
