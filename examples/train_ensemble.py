"""Training an ensemble: 16 tiny MLPs fitted to a synthetic regression by gradient descent.

Each step takes the gradient of ``psum(mlp_loss, models, x, y)`` -- the sum of the 16
models' losses -- with respect to every model at once; the forward map and the
pullback run on the default executor (threads). ``progress=True`` shows a tqdm bar
per pass when tqdm is installed (it is optional: without it, psum warns once).

    python examples/train_ensemble.py
"""

import numpy as np

import adrules as ad

N_MODELS, N_HIDDEN, STEPS, LEARNING_RATE = 16, 16, 30, 0.2


def mlp(params, x):
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"] + params["b2"]


def mlp_loss(params, x, y):
    return np.mean((mlp(params, x) - y) ** 2)


def make_problem(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2, 2, size=(256, 2))
    y = np.sin(1.5 * x[:, 0]) * np.cos(x[:, 1]) + 0.05 * rng.normal(size=256)
    models = [{"w1": rng.normal(size=(2, N_HIDDEN)),
               "b1": rng.normal(size=N_HIDDEN) * 0.5,
               "w2": rng.normal(size=N_HIDDEN) / np.sqrt(N_HIDDEN),
               "b2": 0.0} for _ in range(N_MODELS)]
    return models, x, y


def ensemble_loss(models, x, y):
    return ad.psum(mlp_loss, models, x, y, progress=True) / len(models)


def gradient_step(models, grads):
    return [{k: m[k] - LEARNING_RATE * g[k] for k in m} for m, g in zip(models, grads)]


def main():
    models, x, y = make_problem()
    initial_models, losses = models, []
    for step in range(STEPS):
        loss, (grads,) = ad.value_and_gradient(lambda ms: ensemble_loss(ms, x, y), models)
        if step == 0:
            first_grads = grads
        losses.append(float(loss))
        if step % 5 == 0 or step == STEPS - 1:
            print(f"step {step:>3}  mean loss {loss:.4f}")
        models = gradient_step(models, grads)

    prediction = np.mean([mlp(m, x) for m in models], axis=0)
    print(f"loss {losses[0]:.4f} -> {losses[-1]:.4f} ({losses[0] / losses[-1]:.1f}x lower); "
          f"ensemble-average prediction MSE {np.mean((prediction - y) ** 2):.4f}")

    # self-check 1: the loss went down by a clear factor, every step
    assert losses[-1] < losses[0] / 3, losses
    assert all(b <= a for a, b in zip(losses, losses[1:])), "gradient descent went uphill"
    # self-check 2: the first psum gradient equals the traced plain loop, no psum involved
    plain = ad.gradient(lambda ms: sum(mlp_loss(m, x, y) for m in ms) / len(ms), initial_models)[0]
    for got, want in zip(first_grads, plain):
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=1e-12, atol=1e-15)
    print("first-step gradient matches the plain (unparallel) loop")


if __name__ == "__main__":
    main()
