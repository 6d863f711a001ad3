"""psum: the parallel sum whose forward map and pullback run on an executor.

Targets (2 workers): the heavy ensemble's psum gradient >= 1.6x the serial psum gradient
on processes and threads in steady state, >= 1.4x on a call site's first call with the
pool started; psum of 10 cheap scalars within 50 us of a plain loop on every backend, and of
16 small MLPs within 1.05x of the plain ``sum(...)`` it replaces (serial and threads);
hvp of the heavy ensemble loss >= 1.6x over serial and <= 3x the gradient's time.
``bench_schedule`` sweeps the work size (never slower than serial) and the workers.

Every executor is created and warmed (pool started, a psum gradient run once) in
``setup`` and closed in ``teardown``, outside the timed body.
"""

import statistics
import time

import adrules as ad

from . import common


def _skip_duplicate(backend, n_workers):
    if backend == "serial" and n_workers != 1:
        raise NotImplementedError("serial has one worker")  # asv shows n/a


class _EnsemblePsum:
    """Shared body: forward-only psum and psum gradient of an ensemble's total loss."""

    params = (common.BACKENDS, [1, 2])
    param_names = ["backend", "n_workers"]
    spec = common.SMALL

    def setup(self, backend, n_workers):
        _skip_duplicate(backend, n_workers)
        self.models, x, y = common.ensemble(self.spec)
        self.ex = common.make_executor(backend, n_workers)
        ex, loss = self.ex, common.member_loss(self.spec)
        self.total = lambda models: ad.psum(loss, models, x, y, executor=ex)

    def teardown(self, backend, n_workers):
        common.close_executor(self)

    def time_forward(self, backend, n_workers):
        self.total(self.models)

    def time_gradient(self, backend, n_workers):
        ad.gradient(self.total, self.models)


class PsumSmallEnsemble(_EnsemblePsum):
    """32 MLPs 16-64-1, batch 256 (~0.1 ms forward per model)."""

    spec = common.SMALL


class SmallEnsembleSpeedup:
    """The small ensemble's psum gradient on 2 workers over the serial psum gradient,
    measured side by side in one process (the median of per-round ratios: load from other
    jobs hits both alike), in the steady state of a training loop: the pool started with adrules
    imported, as psum starts one. What the targets are read from (threads >= 1.3x,
    processes >= 1.2x); ``time_gradient`` of ``PsumSmallEnsemble`` gives absolute times.
    """

    unit = "x"
    params = [["threads", "processes"]]
    param_names = ["backend"]
    timeout = 180

    def setup(self, backend):
        self.models, x, y = common.ensemble(common.SMALL)
        self.ex = ex = common.make_executor(backend, 2)
        loss = common.member_loss(common.SMALL)
        self.total = lambda ms: ad.psum(loss, ms, x, y, executor=ex)
        self.total_serial = lambda ms: ad.psum(loss, ms, x, y, executor="serial")
        for _ in range(common.quick_or(3, 1)):  # past the call site's first call (PsumHeavyFirstCall's subject)
            ad.gradient(self.total, self.models)

    def teardown(self, backend):
        common.close_executor(self)

    def track_psum_gradient_speedup(self, backend):
        return common.interleaved_speedups({
            "serial": lambda: ad.gradient(self.total_serial, self.models),
            backend: lambda: ad.gradient(self.total, self.models),
        }, over="serial", repeat=11, budget=0.1)[backend]


class SmallEnsembleThreadsCeiling:
    """How far 2 threads can speed up the small ensemble's gradient at all: hand-written
    NumPy backprop (no tracer) in a loop against the same on a 2-thread pool (one half of
    the models each), the median of per-round ratios. Each MLP runs ~16 short NumPy calls that
    release the GIL for a few microseconds and take it back: two threads mostly hand the
    GIL back and forth. ``SmallEnsembleSpeedup``'s threads figure is read against it."""

    unit = "x"
    timeout = 180

    def setup(self):
        from concurrent.futures import ThreadPoolExecutor

        self.models, self.x, self.y = common.ensemble(common.SMALL)
        self.pool = ThreadPoolExecutor(2)

    def teardown(self):
        self.pool.shutdown()

    def _hand(self, models):
        return [common.mlp_loss_and_grad(p, self.x, self.y) for p in models]

    def track_handwritten_numpy_speedup(self):
        half = len(self.models) // 2
        return common.interleaved_speedups({
            "loop": lambda: self._hand(self.models),
            "pool": lambda: list(self.pool.map(self._hand, [self.models[:half], self.models[half:]])),
        }, over="loop", repeat=11, budget=0.1)["pool"]


