"""Seeded, cached data builders and the workloads every benchmark shares.

The same definitions drive the asv suite, ``compare_peers.py`` and ``scaling.py``, so
"the small ensemble" means the same arrays and the same loss everywhere:

    SMALL  32 MLPs 16-64-1,  batch 256   (~0.1 ms forward per model)
    HEAVY  32 MLPs 16-512-1, batch 4096  (~8 ms forward per model)

Models are dicts of float64 arrays (``w1, b1, w2, b2``), ensembles are lists of them.
Builders are cached: benchmarks must not mutate what they get.

Loss functions take an array namespace ``xp`` (numpy by default; ``autograd.numpy``,
``torch`` or ``jax.numpy`` in the peer comparison): they only use ``@``, ``+``, ``-``,
``**``, ``xp.tanh``, ``xp.sin``, ``xp.cos`` and ``xp.mean`` / ``xp.sum``.

Measurement environment: the one users have. BLAS is pinned to one thread (as the
reference figures were taken that way; that is not malloc tuning), glibc's malloc is left
alone: every large fresh allocation is paid in page faults, as in a user's program.
``MALLOC_ENV`` exists only for a second, labelled figure (``compare_peers.py --malloc-env``).
"""

from __future__ import annotations

import functools
import os

import numpy as np

# ---------------------------------------------------------------------------
# measurement environment
# ---------------------------------------------------------------------------

#: glibc malloc settings for a second, labelled "tuned malloc" figure only; the main
#: figures are taken without them, in the environment users have. Without them, each large
#: temporary (the heavy ensemble's 4096x512 activations are 16 MiB) is mmapped and
#: unmapped, or the heap is trimmed, so every call pays fresh page faults (measured here:
#: ~53k minor faults and 0.3-0.8 s of system time per loop gradient of the heavy
#: ensemble, ~1.6 GB of tape); processes whose working set differs (a parent holding
#: every tape, workers holding one chunk's) pay differently, which fakes speed-ups. With
#: them, only the first call that grows the heap pays (a warm-up call), later calls reuse
#: it. 32 MiB is glibc's largest allowed mmap threshold on 64-bit.
MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": str(32 * 1024 * 1024),
    "MALLOC_TRIM_THRESHOLD_": str(1024 ** 3),
    "MALLOC_TOP_PAD_": str(64 * 1024 * 1024),
}

#: BLAS/OpenMP pools pinned to one thread in this process and its children.
BLAS_ENV = {
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
}

#: Set by ``run_quick.sh`` (CI's pass that checks every benchmark still runs): timed
#: repeats and sample budgets cut to the least that exercises the code, so a quick pass's
#: figures are not measurements. Unset for every figure in RESULTS.md.
QUICK = os.environ.get("ADRULES_BENCH_QUICK") == "1"


def quick_or(full, quick):
    """``quick`` in a quick pass, ``full`` otherwise (repeats, rounds, steps)."""
    return quick if QUICK else full


_blas_pinned = False


def pin_blas():
    """Limit BLAS/OpenMP to one thread in this process (idempotent; the limit stays after
    threadpoolctl's handle is dropped, and keeping no handle keeps this module picklable
    by value for process workers)."""
    global _blas_pinned
    if not _blas_pinned:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:  # the env vars set by run_quick.sh still apply
            return
        threadpool_limits(1)
        _blas_pinned = True


#: XLA (JAX's CPU backend) on one thread, like BLAS
XLA_ENV = {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}


def malloc_env_is_set():
    return all(os.environ.get(k) == v for k, v in MALLOC_ENV.items())


