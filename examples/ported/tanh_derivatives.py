"""Derivatives of tanh to the fourth order with elementwise_grad applied to itself, as
autograd's first example does (it plots them; here they are checked against tanh's
derivatives in closed form, and the first against finite differences).

Ported from autograd by changing the imports (autograd.numpy -> numpy,
autograd.elementwise_grad -> adrules.elementwise_grad).
"""
# requires: scipy

from adrules import elementwise_grad as egrad
import numpy as np


def tanh(x):
    return (1.0 - np.exp(-2 * x)) / (1.0 + np.exp(-2 * x))


if __name__ == "__main__":
    x = np.linspace(-3, 3, 41)
    d1 = egrad(tanh)
    d2 = egrad(d1)
    d3 = egrad(d2)
    d4 = egrad(d3)
    t = np.tanh(x)
    closed = [1 - t ** 2, -2 * t * (1 - t ** 2), (1 - t ** 2) * (6 * t ** 2 - 2),
              (1 - t ** 2) * (16 * t - 24 * t ** 3)]
    for k, (d, want) in enumerate(zip((d1, d2, d3, d4), closed), start=1):
        np.testing.assert_allclose(d(x), want, rtol=1e-9, atol=1e-12)
        print(f"derivative {k} of tanh agrees with its closed form")
    fd = (tanh(x + 1e-6) - tanh(x - 1e-6)) / 2e-6
    np.testing.assert_allclose(d1(x), fd, rtol=1e-6, atol=1e-9)
    print("gradients agree with finite differences")
