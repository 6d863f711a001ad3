"""Robust linear regression: a Student-t likelihood (scipy.stats.t.logpdf) fits a line
through data with outliers that pull a least-squares fit away; its scale and degrees of
freedom are learned too.

Ported from JAX by changing the imports (jax.numpy -> numpy, jax.scipy.stats.t ->
scipy.stats.t, jax.value_and_grad -> adrules.value_and_grad).
"""
# requires: scipy

from adrules import value_and_grad
import numpy as jnp
import numpy as np
from scipy.optimize import minimize
from scipy.stats import t


def unpack(params):
    w, b = params[0], params[1]
    scale, df = jnp.exp(params[2]), jnp.exp(params[3]) + 1.0
    return w, b, scale, df


def negative_log_likelihood(params, x, y):
    w, b, scale, df = unpack(params)
    return -jnp.sum(t.logpdf(y, df, loc=w * x + b, scale=scale))


def make_data(n=80, rs=np.random.RandomState(0)):
    x = rs.uniform(-3, 3, size=n)
    y = 1.5 * x - 0.5 + 0.3 * rs.randn(n)
    y[:8] += rs.uniform(8, 15, size=8)  # outliers
    return x, y


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    x, y = make_data()
    objective = lambda p: negative_log_likelihood(p, x, y)  # noqa: E731
    init = np.array([0.0, 0.0, 0.0, 1.0])
    check_gradient(objective, init, value_and_grad(objective)(init)[1])
    fit = minimize(value_and_grad(objective), init, jac=True, method="BFGS")
    w, b, scale, df = unpack(fit.x)
    w_ls, b_ls = np.polyfit(x, y, 1)
    print(f"Student-t fit: w={w:.3f} b={b:.3f} scale={scale:.3f} df={df:.2f}; "
          f"least squares: w={w_ls:.3f} b={b_ls:.3f}; the truth: w=1.5 b=-0.5")
    assert abs(w - 1.5) < 0.1 and abs(b + 0.5) < 0.2 and abs(b_ls + 0.5) > 0.5
    check_gradient(objective, fit.x, value_and_grad(objective)(fit.x)[1], rtol=1e-5)
    print("gradients agree with finite differences")
