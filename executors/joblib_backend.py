"""The joblib backend: whatever ``joblib.parallel_config`` selects runs the tasks.

Imported (and joblib with it) only when used.  joblib's ``parallel_config`` is how
the scientific Python ecosystem picks a parallel backend -- loky processes, threads,
Dask (``backend="dask"``), Ray (``ray.util.joblib``), Spark (``joblibspark``) -- so
this executor reaches them all without an adapter of ours::

    parent (caller thread)                       joblib backend (loky / threading / dask ...)
    ──────────────────────                       ───────────────────────────────────────────
    read the active parallel_config: backend, n_jobs
    Parallel(n_jobs, return_as="generator")
      delayed(_Task(fn, chunk_size))(i, item, *shared) ─▶ joblib's own transport:
                                                           loky: cloudpickle, arrays > max_nbytes
                                                                 memory-mapped (/dev/shm)
                                                           dask: large arguments scattered
                                                           threads: nothing copied
                                                         _Task: fresh context, in_worker() True,
                                                                BLAS pinned to 1 thread (per task:
                                                                joblib's workers serve others too),
                                                                fn(item, *shared); an error gets
                                                                the item index as a note here
    for i, result in enumerate(generator):  ◀── in submission order ──┘
        on_done(i); results.put(i, result)   (InOrder)

joblib itself decides batching and transport; the schedule already groups chunks
into a few tasks per worker.  On the first error joblib stops the map (its loky
backend restarts its workers for the next call, ~0.5 s: that is joblib's policy).
"""

from __future__ import annotations

import contextvars
import os

from . import _context
from ._blas import blas_pinned
from .base import Executor, SerializationError, add_note, annotate, check_positive_int, where_raised

__all__ = ["JoblibExecutor"]


class JoblibExecutor(Executor):
    """Run tasks with ``joblib.Parallel`` under the active ``joblib.parallel_config``.

    The backend and ``n_jobs`` are read from the ``parallel_config`` in force (in the
    calling thread) at each map.  ``n_jobs`` is used only when that config sets none
    (None: all usable CPUs, ``n_jobs=-1``); the ``"joblib:N"`` form of
    ``ADRULES_EXECUTOR`` and ``config(executor="joblib", n_workers=N)`` set it.
    ``n_workers`` is the effective number of jobs of the active backend (``n_jobs=-1``
    resolved; a Dask cluster's cores).  ``shares_memory`` is True only for joblib's
    threading backend.  ``map(timeout=...)`` is refused: joblib cannot leave a task behind.

    >>> import joblib, executors
    >>> ex = executors.JoblibExecutor(n_jobs=2)
    >>> with joblib.parallel_config(backend="threading"):
    ...     print(ex.map(lambda x, k: x * k, range(5), shared=(3,)), ex.n_workers, ex.shares_memory)
    [0, 3, 6, 9, 12] 2 True
    """

    name = "joblib"
    supports_timeout = False  # joblib's backends cannot be told to leave a task behind

    def __init__(self, n_jobs: int | None = None) -> None:
        self.n_jobs = check_positive_int(n_jobs, "n_jobs")

    # --------------------------------------------------------------- the config

    def _active(self):
        """``(backend, n_jobs)`` of the active ``parallel_config``, n_jobs filled in."""
        from joblib.parallel import get_active_backend

        backend, n_jobs = get_active_backend()
        if n_jobs is None:
            n_jobs = self.n_jobs if self.n_jobs is not None else -1
        return backend, n_jobs

    @property
    def n_workers(self) -> int:  # type: ignore[override]  # read-only: follows joblib's config
        """Effective number of jobs of the active joblib backend (see the class example)."""
        backend, n_jobs = self._active()
        return max(1, int(backend.effective_n_jobs(n_jobs)))

    @property
    def shares_memory(self) -> bool:  # type: ignore[override]  # read-only: follows joblib's config
        """True for joblib's threading backend: results are the objects ``fn`` built."""
        from joblib._parallel_backends import ThreadingBackend

        return isinstance(self._active()[0], ThreadingBackend)

    @property
    def backend_name(self) -> str:
        """The active joblib backend's class name, e.g. ``"LokyBackend"``.

        >>> import joblib, executors
        >>> with joblib.parallel_config(backend="threading"):
        ...     executors.JoblibExecutor().backend_name
        'ThreadingBackend'
        """
        return type(self._active()[0]).__name__

    # ---------------------------------------------------------------------- map

    def _map(self, fn, items, shared, on_done, results):
        from joblib import Parallel, delayed

        backend, n_jobs = self._active()
        # joblib's multiprocessing backend cannot hand results on as they come
        streams = getattr(backend, "supports_return_generator", True)
        n = len(items)
        task = _Task(fn, _context.SETTINGS.get().chunk_size, n, os.getpid())
        calls = (delayed(task)(i, item, *shared) for i, item in enumerate(items))
        try:
            # pinned here too: threading backend tasks then only bump a reference count
            with blas_pinned():
                out = Parallel(n_jobs=n_jobs, return_as="generator" if streams else "list")(calls)
                for i, value in enumerate(out):
                    if on_done is not None:
                        on_done(i)
                    results.put(i, value)
        except Exception as exc:
            if where_raised(exc) is not None:
                raise  # raised by fn, already annotated on the worker
            culprit = _find_unpicklable(fn, items, shared)
            if culprit is not None:
                raise culprit from exc
            raise _note_infrastructure(exc, n, self.backend_name)

    def __repr__(self) -> str:
        return f"JoblibExecutor(n_jobs={self.n_jobs})"


