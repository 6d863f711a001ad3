"""Tracebacks and warnings that point at the user's code, not at the library's.

An error raised by a user's function in a map travels through a dozen frames of this
package, of the package that called it (adrules registers itself) and of loky,
concurrent.futures or Dask. Where it leaves the library, those frames are unlinked from
its traceback (in place, as Dask's ``shorten_traceback`` does, so that Python 3.10's bare
``raise`` keeps the change), and from those of the exceptions it chains::

    File "script.py", line 11, in <module>       the user's frames stay
    File ".../adrules/_psum/parallel.py", in psum the frame that handles it: where the user called
    [library frames: unlinked]
    File "script.py", line 5, in loss            the user's frames stay
    [library frames: unlinked, but the last]     where it was raised, if in the library

An error from a worker process carries the worker's traceback as text (its ``__cause__``,
a :class:`RemoteTraceback`), shortened the same way before it was formatted there.
``ADRULES_FULL_TRACEBACK=1`` in the environment keeps every frame.
"""

from __future__ import annotations

import os
import sys
import traceback
import warnings
from types import FrameType, TracebackType
from typing import Literal

__all__ = ["RemoteTraceback", "hide_frames_of", "hide_library_frames", "user_frames", "remote_text", "warn", "user_frame"]

#: top-level packages whose frames a traceback shown to the user leaves out
LIBRARIES = {"executors", "loky", "joblib", "concurrent", "distributed", "dask", "tornado", "cloudpickle", "tblib"}


class RemoteTraceback(Exception):
    """The traceback of an error raised on a worker, its ``__cause__`` (as loky does)."""

    def __str__(self) -> str:
        return f'\n"""\n{self.args[0]}"""'


def hide_frames_of(package: str) -> None:
    """Leave the frames of ``package`` (a top-level package name) out of the tracebacks
    that errors leaving the library show.

    >>> hide_frames_of("executors")
    """
    LIBRARIES.add(package)


def full_tracebacks() -> bool:
    """Whether ``ADRULES_FULL_TRACEBACK`` asks for every frame (read when an error happens)."""
    return os.environ.get("ADRULES_FULL_TRACEBACK", "").strip().lower() not in ("", "0", "false", "no")


def _in_library(frame: FrameType) -> bool:
    name = frame.f_globals.get("__name__")
    return type(name) is str and name.partition(".")[0] in LIBRARIES


def hide_library_frames(exc: BaseException) -> BaseException:
    """Unlink library frames from the tracebacks of ``exc`` and the exceptions it chains,
    in place; each keeps its first frame (the frame handling it) and its last (where it
    was raised) unless it came from a worker process, whose own traceback says where.

    >>> import executors
    >>> try:
    ...     executors.SerialExecutor().map(lambda x: 1 / x, [0])
    ... except ZeroDivisionError as e:
    ...     [f.name for f in traceback.extract_tb(e.__traceback__)]
    ['<module>', 'map', '<lambda>']
    """
    if full_tracebacks():
        return exc
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen or isinstance(e, RemoteTraceback):
            continue
        seen.add(id(e))
        _unlink(e.__traceback__, keep_last=not isinstance(e.__cause__, RemoteTraceback))
        todo += [e.__cause__, e.__context__]
    return exc


class user_frames:
    """``with user_frames():`` around where the library is entered: an exception leaving
    the block has its library frames hidden (see :func:`hide_library_frames`); the frame
    of the ``with`` stays, naming the entry point.

    >>> import executors
    >>> def entry(fn):
    ...     with user_frames():
    ...         return executors.SerialExecutor().map(fn, [0])
    >>> try:
    ...     entry(lambda x: 1 / x)
    ... except ZeroDivisionError as e:
    ...     [f.name for f in traceback.extract_tb(e.__traceback__)]
    ['<module>', 'entry', '<lambda>']
    """

    __slots__ = ()

    def __enter__(self) -> None:
        pass

    def __exit__(self, kind: object, exc: BaseException | None, tb: object) -> Literal[False]:
        if isinstance(exc, Exception):
            hide_library_frames(exc)
        return False


def _unlink(head: TracebackType | None, keep_last: bool) -> None:
    if head is None:
        return
    kept, tb = head, head.tb_next
    while tb is not None:
        after = tb.tb_next
        if not _in_library(tb.tb_frame) or (after is None and keep_last):
            kept.tb_next = kept = _rebuilt(tb)
        tb = after
    kept.tb_next = None


def _rebuilt(tb: TracebackType) -> TracebackType:
    """``tb``, or for a frame that Dask's tblib rebuilt from a worker's (code that runs
    ``raise __traceback_maker`` at the line), the same without its code positions: the
    stub's would put the carets under the wrong part of the user's line."""
    if "__traceback_maker" not in tb.tb_frame.f_code.co_names:
        return tb
    return TracebackType(None, tb.tb_frame, -1, tb.tb_lineno)


def remote_text(exc: BaseException) -> str:
    """``exc`` with its traceback, formatted on a worker to travel with it, library frames
    left out (the first too: the worker's own loop)."""
    hide_library_frames(exc)
    tb = exc.__traceback__
    if tb is not None and tb.tb_next is not None and not full_tracebacks() and _in_library(tb.tb_frame):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb))


def warn(message: str, category: type[Warning] = UserWarning) -> None:
    """``warnings.warn`` attributed to the first frame outside the library: the line of
    the user's code that called it, whatever the depth of the library's calls.

    >>> import warnings
    >>> script = compile("def call():\\n    warn('look here')\\n\\ncall()", "script.py", "exec")
    >>> with warnings.catch_warnings(record=True) as seen:
    ...     warnings.simplefilter("always")
    ...     exec(script, {"warn": warn, "__name__": "__main__"})
    >>> seen[0].filename, seen[0].lineno
    ('script.py', 2)
    """
    level, frame = 1, sys._getframe(0)
    while _in_library(frame) and frame.f_back is not None:
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)


def user_frame() -> FrameType | None:
    """The innermost frame of the calling thread outside the library (None if none is).

    >>> script = compile("frame = user_frame()", "script.py", "exec")
    >>> exec(script, names := {"user_frame": user_frame, "__name__": "__main__"})
    >>> names["frame"].f_code.co_filename
    'script.py'
    """
    frame: FrameType | None = sys._getframe(0)
    while frame is not None and _in_library(frame):
        frame = frame.f_back
    return frame
