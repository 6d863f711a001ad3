"""Gaussian process regression: fit an RBF kernel's hyperparameters by maximizing the
marginal likelihood, scipy.stats.multivariate_normal.logpdf of the targets.

Ported from autograd by changing the imports (autograd.numpy -> numpy,
autograd.scipy.stats -> scipy.stats, autograd.value_and_grad -> adrules.value_and_grad).
"""
# requires: scipy

from adrules import value_and_grad
import numpy as np
import numpy.random as npr
from scipy.optimize import minimize
from scipy.stats import multivariate_normal as mvn


def rbf_covariance(kernel_params, x, xp):
    output_scale = np.exp(kernel_params[0])
    lengthscales = np.exp(kernel_params[1:])
    diffs = np.expand_dims(x / lengthscales, 1) - np.expand_dims(xp / lengthscales, 0)
    return output_scale * np.exp(-0.5 * np.sum(diffs ** 2, axis=2))


def unpack(params):
    mean, noise = params[0], np.exp(params[1]) + 1e-4
    return mean, noise, params[2:]


def log_marginal_likelihood(params, x, y):
    mean, noise, kernel_params = unpack(params)
    cov_y = rbf_covariance(kernel_params, x, x) + noise * np.eye(len(y))
    return mvn.logpdf(y, mean * np.ones(len(y)), cov_y)


def build_data(n=30, noise=0.1):
    rs = npr.RandomState(0)
    x = np.concatenate([np.linspace(0, 3, n // 2), np.linspace(6, 8, n // 2)])
    y = np.cos(x) + rs.randn(n) * noise
    return x[:, None], y


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    x, y = build_data()
    objective = lambda params: -log_marginal_likelihood(params, x, y)  # noqa: E731
    init = 0.1 * npr.RandomState(1).randn(3)
    value, g = value_and_grad(objective)(init)
    check_gradient(objective, init, g)
    result = minimize(value_and_grad(objective), init, jac=True, method="CG")
    print(f"negative log marginal likelihood: {value:.3f} -> {result.fun:.3f}")
    g_opt = value_and_grad(objective)(result.x)[1]
    assert result.fun < value - 3.0 and np.linalg.norm(g_opt) < 1e-3  # a stationary point
    check_gradient(objective, result.x, g_opt, rtol=1e-5)
    print("gradients agree with finite differences")
