"""Dask backend: per-call overhead against the process backend, and the per-step time of
a training loop whose large shared array is sent once (reused) or with every task.

Chunks are forced onto the executor (``dispatch="always"``): tiny work would otherwise
run inline and these benchmarks would measure nothing.
"""

import sys

import cloudpickle
import numpy as np

import adrules as ad
import executors

# Dask workers cannot import asv's benchmark package: send this module's functions by value.
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _cheap(w, x):
    return np.sum(w * x[:4])


class Overhead:
    """psum of 8 cheap elements (2 chunks): the cost of a round trip through a backend."""

    params = ["processes", "dask"]
    param_names = ["backend"]
    timeout = 180

    def setup(self, backend):
        self.ex = (executors.ProcessExecutor(2) if backend == "processes"
                   else executors.DaskExecutor(n_workers=2))
        rng = np.random.default_rng(0)
        self.ws, self.x = [rng.normal(size=4) for _ in range(8)], rng.normal(size=4)
        self.time_psum_value()  # workers up, code imported, data cached

    def teardown(self, backend):
        self.ex.close()

    def time_psum_value(self, backend=None):
        ad.psum(_cheap, self.ws, self.x, executor=self.ex, chunk_size=4, dispatch="always")


class SharedDataReuse:
    """One gradient step of 8 small models on a 16 MB shared data set: sent to the Dask
    workers once and reused (the default), or sent afresh with every step."""

    params = [True, False]
    param_names = ["reuse"]
    timeout = 240

    def setup(self, reuse):
        self.ex = executors.DaskExecutor(n_workers=2, reuse_shared=reuse)
        rng = np.random.default_rng(0)
        self.data = rng.normal(size=(2**18, 8))  # 16 MB
        self.models = [rng.normal(size=8) for _ in range(8)]
        self.time_step()

    def teardown(self, reuse):
        self.ex.close()

    def time_step(self, reuse=None):
        ad.gradient(lambda ms: ad.psum(_fit, ms, self.data, executor=self.ex, chunk_size=2,
                                                dispatch="always"), self.models)


def _fit(w, data):
    return np.mean((data[:, :4] @ w[:4] - data[:, 4]) ** 2)


def _layers(m, x):
    h = x
    for _ in range(20):
        h = np.tanh(h @ m)
    return np.sum(h)


class ParentCpuPerCall:
    """CPU milliseconds the calling process spends on one psum gradient of 16 models of
    200x200 (issue 9's example: 320 KB a model out, as much back), its Dask scheduler
    thread included, beside the call's wall time. Dask named each map by hashing every
    item's bytes (``pure=True``): 220 ms of the parent's CPU a call, 100 ms without."""

    params = ["processes", "dask"]
    param_names = ["backend"]
    unit = "ms"
    timeout = 240

    def setup(self, backend):
        self.ex = (executors.ProcessExecutor(2) if backend == "processes"
                   else executors.DaskExecutor(n_workers=2))
        rng = np.random.default_rng(0)
        self.x = rng.normal(size=(200, 200)) / 20
        self.models = [rng.normal(size=(200, 200)) / 20 for _ in range(16)]
        self._step()  # workers up, code imported, data cached

    def teardown(self, backend):
        self.ex.close()

    def _step(self):
        ad.gradient(lambda ms, x: ad.psum(_layers, ms, x, executor=self.ex, dispatch="always"),
                    self.models, self.x)

    def track_parent_cpu_ms(self, backend):
        import resource
        import statistics

        per_call = []
        for _ in range(5):
            before = resource.getrusage(resource.RUSAGE_SELF)
            self._step()
            after = resource.getrusage(resource.RUSAGE_SELF)
            per_call.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return statistics.median(per_call) * 1e3