def reexec_with_measurement_env(script, argv, use_malloc_env=False):
    """Re-run ``script`` with BLAS_ENV and XLA_ENV set (and MALLOC_ENV only when asked, for
    a labelled tuned-malloc figure), if they are not set already: glibc reads MALLOC_* at
    process start only, and process pool workers inherit the environment, so every process
    of a run is configured alike. Returns only when nothing had to change."""
    import sys

    wanted = {**BLAS_ENV, **XLA_ENV, **(MALLOC_ENV if use_malloc_env else {})}
    missing = {k: v for k, v in wanted.items() if os.environ.get(k) != v}
    if missing and os.environ.get("_ADRULES_BENCH_REEXEC") != "1":
        env = dict(os.environ, **wanted, _ADRULES_BENCH_REEXEC="1")
        os.execve(sys.executable, [sys.executable, os.path.abspath(script), *argv], env)


# ---------------------------------------------------------------------------
# data builders (seeded, cached)
# ---------------------------------------------------------------------------

SMALL = dict(name="small", n_models=32, d_in=16, d_hidden=64, batch=256)
#: a quick pass takes 8 heavy models, not 32: each is still heavy enough that psum sends
#: a first call's chunks after chunk 0 to a pool, and the pass took minutes in heavy calls
HEAVY = dict(name="heavy", n_models=quick_or(32, 8), d_in=16, d_hidden=512, batch=4096)
MANY = dict(name="many", n_models=512, d_in=16, d_hidden=64, batch=256)
#: BLAS-bound: 12 models of ten ``tanh(h @ w)`` layers, 400 rows through 200x200 weights
DEEP = dict(name="deep", n_models=12, width=200, batch=400, layers=10)


@functools.lru_cache(maxsize=None)
def vector(n, seed=0):
    """A float64 vector of ``n`` standard normals."""
    return np.random.default_rng(seed).standard_normal(n)


@functools.lru_cache(maxsize=None)
def mlp_ensemble(n_models, d_in, d_hidden, seed=1):
    """``n_models`` one-hidden-layer MLPs ``d_in -> d_hidden -> 1`` as dicts of arrays."""
    rng = np.random.default_rng(seed)
    models = []
    for _ in range(n_models):
        models.append({
            "w1": rng.standard_normal((d_in, d_hidden)) / np.sqrt(d_in),
            "b1": 0.1 * rng.standard_normal(d_hidden),
            "w2": rng.standard_normal(d_hidden) / np.sqrt(d_hidden),
            "b2": 0.1 * rng.standard_normal(1),
        })
    return models


@functools.lru_cache(maxsize=None)
def regression_batch(batch, d_in, seed=2):
    """Inputs ``x`` (batch, d_in) and targets ``y`` (batch,)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((batch, d_in))
    y = np.sin(x[:, 0]) + 0.1 * rng.standard_normal(batch)
    return x, y


def ensemble(spec):
    """``(models, x, y)`` for ``SMALL``, ``HEAVY``, ``MANY`` (or any dict of the same keys)
    or ``DEEP``."""
    if spec["name"] == "deep":
        return deep_ensemble(spec["n_models"], spec["width"], spec["batch"])
    models = mlp_ensemble(spec["n_models"], spec["d_in"], spec["d_hidden"])
    x, y = regression_batch(spec["batch"], spec["d_in"])
    return models, x, y


@functools.lru_cache(maxsize=None)
def tanh_layer(n_in=100, n_out=100, seed=3):
    """Weights, bias and input of a ``n_in -> n_out`` tanh layer."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n_out, n_in)) / np.sqrt(n_in),
            0.1 * rng.standard_normal(n_out), rng.standard_normal(n_in))


# ---------------------------------------------------------------------------
# workloads
# ---------------------------------------------------------------------------


def mlp_loss(p, x, y, xp=np):
    """Mean squared error of one MLP."""
    hidden = xp.tanh(x @ p["w1"] + p["b1"])
    pred = hidden @ p["w2"] + p["b2"]
    return xp.mean((pred - y) ** 2)


# One psum member function per workload. adrules' scheduler keys its timing estimates
# (parallel or inline?) by the code of f, so one function used for tiny and heavy data
# shares one estimate, and a warm-up on tiny data decides for the heavy run (reported as
# a library bug). Distinct functions keep each workload's own steady state measurable.


