"""Where psum's chunks run: what users get from the one policy (``adrules/_psum/policy.py``).

- ``SteadyStateOverSerial``: for each amount of work per call, from tiny scalars to the
  heavy ensemble, the psum gradient's time on threads:2 and processes:2 over the serial
  executor's, steady state. Target: at most 1.10 everywhere (parallel where it pays,
  inline at once where it does not).
- ``ColdPoolFirstCall``: a first call with over 3 s of work on a process pool not started
  yet, in a fresh process, against the same call on the serial executor. Target: faster.
- ``ScalingEfficiency``: the cores users have, simulated with chunks that sleep (forward
  and pullback 10 ms each, 256 elements, a chunk each, ``dispatch="always"``) on
  ``ThreadExecutor(n)``: ideal time over measured time. Target: >= 0.9 at 64 workers.
- ``TrainingLoop``: a new user's SGD loop (16 MLPs 8-32-1, 100 steps of ``value_and_gradient``
  of a psum) from a fresh process, steps of ~1 to ~50 ms, on threads:2 and processes:2
  over serial: the whole loop and its first 10 steps. Targets: whole loop <= 1.10x, first
  10 steps' median <= 1.25x, and the same bits as serial (checked: it raises otherwise).
- ``TapeGroups``, ``Lane``: what each acceleration that stays gains on the work it exists
  for (tiny chunks traced on one tape; tasks written straight to worker processes'
  sockets). Under 10% and it goes.
"""

import os
import queue
import statistics
import subprocess
import sys
import time

import cloudpickle
import numpy as np

import adrules as ad
import executors
from adrules._psum import policy, schedule

from . import common

# the workers cannot import this suite: its functions travel by value
cloudpickle.register_pickle_by_value(sys.modules[__name__])
cloudpickle.register_pickle_by_value(common)

#: 16 MLPs 16-64-1, batch 512: a ~10 ms training step
STEP = dict(name="step", n_models=16, d_in=16, d_hidden=64, batch=512)


def step_loss(p, x, y):
    """``common.mlp_loss``, written out: it travels to workers by value, and a module it
    names would travel by reference."""
    hidden = np.tanh(x @ p["w1"] + p["b1"])
    return np.mean((hidden @ p["w2"] + p["b2"] - y) ** 2)


def _workload(name):
    """``(xs, shared, f)`` of a psum gradient of each size."""
    if name == "tiny":
        return [float(v) for v in common.vector(10)], (), common.cheap_scalar
    spec = {"step": STEP, "small": common.SMALL, "heavy": common.HEAVY}[name]
    models = common.mlp_ensemble(spec["n_models"], spec["d_in"], spec["d_hidden"])
    x, y = common.regression_batch(spec["batch"], spec["d_in"])
    return models, (x, y), (step_loss if name == "step" else common.member_loss(spec))


class SteadyStateOverSerial:
    """psum gradient time on 2 workers over the serial executor's, the median of per-round
    ratios (the two timed in alternation), after three calls of each call site."""

    unit = "x serial time"
    params = [["tiny", "step", "small", "heavy"], ["threads", "processes"]]
    param_names = ["work", "backend"]
    timeout = 600

    def setup(self, work, backend):
        common.pin_blas()
        xs, shared, f = _workload(work)
        self.ex = ex = common.make_executor(backend, 2)
        self.on = lambda: ad.gradient(lambda xs: ad.psum(f, xs, *shared, executor=ex), xs)
        self.serial = lambda: ad.gradient(lambda xs: ad.psum(f, xs, *shared, executor="serial"), xs)
        for _ in range(common.quick_or(3, 1)):
            self.on(), self.serial()
        self.budget = 0.005 if work == "tiny" else 0.1

    def teardown(self, work, backend):
        common.close_executor(self)

    def track_time_over_serial(self, work, backend):
        speedup = common.interleaved_speedups({"serial": self.serial, backend: self.on}, over="serial",
                                              repeat=11, budget=self.budget)[backend]
        return 1.0 / speedup


_COLD = """
import sys, time
sys.path.insert(0, {bench!r})
import common
common.pin_blas()
import adrules as ad, executors
spec = dict(common.HEAVY, n_models=common.quick_or(128, 64))  # a quick pass: half (the pool still starts mid-call)
models = common.mlp_ensemble(spec["n_models"], spec["d_in"], spec["d_hidden"])
x, y = common.regression_batch(spec["batch"], spec["d_in"])
ex = executors.SerialExecutor() if sys.argv[1] == "serial" else executors.ProcessExecutor(2)
t0 = time.perf_counter()
ad.gradient(lambda ms: ad.psum(common.heavy_member_loss, ms, x, y, executor=ex), models)
print(time.perf_counter() - t0)
ex.close()
"""


