"""Where chunk work runs: on the executor, or inline when parallel would not pay.

    run(executor, fn, items, shared, site=..., dispatch="auto")
      dispatch="always"       every chunk on the executor
      first call of a site    chunk 0 inline, timed ─ would the rest gain on the executor?
                              yes: the rest of this same call goes there, as soon as
                              chunk 0's time so far shows it (a probe: no worker waits
                              for chunk 0)
                              threads: chunks 0..n_workers-1 timed on the pool instead
      later calls             decided from what the site measured: CPU seconds per chunk
                              (inline loops, or the workers' own clocks)
      worth it  ⟺  work / workers + dispatch (per task, per call, start-up) < work / MARGIN
      a parallel run slower (wall clock) than the loop it replaced (its wall clock too:
      other jobs slow both alike) is a loss: two in a row send the site inline, the
      second once a loop timed on the next call agrees (the machine's speed moves
      between calls), with a parallel try every RETRY_EVERY calls, twice as long a wait
      after each further loss; every RECHECK_EVERY parallel runs, one call times the
      loop again
      work that changed (a chunk WORK_CHANGED times heavier or lighter than the site's
      estimate: the same f on other data) starts the site over, losses forgotten:
        inline run       chunk 0 timed on its own; grew ─ the rest decided as on a first call
        one pass         cannot stop half-way: the next call times its chunk 0 alone
        parallel run     the workers' clocks are the new estimate (shrank: inline next call)

Processes that are not up yet count their start-up in the estimate; when only the
start-up stands in the way, they are started in the background for the next call.
Every decision is logged on the ``adrules.schedule`` logger at DEBUG level, one record
per phase (see ``describe``). Only *where* chunks run depends on timing: every chunk
does the same operations wherever it runs, so results are bitwise identical whatever
is decided.
"""

from __future__ import annotations

import concurrent.futures
import contextvars
import itertools
import logging
import math
import os
import sys
import threading
import time

import executors
from executors import _abandon
from executors._blas import blas_pinned
from executors.base import SerializationError, call_inline

from .callables import code_of
from .registry import travelling_rules

logger = logging.getLogger("adrules.schedule")

COLD_MARGIN = 2.0  # chunk 0 of a first call may take this much longer than a warm chunk
MARGIN = 1.25  # parallel must beat the loop by this factor before it is chosen
FIRST_CONTACT_CALLS = 20  # see first_contact_seconds
RETRY_EVERY = 20  # calls: how often a call site that lost in parallel tries again (at first)
# A chunk this many times heavier or lighter than a call site's estimate means its work
# changed (the same f on other data: a smoke test on a few rows, then the real run):
# what the site learnt, losses included, no longer applies.
WORK_CHANGED = 4.0
RECHECK_EVERY = 100  # parallel runs: then one call times a loop again (the machine's load moves)
LOSS_MARGIN = 1.05  # a parallel run slower than this times the loop is a loss
# One pass over every chunk holds every chunk's state at once (one tape, one cotangent of a
# shared argument per chunk), where chunk by chunk holds one: only for tiny work, whose
# cost is the per-chunk machinery, and few chunks (extra memory: a few MB at most).
ONE_PASS_SECONDS = 2e-4  # CPU seconds per chunk
# A task's fixed cost on worker processes is more than dispatch_cost says once they are
# busy: every result wakes the caller's threads, which then compete with the workers for
# the cores. The small ensemble (16 chunks of ~1.3 ms) on 2 processes, by chunks per
# task 1/2/4/8: 0.85/1.05/1.16/1.25x over the serial loop (interleaved in one process);
# at 10 ms it got 4 tasks, at 25 ms 2. Threads gained alike, 1.07/1.16/1.24/1.27x (each
# result also takes the GIL from the workers), where results are small (see _tasks).
TASK_SECONDS = 0.025
# set by run() for its call: no chunk result holds a big array (read by _tasks, also from
# the probe's thread, which runs in a copy of the caller's context)
_SMALL_RESULTS = contextvars.ContextVar("adrules_small_results", default=False)
ONE_PASS_CHUNKS = 32
PRELOAD = ("adrules",)  # what starting worker processes import ahead of the first chunk

_SERIAL = executors.SerialExecutor()


class _Timed:
    """``fn`` over a batch of items, returning ``(result, CPU seconds, end)`` for each,
    ``end`` read from ``time.perf_counter``, which every process of this machine shares
    (picklable: a module-level class)."""

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, batch, *shared):
        out = []
        for item in batch:
            if out and executors.abandoned():  # the map raised: its caller reads nothing more
                break
            t0 = time.thread_time()
            try:
                result = self.fn(item, *shared)
            except (Exception, SystemExit) as e:
                try:  # which chunk of the batch: _map_in_tasks names it (pickled with e)
                    e.adrules_chunk_in_task = len(out)
                except Exception:  # pragma: no cover - an exception without __dict__
                    pass
                raise
            out.append((result, time.thread_time() - t0, time.perf_counter()))
        return out

    def __reduce__(self):
        # the rules users registered go with the work, registered on the worker first
        return (_timed_with_rules, (self.fn, travelling_rules()))


def _timed_with_rules(fn, rules):
    return _Timed(fn)  # (``rules`` registered them as it was unpickled)


