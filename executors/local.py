"""Backends on this machine: serial, a thread pool, a loky process pool.

::

    SerialExecutor     caller thread: fn(item, *shared) one after another
    ThreadExecutor     caller ──submit──▶ ThreadPoolExecutor (persistent, lazy)
                       each task runs in a copy of the caller's context
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

import concurrent.futures
import contextvars
import os
import threading
from typing import Any, Iterable

from . import _abandon, _context, _remote, _shm
from ._blas import PIN_ENV, blas_pinned
from ._futures import collect
from .base import Executor, WorkerError, _map_inline, check_positive_int, usable_cpu_count

__all__ = ["SerialExecutor", "ThreadExecutor", "ProcessExecutor"]

# Worker processes (loky's, a LocalCluster's) do array work only: glibc keeps freed memory for
# reuse instead of faulting each large temporary's pages in again. A user's MALLOC_* settings win.
WORKER_MALLOC_ENV = {
    "MALLOC_MMAP_THRESHOLD_": os.environ.get("MALLOC_MMAP_THRESHOLD_", str(32 * 2**20)),
    "MALLOC_TRIM_THRESHOLD_": os.environ.get("MALLOC_TRIM_THRESHOLD_", str(2**30)),
}
# loky restarts a worker whose memory grew, taking it for a leak: allow the heap glibc keeps.
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
        _map_inline(fn, items, shared, on_done, self.name, results)

    def overhead(self) -> tuple[float, float, float]:
        return (0.0, 0.0, 0.0)

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
        self._pool = None
        self._lock = threading.Lock()

    def _get_pool(self):
        with self._lock:
            if self._pool is None:
                self._pool = concurrent.futures.ThreadPoolExecutor(max_workers=self.n_workers,
                                                                   thread_name_prefix="executors-thread")
            return self._pool

    def _map(self, fn, items, shared, on_done, results):
        pool = self._get_pool()
        base = contextvars.copy_context()
        base.run(_context.enter_worker)
        flag = _abandon.ThreadFlag()
        base.run(_abandon.enter, flag)

        def submit(i):
            return pool.submit(base.copy().run, _boxed_unless_abandoned, fn, items[i], shared, flag)

        with blas_pinned():
            collect(submit, len(items), self.n_workers, on_done, self.name, results, abandon=flag)

    def close(self) -> None:
        """Shut the pool down (waits for running tasks); a later map starts a new one.

        >>> ex = ThreadExecutor(1); ex.close(); ex.close()
        """
        with self._lock:
            pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)


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

    >>> import executors
    >>> with executors.ProcessExecutor(2) as ex:
    ...     ex.map(lambda x, k: x * k, range(5), shared=(3,))
    [0, 3, 6, 9, 12]
    """

    name = "processes"

    def __init__(self, n_workers: int | None = None, *, idle_timeout: float = 300.0,
                 max_nbytes: int | None = 2**20) -> None:
        self.n_workers = check_positive_int(n_workers) or usable_cpu_count()
        self.idle_timeout = idle_timeout
        self.max_nbytes = check_positive_int(max_nbytes, "max_nbytes")
        self._arrays = _shm.ArrayStore(self.max_nbytes) if self.max_nbytes is not None else None
        self._pool: Any = None
        self._warm_up: list | None = None  # start()'s futures: done once the workers are up
        self._lock = threading.Lock()

    def _get_pool(self):
        with self._lock:
            if self._pool is not None and not _loky_pool_healthy(self._pool):
                self._shutdown_locked(kill=True)  # a worker died while idle: don't fail the next map
            if self._pool is None:
                from loky import ProcessPoolExecutor

                self._pool = ProcessPoolExecutor(max_workers=self.n_workers, timeout=self.idle_timeout,
                                                 initializer=_remote.init_process_worker,
                                                 initargs=(os.getpid(),), env=_LOKY_ENV)
            return self._pool

    def _shutdown_locked(self, kill):
        pool, self._pool = self._pool, None
        self._warm_up = None
        if pool is not None:
            pool.shutdown(wait=True, kill_workers=kill)

    def start(self, preload: Iterable[str] = ()) -> None:
        """Start the worker processes in the background (returns at once), each importing
        the modules named in ``preload``; a map started before they are up waits for them.

        >>> with ProcessExecutor(1) as ex:
        ...     ex.start(preload=("numpy",)); ex.map(abs, [-1])
        [1]
        """
        pool = self._get_pool()
        with self._lock:
            if self._warm_up is None and self._pool is pool:
                self._warm_up = [pool.submit(_remote.warm_up, tuple(preload)) for _ in range(self.n_workers)]

    def ready(self) -> bool:
        """True once the worker processes are up (after ``start`` or a map).

        >>> ProcessExecutor(1).ready()
        False
        """
        warm = self._warm_up
        return warm is not None and all(f.done() for f in warm)

    def worker_pids(self) -> list[int]:
        """Process ids of the current worker processes (empty before first use).

        >>> ProcessExecutor(1).worker_pids()
        []
        """
        pool = self._pool
        return sorted(_loky_workers(pool)) if pool is not None else []

    def _reset(self, pool):
        """Kill ``pool``'s workers if it is still the current one."""
        with self._lock:
            if self._pool is pool:
                self._shutdown_locked(kill=True)

    def _map(self, fn, items, shared, on_done, results):
        paths = []  # memory-mapped arrays this map uses: kept until it is over
        try:
            self._map_sending(fn, items, shared, on_done, results, paths)
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
        from loky.process_executor import BrokenProcessPool, ShutdownExecutorError

        name, n = self.name, len(items)
        fn_blob = _remote.make_blob(_remote.dumps(fn, "fn", name))
        shared_blobs = [_remote.make_blob(self._dumps_shared(a, j, paths)) for j, a in enumerate(shared)]
        chunk_size = _context.SETTINGS.get().chunk_size
        flag = _abandon.FileFlag()
        pid = os.getpid()
        pool = self._get_pool()

        def submit(i):
            nonlocal pool
            task = (_remote.run_task, i, _remote.dumps(items[i], f"item {i}", name), fn_blob, shared_blobs,
                    pid, chunk_size, name, flag)
            try:
                return pool.submit(*task)
            except (BrokenProcessPool, ShutdownExecutorError, RuntimeError):
                if i:  # the pool broke mid-map: the next result reports it
                    raise
                self._reset(pool)  # it broke or was shut down between calls: start afresh
                pool = self._get_pool()
                return pool.submit(*task)

        def translate(exc, i, unfinished):
            if not isinstance(exc, BrokenProcessPool):
                return None
            self._reset(pool)
            return WorkerError(
                f"a worker process of the {name!r} executor died while this map of {n} items "
                f"was running (unfinished items: {_short(sorted([i, *unfinished]))}); it was "
                "killed (e.g. by the OS for lack of memory) or crashed (segfault, os._exit). "
                f"The broken pool was shut down; the next call starts fresh workers. Cause: {exc}")

        def on_abort(exc):
            if not isinstance(exc, Exception):  # KeyboardInterrupt: stop what the workers run
                self._reset(pool)

        collect(submit, n, self.n_workers, on_done, name, results, abandon=flag,
                convert=lambda i, data: _remote.load_result(data, i, name), translate=translate,
                on_abort=on_abort)
        with self._lock:
            if self._warm_up is None and self._pool is pool:
                self._warm_up = []  # the workers answered: they are up

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
            self._shutdown_locked(kill=pool is not None and not _loky_pool_healthy(pool))
        if self._arrays is not None:
            self._arrays.close()  # after the workers are gone: nothing maps the files any more


def _boxed_unless_abandoned(fn, item, shared, flag):
    # a task started after its map raised: nobody reads its result
    return [None] if flag.is_set() else [fn(item, *shared)]


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


def _short(indices, limit=10):
    if len(indices) <= limit:
        return str(indices)
    return f"[{', '.join(map(str, indices[:limit]))}, ...] ({len(indices)} in all)"

