"""Which executor to use: per-call argument > ``config`` context > env var > default.

::

    resolve(executor=None, n_workers=None)
      ├─ inside chunk work (in_worker())  ──────────────▶ SerialExecutor (nested calls)
      ├─ executor argument  (instance or name)
      ├─ config(executor=...) in this context (contextvars: per thread, nestable)
      ├─ ADRULES_EXECUTOR = NAME | NAME:N  (read now, at resolve time)
      └─ built-in default: "threads" with the usable CPU count
    name ──▶ cache[(name, n_workers)] ──▶ one executor per key, pools kept alive,
                                          closed at interpreter exit (atexit)

``n_workers`` comes from the argument, else from ``config``, else from the
``:N`` of the environment variable (only when the variable also chose the
executor), else the usable CPU count.  An ``Executor`` instance is used as is.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading

from . import _context
from .base import Executor, backend_names, check_positive_int, create_backend, usable_cpu_count

__all__ = ["config", "resolve", "current_chunk_size", "ENV_VAR", "DEFAULT_EXECUTOR"]

ENV_VAR = "ADRULES_EXECUTOR"
DEFAULT_EXECUTOR = "threads"


def _valid_forms() -> str:
    names = ", ".join(repr(n) for n in backend_names())
    return f"NAME or NAME:N with NAME one of {names} and N a positive integer (e.g. 'processes:4')"


def _check_executor(executor, where="executor"):
    if executor is None or isinstance(executor, Executor):
        return executor
    if isinstance(executor, str):
        if executor in backend_names():
            return executor
        raise ValueError(
            f"{where}={executor!r} is not a known executor: use an Executor instance or "
            f"one of {', '.join(repr(n) for n in backend_names())}"
        )
    raise TypeError(
        f"{where} must be an Executor instance or a name, got {type(executor).__name__}"
    )


@contextlib.contextmanager
def config(executor=None, n_workers=None, chunk_size=None):
    """Set the executor, worker count and/or chunk size for the enclosed code.

    Based on ``contextvars``: each thread (and asyncio task) has its own
    setting, nested blocks override only what they give and restore the outer
    values on exit.  ``executor`` is an :class:`Executor` instance or a name
    ("serial", "threads", "processes", "dask").  Yields the merged settings.

    >>> import executors
    >>> with executors.config(executor="serial", chunk_size=8):
    ...     with executors.config(chunk_size=2):
    ...         print(executors.resolve().name, executors.current_chunk_size())
    ...     print(executors.current_chunk_size())
    serial 2
    8
    """
    executor = _check_executor(executor)
    n_workers = check_positive_int(n_workers, "n_workers")
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    if isinstance(executor, Executor) and n_workers is not None:
        raise ValueError("give n_workers only with an executor name, not with an Executor instance")
    outer = _context.SETTINGS.get()
    new = _context.Settings(
        executor=executor if executor is not None else outer.executor,
        n_workers=n_workers if n_workers is not None else outer.n_workers,
        chunk_size=chunk_size if chunk_size is not None else outer.chunk_size,
    )
    token = _context.SETTINGS.set(new)
    try:
        yield new
    finally:
        _context.SETTINGS.reset(token)


def current_chunk_size():
    """The ``chunk_size`` set by the innermost ``config`` block, or None.

    Inside chunk work it is the caller's value, on every backend.

    >>> import executors
    >>> executors.current_chunk_size() is None
    True
    >>> with executors.config(chunk_size=4):
    ...     executors.current_chunk_size()
    4
    """
    return _context.SETTINGS.get().chunk_size


def _parse_env():
    """``(name, n_workers)`` from ADRULES_EXECUTOR, or None if unset/empty."""
    raw = os.environ.get(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    text = raw.strip().lower()
    name, sep, count = text.partition(":")
    name = name.strip()
    n = None
    ok = name in backend_names()
    if ok and sep:
        count = count.strip()
        ok = count.isdigit() and int(count) >= 1
        n = int(count) if ok else None
    if not ok:
        raise ValueError(f"{ENV_VAR}={raw!r} is not valid: expected {_valid_forms()}")
    return name, n


_cache: dict = {}
_cache_lock = threading.Lock()
_atexit_registered = False
_SERIAL = None


def _serial():
    global _SERIAL
    if _SERIAL is None:
        from .local import SerialExecutor

        _SERIAL = SerialExecutor()
    return _SERIAL


def _cached(name, n_workers):
    global _atexit_registered
    if name == "serial":
        return _serial()
    key = (name, n_workers if n_workers is not None else usable_cpu_count())
    with _cache_lock:
        ex = _cache.get(key)
        if ex is None:
            ex = create_backend(name, key[1])
            _cache[key] = ex
            if not _atexit_registered:
                # registered after the first backend exists, so it runs before the
                # atexit hooks of libraries imported to build it (loky, distributed)
                atexit.register(_close_cached)
                _atexit_registered = True
        return ex


def _close_cached():
    with _cache_lock:
        items = list(_cache.items())
        _cache.clear()
    for _, ex in reversed(items):
        try:
            ex.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


def resolve(executor=None, n_workers=None) -> Executor:
    """Return the executor to use, applying the precedence rules.

    Per-call ``executor``/``n_workers`` > ``config(...)`` > ``ADRULES_EXECUTOR``
    (``NAME`` or ``NAME:N``) > built-in default ``"threads"`` with the usable
    CPU count.  Executors chosen by name are cached per ``(name, n_workers)``
    and reused (pools stay alive; closed at interpreter exit).  Inside chunk
    work it returns a serial executor.

    >>> import executors
    >>> executors.resolve("serial").name
    'serial'
    >>> executors.resolve("threads", 2) is executors.resolve("threads", 2)
    True
    >>> with executors.config(executor="threads", n_workers=2):
    ...     executors.resolve().n_workers
    2
    """
    executor = _check_executor(executor)
    n_workers = check_positive_int(n_workers, "n_workers")
    if isinstance(executor, Executor) and n_workers is not None:
        raise ValueError("give n_workers only with an executor name, not with an Executor instance")
    if _context.in_worker():
        return _serial()
    ctx = _context.SETTINGS.get()
    env_n = None
    if executor is not None:
        choice = executor
    elif ctx.executor is not None:
        choice = ctx.executor
    else:
        env = _parse_env()
        if env is not None:
            choice, env_n = env
        else:
            choice = DEFAULT_EXECUTOR
    if isinstance(choice, Executor):
        return choice
    if n_workers is None:
        n_workers = ctx.n_workers if ctx.n_workers is not None else env_n
    return _cached(choice, n_workers)
