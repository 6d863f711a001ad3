"""Black-box stochastic variational inference: a diagonal Gaussian fit to a
two-dimensional funnel by following the reparameterized gradient of the ELBO, the target
written with scipy.stats.norm.logpdf.

Ported from autograd by changing the imports (autograd.numpy -> numpy,
autograd.scipy.stats.norm -> scipy.stats.norm, autograd.grad -> adrules.grad).
"""
# requires: scipy

from adrules import grad
import numpy as np
import numpy.random as npr
from scipy.stats import norm


def log_density(x, t):
    mu, log_sigma = x[:, 0], x[:, 1]
    sigma_density = norm.logpdf(log_sigma, 0, 1.35)
    mu_density = norm.logpdf(mu, 0, np.exp(log_sigma))
    return sigma_density + mu_density


def black_box_variational_inference(logprob, d, num_samples):
    def unpack_params(params):
        return params[:d], params[d:]

    def gaussian_entropy(log_std):
        return 0.5 * d * (1.0 + np.log(2 * np.pi)) + np.sum(log_std)

    def variational_objective(params, t):
        """Minus the ELBO, estimated with samples drawn afresh for each iteration t."""
        mean, log_std = unpack_params(params)
        samples = npr.RandomState(t).randn(num_samples, d) * np.exp(log_std) + mean
        return -(gaussian_entropy(log_std) + np.mean(logprob(samples, t)))

    return variational_objective, grad(variational_objective)


def adam(gradient, x, steps, step_size=0.05, b1=0.9, b2=0.999, eps=1e-8):
    m, v = np.zeros(len(x)), np.zeros(len(x))
    for i in range(steps):
        g = gradient(x, i)
        m, v = (1 - b1) * g + b1 * m, (1 - b2) * g ** 2 + b2 * v
        x = x - step_size * (m / (1 - b1 ** (i + 1))) / (np.sqrt(v / (1 - b2 ** (i + 1))) + eps)
    return x


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    objective, gradient = black_box_variational_inference(log_density, d=2, num_samples=500)
    init = np.array([-1.0, -1.0, -5.0, -5.0])
    check_gradient(lambda p: objective(p, 0), init, gradient(init, 0))
    params = adam(gradient, init, steps=300)
    before = np.mean([objective(init, 10_000 + t) for t in range(5)])
    after = np.mean([objective(params, 10_000 + t) for t in range(5)])
    print(f"minus the ELBO: {before:.3f} -> {after:.3f}; mean {params[:2].round(2)}, "
          f"std {np.exp(params[2:]).round(2)}")
    assert after < before - 1.0
    check_gradient(lambda p: objective(p, 7), params, gradient(params, 7))
    print("gradients agree with finite differences")
