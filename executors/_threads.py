"""The thread pool of ``ThreadExecutor``: threads that take a map's tasks from one queue.

::

    caller thread                                 pool threads (started as a map needs
    ─────────────                                 them, kept until shut down)
    tasks.put((task_map, i)) ─────────────────▶   started[i] = True
      (when the caller reduces results as they    value = copy of the caller's context
       arrive, at most n_workers ahead of the             .run(fn, items[i], *shared)
       results handed on; the next once one was      (nothing, once the map's abandon
       handed on)                                     flag is set: it raised)
    i, value, exc = done.get()  ◀───────────────  done.put((i, value, exc))
      error?  set the abandon flag, raise (annotated with the item index)
      else    on_done(i); results.put(i, value) (InOrder hands them on in item order)

A task is a tuple on a queue, a result another: no future, condition or callback per
task, which cost the caller (and every worker's turn at the interpreter) more than many
small tasks do themselves. The caller blocks only in ``SimpleQueue.get``, which a real
SIGINT interrupts, so Ctrl-C reaches it; tasks already running see the abandon flag
(``_abandon``) and stop early. The threads are not daemons: Python waits at exit for the
tasks they run, then stops them.
"""

from __future__ import annotations

import os
import queue
import threading
import time
import weakref
from typing import Any, Callable

from .base import InOrder, annotate

__all__ = ["ThreadPool", "run_map"]

_CANCELLED = object()  # a task a shutdown took off the queue: it did not run

_pools: weakref.WeakSet[ThreadPool] = weakref.WeakSet()
_pools_lock = threading.Lock()
_exit_hook = False


class ThreadPool:
    """Up to ``n_workers`` threads (named ``name_0``, ...), started as maps need them."""

    def __init__(self, n_workers: int, name: str) -> None:
        self.n_workers, self.name = n_workers, name
        self._tasks: queue.SimpleQueue = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []
        self._ran: list[int] = []  # tasks each thread has run (its own slot: no lock)
        self._queued = 0  # tasks put
        self._lock = threading.Lock()  # guards the above and orders puts before a shutdown's
        self._stopped = False
        _watch(self)
        self._stop_when_dropped()

    def _stop_when_dropped(self) -> None:
        # a pool dropped without a shutdown: its idle threads stop (Python would wait for them at exit)
        self._finalizer = weakref.finalize(self, _stop_threads, self._tasks, self._threads)
        self._finalizer.atexit = False

    def put(self, tasks: list[tuple[Any, int]]) -> None:
        """Queue ``tasks``, with threads enough to run every task queued or running
        (up to ``n_workers``); after a shutdown, RuntimeError."""
        with self._lock:
            if self._stopped:
                raise RuntimeError(f"the {self.name} pool was shut down: it runs no new task")
            self._queued += len(tasks)
            want = min(self.n_workers, self._queued - sum(self._ran))
            while len(self._threads) < want:
                k = len(self._threads)
                self._ran.append(0)
                thread = threading.Thread(target=_work, args=(self._tasks, self._ran, k), name=f"{self.name}_{k}")
                thread.start()
                self._threads.append(thread)
            for task in tasks:
                self._tasks.put(task)

    def _forget_threads(self) -> None:
        """In a child process forked from this one: the threads did not come along (only
        the forking thread does), so the pool starts its own as a map needs them; tasks
        queued in the parent are not the child's to run."""
        # New locks and a new queue: a thread that did not come along may have held one of
        # them at the fork. (A SimpleQueue whose waiting thread had just been woken keeps its
        # lock taken for good: its next get() would wait for ever.)
        self._lock = threading.Lock()
        self._tasks = queue.SimpleQueue()
        self._threads, self._ran, self._queued = [], [], 0
        self._finalizer.detach()
        self._stop_when_dropped()

    def shutdown(self, wait: bool = True) -> None:
        """Take the tasks not started off the queue (their maps see them cancelled), stop
        the threads once their running tasks are done, and with ``wait`` wait for that."""
        with self._lock:
            if not self._stopped:
                self._stopped = True
                while True:
                    try:
                        task_map, i = self._tasks.get_nowait()
                    except queue.Empty:
                        break
                    task_map.done.put((i, _CANCELLED, None))
                _stop_threads(self._tasks, self._threads)
            threads = list(self._threads)
        if wait:
            for thread in threads:
                if thread is not threading.current_thread():
                    thread.join()