def small_member_loss(p, x, y):
    return mlp_loss(p, x, y)


def heavy_member_loss(p, x, y):
    return mlp_loss(p, x, y)


def many_member_loss(p, x, y):
    return mlp_loss(p, x, y)


@functools.lru_cache(maxsize=None)
def deep_ensemble(n_models, width, batch, seed=4):
    """``DEEP``'s models (square weight matrices), inputs and targets."""
    rng = np.random.default_rng(seed)
    models = [rng.standard_normal((width, width)) / np.sqrt(width) for _ in range(n_models)]
    return models, rng.standard_normal((batch, width)), rng.standard_normal(batch)


def deep_member_loss(w, x, y):
    """Ten ``tanh(h @ w)`` layers sharing one weight matrix; squared error of the row sums."""
    h = x
    for _ in range(DEEP["layers"]):
        h = np.tanh(h @ w)
    return np.mean((h.sum(axis=1) - y) ** 2)


def warmup_member_loss(p, x, y):
    return mlp_loss(p, x, y)


def member_loss(spec):
    """The psum member function of workload ``spec`` (SMALL, HEAVY, MANY or DEEP)."""
    return {"small": small_member_loss, "heavy": heavy_member_loss,
            "many": many_member_loss, "deep": deep_member_loss}[spec["name"]]


def ensemble_loss(models, x, y, xp=np):
    """``sum(mlp_loss(m, x, y) for m in models)``, a left fold in model order."""
    total = 0.0
    for p in models:
        total = total + mlp_loss(p, x, y, xp)
    return total


def mlp_loss_and_grad(p, x, y):
    """Hand-written backprop of ``mlp_loss``: the reference a tape should approach."""
    z = x @ p["w1"]
    z += p["b1"]
    hidden = np.tanh(z, out=z)
    residual = hidden @ p["w2"]
    residual += p["b2"] - y
    loss = np.mean(residual ** 2)
    dpred = residual * (2.0 / residual.size)
    dz = np.multiply.outer(dpred, p["w2"])
    dz *= 1.0 - hidden * hidden
    grad = {"w1": x.T @ dz, "b1": dz.sum(axis=0), "w2": hidden.T @ dpred,
            "b2": np.array([dpred.sum()])}
    return loss, grad


def handwritten_ensemble_gradient(models, x, y):
    """Per-model gradients of ``ensemble_loss`` by hand-written backprop."""
    return [mlp_loss_and_grad(p, x, y)[1] for p in models]


def sum_sq_power(x, xp=np):
    return xp.sum(x ** 2)


def sum_sq_mul(x, xp=np):
    return xp.sum(x * x)


def sum_sq_matmul(x, xp=np):
    return x @ x


SUM_OF_SQUARES = {"sum(x**2)": sum_sq_power, "sum(x*x)": sum_sq_mul, "x@x": sum_sq_matmul}


def chain(n_ops, xp=np):
    """``x -> sum(op_n(...op_1(x)))`` with ``n_ops`` elementwise ops cycling through
    sin, *c, tanh, +c, cos: the marginal cost per op is ``(t(50) - t(1)) / 49``."""
    ops = (xp.sin, lambda v: v * 0.9, xp.tanh, lambda v: v + 0.1, xp.cos)

    def chained(x):
        for k in range(n_ops):
            x = ops[k % len(ops)](x)
        return xp.sum(x)

    return chained


def tanh_layer_fn(w, b):
    """``x -> tanh(w @ x + b)``, a 100 -> 100 map for Jacobians."""
    def layer(x):
        return np.tanh(w @ x + b)
    return layer


def quartic_loss(x):
    """A 50-parameter loss with a dense Hessian."""
    return np.sum(np.tanh(x) ** 2) + np.sum(x) ** 2 * 0.01 + np.sum(x ** 4) * 0.1


def cheap_scalar(x):
    """The cheapest useful f for psum: nothing to parallelise."""
    return x * x + 1.0


