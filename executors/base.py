"""The ``Executor`` base class and its errors.

An executor maps ``fn`` over ``items`` and returns the results *in item order*::

    parent                                   workers
    ──────                                   ───────
    map(fn, items, shared=(a, b)) ─┬─ task 0 ─▶ fn(items[0], a, b)
                                   ├─ task 1 ─▶ fn(items[1], a, b)
                                   └─ ...
    results[i] ◀── as each task finishes ───┘   on_done(i) runs in the parent
    return results                 # index order, never completion order

Subclasses implement ``_map``; the base class validates the arguments and, inside chunk
work (``in_worker()``), runs the map inline so nested parallel calls neither deadlock a pool
nor oversubscribe the machine.  Whatever the backend, callers may ask ``shares_memory``,
``n_workers``, ``ready()`` (``start()``) and ``overhead()``.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import operator
import os
import pickle
import statistics
import sys
import time
from typing import Any, Callable, Iterable, Literal, SupportsIndex, TypeVar

from . import _context, _global_random
from ._blas import blas_pinned
from ._tracebacks import user_frames

_E = TypeVar("_E", bound="Executor")

#: The environment variable that chooses the default executor (read by ``config``; named
#: here so that an executor failing to start can say how to choose another).
ENV_VAR = "ADRULES_EXECUTOR"

__all__ = ["Executor", "as_worker", "WorkerError", "SerializationError", "RemoteError", "MapTimeoutError", "usable_cpu_count",
           "WhereRaised", "where_raised", "mark_raised"]


class WorkerError(RuntimeError):
    """A worker died (killed, crashed, out of memory) or was lost mid-map; raised instead of a
    bare ``BrokenProcessPool``/``KilledWorker`` (chained as ``__cause__``).  The executor
    restarts what it needs to, so the next call works.

    >>> import executors
    >>> issubclass(executors.WorkerError, RuntimeError)
    True
    """


class SerializationError(pickle.PicklingError, TypeError):
    """Something that must cross a process boundary could not be pickled.

    The message names the culprit: ``fn``, ``item i``, ``shared arg j`` or ``the result of
    item i``; ``what`` names it alone and ``reason`` gives the pickler's error, for callers
    that word their own message.

    >>> import pickle
    >>> issubclass(SerializationError, TypeError), issubclass(SerializationError, pickle.PicklingError)
    (True, True)
    """

    what: str | None = None
    reason: str | None = None


class RemoteError(Exception):
    """Stand-in for an exception raised on a worker that could not be pickled back (e.g. a
    custom ``__init__`` with required arguments); keeps its type name and message.

    >>> str(RemoteError("MyError", "it broke", "no pickle"))
    'MyError: it broke (the original exception could not be sent back from the worker: no pickle)'
    """

    def __init__(self, type_name: str, message: str, reason: str = "") -> None:
        super().__init__(type_name, message, reason)
        self.type_name = type_name
        self.message = message
        self.reason = reason

    def __str__(self) -> str:
        return (f"{self.type_name}: {self.message} (the original exception could not be sent "
                f"back from the worker: {self.reason})")


class MapTimeoutError(TimeoutError):
    """A map (a psum or pmap) still had work unfinished when its ``timeout=`` expired.

    ``running`` lists the items (for psum/pmap: the elements of ``xs``) that were running,
    ``not_started`` those that had not started; ``timeout`` is the limit in seconds and
    ``note`` says what became of the running work on this backend (the message ends with
    it). Nobody reads their results: tasks not started do nothing, and the executor is
    usable at once.

    >>> import executors
    >>> e = executors.MapTimeoutError("a map of 4 items", 2.0, running=[1], not_started=[2, 3])
    >>> print(e)
    a map of 4 items passed its timeout of 2 s (still running: items 1; not started: items 2..3).
    >>> isinstance(e, TimeoutError), e.running, e.not_started
    (True, [1], [2, 3])
    """

    def __init__(self, what: str, timeout: float, running: Iterable[int] = (), not_started: Iterable[int] = (),
                 note: str = "", unit: str = "items") -> None:
        self.what, self.timeout, self.note, self.unit = what, timeout, note, unit
        self.running, self.not_started = sorted(running), sorted(not_started)
        parts = [f"still running: {unit} {spans(self.running)}" if self.running else "",
                 f"not started: {unit} {spans(self.not_started)}" if self.not_started else ""]
        super().__init__(f"{what} passed its timeout of {timeout:g} s ({'; '.join(p for p in parts if p)})."
                         f"{' ' + note if note else ''}")

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.what, self.timeout, self.running, self.not_started, self.note, self.unit))


def spans(indices: list[int], limit: int = 8) -> str:
    """Sorted indices as runs, ``"0, 3..7"``; the first ``limit`` runs, then how many more.

    >>> spans([0, 3, 4, 5, 9]), spans(list(range(0, 40, 2)), limit=2)
    ('0, 3..5, 9', '0, 2, ... (20 in all)')
    """
    runs: list[list[int]] = []
    for i in indices:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    text = ", ".join(str(a) if a == b else f"{a}..{b}" for a, b in runs[:limit])
    return text if len(runs) <= limit else f"{text}, ... ({len(indices)} in all)"


def check_timeout(value: Any, who: str) -> float | None:
    """``timeout=`` as seconds, or None for no limit (None or ``math.inf``); else an error
    naming ``who``.

    >>> check_timeout(2, "psum"), check_timeout(math.inf, "psum")
    (2.0, None)
    >>> check_timeout("3", "psum")
    Traceback (most recent call last):
    ...
    TypeError: psum: timeout must be a number of seconds (how long a pass over the items may take) or None for no limit; got '3'
    """
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: timeout must be a number of seconds (how long a pass over the items may take) "
                        f"or None for no limit; got {value!r}")
    seconds = float(value)
    if not seconds > 0:  # (nan too)
        raise ValueError(f"{who}: timeout must be a number of seconds greater than 0 (how long a pass "
                         f"over the items may take) or None for no limit; got {value!r}")
    return None if seconds == math.inf else seconds


def usable_cpu_count() -> int:
    """Number of CPUs this process may run on (affinity-aware).

    >>> usable_cpu_count() >= 1
    True
    """
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):  # pragma: no cover - macOS / Windows
        return max(1, os.cpu_count() or 1)


def check_positive_int(value: SupportsIndex | None, what: str = "n_workers", minimum: int = 1) -> int | None:
    """``value`` as an int if it is None or an integer >= ``minimum``, else ValueError naming ``what``.

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
        out = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        out = None
    if out is None or out < minimum:
        raise ValueError(f"{what} must be {kind}, got {value!r}")
    return out