class ColdPoolFirstCall:
    """The heavy ensemble at 128 models (over 3 s of work serially), its gradient's first
    call in a fresh process: serial time over the time on a ``ProcessExecutor(2)`` made
    right before, not started (the median of three pairs of runs)."""

    unit = "x"
    number, repeat, warmup_time = 1, 1, 0
    timeout = 600

    def _run(self, backend):
        code = _COLD.format(bench=os.path.dirname(os.path.abspath(__file__)))
        env = {**os.environ, **common.BLAS_ENV}
        out = subprocess.run([sys.executable, "-c", code, backend], capture_output=True, text=True,
                             check=True, env=env)
        return float(out.stdout.split()[-1])

    def track_speedup_on_a_cold_pool(self):
        return statistics.median(self._run("serial") / self._run("processes") for _ in range(common.quick_or(3, 1)))


_LOOP = """
import hashlib, sys, time
import numpy as np
import adrules as ad
from threadpoolctl import threadpool_limits
threadpool_limits(1)
backend, batch, steps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rng = np.random.default_rng(0)
models = [{"w1": rng.normal(size=(8, 32)) / 3, "b1": 0.1 * rng.normal(size=32),
           "w2": rng.normal(size=32) / 6, "b2": 0.1 * rng.normal(size=1)} for _ in range(16)]
X, Y = rng.normal(size=(batch, 8)), rng.normal(size=batch)

def loss(p, x, y):
    h = np.tanh(x @ p["w1"] + p["b1"])
    return np.mean((h @ p["w2"] + p["b2"] - y) ** 2)

if __name__ == "__main__":
    times = []
    for _ in range(steps):
        t0 = time.perf_counter()
        value, (grads,) = ad.value_and_gradient(lambda ms: ad.psum(loss, ms, X, Y, executor=backend), models)
        models = [{k: m[k] - 0.01 * g[k] for k in m} for m, g in zip(models, grads)]
        times.append(time.perf_counter() - t0)
    bits = hashlib.sha256(b"".join(m[k].tobytes() for m in models for k in sorted(m))).hexdigest()
    print(" ".join(map(repr, times)), bits)
"""


class TrainingLoop:
    """A new user's loop, as filed: 16 MLPs 8-32-1, 100 SGD steps of ``value_and_gradient``
    of a psum, from a fresh process (pool start-up included), at three batch sizes (steps
    of ~1, ~5 and ~50 ms serially). Each backend's time over serial's, the runs alternated
    (serial, threads, processes; ``rounds`` rounds, medians): the whole loop, and the median
    of steps 1-10. The final models must have serial's bits."""

    unit = "x serial time"
    params = [[32, 128, 2048], ["threads", "processes"]]
    param_names = ["batch", "backend"]
    timeout = 900
    number, repeat, warmup_time = 1, 1, 0
    rounds = 1  # fresh processes per backend and batch (3 for the figures in RESULTS.md: CI's time)
    steps = common.quick_or(100, 20)

    def setup_cache(self):
        out = {}
        for batch in self.params[0]:
            runs = {"serial": [], "threads": [], "processes": []}
            for _ in range(self.rounds):
                for backend in runs:
                    code = subprocess.run([sys.executable, "-c", _LOOP, f"{backend}:2" if backend != "serial"
                                           else backend, str(batch), str(self.steps)], capture_output=True, text=True,
                                          check=True, env={**os.environ, **common.BLAS_ENV}).stdout.split()
                    runs[backend].append(([float(t) for t in code[:-1]], code[-1]))
            bits = {b for r in runs.values() for _, b in r}
            if len(bits) != 1:
                raise AssertionError(f"batch {batch}: the backends' final models differ in their bits")
            out[batch] = {b: (statistics.median(sum(t) for t, _ in r),
                              statistics.median(statistics.median(t[:10]) for t, _ in r))
                          for b, r in runs.items()}
        return out

    def track_whole_loop_over_serial(self, cache, batch, backend):
        return cache[batch][backend][0] / cache[batch]["serial"][0]

    def track_first_10_steps_over_serial(self, cache, batch, backend):
        return cache[batch][backend][1] / cache[batch]["serial"][1]


@ad.primitive
def sleepy(x):
    """Waits 10 ms without the GIL, as chunk work on a core of its own would take."""
    time.sleep(0.01)
    return x * 1.0


@ad.rrule.register(sleepy)
def _sleepy_rrule(x):
    def sleepy_pullback(g):
        time.sleep(0.01)
        return ad.NoTangent(), g * 1.0
    return sleepy(x), sleepy_pullback


class ScalingEfficiency:
    """Ideal over measured time of a psum gradient of 256 elements whose forward and
    pullback each sleep 10 ms, a chunk each, every chunk on ``ThreadExecutor(n)``: the
    caller's own cost per task is what limits many workers."""

    unit = "efficiency"
    params = [[8, 32, 64, 128]]
    param_names = ["n_workers"]
    timeout = 300

    def setup(self, n_workers):
        self.ex = executors.ThreadExecutor(n_workers)
        self.xs = [float(i) for i in range(256)]
        self.grad = lambda: ad.gradient(
            lambda xs: ad.psum(sleepy, xs, executor=self.ex, chunk_size=1, dispatch="always"), self.xs)
        self.grad()

    def teardown(self, n_workers):
        self.ex.close()

    def track_efficiency(self, n_workers):
        ideal = len(self.xs) * 0.020 / n_workers
        times = []
        for _ in range(common.quick_or(3, 1)):
            t0 = time.perf_counter()
            self.grad()
            times.append(time.perf_counter() - t0)
        return ideal / statistics.median(times)


