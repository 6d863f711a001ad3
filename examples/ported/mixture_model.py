"""A Gaussian mixture model fit by gradient ascent on its log likelihood, the mixture
summed with scipy.special.logsumexp(axis=0) over mvn.logpdf per component.

Ported from autograd by changing the imports (autograd.numpy -> numpy,
autograd.scipy.special/stats -> scipy.special/stats, autograd.grad -> adrules.grad).
"""
# requires: scipy

from adrules import grad
import numpy as np
import numpy.random as npr
from scipy.special import logsumexp
from scipy.stats import multivariate_normal as mvn


def init_params(k, d, scale, rs=npr.RandomState(0)):
    return {"log_proportions": rs.randn(k) * scale, "means": rs.randn(k, d) * scale,
            "lower_tris": np.zeros((k, d, d)) + np.eye(d)}


def log_normalize(x):
    return x - logsumexp(x)


def gmm_log_likelihood(params, data):
    cluster_lls = []
    for log_proportion, mean, tri in zip(log_normalize(params["log_proportions"]), params["means"],
                                         params["lower_tris"]):
        cov = np.dot(tri.T, tri) + 1e-3 * np.eye(len(mean))
        cluster_lls.append(log_proportion + mvn.logpdf(data, mean, cov))
    return np.sum(logsumexp(np.vstack(cluster_lls), axis=0))


def sample_data(n=200, rs=npr.RandomState(1)):
    centres = np.array([[-2.0, 0.0], [2.0, 1.0], [0.0, -2.5]])
    return centres[rs.randint(3, size=n)] + 0.5 * rs.randn(n, 2)


def check_gradient(f, params, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at params (a dict), along random directions vs central differences."""
    rng = np.random.default_rng(2)
    for _ in range(3):
        d = {k: rng.normal(size=np.shape(v)) for k, v in params.items()}
        shifted = lambda s: {k: params[k] + s * d[k] for k in params}  # noqa: E731
        fd = (f(shifted(eps)) - f(shifted(-eps))) / (2 * eps)
        along = sum(np.sum(g[k] * d[k]) for k in params)
        assert np.isclose(along, fd, rtol=rtol, atol=rtol), (along, fd)


if __name__ == "__main__":
    data = sample_data()
    objective = lambda params: -gmm_log_likelihood(params, data) / len(data)  # noqa: E731
    gradient = grad(objective)
    params = init_params(3, 2, 0.5)
    start = objective(params)
    check_gradient(objective, params, gradient(params))
    for step in range(150):
        g = gradient(params)
        params = {k: v - 0.1 * g[k] for k, v in params.items()}
    print(f"negative log likelihood per point: {start:.3f} -> {objective(params):.3f}")
    assert objective(params) < start - 0.5
    check_gradient(objective, params, gradient(params))
    print("gradients agree with finite differences")
