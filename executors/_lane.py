"""A direct line from the calling thread to each worker process of a ProcessExecutor.

loky hands a task to a worker through two threads of the parent (its manager thread and
the call queue's feeder thread) and one pipe that every worker reads, and brings results
back through the manager thread; each hop needs the GIL (asv ``bench_schedule.Lane``
measures what that costs). So each loky worker runs one long task, :func:`serve`, that
connects back to the parent over a Unix socket, and the calling thread writes each task
to a worker's socket and reads the results itself::

    caller ──send_bytes(task)──▶ worker k: serve() ── run_task ──┐
    caller ◀──recv_bytes(result or error), the result's buffers──┘
    (one task in flight per worker: a worker is only written to while it waits to
     read, so the two never block on each other's full socket buffer)

loky still starts the workers (with their initializer and environment), notices when
one dies, and stops them. A worker's socket at end-of-file mid-task means it died; one
that has not connected ``start_seconds`` after the lane began (``START_SECONDS`` on an
idle machine) hangs while starting.
"""

from __future__ import annotations

import atexit
import os
import pickle
import shutil
import socket
import tempfile
import threading
import time
import typing
import weakref
from multiprocessing.connection import Connection, wait
from typing import Any, Callable, Iterable

from . import _remote
from ._tracebacks import RemoteTraceback, remote_text
from .base import usable_cpu_count

_OK, _ERROR, _OK_DREW = b"\x00", b"\x01", b"\x02"  # _OK_DREW: drew from np.random's global state

#: seconds the worker processes may take to start on an idle machine (a fresh interpreter,
#: its sitecustomize, the modules ``preload`` names; a second or two is usual) before a map
#: waiting for them gives up: a worker that hangs while starting would hold it for ever.
#: ``start_seconds`` scales it by how busy the machine is.
START_SECONDS = 60.0


def start_seconds(n_workers: int) -> float:
    """How long ``n_workers`` worker processes may take to start: ``START_SECONDS`` times
    the processes each usable core runs as they start (the one-minute load average, plus
    the workers themselves), at least once.

    >>> start_seconds(1) >= START_SECONDS
    True
    """
    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):  # no load average (Windows)
        load = 0.0
    return START_SECONDS * max(1.0, (load + n_workers) / usable_cpu_count())


def serve(address: str, preload: Iterable[str], idle_timeout: float) -> str:
    """The long task each worker runs: import ``preload``, connect to ``address``, then
    run the tasks that arrive until the parent hangs up ("closed") or none came for
    ``idle_timeout`` seconds ("idle": loky then lets the worker exit)."""
    try:
        _remote.warm_up(preload)
    except Exception:  # a map whose fn needs the module reports it; the worker is fine
        pass
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(address)
    conn = Connection(sock.detach())
    try:
        conn.send_bytes(str(os.getpid()).encode())
        while conn.poll(None if idle_timeout == float("inf") else idle_timeout):
            try:
                task = conn.recv_bytes()
            except (EOFError, OSError):
                return "closed"
            try:
                drew, result = _remote.run_task(*pickle.loads(task))
                header, buffers = result if result is not None else (pickle.dumps(None), [])  # abandoned
                reply = (_OK_DREW if drew else _OK) + pickle.dumps((header, [b.nbytes for b in buffers]))
            except BaseException as exc:  # KeyboardInterrupt, GeneratorExit too: f raised it, the worker is fine
                reply, buffers = _ERROR + _pickled_error(exc), []
            try:
                conn.send_bytes(reply)
                for b in buffers:
                    _send_raw(conn, b)
            except OSError:  # the parent hung up (a map that raised, then close())
                return "closed"
        return "idle"
    finally:
        conn.close()


def _pickled_error(exc: BaseException) -> bytes:
    import cloudpickle

    text = remote_text(exc)
    try:
        return cloudpickle.dumps((exc, text), protocol=5)
    except Exception as why:  # _remote._run stands in for what it raises; this is the rest
        return cloudpickle.dumps((_remote.stand_in(exc, f"{type(why).__name__}: {why}"), text))


def _send_raw(conn: Connection, buffer: Any) -> None:
    """Write ``buffer``'s bytes as they are, after the message that gave their size."""
    data, sent = memoryview(buffer).cast("B"), 0
    while sent < len(data):
        sent += os.write(conn.fileno(), data[sent:])


