"""Backends on this machine: serial, a thread pool, a loky process pool.

::

    SerialExecutor     caller thread: fn(item, *shared) one after another
    ThreadExecutor     caller ──(map, i) on a queue──▶ threads of its own (persistent,
                       started as needed; see ``_threads``), each task in a copy of the
                       caller's context
    ProcessExecutor    caller ──cloudpickle bytes──▶ loky ProcessPoolExecutor
                       (persistent, lazy; workers start with BLAS pinned to 1)
                       ◀──pickled result bytes── ; see ``_remote`` for the task
                       large arrays in shared args ──.npy in /dev/shm, once per
                       content──▶ workers open them read-only (see ``_shm``)

All three run chunk work with BLAS/OpenMP pools pinned to one thread and return results in
item order.  Each ``ProcessExecutor`` owns its loky pool: ``joblib.Parallel``'s loky backend
kills every worker when one task raises, and ``loky.get_reusable_executor`` is a singleton
that restarts whenever another caller asks for a different worker count.
"""

from __future__ import annotations

import contextvars
import math
import multiprocessing
import multiprocessing.util
import os
import pickle
import threading
from typing import Any, Iterable

from . import _abandon, _context, _lane, _remote, _shm, _threads
from ._blas import PIN_ENV, blas_pinned
from .base import (ENV_VAR, Executor, MapTimeoutError, WorkerError, annotate, check_positive_int, closed_mid_map,
                   map_inline, usable_cpu_count)

__all__ = ["SerialExecutor", "ThreadExecutor", "ProcessExecutor"]

# Worker processes (loky's, a LocalCluster's) do array work only: glibc keeps freed memory for
# reuse instead of faulting each large temporary's pages in again. A user's MALLOC_* settings win.
WORKER_MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20)),
    "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_", str(2**30)),
}
# loky restarts a worker whose memory grew, taking it for a leak: allow the heap glibc keeps.
_MAX_IDLE_SECONDS = 2_000_000  # Connection.poll's timeout, in milliseconds, fits a C int
_LOKY_ENV = {**PIN_ENV, **WORKER_MALLOC_ENV, "LOKY_MAX_MEMORY_LEAK_SIZE": os.environ.get(
    "LOKY_MAX_MEMORY_LEAK_SIZE", str(int(WORKER_MALLOC_ENV["MALLOC_TRIM_THRESHOLD_"]) + 300 * 10**6))}


class SerialExecutor(Executor):
    """Run every item in the calling thread, in order: the reference backend.

    Same contract as the parallel backends (BLAS pinned, ``in_worker()`` true
    inside ``fn``, exceptions annotated with the item index).

    >>> import executors
    >>> with executors.SerialExecutor() as ex:
    ...     ex.map(lambda x: x + 1, [1, 2, 3])
    [2, 3, 4]
    """

    name = "serial"
    shares_memory = True

    def _map(self, fn, items, shared, on_done, results):
        map_inline(fn, items, shared, on_done, self.name, results)

    def overhead(self) -> tuple[float, float, float]:
        return (0.0, 0.0, 0.0)

    def start(self, preload: Iterable[str] = ()) -> None:
        """The serial executor has no workers: asking it to start some is a mistake.

        >>> SerialExecutor().start()
        Traceback (most recent call last):
        ...
        ValueError: SerialExecutor.start: the serial executor has no workers to start (it runs every chunk in the calling thread). To start workers at once, start an executor that has them, e.g. executors.resolve("processes:2").start()
        """
        raise ValueError(
            "SerialExecutor.start: the serial executor has no workers to start (it runs every chunk "
            "in the calling thread). To start workers at once, start an executor that has them, "
            'e.g. executors.resolve("processes:2").start()')

    def __repr__(self) -> str:
        return "SerialExecutor()"


