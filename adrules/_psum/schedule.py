"""Where a phase's chunks run: in the calling thread, or on the executor.

    run(executor, fn, items, shared, key=...)      every phase of psum/pmap comes here
      decide(site, executor, n chunks left) ─▶ INLINE | PARALLEL | ONE_FIRST
        INLINE:    the chunks left, in groups (see ``group_size``), in this thread
        PARALLEL:  the chunks left, in tasks of consecutive chunks (``batches``), on the executor
        ONE_FIRST: one group inline, stopping after ``GROUP_SECONDS`` of work, then decide
                   again (no estimate yet, or the workers still starting); an INLINE
                   group that stops early (heavier than estimated) decides again too

Where to run, and how many chunks a group or a task holds, is the placement policy's
(``policy.py``); this module acts on it and teaches it what each run measured. A chunk
function keeps the group contract (``policy``'s docstring): ``_inline`` and ``_Task`` run
the chunks a group left in another. Chunks do the same float operations in the same order
wherever they run: only the time a call takes depends on this, never its results.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
import time

import executors
from executors import WhereRaised, mark_raised, warn, where_raised

from ..callables import code_of, describe
from .policy import (BIG_RESULT, ONE_FIRST, PARALLEL, Site, decide, explain, format_seconds, group_size, in_time,
                     task_batches)
from .worker_rules import travelling_rules

logger = logging.getLogger("adrules.schedule")  # the name the README gives users


class Clock:
    """The clocks the schedule reads (tests pass their own): a thread's CPU, and wall time."""

    cpu, wall = staticmethod(time.thread_time), staticmethod(time.perf_counter)


CLOCK = Clock()


_sites: dict = {}
_sites_lock = threading.Lock()


def site_of(key) -> Site:
    """The ``Site`` of ``key`` (made on first use; at most 1024 kept)."""
    site = _sites.get(key)
    if site is None:
        with _sites_lock:
            if len(_sites) > 1024:  # call sites come and go (lambdas): stay bounded
                _sites.clear()
            site = _sites.setdefault(key, Site())
    return site


def forget() -> None:
    """Forget what every call site has measured (the next call of each is a first call).

    >>> forget()
    """
    with _sites_lock:
        _sites.clear()


def work_key(f):
    """What identifies a call site's work: the code of the user's function.

    >>> work_key(lambda x: x).co_name
    '<lambda>'
    """
    return code_of(f) or type(f)


def run(executor, fn, items, shared=(), *, key=None, dispatch="auto", on_result=None, progress=False,
        label="", user_f=None, result_bytes=0, clock=CLOCK, timeout=None):
    """The results of ``fn`` over ``items`` (chunks), inline or on ``executor`` as
    ``decide`` says, in item order: ``fn(group, *shared)`` takes a list of consecutive
    items (see ``group_size``) and returns a result for each. ``on_result(i, result)`` is
    called in item order as results arrive, and what it returns is kept instead.
    ``label`` and ``user_f`` (the user's function) name the phase in the log;
    ``result_bytes``: the size of each chunk's result where the caller knows it (a dense
    cotangent): above ``BIG_RESULT``, a chunk a task, so that no task holds several.
    ``timeout`` (seconds, or None): every chunk goes to the executor (as with
    ``dispatch="always"``: work in this thread could not be left behind), whose map
    raises ``executors.MapTimeoutError`` naming chunks once it has passed.

    >>> run(executors.SerialExecutor(), lambda group, k: [i * k for i in group], [1, 2, 3], (10,))
    [10, 20, 30]
    """
    n = len(items)
    site = site_of((key, label, executor.name, executor.n_workers))
    site.calls += 1
    bar = _progress_bar(progress, n, label)
    on_done = (lambda i, k=1: bar.update(k)) if bar is not None else None
    w0 = clock.wall()
    out, i = [], 0
    one_chunk_a_task = result_bytes > BIG_RESULT
    if timeout is not None:
        dispatch = "always"
    where, why = decide(site, executor, n, dispatch, result_bytes)
    try:
        while i < n and where is not PARALLEL:
            # ONE_FIRST: one group, as long as GROUP_SECONDS of work (chunk 0 if heavier)
            once = where is ONE_FIRST
            size = 1 if one_chunk_a_task else (n - i if once else group_size(site.seconds))
            with executors.as_worker():  # (pinning BLAS may scan the libraries: not the chunks' time)
                c0 = clock.cpu()
                ran = _inline(fn, items, i, n, size, shared, on_result, on_done, out, once)
                site.seconds = (clock.cpu() - c0) / ran
            i += ran
            if i < n:  # a first chunk timed, workers starting, or work heavier than estimated
                where, why = decide(site, executor, n - i, dispatch, result_bytes)
        if i < n:
            out += _parallel(site, executor, fn, items, i, shared, on_result, on_done, one_chunk_a_task,
                             clock, timeout)
    finally:
        if bar is not None:
            bar.close()
    if logger.isEnabledFor(logging.DEBUG):
        placed = "inline" if i == n else (f"{_placement(executor, n - i)}" if i == 0 else
                                          f"chunks 0..{i - 1} inline, then {_placement(executor, n - i)}")
        _log(label, user_f, n, placed, why, clock.wall() - w0)
    return out


