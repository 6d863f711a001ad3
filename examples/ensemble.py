"""The gradient of an ensemble loss, sum(loss(m, x, y) for m in models), on every backend.

psum runs the forward map and the pullback of the sum on the executor you choose; the
value and the gradients are bitwise identical whichever backend and worker count.

    python examples/ensemble.py            # serial, threads, processes, dask (if installed)
"""

import importlib.util
import statistics
import time

import numpy as np
from threadpoolctl import threadpool_limits

import adrules as ad
import executors


def mlp_loss(params, x, y):
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return np.mean((hidden @ params["w2"] - y) ** 2)


def make_ensemble(n_models, n_in, n_hidden, batch, seed=0):
    rng = np.random.default_rng(seed)
    models = [{"w1": rng.normal(size=(n_in, n_hidden)) / np.sqrt(n_in),
               "b1": np.zeros(n_hidden),
               "w2": rng.normal(size=n_hidden) / np.sqrt(n_hidden)} for _ in range(n_models)]
    return models, rng.normal(size=(batch, n_in)), rng.normal(size=batch)


def ensemble_gradient(models, x, y, executor):
    return ad.value_and_gradient(lambda ms: ad.psum(mlp_loss, ms, x, y, executor=executor), models)


def median_time(fn, repeat=5, warmup=3):
    for _ in range(warmup):  # pools start, workers import the code, psum learns the work's size
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def as_bytes(result):
    value, (grads,) = result
    return np.asarray(value).tobytes() + b"".join(g[k].tobytes() for g in grads for k in sorted(g))


# This process runs with malloc as you have it; executors starts its worker processes (loky's
# and the Dask LocalCluster's) with glibc told to keep freed memory
# (executors.local.WORKER_MALLOC_ENV), which the figure notes.
NOTES = {name: "  (workers: MALLOC_* tuned by executors)" for name in ("processes x2", "dask x2")}


def main():
    models, x, y = make_ensemble(n_models=32, n_in=16, n_hidden=256, batch=2048)
    backends = [("serial", executors.SerialExecutor()),
                ("threads x2", executors.ThreadExecutor(2)),
                ("processes x2", executors.ProcessExecutor(2))]
    if importlib.util.find_spec("distributed"):
        backends.append(("dask x2", executors.DaskExecutor(n_workers=2)))

    with threadpool_limits(1):  # psum pins BLAS to one thread per worker: compare like with like
        forward = median_time(lambda: sum(mlp_loss(m, x, y) for m in models))
    print(f"ensemble: {len(models)} MLPs 16-256-1, batch {len(y)}; "
          f"plain NumPy forward loop: {forward * 1e3:.1f} ms")
    print(f"{'backend':<14}{'gradient (ms)':>14}{'speed-up':>10}{'/ forward':>11}  bitwise = serial")
    reference, serial_time = None, None
    for name, ex in backends:
        with ex:
            result = ensemble_gradient(models, x, y, ex)
            seconds = median_time(lambda: ensemble_gradient(models, x, y, ex))
        reference = reference or as_bytes(result)
        serial_time = serial_time or seconds
        same = as_bytes(result) == reference
        print(f"{name:<14}{seconds * 1e3:>14.1f}{serial_time / seconds:>9.2f}x"
              f"{seconds / forward:>10.2f}x  {'yes' if same else 'NO'}{NOTES.get(name, '')}")
        if not same:
            raise SystemExit(f"{name} differs from serial: determinism is broken")
    print(f"loss = {result[0]:.6f}")


if __name__ == "__main__":
    main()
