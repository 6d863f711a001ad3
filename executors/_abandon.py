"""Telling the tasks of a map that raised to stop.

When one item raises, the map raises at once, but tasks already handed to the workers
would run on: loky feeds workers ahead of time, Dask cannot stop a running task, and a
thread cannot be stopped at all. A script would then wait at exit for work whose results
nobody reads, and the next map would wait behind it. So each map carries a flag, set
when the map raises (or is interrupted); tasks that have not started yet return at once,
a task running several pieces of work (psum's batches of chunks) asks
:func:`abandoned` between them, and a differentiation running in a task asks
:func:`watcher`'s test at each traced operation and raises :class:`Abandoned`.

Threads share an ``Event``. Worker processes on this machine (loky's, a Dask
``LocalCluster``'s) look for a file, created when the flag is set (a thread of theirs
looks every ``POLL_SECONDS`` for the tracer's sake); workers elsewhere do not see it and
run their tasks to the end.
"""

from __future__ import annotations

import atexit
import collections
import contextvars
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

_FLAG: contextvars.ContextVar[Any] = contextvars.ContextVar("executors_abandon", default=None)


def abandoned() -> bool:
    """True inside a task whose map has already raised: its result will not be read,
    so work split in pieces may stop between them.

    >>> import executors
    >>> executors.abandoned()
    False
    """
    flag = _FLAG.get()
    return flag is not None and flag.is_set()


class Abandoned(Exception):
    """Raised inside a task whose map has already raised, by work that stops mid-way
    (the tracer, at its next operation): nobody reads the result."""


def watcher() -> Callable[[], bool] | None:
    """A test, cheap enough to ask at every operation, of whether the current task's map
    has raised (an Event's flag: in a worker process, one thread looks for the flag
    file every ``POLL_SECONDS`` and sets it); None outside a task.

    >>> watcher() is None
    True
    """
    flag = _FLAG.get()
    if type(flag) is ThreadFlag:
        return flag._event.is_set
    if type(flag) is FileFlag:
        event = _poller.event(flag.path)
        return event.is_set if event is not None else None
    return None


def watch(flag: Any) -> None:
    """A task of ``flag``'s map starts in this process: look for its file (until
    ``leave``), so that ``watcher`` reads an Event."""
    if type(flag) is FileFlag:
        _poller.watch(flag.path)


def leave(flag: Any) -> None:
    """That task is over."""
    if type(flag) is FileFlag:
        _poller.forget(flag.path)


POLL_SECONDS = 0.05


class _Poller:
    """The flag files of the maps whose tasks run in this process, looked for by one
    daemon thread, started on first use: the tracer asks an Event at each operation
    (~30 ns), where a file lookup would be a system call."""

    def __init__(self) -> None:
        self._events: dict[str, threading.Event] = {}
        self._tasks: collections.Counter[str] = collections.Counter()  # running, by path
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, path: str) -> None:
        with self._changed:
            if path not in self._events:
                self._events[path] = threading.Event()
                self._changed.notify()
            self._tasks[path] += 1
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="executors-abandon-poller",
                                                daemon=True)
                self._thread.start()

    def forget(self, path: str) -> None:
        with self._changed:
            self._tasks[path] -= 1
            if self._tasks[path] <= 0:
                del self._tasks[path]
                self._events.pop(path, None)

    def event(self, path: str) -> threading.Event | None:
        """The Event set once ``path`` exists, while it is watched."""
        return self._events.get(path)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self._events:
                    self._changed.wait()
                watched = list(self._events.items())
            for path, event in watched:
                if not event.is_set() and os.path.exists(path):
                    event.set()
            time.sleep(POLL_SECONDS)


_poller = _Poller()


def enter(flag: Any) -> None:
    """Make ``flag`` the current task's (through ``Context.run`` on the task's context)."""
    _FLAG.set(flag)


class ThreadFlag:
    """The flag of a map on threads of this process."""

    __slots__ = ("_event",)

    def __init__(self) -> None:
        self._event = threading.Event()

    def set(self) -> None:
        self._event.set()

    def is_set(self) -> bool:
        return self._event.is_set()


class FileFlag:
    """The flag of a map on worker processes: set, a file exists. Picklable: its path."""

    __slots__ = ("path",)

    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.path.join(_folder(), uuid.uuid4().hex)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (FileFlag, (self.path,))

    def set(self) -> None:
        try:
            _make_folder()
            with open(self.path, "x"):
                pass
        except OSError:  # set already, or the folder is gone (at exit): nothing to stop
            return
        with _lock:
            _made.append(self.path)
            old = _made.popleft() if len(_made) > _KEEP else None
        if old is not None:  # a long program with many failed maps: keep the recent ones
            _remove(old)

    def is_set(self) -> bool:
        return os.path.exists(self.path)


_KEEP = 64  # flag files kept: tasks of older failed maps have long ended
_made: collections.deque[str] = collections.deque()
_lock = threading.Lock()
_folder_path: str | None = None
_folder_made = False


def _folder() -> str:
    """This process's folder of flag files (named once, made when a flag is first set),
    in memory where Linux offers it."""
    global _folder_path
    with _lock:
        if _folder_path is None:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            _folder_path = os.path.join(base, f"executors-stop-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        return _folder_path


def _make_folder() -> None:
    global _folder_made
    path = _folder()
    with _lock:
        if not _folder_made:
            os.makedirs(path, exist_ok=True)
            atexit.register(shutil.rmtree, path, True)
            _folder_made = True


def _remove(path: str) -> None:
    try:
        os.remove(path)
    except OSError:
        pass