class ThreadExecutor(Executor):
    """A persistent thread pool (created on first use, kept across calls); ``n_workers``
    defaults to the number of usable CPUs.

    No pickling: ``fn`` may be any callable and results are the very objects built.  BLAS's
    thread count is process-wide: pinned to one while the map runs, for other threads too.

    >>> import executors
    >>> with executors.ThreadExecutor(2) as ex:
    ...     ex.map(lambda x, k: x * k, range(5), shared=(3,))
    [0, 3, 6, 9, 12]
    """

    name = "threads"
    shares_memory = True

    def __init__(self, n_workers: int | None = None) -> None:
        self.n_workers = check_positive_int(n_workers) or usable_cpu_count()
        self._pool: _threads.ThreadPool | None = None
        self._lock = threading.Lock()

    def _get_pool(self) -> _threads.ThreadPool:
        with self._lock:
            if self._pool is None:
                self._pool = _threads.ThreadPool(self.n_workers, "executors-thread")
            return self._pool

    def _map(self, fn, items, shared, on_done, results):
        pool = self._get_pool()
        base = contextvars.copy_context()
        base.run(_context.enter_worker)
        flag = _abandon.ThreadFlag()
        base.run(_abandon.enter, flag)
        closes = self._closes
        try:
            with blas_pinned():
                _threads.run_map(pool, fn, items, shared, base, on_done, self.name, results, abandon=flag,
                                 timeout_note=_THREADS_TIMEOUT_NOTE)
        except MapTimeoutError:
            # threads still running cannot be stopped: the next map gets a pool of its own
            with self._lock:
                if self._pool is pool:
                    self._pool = None
            pool.shutdown(wait=False)
            raise
        except RuntimeError as exc:  # a cancelled item, or a map after shutdown
            if self._closes == closes:
                raise
            raise closed_mid_map(self.name) from exc

    def close(self) -> None:
        """Shut the pool down (waits for running tasks); a later map starts a new one.

        >>> ex = ThreadExecutor(1); ex.close(); ex.close()
        """
        with self._lock:
            pool, self._pool = self._pool, None
            self._closes += 1
        if pool is not None:
            pool.shutdown(wait=True)


_THREADS_TIMEOUT_NOTE = (
    "A thread cannot be stopped: those running go on in the background until fn returns (their "
    "results are dropped; Python waits for them at exit), and the next map uses fresh threads.")