# ---------------------------------------------------------------------------
# executors
# ---------------------------------------------------------------------------

BACKENDS = ["serial", "threads", "processes"]


def make_executor(backend, n_workers):
    """A fresh executor (closed by the caller), warmed up: pool started, modules imported
    on the workers, a psum gradient run once."""
    import time

    import adrules as ad
    import executors

    if backend == "serial":
        ex = executors.SerialExecutor()
    elif backend == "threads":
        ex = executors.ThreadExecutor(n_workers)
    elif backend == "processes":
        ex = executors.ProcessExecutor(n_workers)
    elif backend == "dask":
        ex = executors.DaskExecutor(n_workers=n_workers)
    else:
        raise ValueError(f"unknown backend {backend!r}")
    # as psum starts a pool it needs (and first_call.py does): the workers import adrules
    # once, ahead of the first chunk; a pool started by a bare map(abs) paid that import
    # (~0.15 s a worker) inside the first timed sample (PsumSmallEnsemble: 166 ms, 10x
    # a steady call, in one sample of the processes median)
    if backend != "serial":  # (the serial executor has no workers to start)
        ex.start(preload=("adrules",))
    while not ex.ready():  # every worker has imported it (a map may finish on one alone)
        time.sleep(0.01)
    ex.map(abs, [-1] * max(2, n_workers))
    models, x, y = ensemble(dict(SMALL, n_models=4 * n_workers, batch=32))
    ad.gradient(lambda ms: ad.psum(warmup_member_loss, ms, x, y, executor=ex, chunk_size=1), models)
    return ex


_SPIN = ("import time\n"
         "c0, w0 = time.process_time(), time.perf_counter()\n"
         "while time.process_time() - c0 < {seconds}: pass\n"
         "print(time.process_time() - c0, time.perf_counter() - w0)")


def available_cores(n=2, seconds=0.3):
    """How many cores ``n`` busy processes actually get right now: their summed CPU time
    over the longest wall time. On a shared machine this is below ``n`` when other work
    competes for the cores; a parallel speed-up cannot beat it. (Plain subprocesses, so
    it works from any script and after threads have started.)"""
    import subprocess
    import sys

    procs = [subprocess.Popen([sys.executable, "-S", "-c", _SPIN.format(seconds=seconds)],
                              stdout=subprocess.PIPE, text=True) for _ in range(n)]
    cpu, wall = 0.0, 0.0
    for p in procs:
        c, w = map(float, p.communicate()[0].split())
        cpu, wall = cpu + c, max(wall, w)
    return cpu / wall


class CallsInAProcess:
    """A separate Python process that runs ``setup_code`` once (``common`` is importable
    there; it must define ``call``), then times ``call()`` on demand: ``run(n)`` (or
    ``start(n)`` and ``wait()``) gives its seconds per call over ``n`` calls. Two of them
    side by side show what the machine gives two processes that share nothing."""

    _DRIVER = (
        "import sys, time\n"
        "sys.path.insert(0, {path!r})\n"
        "import common\n"
        "{setup}\n"
        "call(); call()\n"
        "print('ready', flush=True)\n"
        "for line in sys.stdin:\n"
        "    n = int(line)\n"
        "    t0 = time.perf_counter()\n"
        "    for _ in range(n):\n"
        "        call()\n"
        "    print((time.perf_counter() - t0) / n, flush=True)\n")

    def __init__(self, setup_code):
        import subprocess
        import sys

        driver = self._DRIVER.format(path=os.path.dirname(os.path.abspath(__file__)), setup=setup_code)
        self.proc = subprocess.Popen([sys.executable, "-c", driver], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True, env={**os.environ, **BLAS_ENV})
        if self.proc.stdout.readline().strip() != "ready":
            self.close()
            raise RuntimeError("CallsInAProcess: the process failed to set up (see its stderr)")

    def start(self, n):
        self.proc.stdin.write(f"{n}\n")
        self.proc.stdin.flush()

    def wait(self):
        return float(self.proc.stdout.readline())

    def run(self, n):
        self.start(n)
        return self.wait()

    def close(self):
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def close_executor(bench):
    """teardown helper: close ``bench.ex`` if setup got as far as making it (asv runs
    teardown even when setup raised NotImplementedError to skip a combination)."""
    ex = getattr(bench, "ex", None)
    if ex is not None:
        ex.close()