class SmallEnsembleProcessesCeiling:
    """How far 2 processes can speed up the small ensemble's gradient at all on this
    machine now: two separate processes, each running the serial psum gradient with
    nothing sent between them, against one of them alone (per-round ratios of
    ``2 * alone / side by side``). A pure Python loop always got 2 cores here, while this
    NumPy work got 1.2 to 2.0 (2026-11-25, runs minutes apart): the two cores share more
    than their CPU time says (``common.available_cores`` read 1.97-2.00 meanwhile). When
    it is low,
    psum's ~5 ms a call of its own (pickling, two round trips) leave nothing to gain and
    the schedule runs the small ensemble inline. ``SmallEnsembleSpeedup``'s processes
    figure is read against it."""

    unit = "x"
    timeout = 180

    def setup(self):
        self.procs = []
        for _ in range(2):
            self.procs.append(common.CallsInAProcess(_SERIAL_SMALL_GRADIENT))

    def teardown(self):
        for p in self.procs:
            p.close()

    def track_two_processes_speedup(self):
        a, b = self.procs
        ratios = []
        calls = common.quick_or(10, 1)
        for r in range(common.quick_or(7, 1)):
            alone = a.run(calls)
            a.start(calls)
            b.start(calls)
            both = max(a.wait(), b.wait())
            ratios.append(2 * alone / both)
        return statistics.median(ratios)


_SERIAL_SMALL_GRADIENT = """
import adrules as ad
models, x, y = common.ensemble(common.SMALL)
loss = common.member_loss(common.SMALL)
call = lambda: ad.gradient(lambda ms: ad.psum(loss, ms, x, y, executor="serial"), models)
"""


class PsumHeavyEnsemble(_EnsemblePsum):
    """32 MLPs 16-512-1, batch 4096 (~8 ms forward per model)."""

    spec = common.HEAVY
    timeout = 300


class PsumHeavyHvp:
    """Hessian-vector product of the heavy ensemble's psum loss with respect to the
    models (forward-over-reverse: each chunk's product on the executor), beside the
    gradient of the same loss on the same executor.
    Targets (2 workers): hvp >= 1.6x over serial when the machine gives 2 cores, and
    hvp <= 3x the gradient's time."""

    params = [common.BACKENDS]
    param_names = ["backend"]
    timeout = 600
    number, repeat, warmup_time = 1, 3, 0

    def setup(self, backend):
        import numpy as np

        self.models, x, y = common.ensemble(common.HEAVY)
        self.v = [{k: np.ones_like(a) for k, a in m.items()} for m in self.models]
        self.ex = common.make_executor(backend, 2 if backend != "serial" else 1)
        ex, loss = self.ex, common.member_loss(common.HEAVY)
        self.total = lambda models: ad.psum(loss, models, x, y, executor=ex)
        # the steady state: the schedule has seen both call sites once (a first call is
        # PsumHeavyFirstCall's subject)
        ad.gradient(self.total, self.models)
        ad.hvp(self.total, self.models, self.v)

    def teardown(self, backend):
        common.close_executor(self)

    def time_hvp(self, backend):
        ad.hvp(self.total, self.models, self.v)

    def time_gradient(self, backend):
        ad.gradient(self.total, self.models)


class HeavyEnsembleReference:
    """The heavy ensemble without psum: a Python loop forward, its tape gradient, and
    hand-written backprop (the reference for the serial psum gradient)."""

    timeout = 300

    def setup(self):
        self.models, self.x, self.y = common.ensemble(common.HEAVY)
        x, y = self.x, self.y
        self.total = lambda models: common.ensemble_loss(models, x, y)

    def time_forward_loop(self):
        self.total(self.models)

    def time_gradient_loop(self):
        ad.gradient(self.total, self.models)

    def time_handwritten_gradient(self):
        common.handwritten_ensemble_gradient(self.models, self.x, self.y)