def add_note(exc: BaseException, note: str) -> None:
    """``exc.add_note(note)``, also on Python 3.10 (which keeps the notes in ``__notes__``
    without printing them).

    >>> e = ValueError("bad")
    >>> add_note(e, "psum/pmap: raised by f at element 3")
    >>> e.__notes__
    ['psum/pmap: raised by f at element 3']
    """
    if sys.version_info >= (3, 11):
        exc.add_note(note)
        return
    with contextlib.suppress(Exception):  # pragma: no cover - Python 3.10 (an exception may lack __dict__)
        notes = getattr(exc, "__notes__", None)
        if not isinstance(notes, list):
            notes = exc.__notes__ = []  # type: ignore[attr-defined]  # what add_note makes on 3.11+
        notes.append(note)


class WhereRaised:
    """Where in a map an exception was raised; it travels with the exception (from worker
    processes and Dask workers too), read by :func:`where_raised`.

    ``index``: the item that raised, of ``count`` items, on the ``executor`` executor (None:
    run inline, in the calling thread); ``unit``: what the note calls the items ("item",
    or a caller's word: "chunk"); ``part``: which part of its item raised, where an item
    holds several (its ``fn`` says so, while ``index`` is not known yet); ``last``: the
    last item it may have been raised by, where it cannot say which (a worker died running
    several). ``note()`` is the note the user sees in the traceback.

    >>> import executors
    >>> try:
    ...     executors.SerialExecutor().map(lambda x: 1 / x, [1, 0, 2])
    ... except ZeroDivisionError as e:
    ...     where = executors.where_raised(e)
    >>> where.index, where.count, where.executor
    (1, 3, 'serial')
    >>> where.note()
    "executors: raised by item 1 of 3 in a map on the 'serial' executor"
    """

    __slots__ = ("index", "count", "executor", "unit", "part", "last")

    def __init__(self, index: int | None = None, count: int | None = None, executor: str | None = None,
                 unit: str = "item", part: int | None = None, last: int | None = None) -> None:
        self.index, self.count, self.executor = index, count, executor
        self.unit, self.part, self.last = unit, part, last

    def __reduce__(self) -> tuple[type, tuple[Any, ...]]:
        return (WhereRaised, (self.index, self.count, self.executor, self.unit, self.part, self.last))

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self.__slots__)
        return f"WhereRaised({fields})"

    def note(self) -> str:
        """The note an exception raised here carries (nothing known: an empty string).

        >>> WhereRaised(3, 16, None, "chunk").note()
        'executors: raised by chunk 3 of 16, run inline'
        """
        if self.index is None:
            return ""
        where = ", run inline" if self.executor is None else f" in a map on the {self.executor!r} executor"
        return f"executors: raised by {self.unit} {self.index} of {self.count}{where}"


