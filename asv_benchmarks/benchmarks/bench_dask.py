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

from . import common

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
        for _ in range(common.quick_or(5, 1)):
            before = resource.getrusage(resource.RUSAGE_SELF)
            self._step()
            after = resource.getrusage(resource.RUSAGE_SELF)
            per_call.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
        return statistics.median(per_call) * 1e3


class SecurityCost:
    """What the default cluster's security (TLS with credentials made for it, no HTTP
    route) costs, against the same cluster started unsecured (``security=False``), timed
    in alternation (this machine's speed moves within a run; both pay alike): starting a
    ``DaskExecutor`` of 2 workers, one tiny map and closing it (median of 5 each); per call
    with both clusters up, a psum of 8 cheap elements in 2 chunks (a round trip) and a
    gradient of 16 models of 200x200 (5 MB out, as much back: encryption by the byte)."""

    params = [["tls", "plain"]]
    param_names = ["security"]
    unit = "ms"
    timeout = 1200

    def setup_cache(self):
        import time

        settings = {"tls": None, "plain": False}
        starts = {name: [] for name in settings}
        for r in range(common.quick_or(5, 1)):
            for name in list(settings)[:: 1 if r % 2 == 0 else -1]:
                t0 = time.perf_counter()
                ex = executors.DaskExecutor(n_workers=2, security=settings[name])
                try:
                    ex.map(abs, [-1, -2])
                finally:
                    ex.close()
                starts[name].append(time.perf_counter() - t0)
        rng = np.random.default_rng(0)
        ws, x = [rng.normal(size=4) for _ in range(8)], rng.normal(size=4)
        big_x = rng.normal(size=(200, 200)) / 20
        models = [rng.normal(size=(200, 200)) / 20 for _ in range(16)]
        pools = {name: executors.DaskExecutor(n_workers=2, security=v) for name, v in settings.items()}
        try:
            cheap = common.interleaved_medians({
                name: (lambda ex=ex: ad.psum(_cheap, ws, x, executor=ex, chunk_size=4, dispatch="always"))
                for name, ex in pools.items()}, repeat=15, budget=0.2)
            gradient = common.interleaved_medians({
                name: (lambda ex=ex: ad.gradient(
                    lambda ms, x: ad.psum(_layers, ms, x, executor=ex, dispatch="always"), models, big_x))
                for name, ex in pools.items()}, repeat=9, budget=0.5)
        finally:
            for ex in pools.values():
                ex.close()
        return {"start": {name: float(np.median(t)) for name, t in starts.items()},
                "cheap": cheap, "gradient": gradient}

    def track_start_map_close_ms(self, cache, security):
        return cache["start"][security] * 1e3

    def track_cheap_call_ms(self, cache, security):
        return cache["cheap"][security] * 1e3

    def track_gradient_200x200_ms(self, cache, security):
        return cache["gradient"][security] * 1e3
