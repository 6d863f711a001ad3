"""Placeholder demo: the gradient of a small model's loss (replaced by the ensemble demo)."""

import numpy as np

import adrules as ad


def loss(params, x, y):
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    pred = hidden @ params["w2"]
    return np.mean((pred - y) ** 2)


rng = np.random.default_rng(0)
params = {"w1": rng.normal(size=(3, 8)), "b1": np.zeros(8), "w2": rng.normal(size=8)}
x, y = rng.normal(size=(32, 3)), rng.normal(size=32)
value, (grads, _, _) = ad.value_and_gradient(loss, params, x, y)
print(f"loss = {value:.4f}")
for name, g in grads.items():
    print(f"d loss / d {name}: shape {g.shape}, norm {np.linalg.norm(g):.4f}")
