"""Where chunk work runs: on the executor, or inline when parallel would not pay.

    run(executor, fn, items, shared, key=...)
      first call for `key`:  chunk 0 inline, timed ─ worth dispatching the rest?
      later calls:           the estimate for `key` decides at once (no inline probe);
                             parallel runs are timed against the serial estimate; a call
                             site where parallel loses twice, around a fresh serial
                             measurement (GIL-bound work on threads, say), runs inline,
                             with a parallel try every RETRY_EVERY calls

Only *where* chunks run depends on timing; every chunk does the same operations wherever
it runs, so results are bitwise identical whatever is decided.
"""

from __future__ import annotations

import threading
import time

import executors

#: Chunks go to the executor when one chunk takes longer than this many times the
#: executor's per-task dispatch cost; below that, a plain loop is faster. 0 sends every
#: chunk to the executor (tests use it to exercise the backends on tiny work).
DISPATCH_FACTOR = 2.0
RETRY_EVERY = 20  # calls: how often a call site that lost in parallel tries again

_SERIAL = executors.SerialExecutor()


class _Estimate:
    """What one call site has learnt: the serial seconds per chunk, and whether parallel
    runs pay. A parallel run that looks slower than the serial estimate is checked by one
    serial run (a fresh estimate) and one more parallel run before parallel is given up."""

    __slots__ = ("chunk_seconds", "state", "calls", "parallel_runs")

    def __init__(self, chunk_seconds):
        self.chunk_seconds, self.state, self.calls, self.parallel_runs = chunk_seconds, "parallel", 0, 0

    def wants_parallel(self):
        self.calls += 1
        if self.state == "lost":
            return self.calls % RETRY_EVERY == 0
        return self.state != "verify-serial"

    def record(self, parallel, seconds, n_chunks):
        if not parallel:
            self.chunk_seconds = seconds / n_chunks
            if self.state == "verify-serial":
                self.state = "verify-parallel"
            return
        self.parallel_runs += 1
        if self.parallel_runs == 1:  # the first run warms the workers up: no verdict
            return
        slower = seconds > 1.05 * self.chunk_seconds * n_chunks
        if self.state in ("verify-parallel", "lost"):
            self.state = "lost" if slower else "parallel"
        elif slower:
            self.state = "verify-serial"


_estimates: dict = {}
_lock = threading.Lock()


def _worth_dispatching(executor, estimate):
    return executor.n_workers > 1 and estimate.chunk_seconds > DISPATCH_FACTOR * executor.dispatch_cost


def run(executor, fn, items, shared=(), key=None, progress=False, label=""):
    """``[fn(item, *shared) for item in items]`` on ``executor`` or inline, whichever is
    faster for this call site (``key``), in item order.

    >>> run(executors.SerialExecutor(), lambda i, k: i * k, [1, 2, 3], (10,))
    [10, 20, 30]
    """
    bar = _progress_bar(progress, len(items), label)
    on_done = (lambda i: bar.update(1)) if bar is not None else None
    try:
        if not items:
            return []
        if DISPATCH_FACTOR == 0:
            return executor.map(fn, items, shared=shared, on_done=on_done)
        full_key = (key, fn, executor.name, executor.n_workers)
        with _lock:
            estimate = _estimates.get(full_key)
        if estimate is None:
            return _probe(executor, fn, items, shared, on_done, bar, full_key)
        parallel = _worth_dispatching(executor, estimate) and estimate.wants_parallel()
        t0 = time.perf_counter()
        out = (executor if parallel else _SERIAL).map(fn, items, shared=shared, on_done=on_done)
        estimate.record(parallel, time.perf_counter() - t0, len(items))
        return out
    finally:
        if bar is not None:
            bar.close()


def _probe(executor, fn, items, shared, on_done, bar, full_key):
    """First call of a call site: time chunk 0 inline, then decide for the rest."""
    t0 = time.perf_counter()
    first = _SERIAL.map(fn, items[:1], shared=shared)
    if bar is not None:
        bar.update(1)
    estimate = _Estimate(time.perf_counter() - t0)
    with _lock:
        if len(_estimates) > 1024:  # call sites come and go (lambdas): keep it bounded
            _estimates.clear()
        _estimates[full_key] = estimate
    rest = items[1:]
    if not rest:
        return first
    runner = executor if _worth_dispatching(executor, estimate) else _SERIAL
    return first + runner.map(fn, rest, shared=shared, on_done=on_done)


def _progress_bar(progress, total, label):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # a progress bar is a nicety: say how to get it
        import warnings

        warnings.warn("progress=True needs tqdm: pip install tqdm", stacklevel=4)
        return None
    return tqdm(total=total, desc=label, leave=False)


def work_key(f):
    """What identifies a call site's work: the code of the user's function."""
    return getattr(f, "__code__", None) or getattr(getattr(f, "template", None), "__code__", None) \
        or type(f)