def where_raised(exc: BaseException) -> WhereRaised | None:
    """Where in a map ``exc`` was raised, or None if it was not raised in one.

    >>> where_raised(ValueError("not in a map")) is None
    True
    """
    where = getattr(exc, "executors_where", None)
    return where if type(where) is WhereRaised else None


def mark_raised(exc: BaseException, where: WhereRaised, replace: bool = False) -> BaseException:
    """Carry ``where`` with ``exc`` (its type and message unchanged), adding its note;
    ``replace``: instead of the record ``exc`` carries, its note in the place of that
    one's (a caller that knows better what the map's items were, a batch of its own).
    A record with no ``index`` (only ``part``, say) adds no note. Returns ``exc``.

    >>> e = mark_raised(ValueError("bad"), WhereRaised(4, 8, "threads"))
    >>> e = mark_raised(e, WhereRaised(9, 16, "threads", "chunk"), replace=True)
    >>> e.__notes__, where_raised(e).index
    (["executors: raised by chunk 9 of 16 in a map on the 'threads' executor"], 9)
    """
    old, text = where_raised(exc), where.note()
    with contextlib.suppress(Exception):  # an exception may lack __dict__
        exc.executors_where = where  # type: ignore[attr-defined]  # the record, read by where_raised
    notes = getattr(exc, "__notes__", None)
    if not text:
        return exc
    if replace and old is not None and isinstance(notes, list):
        for k in range(len(notes) - 1, -1, -1):  # the old record's own note (an inner map's stay)
            if notes[k] == old.note():
                notes[k] = text
                return exc
    add_note(exc, text)
    return exc


def annotate(exc: BaseException, index: int, n_items: int, name: str) -> BaseException:
    """Attach "which item failed" to an exception without changing its type or message:
    a :class:`WhereRaised` and its note (keeping the ``part`` that ``fn`` named)."""
    old = where_raised(exc)
    part = old.part if old is not None and old.index is None else None
    return mark_raised(exc, WhereRaised(index, n_items, name, part=part))


