"""Second derivatives: Hessian-vector products, Newton-CG, a curvature estimate, Jacobians.

``ad.hvp(f, x, v)`` gives ``H(x) @ v`` by forward-over-reverse without forming ``H``;
that is all Newton-CG (conjugate gradients on ``H p = -g``) and power iteration (the
largest curvature) need. ``ad.jacobian`` takes a layer's Jacobians in forward mode
(one jvp per input element) or reverse mode (one pullback per output element).

    python examples/hessian_vector.py
"""

import numpy as np

import adrules as ad

rng = np.random.default_rng(0)
X = rng.normal(size=(200, 6))
labels = np.sign(X @ rng.normal(size=6) + 0.5 * rng.normal(size=200))  # +1 / -1
LAM = 0.1


def logistic_loss(w):
    """Mean logistic loss log(1 + exp(-label * x.w)) plus an L2 penalty."""
    return np.mean(np.logaddexp(0.0, -labels * (X @ w))) + 0.5 * LAM * np.sum(w ** 2)


def hessian_by_hand(w):
    s = 1 / (1 + np.exp(-labels * (X @ w)))  # l''(z) = sigmoid(z) sigmoid(-z); labels^2 = 1
    return X.T @ (X * (s * (1 - s))[:, None]) / len(X) + LAM * np.eye(len(w))


def newton_cg_step(f, w, cg_iterations=10):
    """Solve H p = -g by conjugate gradients, touching H only through hvp."""
    g = ad.gradient(f, w)[0]
    p, r = np.zeros_like(w), -g
    d = r.copy()
    for _ in range(cg_iterations):
        hd = ad.hvp(f, w, d)
        alpha = (r @ r) / (d @ hd)
        p, r_new = p + alpha * d, r - alpha * hd
        if np.linalg.norm(r_new) < 1e-12:
            break
        d, r = r_new + (r_new @ r_new) / (r @ r) * d, r_new
    return w + p


def main():
    w, v = rng.normal(size=6) * 0.3, rng.normal(size=6)
    hv = ad.hvp(logistic_loss, w, v)
    h = 1e-5  # central differences of the gradient along v
    fd = (ad.gradient(logistic_loss, w + h * v)[0] - ad.gradient(logistic_loss, w - h * v)[0]) / (2 * h)
    H = ad.hessian(logistic_loss, w)
    print("H v by hvp:          ", np.round(hv, 6))
    print("hessian(f, w) @ v:   ", np.round(H @ v, 6))
    print("finite differences:  ", np.round(fd, 6))
    np.testing.assert_allclose(hv, H @ v, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(hv, fd, rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(H, hessian_by_hand(w), rtol=1e-12, atol=1e-14)

    # the largest curvature by power iteration on hvp, against the hand-derived Hessian
    u = np.ones(6)
    for _ in range(100):
        u = ad.hvp(logistic_loss, w, u)
        u /= np.linalg.norm(u)
    top = u @ ad.hvp(logistic_loss, w, u)
    print(f"largest curvature: power iteration {top:.8f}, eigvalsh "
          f"{np.linalg.eigvalsh(hessian_by_hand(w))[-1]:.8f}")
    np.testing.assert_allclose(top, np.linalg.eigvalsh(hessian_by_hand(w))[-1], rtol=1e-8)

    # Newton-CG: the gradient norm falls quadratically
    norms = []
    for step in range(5):
        w = newton_cg_step(logistic_loss, w)
        norms.append(np.linalg.norm(ad.gradient(logistic_loss, w)[0]))
        print(f"Newton-CG step {step}: loss {logistic_loss(w):.10f}, |gradient| {norms[-1]:.2e}")
    assert norms[-1] < 1e-10 and norms[1] < norms[0] ** 1.5, norms
    g_by_hand = -X.T @ (labels / (1 + np.exp(labels * (X @ w)))) / len(X) + LAM * w
    np.testing.assert_allclose(g_by_hand, 0, atol=1e-12)  # a true minimum, by the hand gradient

    # the Jacobians of a layer tanh(W x + b), in both modes, against the hand formula
    W, b, x = rng.normal(size=(3, 4)), rng.normal(size=3), rng.normal(size=4)
    layer = lambda W, x: np.tanh(W @ x + b)  # noqa: E731
    t = layer(W, x)
    J_W_by_hand = (1 - t ** 2)[:, None, None] * np.eye(3)[:, :, None] * x[None, None, :]
    for mode in ("fwd", "rev"):
        J_W, J_x = ad.jacobian(layer, W, x, mode=mode)
        print(f"jacobian, mode={mode!r}: d/dW {J_W.shape}, d/dx {J_x.shape}")
        np.testing.assert_allclose(J_x, (1 - t ** 2)[:, None] * W, rtol=1e-13)
        np.testing.assert_allclose(J_W, J_W_by_hand, rtol=1e-13)
    print("all checks passed")


if __name__ == "__main__":
    main()