class PerItem:
    """``fn(item, *shared)`` made a chunk function of a group of items, for ``run``: one
    result per item, until the group's time runs out (``policy.in_time``); picklable
    when ``fn`` is.

    >>> PerItem(abs)([-1, -2])
    [1, 2]
    """

    __slots__ = ("fn",)

    def __init__(self, fn):
        self.fn = fn

    def __call__(self, group, *shared):
        return in_time(group, lambda item: self.fn(item, *shared))


def _part_raised(e):
    """Which item of its group the chunk function said raised ``e`` (the first if it did
    not say: an error of the group as a whole)."""
    where = where_raised(e)
    return where.part if where is not None and where.index is None and where.part is not None else 0


def _inline(fn, items, i, k, size, shared, on_result, on_done, out, once=False):
    """Chunks ``i..k-1`` in this thread, ``size`` at a time (``once``: one group only); how
    many ran (fewer when a group stopped early: its chunks took longer than estimated)."""
    g = i
    while g < k:
        want = min(k, g + size) - g
        try:
            results = fn(items[g:g + want], *shared)
        except (Exception, SystemExit) as e:
            mark_raised(e, WhereRaised(g + _part_raised(e), len(items), None, "chunk"))
            raise
        for c, result in enumerate(results, g):
            if on_done is not None:
                on_done(c)
            out.append(result if on_result is None else on_result(c, result))
        g += len(results)
        if once or len(results) < want:
            break
    return g - i


class _Task:
    """A batch of consecutive chunks on a worker: ``[(result, CPU seconds), ...]``;
    the user's rules travel with it, registered on the worker first."""

    __slots__ = ("fn", "clock")

    def __init__(self, fn, clock):
        self.fn, self.clock = fn, clock

    def __call__(self, batch, *shared):
        items, first, size = batch
        out = []
        while len(out) < len(items):
            if out and executors.abandoned():  # the map raised: nobody reads the rest
                break
            g, c0 = len(out), self.clock.cpu()
            try:
                results = self.fn(items[g:g + size], *shared)
            except (Exception, SystemExit) as e:  # travels back with the exception
                mark_raised(e, WhereRaised(part=g + _part_raised(e)))  # the chunk, counted from the task's first
                raise
            seconds = (self.clock.cpu() - c0) / len(results)
            out.extend((result, seconds) for result in results)
        return out

    def __reduce__(self):
        return (_task_with_rules, (self.fn, self.clock, travelling_rules()))


def _task_with_rules(fn, clock, rules):
    return _Task(fn, clock)  # (unpickling ``rules`` registered them)