def _receive(conn: Connection) -> Any:
    """A worker's reply: an error's pickled bytes, or ``(drew, (header, buffers))``: a
    result as its pickled header and its buffers, each read straight into memory of its
    own that the result's arrays then use (``recv_bytes`` would hold each twice while
    reading it), and whether the task drew from NumPy's global random state."""
    import numpy as np

    reply = conn.recv_bytes()
    if reply[:1] == _ERROR:
        return memoryview(reply)[1:]
    header, sizes = pickle.loads(memoryview(reply)[1:])
    buffers = []
    for size in sizes:
        buffer = np.empty(size, np.uint8)
        view, got = buffer.data, 0
        while got < size:
            n = os.readv(conn.fileno(), [view[got:]])
            if not n:
                raise EOFError("the worker's socket closed mid-result")
            got += n
        buffers.append(buffer)
    return reply[:1] == _OK_DREW, (header, buffers)


class WorkerGone(Exception):
    """A worker's socket closed: while task ``index`` of this map was on it, or
    (``unstarted``) before the worker had any of this map's tasks."""

    def __init__(self, index: int, pending: list[int], unstarted: bool = False) -> None:
        super().__init__(index, pending)
        self.index, self.pending, self.unstarted = index, pending, unstarted


class NotStarted(Exception):
    """The workers had not all connected ``seconds`` after the lane began (``started``
    of its ``n_workers`` had): one hangs while starting."""

    def __init__(self, seconds: float, started: int, n_workers: int) -> None:
        super().__init__(seconds, started, n_workers)
        self.seconds, self.started, self.n_workers = seconds, started, n_workers


class TimedOut(Exception):
    """The map's deadline passed with tasks ``running`` and ``not_started`` (None: none
    had started, the workers were still starting)."""

    def __init__(self, running: list[int], not_started: list[int] | None) -> None:
        super().__init__(running, not_started)
        self.running, self.not_started = running, not_started


