"""Speed-up of the psum forward pass and of the psum gradient, per backend, side by side.

The seed thread's complaint was a backward pass that got *slower* in parallel while the
forward got faster; this prints both speed-ups for the same ensemble in one run.

    python asv_benchmarks/forward_vs_gradient.py [n_hidden batch [chunk_size]]

Defaults: the heavy ensemble (32 MLPs 16-512-1, batch 4096), measured in the environment
users have (glibc malloc untuned; BLAS on one thread).
"""

import statistics
import sys
import time

import numpy as np
from threadpoolctl import threadpool_limits

import adrules as ad
import executors


def loss(p, x, y):
    hidden = np.tanh(x @ p["w1"] + p["b1"])
    return np.mean((hidden @ p["w2"] - y) ** 2)


def median_seconds(fn, repeat=15):
    fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def main(n_hidden=512, batch=4096, chunk_size=None):
    threadpool_limits(1)
    rng = np.random.default_rng(0)
    models = [{"w1": rng.normal(size=(16, n_hidden)) / 4, "b1": np.zeros(n_hidden),
               "w2": rng.normal(size=n_hidden) / np.sqrt(n_hidden)} for _ in range(32)]
    x, y = rng.normal(size=(batch, 16)), rng.normal(size=batch)
    backends = {"serial": executors.SerialExecutor(), "threads x2": executors.ThreadExecutor(2),
                "processes x2": executors.ProcessExecutor(2)}
    rows = {}
    for name, ex in backends.items():
        forward = median_seconds(lambda: ad.psum(loss, models, x, y, executor=ex, chunk_size=chunk_size))
        gradient = median_seconds(lambda: ad.gradient(
            lambda ms: ad.psum(loss, ms, x, y, executor=ex, chunk_size=chunk_size), models))
        rows[name] = forward, gradient
        ex.close()
    f0, g0 = rows["serial"]
    print(f"32 MLPs 16-{n_hidden}-1, batch {batch}; medians of 15")
    for name, (f, g) in rows.items():
        print(f"{name:14s} forward {f * 1e3:8.1f} ms ({f0 / f:.2f}x)   gradient {g * 1e3:8.1f} ms ({g0 / g:.2f}x)")


if __name__ == "__main__":
    main(*(int(a) for a in sys.argv[1:]))
