"""The ``Executor`` base class and its errors.

An executor maps ``fn`` over ``items`` and returns the results *in item
order*, whatever order the tasks finish in::

    parent                                   workers
    ──────                                   ───────
    map(fn, items, shared=(a, b)) ─┬─ task 0 ─▶ fn(items[0], a, b)
                                   ├─ task 1 ─▶ fn(items[1], a, b)
                                   └─ ...
    results[i] ◀── as each task finishes ───┘   on_done(i) runs in the parent
    return results                 # index order, never completion order

Subclasses implement ``_map``; the base class validates the arguments and, when
called from inside chunk work (``in_worker()``), runs the map inline and
serially so nested parallel calls cannot deadlock a pool or oversubscribe the
machine.  Capability flags let callers adapt without knowing the backend:

* ``shares_memory`` -- results are the very objects ``fn`` built (serial,
  threads); otherwise they are copies that went through pickle.
* ``dispatch_cost`` -- rough seconds of overhead per task, ``call_cost`` per
  map, ``startup_cost`` to start workers (when ``ready()`` is False), so
  callers can run tiny work serially.
* ``bytes_per_second`` -- rough rate at which results come back from workers
  that do not share memory (pickled, sent, unpickled in the caller), so callers
  keep work with big results (a dense gradient per task) where it is.
"""

from __future__ import annotations

import contextvars
import operator
import os
import pickle
import sys
from typing import Any, Callable, Iterable, Literal, SupportsIndex, TypeVar, overload

from . import _context
from ._blas import blas_pinned

_E = TypeVar("_E", bound="Executor")

__all__ = [
    "Executor",
    "WorkerError",
    "SerializationError",
    "RemoteError",
    "usable_cpu_count",
]


class WorkerError(RuntimeError):
    """A worker died (killed, crashed, out of memory) or was lost mid-map.

    Raised instead of a bare ``BrokenProcessPool``/``KilledWorker``; the
    original error is chained as ``__cause__``.  The executor restarts what it
    needs to, so the next call works.

    >>> import executors
    >>> issubclass(executors.WorkerError, RuntimeError)
    True
    """


class SerializationError(pickle.PicklingError, TypeError):
    """Something that must cross a process boundary could not be pickled.

    Subclasses both ``pickle.PicklingError`` and ``TypeError``; the message
    names the culprit: ``fn``, ``item i``, ``shared arg j`` or ``the result of
    item i``; ``what`` names it alone and ``reason`` gives the pickler's error, for
    callers that word their own message.

    >>> import pickle
    >>> issubclass(SerializationError, TypeError), issubclass(SerializationError, pickle.PicklingError)
    (True, True)
    """

    what: str | None = None
    reason: str | None = None


class RemoteError(Exception):
    """Stand-in for an exception raised on a worker that could not be sent back.

    Keeps the original type name (``type_name``) and message; raised when the
    original exception does not survive pickling (e.g. a custom ``__init__``
    with required arguments).

    >>> str(RemoteError("MyError", "it broke", "no pickle"))
    'MyError: it broke (the original exception could not be sent back from the worker: no pickle)'
    """

    def __init__(self, type_name: str, message: str, reason: str = "") -> None:
        super().__init__(type_name, message, reason)
        self.type_name = type_name
        self.message = message
        self.reason = reason

    def __str__(self) -> str:
        return (
            f"{self.type_name}: {self.message} (the original exception could not be sent "
            f"back from the worker: {self.reason})"
        )


