"""A continuous-time Markov chain's rates fit to observed transitions: the transition
probabilities over a time step are scipy.linalg.expm of the rate matrix, and the log
likelihood of the transition counts is maximized by gradient ascent.

Ported from JAX by changing the imports (jax.numpy -> numpy, jax.scipy.linalg.expm ->
scipy.linalg.expm, jax.grad -> adrules.grad).
"""
# requires: scipy

from adrules import grad
import numpy as jnp
import numpy as np
from scipy.linalg import expm

N = 3
OFF = ~np.eye(N, dtype=bool)


def rate_matrix(log_rates):
    """Off-diagonal rates exp(log_rates); each row sums to zero."""
    rates = jnp.where(OFF, jnp.exp(log_rates), 0.0)
    return rates - jnp.diag(jnp.sum(rates, axis=1))


def log_likelihood(log_rates, counts, dt):
    transition = expm(rate_matrix(log_rates) * dt)
    return jnp.sum(counts * jnp.log(transition))


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    dt = 0.5
    true_log_rates = np.log(np.array([[1.0, 0.5, 0.2], [0.3, 1.0, 0.8], [0.1, 0.6, 1.0]]))
    rs = np.random.RandomState(0)
    probabilities = expm(rate_matrix(true_log_rates) * dt)
    counts = np.stack([rs.multinomial(2000, p) for p in probabilities]).astype(float)
    f = lambda lr: -log_likelihood(lr, counts, dt) / counts.sum()  # noqa: E731
    log_rates = np.zeros((N, N))
    start = f(log_rates)
    check_gradient(f, log_rates, grad(f)(log_rates))
    for step in range(400):
        log_rates = log_rates - 2.0 * grad(f)(log_rates)
    fitted = np.where(OFF, np.exp(log_rates), 0.0)
    print(f"negative log likelihood per transition: {start:.4f} -> {f(log_rates):.4f}")
    print("fitted rates:\n", fitted.round(2))
    assert f(log_rates) < start and np.allclose(fitted[OFF], np.exp(true_log_rates)[OFF], atol=0.2)
    check_gradient(f, log_rates, grad(f)(log_rates))
    print("gradients agree with finite differences")