def median_time(fn, repeat=7, number=None, budget=0.05):
    """Median seconds per call of ``fn()`` over ``repeat`` samples of ``number`` calls
    (``number`` chosen so a sample takes about ``budget`` seconds)."""
    import time

    repeat, budget = _sampling(repeat, budget)
    if number is None and QUICK:
        number = 1
    if number is None:
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-7)
        number = max(1, int(budget / once))
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        samples.append((time.perf_counter() - t0) / number)
    return float(np.median(samples))


def interleaved_medians(fns, repeat=7, budget=0.05):
    """Medians of several callables timed in alternation (noise hits all alike)."""
    samples = _interleaved_samples(fns, repeat, budget)
    return {name: float(np.median(s)) for name, s in samples.items()}


def interleaved_differences(fns, minus, repeat=15, budget=0.02):
    """For each callable but ``minus``: the median over rounds of its time minus
    ``minus``'s time in the same round. This machine's speed moves on a scale of
    milliseconds (a loop's time doubled and halved again within a run), which a
    difference of two medians over the whole run keeps and a difference per round
    mostly cancels."""
    samples = _interleaved_samples(fns, repeat, budget)
    return {name: float(np.median([a - b for a, b in zip(s, samples[minus])]))
            for name, s in samples.items() if name != minus}


def interleaved_speedups(fns, over, repeat=11, budget=0.1):
    """For each callable but ``over``: the median over rounds of ``over``'s time divided by
    its own time in the same round (how many times faster than ``over`` it ran). A ratio
    per round, for the reason ``interleaved_differences`` takes a difference per round:
    within one run this machine's speed moves (the serial small ensemble took 19 to 30 ms
    in runs minutes apart), and a ratio of two medians over the run keeps what a ratio
    per round mostly cancels."""
    samples = _interleaved_samples(fns, repeat, budget)
    return {name: float(np.median([b / a for a, b in zip(s, samples[over])]))
            for name, s in samples.items() if name != over}


def _sampling(repeat, budget):
    """``repeat`` and ``budget`` as given, or cut for a quick pass: one round, each callable
    called once in it (the pass checks the code runs; its figures are not read)."""
    return (1, 0.0) if QUICK else (repeat, budget)


def _interleaved_samples(fns, repeat, budget):
    """Each callable's seconds per call in ``repeat`` rounds, each round timing every
    callable for about ``budget`` seconds, in reverse order every other round."""
    import time

    repeat, budget = _sampling(repeat, budget)
    numbers = {}
    for name, fn in fns.items():
        if QUICK:  # one call each, in the one round: no sizing calls
            numbers[name] = 1
            continue
        fn()  # a first call may set things up: not what the budget is sized by
        t0 = time.perf_counter()
        fn()
        once = max(time.perf_counter() - t0, 1e-7)
        numbers[name] = max(1, int(budget / once))
    samples = {name: [] for name in fns}
    names = list(fns)
    for r in range(repeat):
        for name in names if r % 2 == 0 else names[::-1]:
            fn, n = fns[name], numbers[name]
            t0 = time.perf_counter()
            for _ in range(n):
                fn()
            samples[name].append((time.perf_counter() - t0) / n)
    return samples


def _ship_by_value():
    """Process and Dask workers cannot import this suite (asv puts it on sys.path of the
    benchmark process only): have cloudpickle send this module's functions by value, as
    it does for a user's ``__main__`` script."""
    import sys

    try:
        import cloudpickle
    except ImportError:
        return
    cloudpickle.register_pickle_by_value(sys.modules[__name__])


pin_blas()
_ship_by_value()
