"""An ODE net: a small neural network is the right-hand side of an ODE, its weights fit
so that scipy.integrate.odeint's solution follows a spiral; odeint's gradient is its
adjoint.

Ported from autograd by changing the imports (autograd.numpy -> numpy,
autograd.scipy.integrate.odeint -> scipy.integrate.odeint, autograd.grad -> adrules.grad).
"""
# requires: scipy

from adrules import grad
import numpy as np
import numpy.random as npr
from scipy.integrate import odeint

D = 2


def init_nn_params(scale, layer_sizes, rs=npr.RandomState(0)):
    return [(rs.randn(insize, outsize) * scale, rs.randn(outsize) * scale)
            for insize, outsize in zip(layer_sizes[:-1], layer_sizes[1:])]


def nn_predict(inputs, t, params):
    for W, b in params:
        outputs = np.dot(inputs, W) + b
        inputs = np.tanh(outputs)
    return outputs


def true_dynamics(y, t):
    return np.dot(y ** 3, np.array([[-0.1, 2.0], [-2.0, -0.1]]))


def ode_pred(params, y0, t, tol):
    return odeint(nn_predict, y0, t, tuple((params,)), rtol=tol, atol=tol)


def l1_loss(pred, target):
    return np.mean(np.abs(pred - target))


def flat(params):
    return np.concatenate([np.ravel(a) for pair in params for a in pair])


def check_gradient(f, params, g, eps=1e-6, rtol=1e-4):
    """g, the gradient of f at params (a list of (W, b)), along random directions vs
    central differences; rtol: the solver's tolerance limits both."""
    rng = np.random.default_rng(1)
    for _ in range(2):
        d = [(rng.normal(size=W.shape), rng.normal(size=b.shape)) for W, b in params]
        moved = lambda s: [(W + s * dW, b + s * db) for (W, b), (dW, db) in zip(params, d)]  # noqa: E731
        fd = (f(moved(eps)) - f(moved(-eps))) / (2 * eps)
        along = np.sum(flat(g) * flat(d))
        assert np.isclose(along, fd, rtol=rtol, atol=rtol), (along, fd)


if __name__ == "__main__":
    t = np.linspace(0.0, 1.0, 20)
    y0 = np.array([2.0, 0.0])
    target = odeint(true_dynamics, y0, t)
    loss = lambda params, tol=1e-3: l1_loss(ode_pred(params, y0, t, tol), target)  # noqa: E731
    params = init_nn_params(0.1, layer_sizes=[D, 20, D])
    check_gradient(lambda p: loss(p, 1e-10), params, grad(loss)(params, 1e-10))
    start = loss(params)
    for step in range(40):
        g = grad(loss)(params)
        params = [(W - 0.05 * gW, b - 0.05 * gb) for (W, b), (gW, gb) in zip(params, g)]
    print(f"L1 loss of the ODE net's trajectory: {start:.3f} -> {loss(params):.3f}")
    assert loss(params) < 0.8 * start
    print("gradients agree with finite differences")