def _tasks(n, n_workers, chunk_seconds, dispatch_cost, shares_memory=False):
    """How many consecutive chunks go in one task: enough that a task outweighs its
    dispatch ~10 times; where each task carries the shared data to another process, at
    least ``TASK_SECONDS`` of work and at most ~4 tasks a worker; on threads, at least
    ``TASK_SECONDS`` only when the call's results are small (a task's results are held
    until its last chunk ends: tasks of several chunks of a shared argument's gradient
    held 5x its size where one a chunk held 3x); yet every worker gets work. Grouping
    changes only which worker runs a chunk. With no estimate yet (``chunk_seconds`` 0),
    ~4 tasks a worker."""
    if not chunk_seconds:
        return max(1, -(-n // (4 * n_workers)))
    per_task = max(1, int(10 * dispatch_cost / chunk_seconds))
    if not shares_memory or _SMALL_RESULTS.get():
        per_task = max(per_task, int(TASK_SECONDS / chunk_seconds))
    if not shares_memory:
        per_task = max(per_task, -(-n // (4 * n_workers)))
    return min(per_task, -(-n // n_workers))


def _parties(executor, caller_helps=True):
    """How many run a parallel phase's chunks side by side: the workers, and the calling
    thread where the executor lets it take a share (``map``'s ``caller_share``) rather
    than wait, beside as many workers as the executor then uses."""
    if not (caller_helps and _caller_may_help(executor)):
        return executor.n_workers
    return executor.workers_beside_caller() + 1


def _caller_may_help(executor):
    return getattr(executor, "caller_helps", False)


def _batches(items, per_task, n_workers):
    """``items`` in consecutive batches of about ``per_task``: as many batches as tasks of
    ``per_task`` take, rounded up to a multiple of the workers, sizes differing by at most
    one, so that every worker gets as many chunks (13 chunks in tasks of 2: 7 tasks, 8
    chunks on one worker and 6 on the other; in 8 tasks of 1 or 2, 7 and 6).

    >>> [len(b) for b in _batches(list(range(13)), 2, 2)]
    [2, 2, 2, 2, 2, 1, 1, 1]
    """
    n = len(items)
    n_tasks = -(-n // per_task)
    if n_tasks > n_workers and n_tasks % n_workers:
        n_tasks = min(n, n_tasks + n_workers - n_tasks % n_workers)
    size, extra = divmod(n, n_tasks)
    out, start = [], 0
    for t in range(n_tasks):
        stop = start + size + (t < extra)
        out.append(items[start:stop])
        start = stop
    return out


def parallel_seconds(executor, chunk_seconds, n, result_bytes=0):
    """Estimated wall clock of ``n`` chunks on ``executor``: the work shared by the
    workers, plus dispatch per task (tasks spread over the workers), per call, the
    workers' start-up while they are not up, and bringing back results of
    ``result_bytes`` a chunk from workers that do not share memory (the caller receives
    them one after another: a dense gradient of a 95 MB shared argument from each of 8
    chunks took 2.9 s on 2 processes, against 0.59 s inline).

    >>> ex = executors.ProcessExecutor(2)
    >>> parallel_seconds(ex, 0.1, 8, result_bytes=10**8) > 8 * 0.1
    True
    """
    workers = executor.n_workers
    n_tasks = -(-n // _tasks(n, _parties(executor), chunk_seconds, executor.dispatch_cost,
                             executor.shares_memory))
    startup = 0.0 if executor.ready() else executor.startup_cost
    results = n * result_bytes / executor.bytes_per_second if result_bytes and not executor.shares_memory else 0.0
    return (chunk_seconds * n / workers + executor.dispatch_cost * math.ceil(n_tasks / workers)
            + executor.call_cost + startup + results)


def first_contact_seconds(executor):
    """What workers in other processes add the first time a call site's work reaches
    them (unpickling ``f``, running it cold): ``FIRST_CONTACT_CALLS`` map calls' worth.
    Counted on a call site's first call only: a one-off call pays it in full, a call
    site called again shares it among its calls. Measured: the small ensemble's first
    call on 2 processes took 16-17 ms over its steady 28 ms (ms-cheap map calls: 20 of
    them), and a one-off call of ~30 ms of work ran 1.5x slower in parallel than inline."""
    return 0.0 if executor.shares_memory else FIRST_CONTACT_CALLS * executor.call_cost


class _Site:
    """What one call site has learnt about its chunks on one executor."""

    __slots__ = ("chunk_seconds", "measured_inline", "losses", "calls", "parallel_runs", "time_a_loop",
                 "inline_runs", "inline_walls", "watch_chunk_0", "suspect", "result_bytes", "caller_shares")

    def __init__(self):
        self.chunk_seconds = None  # CPU seconds of one chunk
        self.measured_inline = False  # chunk_seconds comes from an uncontended loop
        self.losses = self.calls = self.parallel_runs = 0
        self.time_a_loop = False  # the next call runs inline, to judge parallel against it
        self.inline_runs = []  # CPU seconds per chunk of the last 3 inline runs
        self.inline_walls = []  # and their wall-clock seconds per chunk
        self.watch_chunk_0 = False  # a one pass ran heavy: the next call times chunk 0 alone
        self.suspect = None  # wall seconds per chunk of a parallel run that looked like a loss
        self.result_bytes = 0  # of one chunk's result, as the caller told (see parallel_seconds)
        self.caller_shares = []  # the share of the chunks the caller should take, last 3 runs

    def record_inline(self, cpu_seconds, n, wall_seconds):
        # The median of the last three: one run slowed down (a garbage collection, a
        # preempted core: 7x seen on tiny work) would otherwise send the next call to the
        # workers, and its loss start a series of parallel retries.
        self.chunk_seconds, self.measured_inline = _last_three(self.inline_runs, cpu_seconds / n), True
        _last_three(self.inline_walls, wall_seconds / n)
        if self.suspect is not None:  # the loop timed right after a parallel run: the verdict
            lost, self.suspect = self.suspect > LOSS_MARGIN * wall_seconds / n, None
            self.losses = self.losses + 1 if lost else 0

    def start_over(self, chunk_seconds, measured_inline):
        """The work changed: decide from ``chunk_seconds`` alone, as if on a first call
        (losses and older runs were of other work)."""
        self.chunk_seconds, self.measured_inline = chunk_seconds, measured_inline
        self.inline_runs = [chunk_seconds] if measured_inline else []
        self.inline_walls = []
        self.losses, self.time_a_loop, self.watch_chunk_0, self.suspect = 0, False, False, None
        self.caller_shares = []

    def record_parallel(self, wall, cpu_seconds, n, first_on_workers, n_workers=2):
        """Judge a parallel run against the loop it replaced."""
        self.parallel_runs += 1
        if first_on_workers:  # workers unpickling, importing, caching data: no verdict
            if not self.measured_inline:
                self.chunk_seconds = cpu_seconds / n
            return
        if self.measured_inline and _work_changed(cpu_seconds / n, self.chunk_seconds):
            # the loop this run replaced was of other work: no verdict; the workers'
            # clocks are the estimate (tiny work after heavy goes inline next call)
            self.start_over(cpu_seconds / n, measured_inline=False)
            return
        if not self.measured_inline:
            # Only the workers' clocks so far, and chunks running side by side overstate
            # what a loop would cost (shared caches, memory bandwidth, the GIL's hand-offs).
            # A clear gain stands on its own; an unclear one is judged against a timed loop.
            self.chunk_seconds = cpu_seconds / n
            if cpu_seconds < 0.7 * n_workers * wall:
                self.time_a_loop = True
            return
        # wall clock against wall clock: other jobs on the machine slow both alike (against
        # the loop's CPU time, a busy spell counted every parallel run as a loss, and the
        # small ensemble's 1.3x on threads went inline for good)
        loop = _median(self.inline_walls) if self.inline_walls else self.chunk_seconds
        if wall <= LOSS_MARGIN * loop * n:
            self.losses, self.suspect = 0, None
        elif self.losses == 0:
            self.losses = 1
        else:
            # A loss that would send the site inline, against loops timed earlier, maybe
            # at another speed of the machine (the small ensemble's serial gradient took
            # 18 ms, then 31 ms a call later): the next call times a loop, which decides.
            self.suspect, self.time_a_loop = wall / n, True
            return
        if self.parallel_runs % RECHECK_EVERY == 0:  # a loop timed in a busy spell
            self.time_a_loop = True                   # must not stand for good


def _last_three(runs, value):
    """Append ``value`` to ``runs``, keep the last three, return their median."""
    runs.append(value)
    if len(runs) > 3:
        del runs[0]
    return _median(runs)


def _median(runs):
    return sorted(runs)[(len(runs) - 1) // 2]


_sites: dict = {}
_lock = threading.Lock()


def forget() -> None:
    """Forget what every call site has learnt (the next call of each is a first call).

    >>> forget()
    """
    with _lock:
        _sites.clear()


def _site(key):
    site = _sites.get(key)  # a dict read needs no lock: only making a site does
    if site is not None:
        return site
    with _lock:
        site = _sites.get(key)
        if site is None:
            if len(_sites) > 1024:  # call sites come and go (lambdas): stay bounded
                _sites.clear()
            site = _sites[key] = _Site()
        return site


def run(executor, fn, items, shared=(), *, key=None, dispatch="auto", on_result=None,
        progress=False, label="", about=None, small_results=False, result_bytes=0):
    """``[fn(item, *shared) for item in items]`` on ``executor`` or inline, whichever is
    faster for this call site (``key``), in item order.

    ``on_result(i, result)`` is called in item order as results arrive, and what it
    returns is kept instead (see ``Executor.map``). ``label`` and ``about`` (the user's
    function) name the phase in the log. ``small_results``: no result holds a big array
    (a shared argument's cotangent), so tasks of several chunks may hold some at once
    on threads too (see ``_tasks``). ``result_bytes``: the size of each result where the
    caller knows it beforehand (a shared argument's dense cotangent), weighed against
    sending the work to workers that do not share memory.

    >>> run(executors.SerialExecutor(), lambda i, k: i * k, [1, 2, 3], (10,))
    [10, 20, 30]
    """
    bar = _progress_bar(progress, len(items), label)
    on_done = (lambda i: bar.update(1)) if bar is not None else None
    log = logger.isEnabledFor(logging.DEBUG)
    t0 = time.perf_counter()
    small = _SMALL_RESULTS.set(small_results)
    try:
        if not items:
            return []
        site = _site((key, fn, executor.name, executor.n_workers))
        site.result_bytes = result_bytes
        out, where, why = _auto(site, executor, _Timed(fn), items, shared, on_done, on_result,
                                always=dispatch == "always")
        if log:
            _log(label, about, len(items), where, why, time.perf_counter() - t0)
        return out
    finally:
        _SMALL_RESULTS.reset(small)
        if bar is not None:
            bar.close()


def run_in_one_pass(executor, fn, n, work, *, key=None, dispatch="auto", progress=False,
                    label="", about=None):
    """``(True, work())`` when the schedule would run all ``n`` chunks of ``fn`` inline on
    this call anyway (the call site has an estimate, and dispatch would not pay) and the
    work is tiny (at most ``ONE_PASS_CHUNKS`` chunks of ``ONE_PASS_SECONDS``), with
    ``work`` doing all of them in one pass, in chunk order; ``(False, None)`` and nothing
    run otherwise (then ``run`` decides chunk by chunk). ``work`` runs as inline chunks
    do: in this thread, as worker context, BLAS pinned. Its time teaches the site as an
    inline loop does, and it is logged like one.

    >>> run_in_one_pass(executors.SerialExecutor(), abs, 3, lambda: "all three")
    (False, None)
    """
    if dispatch == "always" or progress or not n or n > ONE_PASS_CHUNKS:
        return False, None
    site = _site((key, fn, executor.name, executor.n_workers))
    if site.chunk_seconds is None:  # a first call: chunk 0 is timed on its own
        return False, None
    if site.chunk_seconds > ONE_PASS_SECONDS or site.watch_chunk_0:
        return False, None
    parallel, why = _wants_parallel(site, executor, n)
    if parallel:
        return False, None
    site.calls += 1
    t0, c0 = time.perf_counter(), time.thread_time()
    try:
        out = call_inline(work)  # as an inline map of one item runs it, for less
    except (Exception, SystemExit) as e:  # its note spoke of "item 0 of 1": the one pass's chunks are all
        notes = getattr(e, "__notes__", None)
        if isinstance(notes, list) and notes and str(notes[-1]).startswith("executors: raised by item 0 of 1"):
            notes[-1] = f"executors: raised while the call's {n} chunks ran inline, in one pass"
        raise
    cpu, wall = time.thread_time() - c0, time.perf_counter() - t0
    # A one pass cannot stop half-way when the work grew (the same f on bigger data): the
    # next call times its chunk 0 alone and sends the rest to the workers if so. Not at
    # once from this time: a garbage collection in a tiny run looks the same.
    site.watch_chunk_0 = cpu > WORK_CHANGED * site.chunk_seconds * n
    site.record_inline(cpu, n, wall)
    if logger.isEnabledFor(logging.DEBUG):
        _log(label, about, n, "inline", why, wall)
    return True, out


def _auto(site, executor, timed, items, shared, on_done, on_result, always=False):
    """Run on the executor or inline as the site's estimate says (``always``: on the
    executor); learn from it."""
    site.calls += 1
    if site.chunk_seconds is None and not always:
        return _first_call(site, executor, timed, items, shared, on_done, on_result)
    parallel, why = (True, "dispatch='always'") if always else _wants_parallel(site, executor, len(items))
    if not parallel:
        return _inline_watching_chunk_0(site, executor, timed, items, shared, on_done, on_result, why)
    out, where = _parallel(site, executor, timed, items, shared, on_done, on_result)
    return out, where, why


def _inline_watching_chunk_0(site, executor, timed, items, shared, on_done, on_result, why):
    """An inline run whose chunk 0 is timed on its own. When it shows that the work grew
    (``WORK_CHANGED`` times the site's estimate: the same f on a few rows, then on the
    real data), what the site learnt, losses included, was of other work: it starts over
    from chunk 0's time, and the rest goes where that says, as on a first call. Also the
    call after a one pass that ran heavy (``watch_chunk_0``), whose time it then does not
    record: chunk by chunk is not what a one pass costs."""
    after_one_pass, site.watch_chunk_0 = site.watch_chunk_0, False
    if len(items) < 2 or executor.n_workers < 2 or executors.in_worker():
        return _inline(site, timed, items, shared, on_done, on_result, 0, len(items)), "inline", why
    with blas_pinned():  # outside the clock (see _inline)
        w0, t0 = time.perf_counter(), time.thread_time()
        done = _serial_map(timed.fn, items[:1], 0, len(items), shared, on_done, on_result)
        chunk0 = time.thread_time() - t0
    # Counted from 4x one pass's limit up: a chunk timed alone costs tiny work ~10x its
    # share of a one pass (which taught the estimate), and a garbage collection in a tiny
    # chunk is no change of work either.
    if chunk0 > WORK_CHANGED * max(site.chunk_seconds, ONE_PASS_SECONDS, executor.call_cost):
        site.start_over(chunk0, measured_inline=True)
        rest, where, why = _rest_after_timed_chunks(site, executor, timed, items[1:], 1, shared, on_done,
                                                    on_result)
        return done + rest, f"chunk 0 inline ({_seconds(chunk0)}: the work grew), then {where}", why
    t1 = time.thread_time()
    rest = _serial_map(timed.fn, items[1:], 1, len(items), shared, _shift(on_done, 1),
                       _shift_result(on_result, 1))
    if not after_one_pass:  # chunk by chunk, tiny work costs several times its one pass
        site.record_inline(chunk0 + time.thread_time() - t1, len(items), time.perf_counter() - w0)
    return done + rest, "inline", why


def _work_changed(chunk_seconds, estimate):
    return chunk_seconds > WORK_CHANGED * estimate or chunk_seconds * WORK_CHANGED < estimate


def _first_call(site, executor, timed, items, shared, on_done, on_result):
    """A call site's first call: chunk 0 runs inline, timed, and decides where the rest
    goes. Meanwhile, as soon as chunk 0's time so far shows that the rest would gain on
    the workers, the rest goes to them (``_Probe``): heavy work keeps every worker busy
    from the start (waiting for a cold chunk 0, 0.15-0.4 s, cost a heavy first call up to
    a third), tiny work never leaves this thread."""
    if executor.shares_memory and executor.n_workers > 1 and not executors.in_worker():
        return _first_call_on_threads(site, executor, timed, items, shared, on_done, on_result)
    probe = _Probe.start(executor, timed, items[1:], shared, on_done, on_result, site.result_bytes)
    try:
        (first_pair,), = _serial_map(timed, [items[:1]], 0, len(items), shared)  # timed around fn alone
    except BaseException:
        if probe is not None:
            probe.abandon()
        raise
    sent = probe is not None and probe.stop()
    site.chunk_seconds = first_pair[1] / COLD_MARGIN
    try:
        if on_done is not None:
            on_done(0)
        done = [first_pair[0] if on_result is None else on_result(0, first_pair[0])]
        if sent:
            rest = probe.hand_on()
    except BaseException:
        if sent:
            probe.abandon()
        raise
    if sent:
        site.record_parallel(time.perf_counter() - probe.t0, probe.cpu_seconds, len(rest),
                             site.parallel_runs == 0, executor.n_workers)
        where = f"chunk 0 inline, the other {_placement(executor, len(rest), probe.n_tasks)} while it ran"
        return done + rest, where, probe.why
    if len(items) == 1:
        return done, "inline", "one chunk"
    rest, where, why = _rest_after_timed_chunks(site, executor, timed, items[1:], 1, shared, on_done,
                                          on_result)
    return done + rest, "chunk 0 inline, then " + where, why


def _first_call_on_threads(site, executor, timed, items, shared, on_done, on_result):
    """A first call on workers that share this process's memory: chunks 0..n_workers-1
    run on them, timed, and decide where the rest goes. Not chunk 0 inline, as on
    processes: a cold heavy chunk in the calling thread took 0.28 s where one on a pool
    thread took 0.16 s (glibc's main arena returns freed memory to the system, thread
    arenas keep it), and two alongside it 0.48 s each. What it costs tiny work, once: a
    round trip to the pool threads (~0.1 ms)."""
    k = min(executor.n_workers, len(items))
    cpu = []

    def take(i, pairs):
        (result, seconds, _), = pairs
        cpu.append(seconds)
        return result if on_result is None else on_result(i, result)

    done = executor.map(timed, [[item] for item in items[:k]], shared=shared, on_done=on_done,
                        on_result=take)
    site.chunk_seconds = sum(cpu) / k / COLD_MARGIN
    head = f"chunk{'s 0-' if k > 1 else ' '}{k - 1} on {executor.name}:{executor.n_workers}"
    if len(items) == k:
        return done, head, "one chunk a worker"
    rest, where, why = _rest_after_timed_chunks(site, executor, timed, items[k:], k, shared, on_done,
                                          on_result)
    return done + rest, f"{head}, then {where}", why


def _rest_after_timed_chunks(site, executor, timed, rest, offset, shared, on_done, on_result):
    """``(results, where, why)`` of chunks ``offset..`` of a call whose chunks before
    them were just timed (a first call, or work that grew), decided from that time."""
    parallel, why = _wants_parallel(site, executor, len(rest))
    on_done, on_result = _shift(on_done, offset), _shift_result(on_result, offset)
    if not parallel:
        return _inline(site, timed, rest, shared, on_done, on_result, offset, offset + len(rest)), "inline", why
    out, where = _parallel(site, executor, timed, rest, shared, on_done, on_result, offset)
    return out, where, why


def _inline(site, timed, items, shared, on_done, on_result, first, total):
    """Chunks ``first..`` of the call's ``total``, inline; their time teaches the site."""
    with blas_pinned():  # outside the clocks: pinning may rescan the libraries (1 ms)
        w0, t0 = time.perf_counter(), time.thread_time()  # read for the lot, not per item
        out = _serial_map(timed.fn, items, first, total, shared, on_done, on_result)
        site.record_inline(time.thread_time() - t0, len(items), time.perf_counter() - w0)
    return out


def _serial_map(fn, items, first, total, shared, on_done=None, on_result=None):
    """``_SERIAL.map`` of chunks ``first..`` of a call's ``total``; an error's note names
    the chunk among them all, run inline (the serial map's own named its item among
    these only, "on the 'serial' executor", whatever executor the user chose)."""
    try:
        return _SERIAL.map(fn, items, shared=shared, on_done=on_done, on_result=on_result)
    except (Exception, SystemExit) as e:
        notes, k = getattr(e, "__notes__", None), getattr(e, "executors_item_index", None)
        if isinstance(notes, list) and k is not None and notes and str(notes[-1]).startswith(
                "executors: raised by item "):
            notes[-1] = f"executors: raised by chunk {first + k} of {total}, run inline"
            e.executors_item_index = first + k
        raise


def _parallel(site, executor, timed, items, shared, on_done, on_result, first=0):
    """``(results, where they ran)`` of ``items`` (chunks ``first..`` of the call) on the
    executor, grouped in tasks of consecutive chunks; the run teaches the site."""
    per_task = _tasks(len(items), _parties(executor), site.chunk_seconds or 0.0, executor.dispatch_cost,
                      executor.shares_memory)
    first_on_workers = site.parallel_runs == 0 and not executor.shares_memory
    t0 = time.perf_counter()
    # (the workers' first contact with the site's work, slow as they unpickle it and run
    # it cold, says nothing of their pace)
    shares = list(site.caller_shares) if first_on_workers else site.caller_shares
    out, n_tasks, cpu, in_caller = _map_in_tasks(executor, timed, items, shared, per_task, on_done, on_result,
                                                 first, shares=shares)
    site.record_parallel(time.perf_counter() - t0, cpu, len(items), first_on_workers, executor.n_workers)
    return out, _placement(executor, len(items), n_tasks, in_caller)


def _map_in_tasks(executor, timed, items, shared, per_task, on_done, on_result, first=0, shares=None):
    """``(results, tasks, CPU seconds, chunks the caller ran)`` of ``timed`` over ``items``
    (chunks ``first..`` of the call) on the executor, in tasks of consecutive chunks
    (``_batches``); ``on_done(i)`` and ``on_result(i, r)`` per chunk, ``i`` counted in
    ``items``. Given ``shares`` (the call site's last balanced shares of the caller, this
    run's appended), the calling thread runs the first task itself where the executor
    lets it, their median share of the chunks (an even one while there are none), and
    the workers the rest."""
    callers = int(shares is not None and _caller_may_help(executor))
    parties = _parties(executor, bool(callers))
    t0 = time.perf_counter()
    if callers:
        # one task a party: a worker of ProcessExecutor's lane gets its next task only
        # once the calling thread has read its last result, and a caller busy with its own
        # share leaves it idle meanwhile (the heavy hvp on processes took 3.3 s in 4 tasks
        # a worker, 1.6 s in one). A map from a thread that only waits (a first call's
        # probe) keeps the tasks _tasks gives: their dynamic balance evens out the worker
        # that shares a core with chunk 0 (heavy first call, 8 runs each: 0.55 s against
        # 0.65 s in one task a worker)
        batches = _caller_first(items, parties - 1, _median(shares) if shares else 1 / parties)
    else:
        batches = _batches(items, per_task, parties)
    starts = list(itertools.accumulate(map(len, batches[:-1]), initial=0))
    cpu = [0.0]
    ends = [t0] * len(batches)  # when each task's last chunk ended

    def batch_result(b, pairs):
        out = []
        for k, (result, seconds, end) in enumerate(pairs):
            cpu[0] += seconds
            ends[b] = end
            out.append(result if on_result is None else on_result(starts[b] + k, result))
        return out

    def batch_done(b):
        if on_done is not None:
            for k in range(len(batches[b])):
                on_done(starts[b] + k)

    try:
        parts = executor.map(timed, batches, shared=shared, on_done=batch_done, on_result=batch_result,
                             caller_share=callers)
    except SerializationError as e:
        task = getattr(e, "executors_item_index", None)
        if task is None or getattr(e, "what", None) != f"the result of item {task}":
            raise
        # the task's result is a list the user never made: speak of f's values
        first, last = starts[task], starts[task] + len(batches[task]) - 1
        chunks = f"chunk {first}" if first == last else f"chunks {first}..{last}"
        raise SerializationError(
            f"f's value in {chunks} could not be pickled to come back from a "
            f"worker of the {executor.name!r} executor: {e.reason}. Return only what pickles "
            f"(numbers, arrays, containers of them), or use the 'threads' executor.") from e
    except (Exception, SystemExit) as e:
        _name_the_chunk(e, [first + start for start in starts], first + len(items))
        raise
    if callers and len(batches) > 1:
        _last_three(shares, _balanced_share(len(batches[0]), ends[0] - t0, len(items), max(ends[1:]) - t0))
    return [r for part in parts for r in part], len(batches), cpu[0], len(batches[0]) if callers else 0


def _balanced_share(mine, my_seconds, n, seconds):
    """The share of ``n`` chunks at which the caller, done with ``mine`` of them after
    ``my_seconds``, and the workers, done with the others after ``seconds``, end together
    at the paces they showed (clocks start as the map does: the caller's share begins
    after it sent the tasks, a worker's after it read one). Heavy chunks took 69 ms in the
    caller against 52 ms on the worker beside it: the caller's untuned malloc gives big
    temporaries back to the system and faults them in again.

    >>> round(_balanced_share(8, 0.55, 16, 0.41), 2)  # the heavy ensemble: 7 of 16 next
    0.43
    """
    if my_seconds <= 0 or seconds <= 0:
        return mine / n
    mine_pace, their_pace = mine / my_seconds, (n - mine) / seconds
    return mine_pace / (mine_pace + their_pace)


def _caller_first(items, n_workers, share):
    """``items`` in one batch of about ``share`` of them for the caller, then one for each
    worker; each gets one at least (the caller the first, where there are too few).

    >>> [len(b) for b in _caller_first(list(range(16)), 1, 0.5)]
    [8, 8]
    >>> [len(b) for b in _caller_first(list(range(16)), 1, 0.43)]
    [7, 9]
    >>> [len(b) for b in _caller_first(list(range(9)), 2, 0.2)]
    [2, 4, 3]
    >>> [len(b) for b in _caller_first(list(range(2)), 2, 0.2)]
    [1, 1]
    """
    n = len(items)
    if n <= n_workers + 1:
        return [[item] for item in items]
    mine = min(max(1, round(n * share)), n - n_workers)
    rest = items[mine:]
    return [items[:mine], *_batches(rest, -(-len(rest) // n_workers), n_workers)]


def _name_the_chunk(e, starts, n):
    """The executor's note names the task that raised ("item 5 of 8"), one of the
    batches of chunks the user never made: name the chunk instead, as an inline run does."""
    task, k = getattr(e, "executors_item_index", None), getattr(e, "adrules_chunk_in_task", None)
    notes = getattr(e, "__notes__", None)
    if task is None or k is None or not isinstance(notes, list) or not 0 <= task < len(starts):
        return
    chunk = starts[task] + k
    for i, note in enumerate(notes):
        if isinstance(note, str) and note.startswith(f"executors: raised by item {task} of "):
            notes[i] = f"executors: raised by chunk {chunk} of {n}" + note[note.index(" in a map"):]
            e.executors_item_index = chunk


class _Probe:
    """The chunks after chunk 0 of a first call, sent to the workers from a helper thread
    while chunk 0 still runs, as soon as the CPU time chunk 0 has taken so far proves
    that they would gain there (the estimate of later decisions, fed with that lower
    bound). Looked at after two round trips' worth of time (``grace``), then each time
    chunk 0's time so far doubles: tiny work is over before the first look.

    Their results are handed on in chunk order after chunk 0's: those that arrive while
    chunk 0 runs wait in ``early`` (at most what the workers finish meanwhile), then
    ``hand_on`` passes them on and lets the helper thread pass on the rest as they come.
    ``stop()`` after chunk 0 says whether they were sent."""

    _pool = None
    _pool_lock = threading.Lock()

    def __init__(self, executor, timed, items, shared, on_done, on_result, result_bytes=0):
        self.executor, self.timed, self.items, self.shared = executor, timed, items, shared
        self.result_bytes = result_bytes
        self.on_done, self.on_result = on_done, on_result
        self.grace = 2 * (executor.call_cost + executor.dispatch_cost)
        self.chunk0_seconds = _cpu_clock_of_this_thread()  # () -> CPU seconds of chunk 0 so far
        self.chunk0_done = threading.Event()
        self.lock = threading.Lock()
        self.sent = self.stopped = self.open = self.abandoned = False
        self.early, self.values = [], {}
        self.t0 = self.cpu_seconds = 0.0
        self.n_tasks, self.why, self.future = 0, None, None
        self.stopper = _abandon.Stopper()  # abandon() stops the map sent, on its workers too

    @classmethod
    def start(cls, executor, timed, items, shared, on_done, on_result, result_bytes=0):
        """A probe watching chunk 0, or None where none can pay: one worker, workers not
        up, nothing after chunk 0, or inside chunk work."""
        if not items or executor.n_workers < 2 or not executor.ready() or executors.in_worker():
            return None
        probe = cls(executor, timed, items, shared, on_done, on_result, result_bytes)
        context = contextvars.copy_context()  # the caller's executors.config travels with it
        probe.future = cls._threads().submit(context.run, probe._run)
        return probe

    @classmethod
    def _threads(cls):
        with cls._pool_lock:
            if cls._pool is None:
                cls._pool = concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="adrules-probe")
            return cls._pool

    def _run(self):
        self.stopper.use()  # (in the context copied for this thread)
        n, wait = len(self.items), self.grace
        while not self.chunk0_done.wait(wait):
            so_far = self.chunk0_seconds()
            lower = so_far / COLD_MARGIN  # a warm chunk takes at least this long
            parallel = (parallel_seconds(self.executor, lower, n, self.result_bytes)
                        + first_contact_seconds(self.executor))
            if parallel * MARGIN < lower * n:
                self.why = _Estimate(lower * n, parallel, self.executor.name)
                break
            wait = max(so_far, self.grace)  # look again when chunk 0 has run twice as long
        else:
            return
        with self.lock:
            if self.stopped:
                return
            self.sent, self.t0 = True, time.perf_counter()
        ex = self.executor
        per_task = _tasks(n, ex.n_workers, lower, ex.dispatch_cost, ex.shares_memory)
        _, self.n_tasks, self.cpu_seconds, _ = _map_in_tasks(ex, self.timed, self.items, self.shared, per_task,
                                                             _shift(self.on_done, 1), self._arrived, 1)

    def _arrived(self, j, result):
        """Chunk ``1 + j``'s result, in chunk order, in the helper thread (kept in
        ``values`` once handed on)."""
        with self.lock:
            if self.abandoned:  # stop the map: the caller is gone
                raise _Abandoned()
            if not self.open:
                self.early.append((j, result))
                return
        self._pass_on(j, result)

    def _pass_on(self, j, result):
        self.values[j] = result if self.on_result is None else self.on_result(1 + j, result)

    def stop(self):
        """Chunk 0 is over: True if the rest was sent (``hand_on`` then gives it)."""
        self.chunk0_done.set()
        with self.lock:
            self.stopped = True
            return self.sent

    def hand_on(self):
        """Pass on what arrived while chunk 0 ran, then the rest as it comes; return what
        ``on_result`` made of the chunks after chunk 0 (waiting for them all); their error
        if one failed."""
        while True:
            with self.lock:
                early, self.early = self.early, []
                if not early:
                    self.open = True
                    break
            for j, result in early:
                self._pass_on(j, result)
        self.future.result()
        return [self.values[j] for j in range(len(self.items))]

    def abandon(self):
        """The caller failed (chunk 0, or handing results on): stop the sent map at its
        next result and wait until nothing runs behind the caller's back."""
        self.chunk0_done.set()
        with self.lock:
            self.stopped = self.abandoned = True
        self.stopper.set()  # its tasks stop at their next operation (Ctrl-C: at once, not after a chunk)
        concurrent.futures.wait([self.future])


class _Abandoned(Exception):
    """Raised in a probe's map to stop it: its caller is gone."""


def _cpu_clock_of_this_thread():
    """A function reading, from any thread, the CPU seconds this thread has used since
    now (a busy machine that preempts it must not make its chunk look heavy); its wall
    clock where threads have no CPU clock of their own."""
    try:
        clock = time.pthread_getcpuclockid(threading.get_ident())
        start = time.clock_gettime(clock)
        return lambda: time.clock_gettime(clock) - start
    except (AttributeError, OSError):  # not on this platform
        start = time.perf_counter()
        return lambda: time.perf_counter() - start


def _shift_result(on_result, offset):
    if on_result is None or offset == 0:
        return on_result
    return lambda i, r: on_result(i + offset, r)


def _wants_parallel(site, executor, n):
    """(parallel?, why) for ``n`` chunks of ``site.chunk_seconds`` each."""
    if executor.n_workers < 2:
        return False, f"{executor.name} has 1 worker"
    if site.time_a_loop:
        site.time_a_loop = False
        return False, "timing a loop to judge parallel runs against"
    # each further loss doubles the wait: a try costs a whole parallel run, which on a
    # site of tiny calls outweighs what the inline calls between tries cost
    every = RETRY_EVERY * 2 ** min(site.losses - 2, 6)
    if site.losses >= 2 and site.calls % every:
        return False, (f"lost in parallel {site.losses} times in a row (retrying every "
                       f"{every} calls)")
    return _would_gain(executor, site.chunk_seconds, n, first_contact=site.calls <= 1 and not site.parallel_runs,
                       result_bytes=site.result_bytes)


def _would_gain(executor, chunk_seconds, n, first_contact=False, result_bytes=0):
    """(parallel?, why) for ``n`` chunks of ``chunk_seconds`` each, from the estimate
    alone; starts the workers for the next call where only their start-up stands in the
    way."""
    work = chunk_seconds * n
    if 2 * work <= MARGIN * executor.call_cost and not logger.isEnabledFor(logging.DEBUG):
        # parallel_seconds is at least call_cost, so neither branch below can be taken:
        # nothing to estimate (nor to ask twice whether workers are up, a lock each on
        # processes), unless for the log
        return False, "too little work for a parallel call"
    par = parallel_seconds(executor, chunk_seconds, n, result_bytes)
    if first_contact:
        par += first_contact_seconds(executor)
    estimate = _Estimate(work, par, executor.name)
    if par * MARGIN < work:
        return True, estimate
    if not executor.ready():
        warm = par - executor.startup_cost
        if warm * MARGIN < work:  # only the start-up stands in the way: start it for next time
            executor.start(preload=PRELOAD)
            estimate.starting = True
    return False, estimate


class _Estimate:
    """Why a phase ran where it did, formatted only when the log asks."""

    __slots__ = ("work", "parallel", "backend", "starting")

    def __init__(self, work, parallel, backend):
        self.work, self.parallel, self.backend, self.starting = work, parallel, backend, False

    def __str__(self):
        text = f"est. {_seconds(self.work)} inline vs {_seconds(self.parallel)} on {self.backend}"
        return text + (" (workers starting in the background for the next call)" if self.starting else "")


def _shift(on_done, offset):
    if on_done is None or offset == 0:
        return on_done
    return lambda i: on_done(i + offset)


def _placement(executor, n, n_tasks=None, in_caller=0):
    """Where ``n`` chunks ran, for the log.

    >>> _placement(executors.ThreadExecutor(2), 3, 1)
    '3 chunks on threads:2, 1 task'
    >>> _placement(executors.ProcessExecutor(2), 16, 2, in_caller=7)
    '16 chunks on processes:2, 2 tasks (7 chunks in the calling thread)'
    """
    tasks = f", {_count(n_tasks, 'task')}" if n_tasks is not None and n_tasks != n else ""
    mine = f" ({_count(in_caller, 'chunk')} in the calling thread)" if in_caller else ""
    return f"{_count(n, 'chunk')} on {executor.name}:{executor.n_workers}{tasks}{mine}"


def _count(n, noun):
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def _seconds(s):
    """``12.3 ms``: three digits, in s, ms or µs (not ``1.03e+03 ms``).

    >>> _seconds(1.0312), _seconds(0.0604), _seconds(4.2e-5)
    ('1.03 s', '60.4 ms', '42 µs')
    """
    if s >= 0.9995:
        return f"{s:.3g} s"
    return f"{s * 1e3:.3g} ms" if s >= 1e-3 else f"{s * 1e6:.3g} µs"


# ------------------------------------------------------------------------- log


def describe(f) -> str:
    """``name (file:line)`` of a user's function, for log lines and messages.

    >>> def loss(w):
    ...     return w
    >>> describe(loss).startswith("loss (")
    True
    """
    code = getattr(f, "__code__", None)
    if code is None:
        call = getattr(type(f), "__call__", None)
        code = getattr(call, "__code__", None)
    name = getattr(f, "__qualname__", None) or type(f).__qualname__
    if code is None:
        return name
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


_OWN_DIRS = tuple(os.path.dirname(str(m.__file__)) + os.sep for m in (executors, sys.modules[__package__]))


def _caller():
    """``file:line`` of the first frame outside adrules and executors: where the user called."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIRS):
        frame = frame.f_back
    if frame is None:
        return "?"
    return f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _log(label, about, n, where, why, wall):
    f = describe(about) if about is not None else "?"
    logger.debug("%s of %s, called at %s: %d chunks, %s (%s); took %s",
                 label or "map", f, _caller(), n, where, why, _seconds(wall))


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
    """What identifies a call site's work: the code of the user's function.

    >>> work_key(lambda x: x).co_name
    '<lambda>'
    """
    return code_of(f) or type(f)