class CheapScalars:
    """psum of 10 cheap scalars on a warm 2-process executor against a plain loop: work too
    small to pay for dispatch must run serially, so the two should cost the same."""

    def setup(self):
        self.xs = [float(v) for v in common.vector(10)]
        self.ex = common.make_executor("processes", 2)

    def teardown(self):
        common.close_executor(self)

    def time_loop_value(self):
        sum(common.cheap_scalar(x) for x in self.xs)

    def time_psum_value(self):
        ad.psum(common.cheap_scalar, self.xs, executor=self.ex)

    def time_loop_gradient(self):
        ad.gradient(lambda xs: sum(common.cheap_scalar(x) for x in xs), self.xs)

    def time_psum_gradient(self):
        ad.gradient(lambda xs: ad.psum(common.cheap_scalar, xs, executor=self.ex), self.xs)


class PsumOverPlainSum:
    """psum against the line it replaces, ``sum(loss(m, x, y) for m in models)``: 16 MLPs
    8-32-1 at batch 128, ``value_and_gradient``, on serial and threads:2 (the work is too
    small to send, so both run the chunks inline): psum's time over the plain sum's (the
    median of per-round ratios, the two timed in alternation). Target: <= 1.05."""

    unit = "x plain sum"
    params = [["serial", "threads"]]
    param_names = ["backend"]
    timeout = 180

    def setup(self, backend):
        common.pin_blas()
        self.models = common.mlp_ensemble(16, 8, 32)
        self.x, self.y = common.regression_batch(128, 8)
        self.ex = common.make_executor(backend, 2 if backend != "serial" else 1)

    def teardown(self, backend):
        common.close_executor(self)

    def track_psum_over_plain_sum(self, backend):
        x, y, ex = self.x, self.y, self.ex
        plain = lambda: ad.value_and_gradient(  # noqa: E731
            lambda ms: sum(common.mlp_loss(m, x, y) for m in ms), self.models)
        on = lambda: ad.value_and_gradient(  # noqa: E731
            lambda ms: ad.psum(common.mlp_loss, ms, x, y, executor=ex), self.models)
        return 1.0 / common.interleaved_speedups({"plain": plain, "psum": on}, over="plain",
                                                 repeat=15, budget=0.05)["psum"]


class CheapScalarsOverhead:
    """Extra microseconds of psum over the loop (the median of per-round differences, the
    two timed in alternation), per backend with 2 workers. Target: <= 50 us on any backend."""

    unit = "us"
    params = [["threads", "processes", "dask"]]
    param_names = ["backend"]
    timeout = 180

    def setup(self, backend):
        self.xs = [float(v) for v in common.vector(10)]
        self.ex = common.make_executor(backend, 2)

    def teardown(self, backend):
        common.close_executor(self)

    def track_value_overhead_us(self, backend):
        t = common.interleaved_differences({
            "loop": lambda: sum(common.cheap_scalar(x) for x in self.xs),
            "psum": lambda: ad.psum(common.cheap_scalar, self.xs, executor=self.ex),
        }, minus="loop", repeat=31, budget=0.005)
        return t["psum"] * 1e6

    def track_gradient_overhead_us(self, backend):
        t = common.interleaved_differences({
            "loop": lambda: ad.gradient(lambda xs: sum(common.cheap_scalar(x) for x in xs), self.xs),
            "psum": lambda: ad.gradient(
                lambda xs: ad.psum(common.cheap_scalar, xs, executor=self.ex), self.xs),
        }, minus="loop", repeat=31, budget=0.005)
        return t["psum"] * 1e6


class PeakMemPsumGradient:
    """Peak memory of a psum gradient over 512 small models (16-64-1, batch 256): chunk
    tapes must be released as chunks finish, not all kept until the end."""

    params = [["serial", "threads"]]
    param_names = ["backend"]

    def setup(self, backend):
        self.models, x, y = common.ensemble(common.MANY)
        self.ex = common.make_executor(backend, 2 if backend != "serial" else 1)
        ex, loss = self.ex, common.member_loss(common.MANY)
        self.total = lambda models: ad.psum(loss, models, x, y, executor=ex)

    def teardown(self, backend):
        common.close_executor(self)

    def peakmem_psum_gradient(self, backend):
        ad.gradient(self.total, self.models)


