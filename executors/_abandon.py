"""Telling the tasks of a map that raised to stop.

When one item raises, the map raises at once, but tasks already handed to the workers
would run on: loky feeds workers ahead of time, Dask cannot stop a running task, and a
thread cannot be stopped at all. A script then waited at exit for work whose results
nobody reads, and the next map waited behind it. So each map carries a flag, set when
the map raises (or is interrupted); tasks that have not started yet return at once,
and a task running several pieces of work (psum's batches of chunks) asks
:func:`abandoned` between them.

Threads share an ``Event``. Worker processes on this machine (loky's, a Dask
``LocalCluster``'s) look for a file, created when the flag is set; workers elsewhere do
not see it and run their tasks to the end, as before.
"""

from __future__ import annotations

import atexit
import collections
import contextvars
import os
import shutil
import tempfile
import threading
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
    has raised; None outside a task, and in worker processes, where the test is a file
    lookup (those are stopped otherwise: loky's are killed on Ctrl-C).

    >>> watcher() is None
    True
    """
    flag = _FLAG.get()
    return flag._event.is_set if type(flag) is ThreadFlag else None


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