class ProcessExecutor(Executor):
    """A persistent loky process pool; ``fn``, items and shared args go by cloudpickle.

    NumPy arrays of at least ``max_nbytes`` bytes (default 1 MiB; None: never) in shared
    arguments are written once per content to a memory-mapped file (in ``/dev/shm`` where it
    exists) that the workers open read-only; an array changed in place is written again.
    :meth:`close` removes the files (at the latest, interpreter exit).

    Lambdas and closures work; results are copies.  The pool starts on first use (or
    :meth:`start`) and stays alive across calls; idle workers exit after ``idle_timeout``
    seconds, and all within a second of this process's death.  A worker that dies mid-map
    raises :class:`executors.WorkerError` and the pool is restarted; Ctrl-C terminates it.
    A map waits a minute for workers still starting (longer on a busy machine),
    then raises :class:`executors.WorkerError` too: one hangs while starting.

    >>> import executors
    >>> with executors.ProcessExecutor(2) as ex:
    ...     ex.map(lambda x, k: x * k, range(5), shared=(3,))
    [0, 3, 6, 9, 12]
    """

    name = "processes"
    prior_overhead = (2e-3, 6e-4, 1e-8)  # on the high side: a pool's start must be earned
    prior_start_cost = 1.0  # each worker starts an interpreter and imports NumPy and adrules

    def __init__(self, n_workers: int | None = None, *, idle_timeout: float = 300.0,
                 max_nbytes: int | None = 2**20) -> None:
        self.n_workers = check_positive_int(n_workers) or usable_cpu_count()
        # at least a second: a worker must outlive the wait for its first task; at most what a
        # socket's poll takes (~24 days, in milliseconds as a C int); math.inf: never
        if (isinstance(idle_timeout, bool) or not isinstance(idle_timeout, (int, float))
                or not (1.0 <= idle_timeout <= _MAX_IDLE_SECONDS or idle_timeout == math.inf)):
            raise ValueError(f"ProcessExecutor: idle_timeout must be a number of seconds from 1 to "
                             f"{_MAX_IDLE_SECONDS:,} (how long an idle worker waits before it exits), or "
                             f"math.inf for never; got {idle_timeout!r}")
        self.idle_timeout = idle_timeout
        self.max_nbytes = check_positive_int(max_nbytes, "max_nbytes")
        self._arrays = _shm.ArrayStore(self.max_nbytes) if self.max_nbytes is not None else None
        self._pool: Any = None
        self._lane: _lane.Lane | None = None  # the sockets to the workers
        self._lock = threading.Lock()  # guards _pool and _lane
        self._map_lock = threading.Lock()  # one map at a time uses the lane

    def _get_lane(self, preload: Iterable[str] = ()) -> _lane.Lane:
        with self._lock:
            lane = self._lane
            if lane is not None and not (lane.serving() and _loky_pool_healthy(self._pool)):
                self._shutdown_locked(kill=True)  # a worker died or idled out: don't fail the next map
            if self._pool is None:
                from loky import ProcessPoolExecutor

                # a worker's serve task waits idle_timeout itself; once it returns, loky may let it go
                self._pool = ProcessPoolExecutor(max_workers=self.n_workers, timeout=1.0,
                                                 initializer=_remote.init_process_worker,
                                                 initargs=(os.getpid(),), env=_LOKY_ENV)
                self._lane = _lane.Lane(self._pool, self.n_workers, preload, self.idle_timeout)
                _lane.register_exit_hook()
                if multiprocessing.parent_process() is not None:
                    # a multiprocessing or joblib worker runs no atexit hook, and waits at exit
                    # for its children: these workers would idle out first (idle_timeout)
                    multiprocessing.util.Finalize(None, _stop, (self._lane, self._pool), exitpriority=100)
            assert self._lane is not None
            return self._lane

    def _shutdown_locked(self, kill):
        pool, self._pool = self._pool, None
        lane, self._lane = self._lane, None
        _stop(lane, pool, kill)

    def start(self, preload: Iterable[str] = ()) -> None:
        """Start the worker processes in the background (returns at once), each importing
        the modules named in ``preload``; a map started before they are up waits for them.

        >>> with ProcessExecutor(1) as ex:
        ...     ex.start(preload=("numpy",)); ex.map(abs, [-1])
        [1]
        """
        self._get_lane(preload)

    def started(self) -> bool:
        """True once the worker processes are up or starting (after ``start`` or a map).

        >>> ProcessExecutor(1).started()
        False
        """
        with self._lock:
            return self._lane is not None

    def ready(self) -> bool:
        """True once the worker processes are up (after ``start`` or a map).

        >>> ProcessExecutor(1).ready()
        False
        """
        with self._lock:
            return self._lane is not None and self._lane.ready()

    def worker_pids(self) -> list[int]:
        """Process ids of the current worker processes (empty before first use).

        >>> ProcessExecutor(1).worker_pids()
        []
        """
        pool = self._pool
        return sorted(_loky_workers(pool)) if pool is not None else []

    def _reset(self, lane):
        """Kill the workers behind ``lane`` if it is still the current one."""
        with self._lock:
            if self._lane is lane:
                self._shutdown_locked(kill=True)

    def _map(self, fn, items, shared, on_done, results):
        paths, closes = [], self._closes  # memory-mapped arrays this map uses: kept until it is over
        try:
            self._map_sending(fn, items, shared, on_done, results, paths)
        except Exception as exc:
            if self._closes == closes:
                raise
            raise closed_mid_map(self.name) from exc
        finally:
            if paths:
                self._arrays.release(paths)

    def _dumps_shared(self, a, j, paths):
        what = f"shared arg {j}"
        if self._arrays is None:
            return _remote.dumps(a, what, self.name)
        try:
            return _shm.dumps_sharing_arrays(a, self._arrays, paths)
        except Exception:  # the same message as without memory maps
            _remote.dumps(a, what, self.name)  # raises SerializationError naming `what`
            raise

    def _map_sending(self, fn, items, shared, on_done, results, paths):
        name, n = self.name, len(items)
        fn_blob = _remote.make_blob(_remote.dumps(fn, "fn", name))
        shared_blobs = [_remote.make_blob(self._dumps_shared(a, j, paths)) for j, a in enumerate(shared)]
        chunk_size = _context.SETTINGS.get().chunk_size
        flag = _abandon.FileFlag()
        pid = os.getpid()
        tasks = [(i, pickle.dumps((i, _remote.dumps(items[i], f"item {i}", name), fn_blob, shared_blobs, pid,
                                   chunk_size, name, flag), protocol=5)) for i in range(n)]

        def put(i, data, drew):
            results.drew_global_random |= drew
            results.put(i, _remote.load_result(data, i, name))

        # the caller reduces results as they arrive: no task more than n_workers ahead of them
        ahead = (lambda: results.delivered + self.n_workers) if results.on_result is not None else None
        with self._map_lock:
            for attempt in (0, 1):
                lane = self._get_lane()
                try:
                    lane.wait_ready(failed=lambda: self._failed_to_start(lane), deadline=results.deadline)
                    lane.run(tasks, put, on_done, ahead, deadline=results.deadline)
                    return
                except _lane.TimedOut as late:
                    flag.set()
                    if late.running:  # stop them: a worker still running one would hold the next map
                        self._reset(lane)
                    raise results.timed_out(
                        name, late.running, range(n) if late.not_started is None else late.not_started,
                        "The worker processes still running were stopped; the next map starts fresh "
                        "ones." if late.running else "Its worker processes were still starting.") from None
                except _lane.NotStarted as late:
                    flag.set()
                    self._reset(lane)  # the workers hanging at start with it
                    raise _start_error(
                        f"the worker processes of the {name!r} executor did not start within {late.seconds:.0f} s "
                        f"({late.started} of {late.n_workers} did; they were stopped): one hangs while starting",
                        "Its output above, if any, says why (a fresh interpreter waits as it starts or imports "
                        "here: a sitecustomize, a module that blocks on import)", name) from None
                except _lane.WorkerGone as gone:
                    flag.set()
                    self._reset(lane)
                    if gone.unstarted and attempt == 0:
                        continue  # it died before this map reached it: run the map afresh
                    unfinished = sorted([gone.index, *gone.pending]) if gone.index >= 0 else list(range(n))
                    err = WorkerError(
                        f"a worker process of the {name!r} executor died while this map of {n} items was "
                        f"running (unfinished items: {_short(unfinished)}); it was killed (e.g. by the OS "
                        "for lack of memory) or crashed (segfault, os._exit). The broken pool was shut "
                        "down; the next call starts fresh workers.")
                    if gone.index >= 0:
                        annotate(err, gone.index, n, name)  # the item it was running
                    raise err from None
                except BaseException as exc:
                    flag.set()
                    i = getattr(exc, "executors_lane_index", None)
                    if i is not None:  # raised by a task (SystemExit too): the workers are fine
                        del exc.executors_lane_index
                        raise annotate(exc, i, n, name)
                    if not isinstance(exc, Exception):  # KeyboardInterrupt: stop the workers
                        self._reset(lane)
                    raise

    def _failed_to_start(self, lane):
        for f in lane.futures:
            if f.done():
                exc = f.exception()
                why = str(exc).rstrip(".") if exc is not None else "it stopped serving"
                return _start_error(f"a worker process of the {self.name!r} executor died while starting: {why}",
                                    "Its output above says why (a fresh interpreter fails to start or import "
                                    "here: a sitecustomize, a module missing)", self.name)
        return None

    def close(self) -> None:
        """Shut the worker processes down (idempotent); a later map starts new ones.

        Waits for tasks still running from a map that raised (at most one per worker):
        killed, loky would report the futures cancelled here as an error.

        >>> ex = ProcessExecutor(1)
        >>> ex.map(abs, [-2]), ex.close(), ex.worker_pids()
        ([2], None, [])
        """
        with self._lock:
            pool = self._pool
            self._closes += 1
            self._shutdown_locked(kill=pool is not None and not _loky_pool_healthy(pool))
        if self._arrays is not None:
            self._arrays.close()  # after the workers are gone: nothing maps the files any more


