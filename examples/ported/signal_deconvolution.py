"""Learning a blur: the FIR filter h that best maps a signal x onto its blurred, noisy
copy y with scipy.signal.convolve(x, h, mode="same"), fit by gradient descent; the
least-squares answer, solved directly, is the check.

Ported from autograd by changing the imports (autograd.numpy -> numpy, the convolution
from scipy.signal, autograd.grad -> adrules.grad).
"""
# requires: scipy

from adrules import grad
import numpy as np
import numpy.random as npr
from scipy.signal import convolve


def loss(h, x, y):
    return np.mean((convolve(x, h, mode="same") - y) ** 2)


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    rs = npr.RandomState(0)
    x = rs.randn(400)
    blur = np.array([0.1, 0.2, 0.4, 0.2, 0.1])
    y = convolve(x, blur, mode="same") + 0.05 * rs.randn(len(x))
    f = lambda h: loss(h, x, y)  # noqa: E731
    h = np.zeros(5)
    check_gradient(f, h, grad(f)(h))
    for step in range(300):
        h = h - 0.3 * grad(f)(h)
    # the same least squares, solved: the columns are x convolved with each unit filter
    columns = np.stack([convolve(x, e, mode="same") for e in np.eye(5)], axis=1)
    best = np.linalg.lstsq(columns, y, rcond=None)[0]
    print(f"learned filter {h.round(3)}, least squares {best.round(3)}, true {blur}")
    assert np.allclose(h, best, atol=1e-3)
    check_gradient(f, h, grad(f)(h))
    print("gradients agree with finite differences")
