"""A psum gradient on Dask whose results are arrays of 1.2 MiB (16 models of 400x400), timed
on the checkout that ``PYTHONPATH`` points at: run it on a commit before and after Dask
results travelled with their array buffers out of band, in alternation:

    git worktree add --detach /tmp/before f32ee71
    for i in 1 2; do
        PYTHONPATH=/tmp/before python asv_benchmarks/history/dask_results_out_of_band.py
        PYTHONPATH=. python asv_benchmarks/history/dask_results_out_of_band.py
    done

Prints the median of 15 calls after 3 warm-up calls, in a fresh cluster each run.
"""

import statistics
import time

import numpy as np

import adrules as ad
import executors


def loss(w, x):
    return np.sum(np.tanh(x @ w) ** 2)


if __name__ == "__main__":
    ex = executors.DaskExecutor(n_workers=2)
    rng = np.random.default_rng(0)
    ws = [rng.standard_normal((400, 400)) for _ in range(16)]
    x = rng.standard_normal((64, 400))

    def gradient():
        return ad.gradient(lambda ws, x: ad.psum(loss, ws, x, executor=ex, dispatch="always"), ws, x)

    for _ in range(3):
        gradient()
    times = []
    for _ in range(15):
        t0 = time.perf_counter()
        gradient()
        times.append(time.perf_counter() - t0)
    print(f"median {statistics.median(times) * 1e3:.1f} ms ({ad.__file__})")
    ex.close()