def _parallel(site, executor, fn, items, first, shared, on_result, on_done, one_each, clock, timeout=None):
    """Chunks ``first..`` on the executor; what the run achieved teaches the site."""
    n = len(items) - first
    t = site.seconds or 0.0
    size = group_size(t, one_each)  # the chunks of a task traced together, as inline
    tasks = [(items[first + r.start:first + r.stop], first + r.start, size)
             for r in task_batches(executor, n, t, one_each or timeout is not None)]
    cpu = [0.0]

    def take(j, pairs):
        out = []
        for k, (result, seconds) in enumerate(pairs):
            cpu[0] += seconds
            c = tasks[j][1] + k
            out.append(result if on_result is None else on_result(c, result))
        return out

    done = None if on_done is None else (lambda j: on_done(tasks[j][1], len(tasks[j][0])))
    w0 = clock.wall()
    try:
        parts = executor.map(_Task(fn, clock), tasks, shared=shared, on_result=take, on_done=done, timeout=timeout)
    except executors.SerializationError as e:
        where = where_raised(e)
        task = None if where is None else where.index
        if task is None or e.what != f"the result of item {task}":
            raise
        # the task's result is a list the user never made: speak of f's values
        a, b = tasks[task][1], tasks[task][1] + len(tasks[task][0]) - 1
        raise executors.SerializationError(
            f"f's value in {f'chunk {a}' if a == b else f'chunks {a}..{b}'} could not be pickled to "
            f"come back from a worker of the {executor.name!r} executor: {e.reason}. Return only "
            "what pickles (numbers, arrays, containers of them), or use the 'threads' executor.") from e
    except (Exception, SystemExit) as e:
        where = where_raised(e)
        if isinstance(e, executors.MapTimeoutError) and where is None:  # this map's own (not f's)
            raise _timed_out(e, tasks, len(items), executor.name) from None
        _name_the_chunk(e, tasks, len(items), executor.name)
        raise
    wall = clock.wall() - w0
    if wall > 0 and cpu[0] > 0:
        site.seconds = cpu[0] / n
        site.speedup, site.speedup_at, site.calls = cpu[0] / wall, site.seconds, 0
    return [r for part in parts for r in part]


def _timed_out(e, tasks, n, name):
    """The map's timeout error, naming chunks instead of tasks (batches the user never made)."""
    def chunks(js):
        return [c for j in js for c in range(tasks[j][1], tasks[j][1] + len(tasks[j][0]))]

    return executors.MapTimeoutError(f"a map of {n} chunks on the {name!r} executor", e.timeout,
                                     chunks(e.running), chunks(e.not_started), e.note, "chunks")


def _name_the_chunk(e, tasks, n, name):
    """The executor named a task (a batch of chunks the user never made): name its chunk,
    or, where the task does not say which of its chunks raised (its worker died running
    it), its first chunk and its last."""
    where = where_raised(e)
    if where is None or where.index is None or not 0 <= where.index < len(tasks):
        return
    first, size = tasks[where.index][1], len(tasks[where.index][0])
    if where.part is not None:
        mark_raised(e, WhereRaised(first + where.part, n, name, "chunk"), replace=True)
    else:
        mark_raised(e, WhereRaised(first, n, name, "chunk", last=first + size - 1), replace=True)


# ------------------------------------------------------------------------- log


def _placement(executor, n):
    return f"{n} chunk{'s' if n != 1 else ''} on {executor.name}:{executor.n_workers}"


_OWN_DIRS = tuple(os.path.dirname(str(m.__file__)) + os.sep for m in (executors, sys.modules["adrules"]))


def _caller():
    """``file:line`` of the first frame outside adrules and executors: where the user called."""
    frame = sys._getframe(2)
    while frame is not None and frame.f_code.co_filename.startswith(_OWN_DIRS):
        frame = frame.f_back
    return "?" if frame is None else f"{os.path.basename(frame.f_code.co_filename)}:{frame.f_lineno}"


def _log(label, user_f, n, where, why, wall):
    f = describe(user_f) if user_f is not None else "?"
    logger.debug("%s of %s, called at %s: %d chunks, %s (%s); took %s",
                 label or "map", f, _caller(), n, where, explain(why), format_seconds(wall))


def _progress_bar(progress, total, label):
    if not progress:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # a progress bar is a nicety: say how to get it
        warn("progress=True needs tqdm: pip install tqdm")
        return None
    return tqdm(total=total, desc=label, leave=False)