def usable_cpu_count() -> int:
    """Number of CPUs this process may run on (affinity-aware).

    >>> usable_cpu_count() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


@overload
def check_positive_int(value: None, what: str = ..., minimum: int = ...) -> None: ...


@overload
def check_positive_int(value: SupportsIndex, what: str = ..., minimum: int = ...) -> int: ...


def check_positive_int(value: SupportsIndex | None, what: str = "n_workers", minimum: int = 1) -> int | None:
    """Return ``value`` as an int if it is None or an integer >= ``minimum``, else raise
    ValueError naming ``what``.

    >>> check_positive_int(4), check_positive_int(None)
    (4, None)
    >>> check_positive_int(0, "chunk_size")
    Traceback (most recent call last):
    ...
    ValueError: chunk_size must be a positive integer or None, got 0
    """
    if value is None:
        return None
    kind = "a positive integer or None" if minimum == 1 else "a non-negative integer"
    try:
        if isinstance(value, bool):
            raise TypeError
        out = operator.index(value)
    except TypeError:
        raise ValueError(f"{what} must be {kind}, got {value!r}") from None
    if out < minimum:
        raise ValueError(f"{what} must be {kind}, got {value!r}")
    return out


def annotate(exc: BaseException, index: int, n_items: int, name: str) -> BaseException:
    """Attach "which item failed" to an exception without changing its type or message.

    A note on Python >= 3.11 (``__notes__`` list on 3.10), plus the attribute
    ``executors_item_index``.

    >>> e = annotate(ValueError("boom"), 3, 8, "threads")
    >>> e.executors_item_index, str(e)
    (3, 'boom')
    """
    note = f"executors: raised by item {index} of {n_items} in a map on the {name!r} executor"
    try:
        exc.executors_item_index = index  # type: ignore[attr-defined]  # our own marker attribute
    except Exception:  # pragma: no cover - exotic exception without __dict__
        pass
    if sys.version_info >= (3, 11):
        exc.add_note(note)
    else:  # pragma: no cover - Python 3.10
        try:
            notes = getattr(exc, "__notes__", None)
            if not isinstance(notes, list):
                notes = []
                exc.__notes__ = notes  # type: ignore[attr-defined]  # what add_note makes on 3.11+
            notes.append(note)
        except Exception:
            pass
    return exc


class Executor:
    """Base class of all backends: ``map`` in item order, ``close``, context manager.

    ``map(fn, items, shared=(a, b))`` returns ``[fn(x, a, b) for x in items]``.

    >>> import executors
    >>> with executors.SerialExecutor() as ex:
    ...     ex.map(pow, [1, 2, 3], shared=(2,))
    [1, 4, 9]
    """

    #: backend name: "serial", "threads", "processes" or "dask"
    name: str = "base"
    #: True when results are the very objects built by ``fn`` (no pickling)
    shares_memory: bool = False
    #: rough overhead in seconds per task; callers run tiny work serially
    dispatch_cost: float = 0.0
    #: rough overhead in seconds per map, besides its tasks
    call_cost: float = 0.0
    #: rough seconds to start the workers while ``ready()`` is False
    startup_cost: float = 0.0
    #: rough bytes a second of results coming back (unused where ``shares_memory``)
    bytes_per_second: float = float("inf")
    #: number of tasks that can run at once
    n_workers: int = 1
    #: True when ``map``'s ``caller_share`` runs in the calling thread while the workers
    #: run the rest (else the workers run every item)
    caller_helps: bool = False

    def map(
        self,
        fn: Callable[..., Any],
        items: Iterable[Any],
        *,
        shared: tuple[Any, ...] | list[Any] = (),
        on_done: Callable[[int], object] | None = None,
        on_result: Callable[[int, Any], Any] | None = None,
        caller_share: int = 0,
    ) -> list[Any]:
        """Return ``[fn(item, *shared) for item in items]``, in item order.

        ``on_done(i)`` is called in the calling thread as item ``i`` completes
        (completion order; handy for progress bars).  ``on_result(i, result)``
        is called in the calling thread in *item order* as soon as results
        ``0..i`` are in, and what it returns is stored instead of the result:
        a caller can reduce results as they arrive instead of holding them all
        (results that finish early wait for the ones before them).  An exception raised by
        ``fn`` reaches the caller with its type and message, plus a note naming
        the failing item; the not-yet-started tasks are cancelled and the
        executor stays usable.  Called from inside chunk work, the map runs
        inline and serially.

        ``caller_share=k`` lets the calling thread run items ``0..k-1`` itself while the
        workers run the rest, instead of sitting idle until they are done (the caller is
        a worker too, as in Stan's ``reduce_sum``); results, their order and errors are
        as without it. :class:`ProcessExecutor` takes the offer (unless made with
        ``caller_helps=False``), the caller then taking one core and the rest going to
        as many workers as there are other cores; the other backends run every item on
        their workers.

        >>> import executors
        >>> executors.SerialExecutor().map(lambda x, k: x * k, range(4), shared=(10,))
        [0, 10, 20, 30]
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(shared, (tuple, list)):
            raise TypeError(
                "shared must be a tuple (or list) of extra positional arguments, "
                f"e.g. shared=(w,); got {type(shared).__name__}"
            )
        for name, hook in (("on_done", on_done), ("on_result", on_result)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{name} must be callable or None, got {type(hook).__name__}")
        caller_share = check_positive_int(caller_share, "caller_share", minimum=0) or 0
        items = list(items)
        shared = tuple(shared)
        if not items:
            return []
        results = InOrder(len(items), on_result)
        if _context.in_worker() or caller_share >= len(items):
            _map_inline(fn, items, shared, on_done, self.name, results)
        elif caller_share and self.caller_helps:
            self._map(fn, items, shared, on_done, results, caller_share=caller_share)
        else:
            self._map(fn, items, shared, on_done, results)
        return results.values

    def workers_beside_caller(self) -> int:
        """How many workers run a map's items while the calling thread runs its
        ``caller_share``: the caller takes a core and the workers get the others, one at
        least (a third process on 2 cores made all three wait for time slices: the small
        ensemble on 2 processes got 1.0x, against 1.2x for the caller and one worker).
        Where the caller does not help, every worker.

        >>> import executors
        >>> executors.ThreadExecutor(4).workers_beside_caller()
        4
        """
        if not self.caller_helps:
            return self.n_workers
        return max(1, min(self.n_workers, usable_cpu_count() - 1))

    def _map(self, fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...],
             on_done: Callable[[int], object] | None, results: InOrder,
             caller_share: int = 0) -> None:  # pragma: no cover - abstract
        """Run the items; hand each result to ``results.put(i, result)``. Where
        ``caller_helps``, run items ``0..caller_share-1`` in the calling thread meanwhile."""
        raise NotImplementedError

    def start(self, preload: Iterable[str] = ()) -> None:
        """Start workers in the background, if this backend has any to start (returns
        at once); worker processes import the modules named in ``preload``.

        >>> import executors
        >>> executors.SerialExecutor().start()
        """

    def ready(self) -> bool:
        """True when a map would not wait for workers to start.

        >>> import executors
        >>> executors.ThreadExecutor(2).ready()
        True
        """
        return True

    def close(self) -> None:
        """Release pools/clusters owned by this executor (idempotent).

        >>> import executors
        >>> ex = executors.ThreadExecutor(1); ex.close(); ex.close()
        """

    def __enter__(self: _E) -> _E:
        return self

    def __exit__(self, *exc_info: object) -> Literal[False]:
        self.close()
        return False

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_workers={self.n_workers})"

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled, an executor is the serial one: a copy in another process cannot use
        this one's workers, and the copy is there because work sent to workers took it
        along (``f`` running a ``psum`` of its own), where every map runs inline anyway.

        >>> import pickle, executors
        >>> pickle.loads(pickle.dumps(executors.ThreadExecutor(2)))
        SerialExecutor()
        """
        serial = next(c for c in Executor.__subclasses__() if c.name == "serial")  # no import up the layers
        return (serial, ())

    def __copy__(self: _E) -> _E:
        return self  # a handle on workers, as a logger is on its handlers: shared, not copied

    def __deepcopy__(self: _E, memo: dict[int, Any]) -> _E:
        return self


class InOrder:
    """Results of a map, handed to ``on_result(i, result)`` in item order whatever
    order they complete in; ``values`` holds what it returned (or the results)."""

    __slots__ = ("values", "_on_result", "_next", "_early")
    values: list[Any]
    _early: dict[int, Any]  # results that came before the ones ahead of them

    def __init__(self, n: int, on_result: Callable[[int, Any], Any] | None = None) -> None:
        self.values = [None] * n
        self._on_result, self._next, self._early = on_result, 0, {}

    @property
    def reduces(self) -> bool:
        """True when results are handed to ``on_result`` (the caller reduces them as they
        arrive) rather than all kept."""
        return self._on_result is not None

    @property
    def delivered(self) -> int:
        """How many results, ``0..delivered - 1``, were handed to ``on_result``."""
        return self._next

    def put(self, i: int, result: Any) -> None:
        if self._on_result is None:
            self.values[i] = result
            return
        if i == self._next and not self._early:  # in order, as inline and serial maps are
            self.values[i] = self._on_result(i, result)
            self._next += 1
            return
        self._early[i] = result
        while self._next in self._early:
            j = self._next
            self.values[j] = self._on_result(j, self._early.pop(j))
            self._next += 1


def _map_inline(fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...],
                on_done: Callable[[int], object] | None, name: str, results: InOrder,
                n_items: int | None = None) -> None:
    """Run the map in this thread, in one copy of the caller's context marked as
    worker context (one copy for all items: a copy per item cost more than tiny items).
    ``items`` may be the first of ``n_items`` (a caller's share; errors count in those)."""
    context = contextvars.copy_context()
    context.run(_context.enter_worker)
    with blas_pinned():
        context.run(_run_items, fn, items, shared, on_done, name, results, n_items)


def call_inline(fn: Callable[[], Any], name: str = "serial") -> Any:
    """``fn()`` as the one item of an inline map (``SerialExecutor().map``): in a copy
    of the caller's context marked as worker context, BLAS pinned, an exception
    annotated as item 0 of 1; without the map's checks and bookkeeping.

    >>> import executors
    >>> call_inline(executors.in_worker)
    True
    """
    context = contextvars.copy_context()
    context.run(_context.enter_worker)
    with blas_pinned():
        try:
            return context.run(fn)
        except (Exception, SystemExit) as exc:
            annotate(exc, 0, 1, name)
            raise


def _run_items(fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...],
               on_done: Callable[[int], object] | None, name: str, results: InOrder,
               n_items: int | None = None) -> None:
    n = len(items) if n_items is None else n_items
    for i, item in enumerate(items):
        try:
            value = fn(item, *shared)
        except (Exception, SystemExit) as exc:
            annotate(exc, i, n, name)
            raise
        if on_done is not None:
            on_done(i)
        results.put(i, value)