def closed_mid_map(name: str) -> WorkerError:
    """The error of a map whose executor ``close()`` (from another thread) stopped.

    >>> print(closed_mid_map("dask"))  # doctest: +ELLIPSIS
    the 'dask' executor was closed (close() from another thread) while this map was running: ...
    """
    return WorkerError(f"the {name!r} executor was closed (close() from another thread) while this map "
                       "was running: its unfinished items did not run. The next map starts it afresh.")


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
    #: number of tasks that can run at once
    n_workers: int = 1
    #: False where ``map(timeout=...)`` cannot be honoured (it then raises ValueError)
    supports_timeout: bool = True
    _overhead: tuple[float, float, float] | None = None
    _closes = 0  # how many times close() ran: a map that sees it change was closed mid-way

    def map(self, fn: Callable[..., Any], items: Iterable[Any], *, shared: tuple[Any, ...] | list[Any] = (),
            on_done: Callable[[int], object] | None = None,
            on_result: Callable[[int, Any], Any] | None = None, timeout: float | None = None) -> list[Any]:
        """Return ``[fn(item, *shared) for item in items]``, in item order.

        In the calling thread, ``on_done(i)`` is called as item ``i`` completes (progress
        bars), and ``on_result(i, result)`` in *item order* once results ``0..i`` are in: what
        it returns is stored instead of the result, so a caller can reduce results as they
        arrive (the pools then run at most ``n_workers`` tasks ahead).  An exception from
        ``fn`` reaches the caller unchanged but for a note naming the item; tasks not yet
        started are cancelled and the executor stays usable.  Inside chunk work, the map
        runs inline.

        ``timeout``: seconds for the whole map (None: no limit). Once they have passed with
        items unfinished, :class:`MapTimeoutError` names the items still running and those
        not started; the executor is usable at once. Threads run on in the background (a
        thread cannot be stopped; the next map gets fresh ones), worker processes are
        stopped and replaced, the Dask workers running them are restarted (on a cluster
        this executor started); the serial executor (and a map inside chunk work) checks
        the time between items only: an item is never stopped mid-way.

        >>> import executors
        >>> executors.SerialExecutor().map(lambda x, k: x * k, range(4), shared=(10,))
        [0, 10, 20, 30]
        """
        if not callable(fn):
            raise TypeError(f"fn must be callable, got {type(fn).__name__}")
        if not isinstance(shared, (tuple, list)):
            raise TypeError("shared must be a tuple (or list) of extra positional arguments, "
                            f"e.g. shared=(w,); got {type(shared).__name__}")
        for name, hook in (("on_done", on_done), ("on_result", on_result)):
            if hook is not None and not callable(hook):
                raise TypeError(f"{name} must be callable or None, got {type(hook).__name__}")
        items, shared = list(items), tuple(shared)
        if timeout is not None:
            timeout = check_timeout(timeout, f"{type(self).__name__}.map")
            if not self.supports_timeout:
                raise ValueError(f"{type(self).__name__}.map: the {self.name!r} executor cannot honour "
                                 "timeout= (it cannot leave a task behind): use the 'threads', 'processes' "
                                 "or 'dask' executor, or timeout=None")
        if not items:
            return []
        results = InOrder(len(items), on_result, timeout)
        with user_frames():
            if _context.in_worker():
                map_inline(fn, items, shared, on_done, self.name, results)
            else:
                self._map(fn, items, shared, on_done, results)
        if results.drew_global_random:
            _global_random.warn_once(self.name)
        return results.values

    def _map(self, fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...],
             on_done: Callable[[int], object] | None, results: InOrder) -> None:  # pragma: no cover
        """Run the items; hand each result to ``results.put(i, result)``."""
        raise NotImplementedError

    #: ``(per_call, per_task, per_byte)`` a map is expected to cost before its workers
    #: are started and ``overhead()`` measured: psum starts workers only for work that
    #: gains on them at this cost (on the high side: a pool started for nothing costs
    #: the caller its start and more)
    prior_overhead: tuple[float, float, float] = (0.0, 0.0, 0.0)

    #: seconds of the caller's time starting the workers is expected to cost (workers
    #: importing Python, NumPy and adrules take cores the caller's work had): psum starts
    #: them once a call site's calls run inline would have gained this much on them
    prior_start_cost: float = 0.0

    def start(self, preload: Iterable[str] = ()) -> None:
        """Start workers in the background, if this backend has any to start (returns
        at once); worker processes import the modules named in ``preload``. psum starts
        them itself when a call's work can gain on them; call this to have them at once.

        >>> import executors
        >>> executors.ThreadExecutor(2).start()
        """

    def started(self) -> bool:
        """True once the workers are up or starting (after ``start`` or a map).

        >>> import executors
        >>> executors.ThreadExecutor(2).started()
        True
        """
        return self.ready()

    def ready(self) -> bool:
        """True when a map would not wait for workers to start.

        >>> import executors
        >>> executors.ThreadExecutor(2).ready()
        True
        """
        return True

    def overhead(self) -> tuple[float, float, float]:
        """``(per_call, per_task, per_byte)``: the seconds a map costs besides its work, once,
        for each task, and for each byte of results brought back from workers that do not
        share memory.  Measured once, when first asked, by timing maps of empty tasks (a map
        waits for workers still starting: ask once ``ready()``).

        >>> import executors
        >>> executors.SerialExecutor().overhead()
        (0.0, 0.0, 0.0)
        >>> executors.ThreadExecutor(2).overhead()[1] < 0.01
        True
        """
        if self._overhead is None:
            self._overhead = _measure(self)
        return self._overhead

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
        """Pickled, an executor is the serial one: a copy in another process (taken along by
        work sent to workers) cannot use these workers, and every map there runs inline.

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


_MIB = 2**20


def _nothing(nbytes: int) -> bytes | None:  # the empty task (module level: workers import it by name)
    return bytes(nbytes) if nbytes else None


def _measure(executor: Executor) -> tuple[float, float, float]:
    """Medians of three maps: of one empty task, of ``2 * n_workers + 1``, of as many returning a MiB."""
    many = 2 * executor.n_workers + 1
    maps = [(1, 0), (many, 0)] + ([] if executor.shares_memory else [(many, _MIB)])
    times: list[list[float]] = [[] for _ in maps]
    executor.map(_nothing, [0] * many)  # the first contact: workers import this module
    for _ in range(3):
        for (n, nbytes), t in zip(maps, times):
            t0 = time.perf_counter()
            executor.map(_nothing, [nbytes] * n)
            t.append(time.perf_counter() - t0)
    one, all_, *big = map(statistics.median, times)
    per_task = max(0.0, (all_ - one) / (many - 1))
    per_byte = max(0.0, (big[0] - all_) / (many * _MIB)) if big else 0.0
    return max(0.0, one - per_task), per_task, per_byte


class InOrder:
    """Results of a map, handed to ``on_result(i, result)`` in item order whatever order
    they complete in; ``values`` holds what it returned (or the results), ``delivered``
    how many were handed on; ``drew_global_random``: a worker process said a task drew
    from NumPy's global random state; ``timeout``: the map's, and its ``deadline`` on the
    ``time.monotonic`` clock (None: no limit)."""

    __slots__ = ("values", "on_result", "delivered", "_early", "drew_global_random", "timeout", "deadline")

    def __init__(self, n: int, on_result: Callable[[int, Any], Any] | None = None,
                 timeout: float | None = None) -> None:
        self.values: list[Any] = [None] * n
        self.on_result, self.delivered = on_result, 0
        self.timeout = timeout
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.drew_global_random = False
        self._early: dict[int, Any] = {}  # results that came before the ones ahead of them

    def timed_out(self, name: str, running: Iterable[int] = (), not_started: Iterable[int] = (),
                  note: str = "") -> MapTimeoutError:
        """The error of this map past its deadline, on the executor ``name``."""
        return MapTimeoutError(f"a map of {len(self.values)} items on the {name!r} executor", self.timeout or 0.0,
                               running, not_started, note)

    def put(self, i: int, result: Any) -> None:
        if self.on_result is None:
            self.values[i] = result
            return
        self._early[i] = result
        while self.delivered in self._early:
            j = self.delivered
            self.values[j] = self.on_result(j, self._early.pop(j))
            self.delivered += 1


class as_worker:
    """``with as_worker():`` runs chunk work in the calling thread as a worker runs it:
    BLAS/OpenMP pools pinned to one thread, ``in_worker()`` true (so maps nested in it
    run inline). Reentrant.

    >>> import executors
    >>> with executors.as_worker():
    ...     executors.in_worker()
    True
    >>> executors.in_worker()
    False
    """

    __slots__ = ("_tokens",)

    def __init__(self) -> None:
        self._tokens: list[Any] = []

    def __enter__(self) -> None:
        self._tokens.append(_context.mark_worker())
        blas_pinned().__enter__()

    def __exit__(self, *exc_info: object) -> None:
        blas_pinned().__exit__()
        _context.unmark_worker(self._tokens.pop())


def map_inline(fn: Callable[..., Any], items: list[Any], shared: tuple[Any, ...],
               on_done: Callable[[int], object] | None, name: str, results: InOrder) -> None:
    """Run the map in this thread as worker context."""
    with as_worker():
        for i, item in enumerate(items):
            try:
                value = fn(item, *shared)
            except (Exception, SystemExit) as exc:
                annotate(exc, i, len(items), name)
                raise
            if on_done is not None:
                on_done(i)
            results.put(i, value)
            if results.deadline is not None and i + 1 < len(items) and time.monotonic() > results.deadline:
                raise results.timed_out(name, not_started=range(i + 1, len(items)), note=INLINE_NOTE)


#: what a timeout leaves behind where items run in the calling thread
INLINE_NOTE = ("The serial executor (as a map inside chunk work) runs its items in the calling thread "
               "and checks the time only between them: it never stops one mid-way, so a stuck one "
               "is not interrupted. To bound each, use the 'threads', 'processes' or 'dask' executor.")