def _stop_threads(tasks: queue.SimpleQueue, threads: list[threading.Thread]) -> None:
    for _ in threads:
        tasks.put(None)


def _work(tasks: queue.SimpleQueue, ran: list[int], k: int) -> None:
    """Pool thread ``k``: run tasks until told to stop (None)."""
    while True:
        task = tasks.get()
        if task is None:
            return
        task_map, i = task
        task = None
        task_map.started[i] = True
        if task_map.abandon.is_set():  # its map raised: nobody reads the result
            task_map.done.put((i, None, None))
            task_map = None
            ran[k] += 1
            continue
        try:
            value = task_map.context.copy().run(task_map.fn, task_map.items[i], *task_map.shared)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too: they belong to the caller
            task_map.done.put((i, None, exc))
            del exc
        else:
            task_map.done.put((i, value, None))
            value = None
        task_map = None  # nothing of a map stays alive in an idle thread
        ran[k] += 1


class _TaskMap:
    """What every task of one map reads: ``fn(items[i], *shared)`` in a copy of ``context``."""

    __slots__ = ("fn", "items", "shared", "context", "abandon", "started", "done")

    def __init__(self, fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...], context: Any,
                 abandon: Any) -> None:
        self.fn, self.items, self.shared, self.context, self.abandon = fn, items, shared, context, abandon
        self.started = [False] * len(items)
        self.done: queue.SimpleQueue = queue.SimpleQueue()


def run_map(pool: ThreadPool, fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...], context: Any,
            on_done: Callable[[int], object] | None, name: str, results: InOrder, *, abandon: Any,
            timeout_note: str = "") -> None:
    """Run ``fn(items[i], *shared)`` on ``pool``'s threads, each in a copy of ``context``,
    and hand each result to ``results.put(i, value)``.

    When the caller reduces results as they arrive, at most ``n_workers`` tasks run ahead:
    a worker running ahead holds a finished result. On an error (or Ctrl-C, or an error in
    the caller's hooks) ``abandon`` is set, so that tasks not started do nothing; a task a
    shutdown took off the queue raises RuntimeError. Past ``results.deadline``,
    :class:`MapTimeoutError` (ending with ``timeout_note``).
    """
    n = len(items)
    task_map = _TaskMap(fn, items, shared, context, abandon)
    window = pool.n_workers if results.on_result is not None else n
    finished = [False] * n
    sent = min(n, window)
    get = task_map.done.get
    try:
        pool.put([(task_map, i) for i in range(sent)])
        for _ in range(n):
            if results.deadline is None:
                i, value, exc = get()
            else:
                try:
                    i, value, exc = get(timeout=max(0.0, results.deadline - time.monotonic()))
                except queue.Empty:
                    running = [j for j in range(n) if task_map.started[j] and not finished[j]]
                    raise results.timed_out(name, running, [j for j in range(n) if not task_map.started[j]],
                                            timeout_note) from None
            if value is _CANCELLED:
                exc = RuntimeError(f"item {i} was cancelled")
            if exc is not None:
                abandon.set()
                raise annotate(exc, i, n, name)
            finished[i] = True
            if on_done is not None:
                on_done(i)
            results.put(i, value)
            value = None  # (not kept alive while the next is awaited)
            if sent < n and results.delivered + window > sent:
                more = min(n, results.delivered + window)
                pool.put([(task_map, j) for j in range(sent, more)])
                sent = more
    except BaseException:
        abandon.set()
        raise


def _watch(pool: ThreadPool) -> None:
    """Stop ``pool``'s threads at interpreter exit, once the tasks they run are done: in
    threading's exit hooks, before Python waits for its non-daemon threads (as
    ``concurrent.futures`` does)."""
    global _exit_hook
    with _pools_lock:
        _pools.add(pool)
        if not _exit_hook:
            threading._register_atexit(_stop_all)  # type: ignore[attr-defined]  # (Python 3.9+)
            _exit_hook = True


def _after_fork_in_child() -> None:
    global _pools_lock
    _pools_lock = threading.Lock()
    for pool in list(_pools):
        pool._forget_threads()


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_after_fork_in_child)


def _stop_all() -> None:
    with _pools_lock:
        pools = list(_pools)
    for pool in pools:
        pool.shutdown(wait=True)