class PsumHeavyFirstCall:
    """The heavy ensemble's psum gradient on a call site the schedule has never seen (what
    a one-off call in a user's script gets): chunk 0 is timed inline and the rest of the
    same call goes to the executor. Pools are started beforehand, their workers having
    imported adrules; every sample forgets what the call site measured.
    Target: threads and processes (2 workers) >= 1.4x the serial first call."""

    params = [["serial", "threads", "processes"]]
    param_names = ["backend"]
    number, repeat, warmup_time = 1, 5, 0
    timeout = 300

    def setup(self, backend):
        import executors
        from adrules._psum import schedule

        self.models, x, y = common.ensemble(common.HEAVY)
        self.ex = ex = executors.resolve(backend, 2 if backend != "serial" else None)
        # the pool is up (kept across samples: resolve caches it); without the preload each
        # worker's first chunk imported adrules (0.35 s) inside the timed first call
        if backend != "serial":  # (the serial executor has no workers to start)
            ex.start(preload=("adrules",))
        while not ex.ready():  # every worker up: a map may finish on the first worker alone,
            time.sleep(0.01)   # and then the timed call had no probe and counted a start-up
        ex.map(abs, [-1, -2])
        loss = common.member_loss(common.HEAVY)
        self.total = lambda models: ad.psum(loss, models, x, y, executor=ex)
        schedule.forget()

    def time_gradient_first_call(self, backend):
        ad.gradient(self.total, self.models)


#: the shared argument's length: 191 MiB of float64; a quick pass takes a tenth (still
#: far over every size threshold on the way: a big result, an array sent by memory map)
SHARED_SIZE = common.quick_or(25_000_000, 2_500_000)

_SHARED_GRADIENT = """
import resource, sys, time
import numpy as np
import adrules as ad, executors
def fit(w, data):
    return np.sum(data * w)
if __name__ == "__main__":
    backend, n_chunks, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    data = np.random.default_rng(0).standard_normal(size)
    weights = [float(i + 1) for i in range(16)]
    ex = executors.resolve(backend, 2 if backend != "serial" else None)
    if backend != "serial":  # (the serial executor has no workers to start)
        ex.start()
    while not ex.ready():
        time.sleep(0.05)
    ex.map(abs, [1, 2])
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    ad.gradient(lambda d: ad.psum(fit, weights, d, executor=ex, chunk_size=16 // n_chunks,
                                  dispatch="always"), data)
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print((after - before) * 1024 / data.nbytes)
"""


class PeakMemSharedArgumentGradient:
    """Gradient with respect to a 191 MiB shared argument of a 16-element psum, every chunk
    on the executor (``dispatch="always"``): the calling process's peak memory growth,
    in multiples of the array (a fresh process each). Shared-argument cotangents fold into
    one buffer as chunks complete, no more than a task a worker ahead of the fold.
    Target: <= 4 at 16 chunks, every backend."""

    params = [["serial", "threads", "processes", "dask"], [16]]
    param_names = ["backend", "n_chunks"]
    unit = "x the array"
    timeout = 300

    def track_peak_growth(self, backend, n_chunks):
        import subprocess
        import sys

        import importlib.util

        if backend == "dask" and importlib.util.find_spec("distributed") is None:
            raise NotImplementedError("the dask extra is not installed")  # asv shows n/a
        out = subprocess.run([sys.executable, "-c", _SHARED_GRADIENT, backend, str(n_chunks), str(SHARED_SIZE)],
                             capture_output=True, text=True, check=True)
        return float(out.stdout.split()[-1])


class PeakMemSharedArgument:
    """asv's own peak-memory figure for the same gradient (the whole benchmark process:
    the 191 MiB array itself included)."""

    params = [["serial", "threads"]]
    param_names = ["backend"]
    timeout = 300

    def setup(self, backend):
        import numpy as np

        self.data = np.random.default_rng(0).standard_normal(SHARED_SIZE)
        self.weights = [float(i + 1) for i in range(16)]

    def peakmem_shared_argument_gradient(self, backend):
        ad.gradient(lambda d: ad.psum(_fit, self.weights, d, executor=backend, chunk_size=1), self.data)


def _fit(w, data):
    return (data * w).sum()
