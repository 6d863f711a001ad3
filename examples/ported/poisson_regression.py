"""Poisson regression (a generalized linear model for counts): maximize
scipy.stats.poisson.logpmf of the counts at rates exp(X w) with L-BFGS, its gradient
from adrules.grad; at the optimum it is X^T (exp(X w) - counts) + w, zero.

Ported from autograd by changing the imports (autograd.numpy -> numpy,
autograd.scipy.stats.poisson -> scipy.stats.poisson, autograd.grad -> adrules.grad).
"""
# requires: scipy

from adrules import grad
import numpy as np
import numpy.random as npr
from scipy.optimize import minimize
from scipy.stats import poisson


def objective(w, X, counts, l2=1.0):
    rates = np.exp(np.dot(X, w))
    return -np.sum(poisson.logpmf(counts, rates)) + 0.5 * l2 * np.sum(w ** 2)


def make_data(n=300, d=4, rs=npr.RandomState(0)):
    X = rs.randn(n, d) * 0.5
    true_w = np.array([0.8, -0.5, 0.3, 1.0])
    return X, rs.poisson(np.exp(X @ true_w)), true_w


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    X, counts, true_w = make_data()
    f = lambda w: objective(w, X, counts)  # noqa: E731
    w0 = np.zeros(X.shape[1])
    check_gradient(f, w0, grad(f)(w0))
    fit = minimize(f, w0, jac=grad(f), method="L-BFGS-B")
    closed_form = X.T @ (np.exp(X @ fit.x) - counts) + fit.x  # the gradient, by hand
    np.testing.assert_allclose(grad(f)(fit.x), closed_form, rtol=1e-10, atol=1e-10)
    print(f"fitted weights {fit.x.round(2)}, true {true_w}; |gradient| {np.linalg.norm(closed_form):.1e}")
    assert np.linalg.norm(closed_form) < 1e-3 and np.allclose(fit.x, true_w, atol=0.25)
    check_gradient(f, fit.x, grad(f)(fit.x))
    print("gradients agree with finite differences")
