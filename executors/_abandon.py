"""Telling the tasks of a map that raised to stop.

Tasks already handed to workers would run on after their map raised (a thread cannot be
stopped, nor a running Dask task), and later work would wait behind them. So each map
carries a flag, set when it raises or is interrupted: tasks not started yet return at once,
a task running several pieces of work asks :func:`abandoned` between them, and the tracer
asks :func:`abandoned_test`'s test at each operation and raises :class:`Abandoned`.

Threads share an ``Event``. Worker processes on this machine (loky's, a ``LocalCluster``'s)
look for a file created when the flag is set (one thread of theirs every ``POLL_SECONDS``);
workers elsewhere do not see it and run their tasks to the end.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import contextvars
import os
import shutil
import tempfile
import threading
import time
import uuid
from typing import Any, Callable

from ._leftovers import remove_stale_folders

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
    (the tracer, at its next operation): nobody reads the result, and the executor drops it.

    >>> import executors
    >>> issubclass(executors.Abandoned, Exception)
    True
    """


def abandoned_test() -> Callable[[], bool] | None:
    """A test, cheap enough to ask at every operation, of whether the current task's map
    has raised (an Event's ``is_set``); None outside a task. Work that stops mid-way when
    it says yes raises :class:`Abandoned`, which the executor drops.

    >>> import executors
    >>> executors.abandoned_test() is None
    True
    """
    flag = _FLAG.get()
    if type(flag) is ThreadFlag:
        return flag.is_set
    if type(flag) is FileFlag:
        event = _poller.events.get(flag.path)  # set once the file exists, while it is watched
        return event.is_set if event is not None else None
    return None


def watch(flag: Any) -> None:
    """A task of ``flag``'s map starts in this process: look for its file (until
    ``leave``), so that ``abandoned_test`` reads an Event."""
    if type(flag) is FileFlag:
        _poller.watch(flag.path)


def leave(flag: Any) -> None:
    """That task is over."""
    if type(flag) is FileFlag:
        _poller.forget(flag.path)


POLL_SECONDS = 0.05


class _Poller:
    """The flag files of the maps whose tasks run in this process, looked for by one daemon
    thread started on first use, so that the tracer asks an Event rather than the file system."""

    def __init__(self) -> None:
        self.events: dict[str, threading.Event] = {}
        self._tasks: collections.Counter[str] = collections.Counter()  # running, by path
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, path: str) -> None:
        with self._changed:
            if path not in self.events:
                self.events[path] = threading.Event()
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
                self.events.pop(path, None)

    def _run(self) -> None:
        while True:
            with self._changed:
                while not self.events:
                    self._changed.wait()
                watched = list(self.events.items())
            for path, event in watched:
                if not event.is_set() and os.path.exists(path):
                    event.set()
            time.sleep(POLL_SECONDS)


_poller = _Poller()


enter = _FLAG.set  # enter(flag) makes it the current task's (through Context.run on the task's context)


class ThreadFlag(threading.Event):
    """The flag of a map on threads of this process."""


class FileFlag:
    """The flag of a map on worker processes: set, a file exists. Picklable: its path."""

    __slots__ = ("path",)

    def __init__(self, path: str | None = None) -> None:
        self.path = path if path is not None else os.path.join(_folder(), uuid.uuid4().hex)

    def __reduce__(self) -> tuple[type, tuple[str]]:
        return (FileFlag, (self.path,))

    def set(self) -> None:
        try:
            _folder(make=True)
            open(self.path, "x").close()
        except OSError:  # set already, or the folder is gone (at exit): nothing to stop
            return
        with _lock:
            _made.append(self.path)
            old = _made.popleft() if len(_made) > _KEEP else None
        if old is not None:  # a long program with many failed maps: keep the recent ones
            with contextlib.suppress(OSError):
                os.remove(old)

    def is_set(self) -> bool:
        return os.path.exists(self.path)


_KEEP = 64  # flag files kept: tasks of older failed maps have long ended
_made: collections.deque[str] = collections.deque()
_lock = threading.Lock()
_folder_path: str | None = None
_folder_made = False


def _folder(make: bool = False) -> str:
    """This process's folder of flag files (named once, made when a flag is first set),
    in memory where Linux offers it."""
    global _folder_path, _folder_made
    with _lock:
        if _folder_path is None:
            base = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
            _folder_path = os.path.join(base, f"executors-stop-{os.getpid()}-{uuid.uuid4().hex[:8]}")
        if make and not _folder_made:
            remove_stale_folders(os.path.dirname(_folder_path), "executors-stop-")  # of processes killed before they could
            os.makedirs(_folder_path, mode=0o700, exist_ok=True)  # this user's (workers run as them)
            atexit.register(shutil.rmtree, _folder_path, True)
            _folder_made = True
        return _folder_path
