"""Map functions over chunks on a chosen backend, and reduce deterministically.

``executors`` knows nothing about differentiation.  It provides

* backends with one contract -- :class:`SerialExecutor`,
  :class:`ThreadExecutor`, :class:`ProcessExecutor` (loky) and
  :class:`DaskExecutor` (``distributed``, imported lazily),
  :class:`JoblibExecutor` (whatever ``joblib.parallel_config`` selects, imported lazily);
* configuration -- :func:`config` (contextvars), the ``ADRULES_EXECUTOR``
  environment variable and :func:`resolve` applying the precedence
  per-call argument > ``config`` > environment > default ("threads");
* what a library built on it needs: where in a map an error was raised
  (:func:`where_raised`, :class:`WhereRaised`), tracebacks and warnings that point at the
  user's code (:func:`user_frames`, :func:`hide_frames_of`, :func:`warn`), and how a
  task's work learns that its map has raised (:func:`abandoned`, :func:`abandoned_test`);
* deterministic reduction -- :func:`chunk_ranges` (depends only on the number
  of items and the chunk size), :func:`tree_sum` (fixed pairwise tree),
  :func:`neumaier_sum` (compensated);

so that ``tree_sum(executor.map(work, chunk_ranges(n, size)))`` has the same
bits on every backend and worker count::

    caller ── resolve() ──▶ executor ── map(work, chunks) ──▶ workers
                                                               (BLAS pinned to 1,
                                                                in_worker() True,
                                                                nested calls serial)
    tree_sum(results in chunk order) ◀────────────────────────┘

>>> import executors
>>> chunks = executors.chunk_ranges(10, 4)
>>> executors.tree_sum(executors.resolve("threads", 2).map(sum, chunks))
45
"""

from typing import TYPE_CHECKING, Any

from .base import (Executor, MapTimeoutError, RemoteError, SerializationError, WhereRaised, WorkerError, as_worker, mark_raised,
                   where_raised)
from .config import config, current_chunk_size, register_backend, resolve, resolve_dispatch
from ._abandon import Abandoned, abandoned, abandoned_test
from ._global_random import GlobalRandomWarning
from ._context import in_worker
from ._tracebacks import hide_frames_of, user_frames, warn
from .local import ProcessExecutor, SerialExecutor, ThreadExecutor
from .reduce import TreeSum, chunk_ranges, neumaier_sum, tree_sum

if TYPE_CHECKING:  # imported on first use at run time (see __getattr__); type checkers see them
    from .dask import DaskExecutor
    from .joblib_backend import JoblibExecutor

    __version__: str

__all__ = [
    "Executor",
    "as_worker",
    "SerialExecutor",
    "ThreadExecutor",
    "ProcessExecutor",
    "DaskExecutor",
    "JoblibExecutor",
    "config",
    "resolve",
    "resolve_dispatch",
    "register_backend",
    "current_chunk_size",
    "chunk_ranges",
    "tree_sum",
    "TreeSum",
    "neumaier_sum",
    "in_worker",
    "abandoned",
    "abandoned_test",
    "Abandoned",
    "WhereRaised",
    "where_raised",
    "mark_raised",
    "user_frames",
    "hide_frames_of",
    "warn",
    "WorkerError",
    "RemoteError",
    "SerializationError",
    "MapTimeoutError",
    "GlobalRandomWarning",
]


def __getattr__(name: str) -> Any:
    if name == "DaskExecutor":
        from .dask import DaskExecutor

        return DaskExecutor
    if name == "JoblibExecutor":
        from .joblib_backend import JoblibExecutor

        return JoblibExecutor
    if name == "__version__":
        # looked up on first use: importlib.metadata would add milliseconds to every import,
        # worker processes' included
        from importlib.metadata import PackageNotFoundError, version

        try:
            return version("adrules")  # the distribution that ships this package
        except PackageNotFoundError:  # a source tree that was never installed
            return "0+unknown"
    raise AttributeError(f"module 'executors' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | {"DaskExecutor", "JoblibExecutor", "__version__"})
