"""A psum gradient step whose ensemble shares a 200 MB training array.

The array goes to process workers by memory map (``ProcessExecutor(max_nbytes=...)``:
written once per content to ``/dev/shm``, opened read-only by the workers) instead of a
pickle per task ("processes-pickled": ``max_nbytes=None``, the transport before, for
comparison). Targets (2 workers): the step on processes within 1.3x the same step
on threads; peak memory of parent plus workers during the step under 2x the array.

    step = gradient of  psum(member_loss, models, X, y)  w.r.t. the 8 models
           X: 100_000 x 250 float64 (200 MB), y: 100_000; MLPs 250-4-1
"""

import adrules as ad

from . import common

#: 200 MB of training data; a quick pass takes a tenth (still far over the memory-map threshold)
N_ROWS, N_COLS, N_HIDDEN, N_MODELS = common.quick_or(100_000, 10_000), 250, 4, 8


def training_data(seed=5):
    import numpy as np

    rng = np.random.default_rng(seed)
    X = rng.standard_normal((N_ROWS, N_COLS))
    y = rng.standard_normal(N_ROWS)
    models = [{"w1": rng.standard_normal((N_COLS, N_HIDDEN)) * 0.1,
               "w2": rng.standard_normal(N_HIDDEN)} for _ in range(N_MODELS)]
    return models, X, y


def member_loss(p, X, y):
    import numpy as np

    return np.mean((np.tanh(X @ p["w1"]) @ p["w2"] - y) ** 2)


def make_executor(backend):
    """2 workers: threads, processes (arrays by memory map) or processes-pickled."""
    import executors

    backend = backend.replace("-npy-mmap", "")  # the same executor; the data differ

    if backend == "threads":
        return executors.ThreadExecutor(2)
    return executors.ProcessExecutor(2, max_nbytes=None if backend == "processes-pickled" else 2**20)


class SharedTrainingArrayStep:
    """Time of one warm gradient step (``dispatch="auto"``: what a user gets)."""

    params = [["threads", "processes", "processes-pickled"]]
    param_names = ["backend"]
    timeout = 600
    number, repeat, warmup_time = 1, 5, 0

    def setup(self, backend):
        self.models, X, y = training_data()
        self.ex = ex = make_executor(backend)
        self.step = lambda: ad.gradient(
            lambda ms: ad.psum(member_loss, ms, X, y, executor=ex), self.models)
        for _ in range(common.quick_or(3, 1)):  # pool up, array in /dev/shm, the schedule has measured the site
            self.step()

    def teardown(self, backend):
        common.close_executor(self)

    def time_gradient_step(self, backend):
        self.step()


class SharedTrainingArrayRatio:
    """The step on 2 processes over the step on 2 threads, timed in alternation in one
    process (medians of 5): on a shared machine, load that comes and goes between two
    separately timed benchmarks would otherwise decide the ratio. Target: <= 1.3."""

    unit = "ratio"
    timeout = 600

    def setup(self):
        self.models, X, y = training_data()
        self.executors = {name: make_executor(name) for name in ("threads", "processes")}
        self.steps = {
            name: (lambda ex: lambda: ad.gradient(
                lambda ms: ad.psum(member_loss, ms, X, y, executor=ex), self.models))(ex)
            for name, ex in self.executors.items()}
        for step in self.steps.values():
            for _ in range(common.quick_or(3, 1)):
                step()

    def teardown(self):
        for ex in getattr(self, "executors", {}).values():
            ex.close()

    def track_processes_over_threads(self):
        return common.interleaved_speedups(self.steps, over="processes", repeat=5, budget=0)["threads"]


_PEAK = """
import sys, threading, time
import numpy as np, psutil
import adrules as ad, executors
backend = sys.argv[1]
models, X, y = training_data()
if backend == "processes-npy-mmap":  # the user loads the training set as a read-only map
    import os, tempfile
    path = os.path.join(tempfile.mkdtemp(), "X.npy")
    np.save(path, X)
    del X
    X = np.load(path, mmap_mode="r")
ex = make_executor(backend)
ex.map(abs, [-1, -2])  # workers up (and numpy imported there) before the baseline
me = psutil.Process()

def total():
    # PSS: pages shared by several processes (the memory map) are counted once in all
    procs = [me] + [p for p in me.children(recursive=True)]
    out = 0
    for p in procs:
        try:
            out += p.memory_full_info().pss
        except psutil.Error:
            pass
    return out

base = total()
peak = [base]
stop = threading.Event()
def sample():
    while not stop.is_set():
        peak[0] = max(peak[0], total())
        time.sleep(0.01)
t = threading.Thread(target=sample); t.start()
ad.gradient(lambda ms: ad.psum(member_loss, ms, X, y, executor=ex, dispatch="always"), models)
stop.set(); t.join()
peak[0] = max(peak[0], total())
print((peak[0] - base) / X.nbytes, peak[0] / X.nbytes)
ex.close()
if backend == "processes-npy-mmap":
    del X
    os.remove(path)
    os.rmdir(os.path.dirname(path))
"""


def _peak(backend):
    """(growth during the first step, whole peak), in multiples of the array, measured
    in a fresh process: parent plus workers, proportional set size (shared pages once).
    The workload's source goes into the script (``__main__``: cloudpickle sends it to the
    workers by value)."""
    import inspect
    import subprocess
    import sys

    source = (f"N_ROWS, N_COLS, N_HIDDEN, N_MODELS = {N_ROWS}, {N_COLS}, {N_HIDDEN}, {N_MODELS}\n"
              + "\n".join(inspect.getsource(f) for f in (training_data, member_loss, make_executor)))
    out = subprocess.run([sys.executable, "-c", source + _PEAK, backend], capture_output=True,
                         text=True, check=True)
    growth, whole = map(float, out.stdout.split()[-2:])
    return growth, whole


class SharedTrainingArrayPeakMemory:
    """Peak memory of parent plus workers (psutil, PSS summed, sampled every 10 ms) during
    the first gradient step, in multiples of the 200 MB array: ``growth`` counts what the
    step adds to the baseline (the parent already holds the array, the workers are up),
    ``whole`` is the peak itself, the parent's array and three interpreters included.
    "processes-npy-mmap": the parent holds the array as ``np.load(path, mmap_mode="r")``
    (file pages count once, where mapped). Target: under 2x."""

    params = [["threads", "processes", "processes-pickled", "processes-npy-mmap"]]
    param_names = ["backend"]
    unit = "x the array"
    timeout = 600

    def track_peak_growth(self, backend):
        return _peak(backend)[0]

    def track_peak_whole(self, backend):
        return _peak(backend)[1]


class CoresAvailable:
    """How many cores two busy processes get on this machine right now (the ceiling of
    any 2-worker speed-up reported beside these figures)."""

    unit = "cores"

    def track_cores_two_busy_processes_get(self):
        return common.available_cores(2)


def _ship_by_value():
    """Process workers cannot import this suite: send its functions by value (as
    ``common`` does for its own)."""
    import sys

    import cloudpickle

    cloudpickle.register_pickle_by_value(sys.modules[__name__])


_ship_by_value()
