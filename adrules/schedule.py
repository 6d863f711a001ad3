"""Where chunk work runs: on the executor, or inline when parallel would not pay.

    run(executor, fn, items, shared, key=...)
      every chunk reports the CPU seconds it used (time.thread_time, on whichever
      thread or process ran it): their sum is what a plain loop would cost
      first call for `key`:  chunk 0 inline ─ worth dispatching the rest?
      later calls:           decide from the last call's CPU seconds per chunk
      a parallel call that took longer (wall clock) than its chunks' CPU seconds
      lost to a loop (GIL-bound work on threads, a busy machine); two such calls in a
      row send the call site inline, with a parallel try every RETRY_EVERY calls

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


class _Timed:
    """``fn`` returning ``(result, CPU seconds)``; CPU time, not wall time, so a thread
    waiting for the GIL is not counted as working (picklable: a module-level class)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, item, *shared):
        t0 = time.thread_time()
        result = self.fn(item, *shared)
        return result, time.thread_time() - t0

    def __reduce__(self):
        return (_Timed, (self.fn,))


class _Estimate:
    """What one call site has learnt: CPU seconds per chunk, and whether parallel pays."""

    __slots__ = ("chunk_seconds", "losses", "calls")

    def __init__(self, chunk_seconds):
        self.chunk_seconds, self.losses, self.calls = chunk_seconds, 0, 0

    def wants_parallel(self, executor):
        self.calls += 1
        if executor.n_workers < 2 or self.chunk_seconds <= DISPATCH_FACTOR * executor.dispatch_cost:
            return False
        return self.losses < 2 or self.calls % RETRY_EVERY == 0

    def record(self, parallel, wall_seconds, cpu_seconds, n_chunks):
        self.chunk_seconds = cpu_seconds / n_chunks
        if parallel:
            lost = wall_seconds > 1.05 * cpu_seconds  # a loop would have been quicker
            self.losses = self.losses + 1 if lost else 0


_estimates: dict = {}
_lock = threading.Lock()


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
        timed = _Timed(fn)
        full_key = (key, fn, executor.name, executor.n_workers)
        with _lock:
            estimate = _estimates.get(full_key)
        if estimate is None:
            first = _SERIAL.map(timed, items[:1], shared=shared)
            if bar is not None:
                bar.update(1)
            estimate = _Estimate(first[0][1])
            with _lock:
                if len(_estimates) > 1024:  # call sites come and go (lambdas): stay bounded
                    _estimates.clear()
                _estimates[full_key] = estimate
            rest = _timed_map(estimate, executor, timed, items[1:], shared, on_done)
            return [first[0][0]] + rest
        return _timed_map(estimate, executor, timed, items, shared, on_done)
    finally:
        if bar is not None:
            bar.close()


def _timed_map(estimate, executor, timed, items, shared, on_done):
    if not items:
        return []
    if not estimate.wants_parallel(executor):  # inline: one clock reading for the lot
        t0 = time.thread_time()
        out = _SERIAL.map(timed.fn, items, shared=shared, on_done=on_done)
        cpu = time.thread_time() - t0
        estimate.record(False, cpu, cpu, len(items))
        return out
    t0 = time.perf_counter()
    out = executor.map(timed, items, shared=shared, on_done=on_done)
    estimate.record(True, time.perf_counter() - t0, sum(t for _, t in out), len(items))
    return [r for r, _ in out]


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