def _left(deadline: float | None) -> float | None:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class Lane:
    """The parent's end: a socket per worker, the tasks in flight, the tasks owed. Not
    thread-safe: the executor holds a lock around :meth:`run`."""

    def __init__(self, pool: Any, n_workers: int, preload: Iterable[str], idle_timeout: float) -> None:
        if not hasattr(socket, "AF_UNIX"):  # pragma: no cover - Windows
            raise NotImplementedError(
                "the 'processes' executor talks to its workers over Unix sockets, which this "
                "platform lacks: use the 'threads' or 'dask' executor")
        self._folder = tempfile.mkdtemp(prefix="executors-lane-")  # 0700: only this user
        # removed once every worker has connected (ready()); this covers a lane dropped before
        self._remove_folder = weakref.finalize(self, shutil.rmtree, self._folder, ignore_errors=True)
        address = os.path.join(self._folder, "s")
        self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._listener.bind(address)
        self._listener.listen(n_workers)
        self._listener.setblocking(False)
        self.n_workers = n_workers
        self.futures = [pool.submit(serve, address, tuple(preload), idle_timeout) for _ in range(n_workers)]
        self.began = time.monotonic()  # the workers start now
        self.conns: list[Connection] = []
        self._owed: set[Connection] = set()  # a task of a map that raised is still on it
        self._accepting = threading.Lock()  # ready() may be asked while a map waits
        _open_lanes.add(self)

    def ready(self) -> bool:
        """Accept the workers that have connected so far; True once all have."""
        if len(self.conns) == self.n_workers:
            return True
        with self._accepting:
            while len(self.conns) < self.n_workers:
                try:
                    sock, _ = self._listener.accept()
                except (BlockingIOError, InterruptedError, OSError):  # none yet, or closed
                    return False
                sock.setblocking(True)
                conn = Connection(sock.detach())
                conn.recv_bytes()  # the worker's hello: it is serving
                self.conns.append(conn)
            # nobody else may connect, and nothing is left on disk should this process be killed
            self._listener.close()
            self._remove_folder()
            return True

    def wait_ready(self, failed: Callable[[], BaseException | None], deadline: float | None = None) -> None:
        """Block until every worker has connected; ``failed()`` returns an error to raise
        (a worker died while starting) or None. Past ``deadline`` (``time.monotonic``),
        :class:`TimedOut`; past ``start_seconds`` since the lane began, :class:`NotStarted`."""
        while not self.ready():
            wait([self._listener], timeout=0.05)
            error = failed()
            if error is not None:
                raise error
            now = time.monotonic()
            if deadline is not None and now > deadline:
                raise TimedOut([], None)
            waited = now - self.began
            if waited > START_SECONDS and waited > (bound := start_seconds(self.n_workers)):
                raise NotStarted(bound, len(self.conns), self.n_workers)

    def serving(self) -> bool:
        """False once a worker's serve task has ended (it sat idle for idle_timeout)."""
        return not any(f.done() for f in self.futures)

    def run(self, tasks: list[tuple[int, bytes]], on_result: Callable[[int, Any, bool], None],
            on_done: Callable[[int], None] | None, ahead: Callable[[], int] | None = None,
            deadline: float | None = None) -> None:
        """Send ``tasks`` (item index, pickled ``run_task`` arguments) to the workers, one
        at a time each (and none from index ``ahead()`` on, where given); ``on_result(i,
        data, drew)`` for each result, in completion order (``drew``: see ``run_task``).
        The first error raised by a task is raised here, rebuilt, with
        ``executors_lane_index`` set; a dead worker raises
        :class:`WorkerGone`; past ``deadline`` (``time.monotonic``), :class:`TimedOut`.
        Tasks still running then are owed: their replies are read and dropped before the
        worker gets another."""
        self._settle_owed()
        idle = self.conns[::-1]  # popped from the end: worker 0 first
        on: dict[Connection, int] = {}
        waiting = tasks[::-1]  # popped from the end: in item order

        def send_while_idle():
            while idle and waiting and (ahead is None or waiting[-1][0] < ahead()):
                conn = idle.pop()
                i, task = waiting.pop()
                try:
                    conn.send_bytes(task)
                except OSError:  # it had died before it got this task
                    raise WorkerGone(-1, [], unstarted=True) from None
                on[conn] = i

        try:
            send_while_idle()
            while on:
                ready_now = wait(list(on), _left(deadline))
                if not ready_now:
                    raise TimedOut(sorted(on.values()), [j for j, _ in reversed(waiting)])
                for ready in ready_now:
                    conn = typing.cast(Connection, ready)
                    i = on.pop(conn)
                    try:
                        reply = _receive(conn)
                    except (EOFError, OSError):
                        raise WorkerGone(i, sorted({*on.values(), *(j for j, _ in waiting)})) from None
                    idle.append(conn)
                    if type(reply) is not tuple:  # an error
                        exc, text = pickle.loads(reply)
                        exc.__cause__ = RemoteTraceback(text)
                        exc.executors_lane_index = i
                        raise exc
                    if on_done is not None:
                        on_done(i)
                    drew, data = reply
                    on_result(i, data, drew)
                send_while_idle()
        except BaseException:
            self._owed.update(on)
            raise

    def _settle_owed(self) -> None:
        for conn in list(self._owed):
            try:
                _receive(conn)  # the reply of a task whose map raised: nobody reads it
            except (EOFError, OSError):
                raise WorkerGone(-1, [], unstarted=True) from None
            self._owed.discard(conn)

    def close(self) -> None:
        """Hang up: each worker's serve task returns (after its running task, if any)."""
        _open_lanes.discard(self)
        with self._accepting:
            for conn in self.conns:
                conn.close()
            self.conns = []
            self._listener.close()
        self._remove_folder()


# A lane left open at exit (a script's executor never closed) would keep each worker's
# serve task running, and loky's exit handler waits for running tasks. loky registers that
# handler with threading's exit hooks (run before atexit's, last registered first) again
# with every new pool, so this one is registered after each new pool too.
_open_lanes: weakref.WeakSet[Lane] = weakref.WeakSet()


def _hang_up_all() -> None:
    for lane in list(_open_lanes):
        lane.close()


def register_exit_hook() -> None:
    """Hang up every lane at exit, before loky's exit handler (call after each new pool)."""
    register = getattr(threading, "_register_atexit", None)  # what loky and concurrent.futures use
    if register is None:  # pragma: no cover - no such hook in this Python
        atexit.register(_hang_up_all)
        return
    try:
        register(_hang_up_all)
    except RuntimeError:  # already shutting down
        pass
