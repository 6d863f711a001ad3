"""Where chunk work runs: on the executor, or inline when parallel would not pay.

    run(executor, fn, items, shared, key=...)
      first call for `key`:  chunk 0 inline, timed ─ worth dispatching the rest?
      second call:           inline, to time a warm loop (CPU seconds per chunk)
      later calls:           parallel when the work outweighs the dispatch cost, chunks
                             grouped into tasks that each outweigh it ~10 times; a
                             parallel call slower (wall clock) than the loop's time lost
                             (GIL-bound work on threads, a busy machine): two losses in
                             a row send the call site inline, with a parallel try every
                             RETRY_EVERY calls

Only *where* chunks run depends on timing; every chunk does the same operations wherever
it runs, so results are bitwise identical whatever is decided.
"""

from __future__ import annotations

import threading
import time

import executors

#: Chunks go to the executor when their work outweighs this many times the dispatch cost
#: of the tasks they travel in; below that, a plain loop is faster. 0 sends every chunk to
#: the executor (tests use it to exercise the backends on tiny work).
DISPATCH_FACTOR = 2.0
RETRY_EVERY = 20  # calls: how often a call site that lost in parallel tries again

_SERIAL = executors.SerialExecutor()


class _Timed:
    """``fn`` over a batch of items, returning ``(result, CPU seconds)`` for each
    (picklable: a module-level class)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, batch, *shared):
        out = []
        for item in batch:
            t0 = time.thread_time()
            result = self.fn(item, *shared)
            out.append((result, time.thread_time() - t0))
        return out

    def __reduce__(self):
        return (_Timed, (self.fn,))


def _batches(items, n_workers, chunk_seconds, dispatch_cost):
    """Consecutive items grouped so each task outweighs its dispatch ~10 times and each
    worker gets at most ~4 tasks (each task carries the shared data), yet every worker
    gets work. Grouping changes only which process runs a chunk, never the chunk."""
    n = len(items)
    per_task = max(1, int(10 * dispatch_cost / max(chunk_seconds, 1e-9)), -(-n // (4 * n_workers)))
    per_task = min(per_task, -(-n // n_workers))  # at most 4 tasks a worker, at least 1
    return [items[i:i + per_task] for i in range(0, n, per_task)]


class _Estimate:
    """What one call site has learnt: the CPU seconds a chunk takes when run inline
    (uncontended: chunks running side by side slow each other, so their own clocks
    overstate what a loop would cost), and whether parallel runs beat that."""

    __slots__ = ("chunk_seconds", "calibrated", "losses", "calls", "parallel_runs")

    def __init__(self, chunk_seconds):
        self.chunk_seconds, self.calibrated, self.losses, self.calls = chunk_seconds, False, 0, 0
        self.parallel_runs = 0

    def wants_parallel(self, executor, n_chunks):
        self.calls += 1
        work = self.chunk_seconds * n_chunks  # batched, the tasks cost about 2 dispatches a worker
        if executor.n_workers < 2 or work <= DISPATCH_FACTOR * 2 * executor.n_workers * executor.dispatch_cost:
            return False
        if not self.calibrated:  # the first estimate came from one cold chunk: measure a warm loop
            return False
        return self.losses < 2 or self.calls % RETRY_EVERY == 0

    def record(self, parallel, wall_seconds, cpu_seconds, n_chunks):
        if not parallel:
            self.chunk_seconds, self.calibrated = cpu_seconds / n_chunks, True
            return
        self.parallel_runs += 1
        if self.parallel_runs == 1:  # workers starting up, importing, caching data: no verdict
            return
        lost = wall_seconds > 1.05 * self.chunk_seconds * n_chunks  # a loop would have been quicker
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
            (first,), = _SERIAL.map(timed, [items[:1]], shared=shared)
            if bar is not None:
                bar.update(1)
            estimate = _Estimate(first[1])
            with _lock:
                if len(_estimates) > 1024:  # call sites come and go (lambdas): stay bounded
                    _estimates.clear()
                _estimates[full_key] = estimate
            rest = _timed_map(estimate, executor, timed, items[1:], shared, on_done)
            return [first[0]] + rest
        return _timed_map(estimate, executor, timed, items, shared, on_done)
    finally:
        if bar is not None:
            bar.close()


def _timed_map(estimate, executor, timed, items, shared, on_done):
    if not items:
        return []
    if not estimate.wants_parallel(executor, len(items)):  # inline: one clock reading for the lot
        t0 = time.thread_time()
        out = _SERIAL.map(timed.fn, items, shared=shared, on_done=on_done)
        cpu = time.thread_time() - t0
        estimate.record(False, cpu, cpu, len(items))
        return out
    batches = _batches(items, executor.n_workers, estimate.chunk_seconds, executor.dispatch_cost)
    done = None if on_done is None else (lambda i: [on_done(j) for j in range(len(batches[i]))])
    t0 = time.perf_counter()
    out = [pair for part in executor.map(timed, batches, shared=shared, on_done=done) for pair in part]
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