class TapeGroups:
    """10 cheap scalars' psum gradient on threads:2 (inline: too little work to send):
    microseconds over a plain loop's gradient, with consecutive chunks traced on one tape
    (``policy.GROUP_SECONDS`` of work at most) and with a tape per chunk."""

    unit = "us"
    params = [["one tape per group", "one tape per chunk"]]
    param_names = ["tapes"]
    timeout = 120

    def setup(self, tapes):
        self.xs = [float(v) for v in common.vector(10)]
        self.ex = common.make_executor("threads", 2)
        self.saved = policy.GROUP_SECONDS
        policy.GROUP_SECONDS = self.saved if tapes == "one tape per group" else 0.0
        schedule.forget()

    def teardown(self, tapes):
        policy.GROUP_SECONDS = self.saved
        common.close_executor(self)

    def track_gradient_over_loop_us(self, tapes):
        xs, ex = self.xs, self.ex
        t = common.interleaved_differences({
            "loop": lambda: ad.gradient(lambda xs: sum(common.cheap_scalar(x) for x in xs), xs),
            "psum": lambda: ad.gradient(lambda xs: ad.psum(common.cheap_scalar, xs, executor=ex), xs),
        }, minus="loop", repeat=31, budget=0.005)
        return t["psum"] * 1e6


def _collect(submit, n, n_workers, on_done, results, convert):
    """Submit tasks ``0..n-1`` (``submit(i) -> future``) and hand their results on in item
    order, at most ``n_workers`` ahead when the caller reduces as they arrive: what the
    lane does over its own queue, here over loky's futures (errors are not the point)."""
    window = n_workers if results.on_result is not None else n
    futures, done = [], queue.SimpleQueue()

    def submit_next():
        i = len(futures)
        futures.append(submit(i))
        futures[i].add_done_callback(lambda f: done.put((i, f)))

    while len(futures) < min(n, window):
        submit_next()
    for _ in range(n):
        i, f = done.get()
        if on_done is not None:
            on_done(i)
        results.put(i, convert(i, f.result().pop()))
        while len(futures) < min(n, results.delivered + window):
            submit_next()


class _LokySubmit(executors.ProcessExecutor):
    """``ProcessExecutor`` with loky's own submit and result for transport instead of the
    lane (what the lane replaced), on a loky pool of its own, for ``Lane``'s comparison."""

    def start(self, preload=()):
        from loky import ProcessPoolExecutor

        from executors import _remote, local

        if self._pool is None:
            self._pool = ProcessPoolExecutor(self.n_workers, initializer=_remote.init_process_worker,
                                             initargs=(os.getpid(),), env=local._LOKY_ENV)
            list(self._pool.map(_remote.warm_up, [preload] * self.n_workers))

    def ready(self):
        return self._pool is not None

    def _map_sending(self, fn, items, shared, on_done, results, paths):
        from executors import _abandon, _context, _remote

        self.start()
        fn_blob = _remote.make_blob(_remote.dumps(fn, "fn", self.name))
        blobs = [_remote.make_blob(self._dumps_shared(a, j, paths)) for j, a in enumerate(shared)]
        size, flag, pid = _context.SETTINGS.get().chunk_size, _abandon.FileFlag(), os.getpid()

        def submit(i):
            return self._pool.submit(_remote.run_task, i, _remote.dumps(items[i], f"item {i}", self.name),
                                     fn_blob, blobs, pid, size, self.name, flag)

        _collect(submit, len(items), self.n_workers, on_done, results,
                 convert=lambda i, data: _remote.load_result(data, i, self.name))

    def close(self):
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None


class Lane:
    """What the lane to process workers gains on the work it exists for: the small ensemble
    and the ~10 ms training step on processes:2, every chunk sent (``dispatch="always"``),
    through the lane over through loky's own submit and result (speed-up)."""

    unit = "x"
    params = [["small", "step"]]
    param_names = ["work"]
    timeout = 300

    def setup(self, work):
        common.pin_blas()
        xs, shared, f = _workload(work)
        self.lane, self.loky = executors.ProcessExecutor(2), _LokySubmit(2)
        for ex in (self.lane, self.loky):
            ex.start(preload=("adrules",))
            while not ex.ready():
                time.sleep(0.01)
            ex.map(abs, [1, 2])
            ex._overhead = (1e-3, 4e-4, 3e-9)  # the same tasks for both, whatever each measured
        self.grad = {ex: (lambda ex=ex: ad.gradient(
            lambda xs: ad.psum(f, xs, *shared, executor=ex, dispatch="always"), xs)) for ex in (self.lane, self.loky)}
        for _ in range(common.quick_or(3, 1)):
            self.grad[self.lane](), self.grad[self.loky]()

    def teardown(self, work):
        self.lane.close(), self.loky.close()

    def track_lane_speedup(self, work):
        return common.interleaved_speedups({"loky": self.grad[self.loky], "lane": self.grad[self.lane]},
                                           over="loky", repeat=11, budget=0.1)["lane"]
