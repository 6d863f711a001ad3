"""The placement policy: where a phase's chunks run, and how many run together.

Read together here: the decision (``decide``: inline, on the executor, or one group
inline first), the model it reads (``parallel_seconds``: the executor's ``overhead()``
once measured, its ``prior_overhead`` before its workers start, and the cores free for
them, ``free_cores``), what a call site has measured (``Site``), how chunks are grouped
(``group_size`` inline, ``task_batches`` into tasks), the group time budget
(``GROUP_SECONDS``, ``in_time``) and the dispatch setting in force (``resolve_dispatch``).
The overheads themselves are each executor's to measure (``Executor.overhead``);
``schedule.run`` acts on what this module decides.

The policy, as the README states it: a phase runs on the executor when that is expected
to be at least ``MARGIN`` times faster than its chunks one after another in the calling
thread. The inline time is the chunks' CPU time as the call site last measured it; the
parallel time is that work shared by the workers plus the executor's overhead per map,
task and byte of results (``Executor.overhead()``), and no less than what the site's last
parallel run achieved (``Site.measured_speedup``). Workers not started are started only
for work that would gain ``MARGIN`` at the executor's ``prior_overhead`` (its expected cost
until measured) on the cores not busy with other work (``free_cores``), and once the
time such calls would have gained (``Site.forgone``) has reached what starting them is
expected to cost (``prior_start_cost``): rent until the rent paid equals the price, so a
short loop never pays a start it cannot earn back, and a long one pays at most twice the
best choice made knowing its length. Otherwise the chunks run inline and nothing starts
(``executor.start()`` starts them at once). A site is a call site (the user's function),
phase and executor.

**The group contract.** A chunk function (``fn(group, *shared)``, given to
``schedule.run``) receives a group of consecutive chunks and returns the results of
the group's first chunks, in order: all of them, or fewer when the group's time
(``GROUP_SECONDS``) ran out, but at least one. Its caller runs the rest in another group:
inline, ``schedule.run`` decides again; on a worker, the task sends them in another
call. ``in_time`` is that loop: every chunk function that runs ``f`` runs its chunks
through it (``chunk_pullback``, which only pulls back tapes already made, runs them all).
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import executors
from executors import WhereRaised, mark_raised
from executors.base import usable_cpu_count

MARGIN = 1.25  # parallel must be expected this many times faster than inline
RETRY_CALLS = 32  # calls after which a site's measured parallel speed-up is measured again
TASK_WORK = 10.0  # a task holds at least this many times the executor's per-task overhead (and a group)
BIG_RESULT = 2**20  # bytes: a chunk's result this big travels in a task of its own
PRELOAD = ("adrules",)  # what starting worker processes import ahead of the first chunk

#: a group's chunks traced on one tape hold up to this much work (seconds): a group
#: stops after the chunk that takes it past (its caller sends the rest again). Each tape
#: costs a traced call, a reverse pass and boxing of its own: fewer tapes of chunks under a
#: millisecond pay on a loop of small models (asv_benchmarks/RESULTS.md)
GROUP_SECONDS = 5e-3

INLINE, PARALLEL, ONE_FIRST = "inline", "parallel", "a group inline first"

#: the clocks a group's length is read from: its work is the thread's CPU time (chunks that
#: wait or release the GIL, on a worker thread, stay on one tape), read only once the wall
#: clock, never less than it and read without a system call, says the budget may be spent
_group_clock, _group_cpu = time.perf_counter, time.thread_time


def in_time(group, run):
    """``[run(item) for item in group]`` until the items have taken ``GROUP_SECONDS`` of
    the thread's CPU time (at least the first item runs): the group contract's loop (see
    the module's docstring). An error says which item of the group raised it.

    >>> in_time([1, 2, 3], lambda x: 10 * x)
    [10, 20, 30]
    """
    out, t0 = [], _group_clock()
    c0 = _group_cpu() if len(group) > 1 else 0.0
    for j, item in enumerate(group):
        if j and _group_clock() - t0 > GROUP_SECONDS and _group_cpu() - c0 > GROUP_SECONDS:
            break  # the rest waits for another group: no tape holds much work
        try:
            out.append(run(item))
        except (Exception, SystemExit) as e:
            mark_raised(e, WhereRaised(part=j))
            raise
    return out


class Site:
    """What one call site has measured: ``seconds`` of CPU per chunk (the last call's),
    and the ``speedup`` its last parallel run achieved, measured on chunks of
    ``speedup_at`` seconds, ``calls`` calls ago; ``forgone``: the seconds its calls run
    inline would have gained on workers not started (each call counted once: at its first
    decision with an estimate, ``counted_at``)."""

    __slots__ = ("seconds", "speedup", "speedup_at", "calls", "forgone", "counted_at")

    def __init__(self):
        self.seconds = self.speedup = self.speedup_at = None
        self.calls = 0
        self.forgone, self.counted_at = 0.0, -1

    def measured_speedup(self, t):
        """The last parallel run's speed-up, while it stands for chunks of ``t`` seconds:
        until the work grew fourfold, or ``RETRY_CALLS`` calls times how many times slower
        than inline that run was (so retrying costs at most ``1 / RETRY_CALLS`` of the
        time), whichever comes first."""
        s = self.speedup
        if s is None or t > 4 * self.speedup_at or self.calls >= RETRY_CALLS / min(s, 1.0):
            return None
        return s


def decide(site: Site, executor: executors.Executor, n: int, dispatch: str = "auto", result_bytes: int = 0,
           cores: float | None = None) -> tuple[str, tuple]:
    """``(where, why)`` for the ``n`` chunks left of a call (``result_bytes``: of each
    chunk's result, where known; ``cores``: those free for workers not started yet, by
    default from the load average, see ``free_cores``).

    >>> site = Site(); site.seconds = 1e-3
    >>> where, why = decide(site, executors.SerialExecutor(), 16)
    >>> where, explain(why)
    ('inline', 'serial has 1 worker')
    """
    if dispatch == "always":
        return PARALLEL, ("dispatch='always'",)
    if executor.n_workers < 2:
        return INLINE, ("{} has 1 worker", executor.name)
    if n < 2:
        return INLINE, ("one chunk",) if n else ("no chunk",)
    t = site.seconds
    if t is None:
        return ONE_FIRST, ("no estimate yet",)
    work = n * t
    if not executor.started():  # start workers only for work that gains on them
        cores = free_cores(executor.n_workers) if cores is None else cores
        expected = parallel_seconds(executor, t, n, result_bytes, executor.prior_overhead, cores)
        if work < MARGIN * expected:
            return INLINE, ("est. {} inline vs {} on {} once started ({:.3g} cores free): not started",
                            format_seconds(work), format_seconds(expected), executor.name, cores)
        if site.counted_at != site.calls:  # (a group that stopped early decides again: same call)
            site.forgone += work - expected
            site.counted_at = site.calls
        if site.forgone < executor.prior_start_cost:
            return INLINE, ("est. {} inline vs {} on {} once started; {} gained by now against {} its start "
                            "costs: not started", format_seconds(work), format_seconds(expected), executor.name,
                            format_seconds(site.forgone), format_seconds(executor.prior_start_cost))
        executor.start(preload=PRELOAD)
    if not executor.ready():
        return ONE_FIRST, ("est. {} of work; {} workers starting", format_seconds(work), executor.name)
    expected = parallel_seconds(executor, t, n, result_bytes)
    speedup = site.measured_speedup(t)
    if speedup is not None:  # what the site's last parallel run achieved, where it says less
        expected = max(expected, work / max(speedup, 1e-9))
    why = ("est. {} inline vs {} on {}{}", format_seconds(work), format_seconds(expected), executor.name,
           "" if speedup is None else f" (its last parallel run: {speedup:.2f}x)")
    return (PARALLEL if work >= MARGIN * expected else INLINE), why


def explain(why: tuple) -> str:
    """The text of a reason ``decide`` gave (formatted only when asked: the log's)."""
    return why[0].format(*why[1:])


def parallel_seconds(executor: executors.Executor, t: float, n: int, result_bytes: int = 0,
                     overhead: tuple[float, float, float] | None = None, cores: float | None = None) -> float:
    """The model: ``n`` chunks of ``t`` seconds shared by the workers (on ``cores`` of
    them at most, where given), plus the executor's overhead per map, per task (see
    ``batches``), and per byte of each chunk's result (``result_bytes``) brought back:
    ``overhead``, else the executor's measured one.

    >>> round(parallel_seconds(executors.SerialExecutor(), 0.01, 8), 3)
    0.08
    """
    per_call, per_task, per_byte = overhead if overhead is not None else executor.overhead()
    tasks = _n_tasks(n, executor.n_workers, t, per_task, result_bytes > BIG_RESULT)
    workers = executor.n_workers if cores is None else max(1.0, min(executor.n_workers, cores))
    return n * t / workers + per_call + tasks * per_task + n * result_bytes * per_byte


def free_cores(n_workers: int) -> float:
    """How many of ``n_workers`` would get a core: the usable cores less those busy with
    other work (the one-minute load average less this caller's own, which the workers
    take over), at least one.

    >>> 1 <= free_cores(2) <= 2
    True
    """
    try:
        busy = max(0.0, os.getloadavg()[0] - 1.0)
    except (AttributeError, OSError):  # no load average (Windows): assume the cores are free
        busy = 0.0
    return max(1.0, min(float(n_workers), usable_cpu_count() - busy))


def _n_tasks(n, n_workers, t, per_task, one_each=False):
    if one_each or t <= 0 or n <= n_workers:
        return n
    n_tasks = math.ceil(n / max(group_size(t), math.ceil(TASK_WORK * per_task / t)))
    return min(n, n_workers * math.ceil(n_tasks / n_workers))


def batches(n: int, n_workers: int, t: float, per_task: float, one_each: bool = False) -> list[range]:
    """Chunks ``0..n-1`` in tasks of consecutive chunks: each with a group's work at least
    (``group_size``: a task's chunks are traced together, and each tape has a cost of its
    own) and ``TASK_WORK`` times the per-task overhead, as many tasks as a multiple of the
    workers (every worker gets as many), sizes differing by at most one; ``one_each``: a
    chunk a task.

    >>> [len(b) for b in batches(13, 2, 1e-3, 2e-4)]
    [4, 3, 3, 3]
    >>> [len(b) for b in batches(16, 2, 1.0, 2e-4)]
    [1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]
    """
    n_tasks = _n_tasks(n, n_workers, t, per_task, one_each)
    size, extra = divmod(n, n_tasks)
    out, start = [], 0
    for k in range(n_tasks):
        stop = start + size + (k < extra)
        out.append(range(start, stop))
        start = stop
    return out


def group_size(t, one_each=False):
    """How many consecutive chunks of ``t`` seconds a call of the chunk function takes:
    those traced together on one tape hold up to ``GROUP_SECONDS`` of work; one when
    ``t`` is unknown, or each result is big (a dense cotangent).

    >>> group_size(1e-4), group_size(0.1), group_size(None)
    (50, 1, 1)
    """
    return 1 if one_each or not t else max(1, int(GROUP_SECONDS / t))


def task_batches(executor: executors.Executor, n: int, t: float, one_each: bool = False) -> list[range]:
    """``batches`` of ``n`` chunks of ``t`` seconds for ``executor``'s workers, at its
    measured per-task overhead (none counted while its workers still start).

    >>> [len(b) for b in task_batches(executors.SerialExecutor(), 3, 1e-3)]  # one worker: one task
    [3]
    """
    per_task = executor.overhead()[1] if executor.ready() else 0.0
    return batches(n, executor.n_workers, t, per_task, one_each)


def resolve_dispatch(api: str, dispatch: Any = None) -> str:
    """The dispatch setting in force ("auto" or "always"): ``dispatch`` where given, else
    ``executors.config(dispatch=...)``'s, else the environment's (see
    ``executors.resolve_dispatch``); a wrong one raises an error naming ``api``.

    >>> resolve_dispatch("psum"), resolve_dispatch("psum", "always")
    ('auto', 'always')
    """
    try:
        return executors.resolve_dispatch(dispatch)
    except ValueError as e:
        raise ValueError(f"{api}: {e}") from None


def format_seconds(s):
    """``12.3 ms``: three digits, in s, ms or µs.

    >>> format_seconds(1.0312), format_seconds(0.0604), format_seconds(4.2e-5)
    ('1.03 s', '60.4 ms', '42 µs')
    """
    if s >= 0.9995:
        return f"{s:.3g} s"
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} µs"
