"""Context state seen by callers and by chunk work: settings and the worker flag.

Here, at the bottom of the import graph, so that every module can read them:

* ``SETTINGS`` -- the values set by :func:`executors.config`; each thread and asyncio
  task sees its own, and nested ``config`` blocks restore the outer value on exit.
* the *in-worker* flag -- True while chunk work runs: set in a per-task copy of the
  caller's context on serial/threads, for good in process/dask worker processes::

      caller thread                       worker (thread / process)
      ─────────────                       ─────────────────────────
      SETTINGS = (threads, 2, chunk=8)
      map(fn, items) ──── task ────────▶  copy of caller context (threads)
                                          or fresh context (processes/dask)
                                          with  in_worker() = True,
                                                current_chunk_size() = 8
"""

from __future__ import annotations

import contextvars
import dataclasses
from typing import Any

__all__ = ["Settings", "SETTINGS", "in_worker", "mark_process_worker", "enter_worker", "mark_worker",
           "unmark_worker"]


@dataclasses.dataclass(frozen=True)
class Settings:
    """Values set by ``executors.config``; ``None`` means "not set here"."""

    executor: Any = None  # an Executor or a backend name (base.py sits above this module)
    n_workers: int | None = None
    chunk_size: int | None = None
    dispatch: str | None = None


SETTINGS: contextvars.ContextVar[Settings] = contextvars.ContextVar("executors_settings", default=Settings())
_IN_WORKER: contextvars.ContextVar[bool] = contextvars.ContextVar("executors_in_worker", default=False)
_PROCESS_WORKER = False


def in_worker() -> bool:
    """True while running inside chunk work of a map (any backend).

    There :func:`executors.resolve` returns a serial executor and ``Executor.map`` runs
    inline, so nested parallel calls neither deadlock nor oversubscribe the machine.

    >>> import executors
    >>> executors.in_worker()
    False
    >>> executors.SerialExecutor().map(lambda x: executors.in_worker(), [0])
    [True]
    """
    return _PROCESS_WORKER or _IN_WORKER.get()


def mark_process_worker() -> None:
    """Mark this whole process as a worker process (loky / dask workers)."""
    global _PROCESS_WORKER
    _PROCESS_WORKER = True


def enter_worker(chunk_size: int | None = None, *, keep_settings: bool = True) -> None:
    """Set the in-worker flag (and settings) in the *current* context: call it through
    ``Context.run`` on a copy thrown away after the task."""
    _IN_WORKER.set(True)
    if not keep_settings:
        SETTINGS.set(Settings(chunk_size=chunk_size))


def mark_worker() -> contextvars.Token[bool]:
    """Set the in-worker flag in the current context until ``unmark_worker(token)``."""
    return _IN_WORKER.set(True)


unmark_worker = _IN_WORKER.reset
