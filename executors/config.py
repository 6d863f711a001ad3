"""Which executor to use: per-call argument > ``config`` context > env var > default.

::

    resolve(executor=None, n_workers=None)
      ├─ inside chunk work (in_worker())  ──────────────▶ SerialExecutor (nested calls)
      ├─ executor argument  (instance or name)
      ├─ config(executor=...) in this context (contextvars: per thread, nestable)
      ├─ ADRULES_EXECUTOR = NAME | NAME:N  (read now, at resolve time)
      └─ built-in default: "threads" with the usable CPU count
    name ──▶ BACKENDS[name](n_workers) ──▶ cache[(name, n_workers)] ──▶ one executor per
                                          key, pools kept alive, closed at interpreter exit

``n_workers`` comes from the argument, else from ``config``, else from the
``:N`` of the environment variable (only when the variable also chose the
executor), else the usable CPU count.  An ``Executor`` instance is used as is.

``dispatch`` ("auto" or "always") follows the same precedence, with the
``ADRULES_DISPATCH`` variable and "auto" as the default: see :func:`resolve_dispatch`.

The backend table lives here, beside its only user: ``register_backend(name,
factory)`` adds a name; the Dask factory imports ``distributed`` only when called.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from typing import Callable, Iterator, Literal, Optional, TypeVar

from . import _context
from .base import ENV_VAR, Executor, check_positive_int, usable_cpu_count
from .local import ProcessExecutor, SerialExecutor, ThreadExecutor

__all__ = [
    "config",
    "resolve",
    "resolve_dispatch",
    "current_chunk_size",
    "register_backend",
    "backend_names",
    "create_backend",
    "ENV_VAR",
    "DISPATCH_ENV_VAR",
    "DEFAULT_EXECUTOR",
    "DISPATCH_CHOICES",
]

#: The dispatch policies: see :func:`resolve_dispatch`.
Dispatch = Literal["auto", "always"]
_S = TypeVar("_S", bound=Optional[str])

def _getenv(name: str) -> str | None:
    """``os.environ.get(name)``, read now (a test or a notebook may set it between calls),
    without the KeyError ``Mapping.get`` raises and catches for an unset variable (two
    variables, usually unset, read by every psum: of tiny work too). CPython's ``os.environ``
    keeps its encoded entries in ``_data``; elsewhere, the public way."""
    data = getattr(os.environ, "_data", None)
    if data is None:  # pragma: no cover - not CPython
        return os.environ.get(name)
    raw = data.get(os.environ.encodekey(name))
    return None if raw is None else os.environ.decodevalue(raw)


# ---------------------------------------------------------------- backend table


def _dask_factory(n_workers: int | None = None) -> Executor:
    from .dask import DaskExecutor  # distributed is an optional extra: import on use

    # its cluster starts when work that gains on it is sent (or at start()), as a pool's workers do
    return DaskExecutor(n_workers=n_workers, start=False)


def _joblib_factory(n_workers: int | None = None) -> Executor:
    from .joblib_backend import JoblibExecutor  # keeps `import executors` free of joblib

    # n_workers only fills in n_jobs when the active joblib.parallel_config sets none
    return JoblibExecutor(n_jobs=n_workers)


#: name -> ``factory(n_workers) -> Executor``, in the order names are listed to users
BACKENDS: dict = {
    "serial": lambda n_workers=None: SerialExecutor(),
    "threads": ThreadExecutor,
    "processes": ProcessExecutor,
    "dask": _dask_factory,
    "joblib": _joblib_factory,
}


def register_backend(name: str, factory: Callable[[int | None], Executor]) -> None:
    """Register ``factory(n_workers) -> Executor`` under ``name`` (a new name or a
    replacement), so ``config``, ``resolve`` and ``ADRULES_EXECUTOR`` accept it.

    >>> register_backend("serial", lambda n_workers=None: SerialExecutor())
    >>> resolve("serial").name
    'serial'
    """
    if not isinstance(name, str) or not name or ":" in name:
        raise ValueError(f"register_backend: name must be a non-empty string without ':', got {name!r}")
    if not callable(factory):
        raise TypeError(f"register_backend: factory must be callable, got {type(factory).__name__}")
    BACKENDS[name] = factory


def backend_names() -> tuple[str, ...]:
    """Names accepted by ``config``/``resolve``/``ADRULES_EXECUTOR``.

    >>> backend_names()[:4]
    ('serial', 'threads', 'processes', 'dask')
    """
    return tuple(BACKENDS)


def create_backend(name: str, n_workers: int | None = None) -> Executor:
    """Build a new (uncached) executor from its registered name.

    >>> with create_backend("threads", 2) as ex:
    ...     ex.n_workers
    2
    """
    return BACKENDS[name](n_workers)


DEFAULT_EXECUTOR = "threads"
DISPATCH_ENV_VAR = "ADRULES_DISPATCH"
#: "auto": chunks whose work cannot pay for dispatch run inline; "always": every chunk
#: goes to the executor (to check that work runs and pickles there, or to benchmark it)
DISPATCH_CHOICES = ("auto", "always")


def _valid_forms() -> str:
    names = ", ".join(repr(n) for n in backend_names())
    return f"NAME or NAME:N with NAME one of {names} and N a positive integer (e.g. 'processes:4')"


def _check_executor(executor: Executor | str | None, n_workers: int | None,
                    where: str = "executor") -> tuple[Executor | str | None, int | None]:
    """``(executor, n_workers)`` checked; a name may carry its worker count, "processes:4"
    (as ``ADRULES_EXECUTOR`` does), which ``n_workers`` must then not contradict."""
    n_workers = check_positive_int(n_workers, "n_workers")
    if executor is None or isinstance(executor, Executor):
        if isinstance(executor, Executor) and n_workers is not None:
            raise ValueError("give n_workers only with an executor name, not with an Executor instance")
        return executor, n_workers
    if not isinstance(executor, str):
        raise TypeError(f"{where} must be an Executor instance or a name, got {type(executor).__name__}")
    parsed = _name_and_count(executor)
    if parsed is None:
        raise ValueError(f"{where}={executor!r} is not a known executor: use an Executor instance or "
                         f"{_valid_forms()}")
    name, count = parsed
    if count is not None and n_workers is not None and n_workers != count:
        raise ValueError(f"{where}={executor!r} and n_workers={n_workers} disagree: give the "
                         f"worker count once")
    return name, count if count is not None else n_workers


def _name_and_count(text: str) -> tuple[str, int | None] | None:
    """``(name, worker count or None)`` of ``"NAME"`` or ``"NAME:N"``, None if it is neither;
    the name in any case (as ``ADRULES_EXECUTOR`` is read).

    >>> _name_and_count("processes:4"), _name_and_count("THREADS"), _name_and_count("gpu")
    (('processes', 4), ('threads', None), None)
    """
    name, sep, count = text.partition(":")
    names = backend_names()
    if name not in names:
        name = {n.lower(): n for n in names}.get(name.strip().lower(), "")
        if not name:
            return None
    count = count.strip()
    if not sep:
        return name, None
    return (name, int(count)) if count.isdigit() and int(count) >= 1 else None


def _check_dispatch(dispatch: _S, where: str = "dispatch") -> _S:
    if dispatch is None or dispatch in DISPATCH_CHOICES:
        return dispatch
    raise ValueError(
        f"{where}={dispatch!r} is not valid: use one of "
        f"{', '.join(repr(c) for c in DISPATCH_CHOICES)} ('auto': chunks too small to pay "
        "for dispatch run inline; 'always': every chunk goes to the executor)"
    )


@contextlib.contextmanager
def config(
    executor: Executor | str | None = None,
    n_workers: int | None = None,
    chunk_size: int | None = None,
    dispatch: Dispatch | None = None,
) -> Iterator[_context.Settings]:
    """Set the executor, worker count, chunk size and/or dispatch policy for the enclosed code.

    Based on ``contextvars``: each thread (and asyncio task) has its own
    setting, nested blocks override only what they give and restore the outer
    values on exit.  ``executor`` is an :class:`Executor` instance or a name
    ("serial", "threads", "processes", "dask", "joblib": whatever
    ``joblib.parallel_config`` selects).  ``dispatch`` is "auto" (work
    too small to pay for dispatch runs inline) or "always" (every chunk goes to
    the executor).  Yields the merged settings.

    >>> import executors
    >>> with executors.config(executor="serial", chunk_size=8):
    ...     with executors.config(chunk_size=2, dispatch="always"):
    ...         print(executors.resolve().name, executors.current_chunk_size(),
    ...               executors.resolve_dispatch())
    ...     print(executors.current_chunk_size(), executors.resolve_dispatch())
    serial 2 always
    8 auto
    """
    executor, n_workers = _check_executor(executor, n_workers)
    chunk_size = check_positive_int(chunk_size, "chunk_size")
    dispatch = _check_dispatch(dispatch)
    outer = _context.SETTINGS.get()  # (an outer block's Executor instance ignores n_workers)
    new = _context.Settings(
        executor=executor if executor is not None else outer.executor,
        n_workers=n_workers if n_workers is not None else outer.n_workers,
        chunk_size=chunk_size if chunk_size is not None else outer.chunk_size,
        dispatch=dispatch if dispatch is not None else outer.dispatch,
    )
    token = _context.SETTINGS.set(new)
    try:
        yield new
    finally:
        _context.SETTINGS.reset(token)


def resolve_dispatch(dispatch: Dispatch | None = None) -> str:
    """The dispatch policy in force: argument > ``config(dispatch=...)`` >
    ``ADRULES_DISPATCH`` > "auto".

    >>> import executors
    >>> executors.resolve_dispatch(), executors.resolve_dispatch("always")
    ('auto', 'always')
    >>> executors.resolve_dispatch("sometimes")
    Traceback (most recent call last):
    ...
    ValueError: dispatch='sometimes' is not valid: use one of 'auto', 'always' ('auto': chunks too small to pay for dispatch run inline; 'always': every chunk goes to the executor)
    """
    if dispatch is not None:
        return _check_dispatch(dispatch)
    ctx = _context.SETTINGS.get().dispatch
    if ctx is not None:
        return ctx
    raw = _getenv(DISPATCH_ENV_VAR)
    if raw is None or not raw.strip():
        return "auto"
    return _check_dispatch(raw.strip().lower(), DISPATCH_ENV_VAR)


def current_chunk_size() -> int | None:
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


def _parse_env() -> tuple[str, int | None] | None:
    """``(name, n_workers)`` from ADRULES_EXECUTOR, or None if unset/empty."""
    raw = _getenv(ENV_VAR)
    if raw is None or not raw.strip():
        return None
    parsed = _name_and_count(":".join(part.strip() for part in raw.strip().lower().split(":", 1)))
    if parsed is None:
        raise ValueError(f"{ENV_VAR}={raw!r} is not valid: expected {_valid_forms()}")
    return parsed


_cache: dict = {}
_cache_lock = threading.Lock()
_SERIAL = SerialExecutor()


def _serial() -> SerialExecutor:
    return _SERIAL


def _cached(name: str, n_workers: int | None) -> Executor:
    if name == "serial":
        return _serial()
    key = (name, n_workers if n_workers is not None else usable_cpu_count())
    with _cache_lock:
        ex = _cache.get(key)
        if ex is None:
            ex = create_backend(name, key[1])
            _cache[key] = ex
            # registered again after each new backend exists, so that it runs before the
            # atexit hooks of the libraries imported to build it (loky, distributed: those
            # would tear a cluster down under the scattered data of a map still closing)
            atexit.unregister(_close_cached)
            atexit.register(_close_cached)
        return ex


def _close_cached() -> None:
    with _cache_lock:
        items = list(_cache.items())
        _cache.clear()
    for _, ex in reversed(items):
        try:
            ex.close()
        except Exception:  # pragma: no cover - best effort at exit
            pass


def resolve(executor: Executor | str | None = None, n_workers: int | None = None) -> Executor:
    """Return the executor to use, applying the precedence rules.

    Per-call ``executor``/``n_workers`` > ``config(...)`` > ``ADRULES_EXECUTOR``
    (``NAME`` or ``NAME:N``) > built-in default ``"threads"`` with the usable
    CPU count.  Executors chosen by name are cached per ``(name, n_workers)``
    and reused (pools stay alive; closed at interpreter exit).  Inside chunk
    work it returns a serial executor.

    >>> import executors
    >>> executors.resolve("serial").name
    'serial'
    >>> executors.resolve("threads", 2) is executors.resolve("threads:2")
    True
    >>> with executors.config(executor="threads", n_workers=2):
    ...     executors.resolve().n_workers
    2
    """
    executor, n_workers = _check_executor(executor, n_workers)
    if _context.in_worker():
        return _serial()
    ctx = _context.SETTINGS.get()
    env_n, from_env = None, False
    if executor is not None:
        choice = executor
    elif ctx.executor is not None:
        choice = ctx.executor
    else:
        env = _parse_env()
        if env is not None:
            (choice, env_n), from_env = env, True
        else:
            choice = DEFAULT_EXECUTOR
    if isinstance(choice, Executor):
        return choice
    if n_workers is None:
        n_workers = ctx.n_workers if ctx.n_workers is not None else env_n
    if from_env:
        try:
            return _cached(choice, n_workers)
        except Exception as exc:  # the user did not name it in this code: say where it came from
            raise _env_backend_failed(choice, exc) from exc
    return _cached(choice, n_workers)


def _env_backend_failed(name: str, exc: Exception) -> Exception:
    """The error for a backend named by ``ADRULES_EXECUTOR`` that cannot be made (an
    ImportError stays one)."""
    others = ", ".join(repr(n) for n in backend_names() if n != name)
    message = (f"{ENV_VAR}={_getenv(ENV_VAR)!r} chose the {name!r} executor, which cannot start: "
               f"{type(exc).__name__}: {exc}. Install what it needs, or set {ENV_VAR} to another "
               f"executor ({others}), or unset it (the default is {DEFAULT_EXECUTOR!r})")
    return ImportError(message) if isinstance(exc, ImportError) else RuntimeError(message)