class _Task:
    """Runs on joblib's workers: one item of the map, as worker context."""

    __slots__ = ("fn", "chunk_size", "n", "origin_pid")

    def __init__(self, fn, chunk_size, n, origin_pid):
        self.fn, self.chunk_size, self.n, self.origin_pid = fn, chunk_size, n, origin_pid

    def __call__(self, index, item, *shared):
        ctx = contextvars.Context()
        ctx.run(_context.enter_worker, self.chunk_size, keep_settings=False)
        try:
            with blas_pinned():
                value = ctx.run(self.fn, item, *shared)
        except Exception as exc:
            annotate(exc, index, self.n, "joblib")
            if os.getpid() == self.origin_pid:
                raise
            from ._remote import stand_in, why_unsendable

            reason = why_unsendable(exc)
            if reason is None:
                raise
            unsendable = stand_in(exc, reason)  # with exc's notes, this item's among them
        except SystemExit as exc:  # sent back as it is, named as other errors are
            annotate(exc, index, self.n, "joblib")
            raise
        else:
            return value if os.getpid() == self.origin_pid else _Result(value, index)
        raise unsendable  # out of the except block: exc, unpicklable, is not its context

    def __reduce__(self):
        return (_Task, (self.fn, self.chunk_size, self.n, self.origin_pid))


class _Result:
    """A result leaving a worker process: pickled by us, so that a result that cannot
    be pickled is reported as "the result of item i" (joblib would report a bare
    TypeError with no item).  Costs one extra copy of the pickled bytes; unpickles to
    the value itself."""

    __slots__ = ("value", "index")

    def __init__(self, value, index):
        self.value, self.index = value, index

    def __reduce__(self):
        from . import _remote

        return (_remote.loads, (_remote.dumps(self.value, f"the result of item {self.index}", "joblib"),))


def _find_unpicklable(fn, items, shared):
    """After joblib failed to send or receive a task: a SerializationError naming what
    does not survive a pickle round trip (``fn``, ``shared arg j``, ``item i``), or
    None.  Paid only on failure; an object that unpickles here but not on a worker
    (a module missing there) is not found."""
    from . import _remote

    candidates = [(fn, "fn"), *((a, f"shared arg {j}") for j, a in enumerate(shared)),
                  *((x, f"item {i}") for i, x in enumerate(items))]
    for obj, what in candidates:
        try:
            data = _remote.dumps(obj, what, "joblib")
        except SerializationError as err:
            return err
        try:
            _remote.loads(data)
        except Exception as exc:
            failure = SerializationError(
                f"could not unpickle {what} (a {type(obj).__name__}) sent to a worker of the "
                f"'joblib' executor: {type(exc).__name__}: {exc}. Are the same modules "
                "importable in the workers' environment?")
            failure.__cause__ = exc
            return failure
    return None


def _note_infrastructure(exc, n, backend_name):
    note = (f"executors: raised by joblib ({backend_name}) while running a map of {n} items, "
            "not by fn (e.g. a result that could not be sent back, or a lost worker)")
    add_note(exc, note)
    return exc