# loky has no public API for "is this pool usable?" or "which are its workers?": the private
# reads are here, and test_loky_private_attributes fails if a loky release renames them.
def _loky_workers(pool) -> dict:
    """``{pid: process}`` of a loky pool's workers."""
    return dict(pool._processes)


def _loky_pool_healthy(pool) -> bool:
    """False once loky flagged the pool broken or one of its workers has exited."""
    if pool._flags.broken or pool._flags.shutdown:
        return False
    return not any(_has_exited(p) for p in _loky_workers(pool).values())


def _has_exited(process) -> bool:
    """Whether a worker has exited or is exiting, without reaping it (``exitcode`` would
    race loky's manager thread, whose loser is told "still running"); a worker killed a
    moment ago is not reapable until its threads are torn down, but Linux shows it exiting.
    """
    if _exiting_on_linux(process.pid):
        return True
    if not hasattr(os, "waitid"):  # macOS
        return process.exitcode is not None
    try:
        return os.waitid(os.P_PID, process.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already
        return True


def _exiting_on_linux(pid) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except FileNotFoundError:  # gone, or no /proc at all (not Linux): waitid tells
        return False
    except ProcessLookupError:  # gone while reading
        return True
    fields = stat[stat.rindex(b")") + 2:].split()  # after "pid (command) "
    return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & 0x4)  # PF_EXITING (linux/sched.h)


def _start_error(what, where_to_look, name):
    """The error of workers that did not start: what happened, where to look, the fix."""
    return WorkerError(f"{what}. {where_to_look}; fix that, or use another executor{_variable_hint(name)}")


def _variable_hint(name):
    """How to choose another executor where ``ADRULES_EXECUTOR`` names ``name``."""
    value = os.environ.get(ENV_VAR)
    if value is None or value.strip().lower().partition(":")[0].strip() != name:
        return " (e.g. executor=\"threads\")"
    return f" ({ENV_VAR}={value!r} names it: set the variable to 'threads', or unset it)"


def _short(indices, limit=10):
    if len(indices) <= limit:
        return str(indices)
    return f"[{', '.join(map(str, indices[:limit]))}, ...] ({len(indices)} in all)"


def _stop(lane, pool, kill=True) -> None:
    if lane is not None:
        lane.close()  # each serve task returns once its running task (if any) is done
    if pool is not None:
        pool.shutdown(wait=True, kill_workers=kill)
