"""A softmax classifier trained with value_and_grad(loss, argnums=(0, 1), has_aux=True):
the loss is the mean of -log_softmax at the labels (scipy.special.log_softmax), and the
accuracy comes back as aux, as JAX code writes it.

Ported from JAX by changing the imports (jax.numpy -> numpy, jax.scipy.special ->
scipy.special, jax.value_and_grad -> adrules.value_and_grad).
"""
# requires: scipy

from adrules import value_and_grad
import numpy as jnp
import numpy as np
from scipy.special import log_softmax


def loss(W, b, x, labels):
    logits = jnp.dot(x, W) + b
    log_probs = log_softmax(logits, axis=1)
    nll = -jnp.mean(jnp.take_along_axis(log_probs, labels[:, None], axis=1))
    accuracy = jnp.mean(jnp.argmax(logits, axis=1) == labels)
    return nll, accuracy


def make_data(n=300, rs=np.random.RandomState(0)):
    centres = np.array([[2.0, 0.0], [-1.0, 1.7], [-1.0, -1.7]])
    labels = rs.randint(3, size=n)
    return centres[labels] + 0.8 * rs.randn(n, 2), labels


def check_gradient(f, x, g, eps=1e-6, rtol=1e-6):
    """g, the gradient of f at x, along random directions against central differences."""
    for d in np.random.default_rng(1).normal(size=(3,) + np.shape(x)):
        fd = (f(x + eps * d) - f(x - eps * d)) / (2 * eps)
        assert np.isclose(np.sum(g * d), fd, rtol=rtol, atol=rtol), (np.sum(g * d), fd)


if __name__ == "__main__":
    x, labels = make_data()
    W, b = 0.01 * np.random.RandomState(1).randn(2, 3), np.zeros(3)
    step = value_and_grad(loss, argnums=(0, 1), has_aux=True)
    (start, start_accuracy), (gW, gb) = step(W, b, x, labels)
    check_gradient(lambda W: loss(W, b, x, labels)[0], W, gW)
    check_gradient(lambda b: loss(W, b, x, labels)[0], b, gb)
    for i in range(200):
        (value, accuracy), (gW, gb) = step(W, b, x, labels)
        W, b = W - 0.5 * gW, b - 0.5 * gb
    print(f"loss {start:.3f} -> {value:.3f}, accuracy {start_accuracy:.2f} -> {accuracy:.2f}")
    assert value < 0.5 * start and accuracy > 0.9 and isinstance(accuracy, np.floating)  # aux: a value
    check_gradient(lambda W: loss(W, b, x, labels)[0], W, step(W, b, x, labels)[1][0])
    print("gradients agree with finite differences")
