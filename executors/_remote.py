"""Pickled payloads for process and dask workers, and the task they run.

Everything that crosses a process boundary is pickled *in the parent* with
cloudpickle, one argument at a time, so that
(1) lambdas and closures work, (2) a pickling failure names its culprit (``fn``, ``item 3``, ``shared arg 0``)
instead of surfacing later as a broken pool, and (3) ``fn`` and the shared
arguments are pickled once per map, not once per task::

    parent                                         worker process
    ──────                                         ──────────────
    fn      ─ cloudpickle ─▶ blob (key, bytes)  ┐
    shared  ─ cloudpickle ─▶ blobs              ├─▶ run_task(i, item_bytes, fn_blob, shared_blobs, ...)
    item i  ─ cloudpickle ─▶ bytes              ┘     ├ first task: mark worker, pin BLAS to 1 thread
                                                      ├ load blobs through a small LRU cache keyed by
                                                      │ content hash (unpickled once per worker)
                                                      ├ fn(item, *shared) in a fresh context:
                                                      │ in_worker() True, caller's chunk_size
    result  ◀─ cloudpickle.loads ◀── bytes ◀──────────┘ result pickled here: a failure names item i
                                                        (array buffers apart, received into their own memory)

A blob's key is a BLAKE2b hash of its bytes (``None`` for small inline blobs),
so equal content is unpickled once per worker, and changed content (a mutated
array) gets a new key: a worker can never use stale data.  On dask a blob may
instead be a scattered future that dask resolves to the same ``(key, bytes)``.
"""

from __future__ import annotations

import collections
import contextvars
import hashlib
import io
import logging
import os
import pickle
import threading
import time
from typing import Any, Iterable

from . import _abandon, _context, _global_random, _pickler, _shm
from ._blas import blas_pinned, pin_for_process
from .base import RemoteError, SerializationError, WhereRaised

__all__ = ["dumps", "loads", "make_blob", "run_task", "init_process_worker"]

#: blobs at least this large get a content-hash key (cached on workers)
HASH_MIN_BYTES = 4096
#: result buffers at least this large travel apart from the pickled bytes
OUT_OF_BAND_MIN_BYTES = 1 << 16


def dumps(obj: Any, what: str, backend: str) -> bytes:
    """cloudpickle ``obj``; on failure raise SerializationError naming ``what``."""
    return _pickled(obj, what, backend)


def _pickled(obj, what, backend, buffer_callback=None):
    try:
        return _pickler.dumps(obj, buffer_callback)
    except Exception as exc:
        err = SerializationError(
            f"could not pickle {what} (a {type(obj).__name__}), which must cross a "
            f"process boundary on the {backend!r} executor: {type(exc).__name__}: {str(exc).rstrip('.')}. "
            "Use the 'serial' or 'threads' executor for objects that cannot be "
            "pickled, or build them inside fn."
        )
        # for a caller to word its own message (they travel with it from a worker)
        err.what, err.reason = what, f"{type(exc).__name__}: {exc}"
        raise err from exc


def dumps_out_of_band(obj: Any, what: str, backend: str) -> tuple:
    """``obj`` pickled with its large buffers (array data) left out of the bytes: Dask and
    the lane send them apart, and :func:`load_result` builds the arrays on the memory
    they are received into, without another copy. Small ones stay in the bytes, where
    a copy costs less than a message of their own."""
    import numpy as np

    buffers: list = []

    def in_band(buffer):
        if buffer.raw().nbytes < OUT_OF_BAND_MIN_BYTES:
            return True
        buffers.append(np.frombuffer(buffer.raw(), np.uint8))
        return False

    return _pickled(obj, what, backend, in_band), buffers


def loads(data: bytes) -> Any:
    """Unpickle bytes made by :func:`dumps`."""
    return pickle.loads(data)


def content_key(data: bytes) -> str:
    """A content hash of ``data`` (BLAKE2b, 128 bits)."""
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def make_blob(data: bytes) -> tuple:
    """``(key, data)``: key is a content hash for large data, None for small."""
    return (content_key(data) if len(data) >= HASH_MIN_BYTES else None, data)


# ------------------------------------------------------------------ worker side

_CACHE_MAX_ITEMS = 16
_CACHE_MAX_BYTES = 512 * 2**20
_cache: collections.OrderedDict = collections.OrderedDict()  # key -> (obj, nbytes)
_cache_bytes = 0
_cache_lock = threading.Lock()


def _load_blob(blob):
    """Unpickle a blob, through the per-process LRU cache when it has a key."""
    global _cache_bytes
    key, data = blob
    if key is None:
        return loads(data)
    with _cache_lock:
        hit = _cache.get(key)
        if hit is not None:
            _cache.move_to_end(key)
            return hit[0]
    mapped = _shm.mapped_bytes_opened()
    obj = loads(data)
    # memory-mapped arrays count too: a cached object keeps its files' pages alive,
    # also after the parent deleted them
    nbytes = len(data) + _shm.mapped_bytes_opened() - mapped
    with _cache_lock:
        if key not in _cache:
            _cache[key] = (obj, nbytes)
            _cache_bytes += nbytes
            while len(_cache) > 1 and (
                len(_cache) > _CACHE_MAX_ITEMS or _cache_bytes > _CACHE_MAX_BYTES
            ):
                _, (_, nbytes) = _cache.popitem(last=False)
                _cache_bytes -= nbytes
    return obj


def init_process_worker(parent_pid: int) -> None:
    """Initializer of loky workers: this process only ever runs chunk work, and ends
    when ``parent_pid``, the process that started it, is gone. Given by the parent, not
    read here: a worker still starting when its parent was killed is already an orphan
    when it gets here (its parent pid is init's), and would watch init for good."""
    _context.mark_process_worker()
    pin_for_process()
    threading.Thread(target=_exit_when_orphaned, args=(parent_pid,), daemon=True,
                     name="executors-orphan-watch").start()


#: seconds between a worker's looks at whether the process that started it is alive
ORPHAN_CHECK_SECONDS = 0.5


def _exit_when_orphaned(parent_pid: int) -> None:
    """End this worker once its parent is gone (killed: SIGKILL, the OOM killer). An
    orphaned loky worker otherwise waits out its idle timeout (300 s by default), then
    30 s more for the dead parent's go-ahead, holding its memory, and the shared
    arrays' files in /dev/shm stay until it exits (their resource tracker waits for it).
    The kernel re-parents an orphan (to init or a subreaper), so its parent pid changes."""
    while os.getppid() == parent_pid:
        time.sleep(ORPHAN_CHECK_SECONDS)
    os._exit(1)


def warm_up(modules: Iterable[str] = ()) -> None:
    """A task run when the pool starts: the worker is up and has imported ``modules``."""
    import importlib

    for name in modules:
        importlib.import_module(name)


def run_task(index, item_data, fn_blob, shared_blobs, origin_pid, chunk_size, backend="processes",
             flag=None):
    """Run one item on a worker; return ``[drew, result]``, the result pickled by
    :func:`dumps_out_of_band` (the parent pops it, so the finished future does not keep
    it alive); ``drew``: whether it drew from NumPy's global random state (see
    ``_global_random``).

    ``origin_pid`` tells a separate worker process (pinned for good) from an
    in-process dask worker thread (pinned per task, ref-counted). ``flag``: the map's
    (``_abandon``), set once the map raised; the task then does nothing.
    """
    if flag is not None and flag.is_set():
        return [False, None]  # nobody reads it
    if backend == "dask" and not _failures_quiet:
        _quiet_failures_of_our_tasks()
    if os.getpid() != origin_pid:
        _context.mark_process_worker()
        pin_for_process()
        watch = _global_random.Watch() if _alone_in_process(backend) else None
        data = _run(index, item_data, fn_blob, shared_blobs, chunk_size, backend, flag)
        return [_global_random.drew(watch, _work_key(fn_blob, shared_blobs)), data]
    with blas_pinned():  # in-process worker (e.g. LocalCluster(processes=False))
        return [False, _run(index, item_data, fn_blob, shared_blobs, chunk_size, backend, flag)]


def _work_key(fn_blob, shared_blobs):
    """What names a map's work on a worker: ``fn`` and the shared arguments, by content."""
    blobs = (fn_blob, *shared_blobs)
    if not all(isinstance(b, tuple) for b in blobs):
        return None
    return tuple(key if key is not None else hash(data) for key, data in blobs)


def _alone_in_process(backend):
    """Whether this task runs alone in its worker process (its global random state is
    the task's own): always on a loky worker, on a Dask worker with one thread."""
    if backend != "dask":
        return True
    try:
        from distributed import get_worker

        return get_worker().state.nthreads == 1
    except Exception:  # not run by a Dask worker, or a distributed that words it otherwise
        return False


_failures_quiet = False


class _OurTaskFailures(logging.Filter):
    """Drops a Dask worker's "Compute Failed" record (20 lines on stderr: the task's key,
    its traceback through this module) for the tasks of an executors map: the caller gets
    the original exception, naming the element, and would read every error twice."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (str(record.msg).startswith("Compute Failed") and isinstance(record.args, tuple)
                    and bool(record.args) and str(record.args[0]).startswith("executors-"))


def _quiet_failures_of_our_tasks() -> None:
    global _failures_quiet
    logging.getLogger("distributed.worker").addFilter(_OurTaskFailures())
    _failures_quiet = True


def _load_on_worker(loader, blob, what, backend):
    try:
        return loader(blob)
    except _shm.SharedFileChanged:
        raise  # names the file and what to do
    except Exception as exc:
        data = blob[1] if isinstance(blob, tuple) else blob
        why = _why_not_loaded(exc, data)
        # a name found says what to fix; "shared arg 0" would name an argument the user may
        # never have passed (psum sends its own, holding f)
        head = (f"a worker of the {backend!r} executor could not unpickle what it was sent"
                if why.startswith("it refers to ") else
                f"could not unpickle {what} on a worker of the {backend!r} executor")
        raise SerializationError(f"{head}: {why}") from exc


class _NameFinder(pickle.Unpickler):
    """Unpickles as usual, keeping the ``module.name`` whose lookup failed."""

    culprit: tuple[str, str] | None = None

    def find_class(self, module, name):
        try:
            return super().find_class(module, name)
        except Exception:
            self.culprit = (module, name)
            raise


def _why_not_loaded(exc, data):
    """What the user can act on when ``data`` did not unpickle with ``exc``: for a
    function or class sent by reference, its name, and the module the workers lack."""
    culprit = None
    if isinstance(exc, (ImportError, AttributeError)):
        finder = _NameFinder(io.BytesIO(data))
        try:
            finder.load()
        except Exception:
            culprit = finder.culprit
    error = f"{type(exc).__name__}: {exc}"
    missing = getattr(exc, "name", None) if isinstance(exc, ImportError) else None
    if culprit is None:
        if missing:
            return (f"it needs module {missing!r}, which the workers cannot import ({error}). "
                    f"Install {missing!r} where the workers run.")
        return f"{error}. Are the same modules importable in the workers' environment?"
    module, name = culprit
    if isinstance(exc, AttributeError):
        return (f"it refers to {module}.{name}, which module {module!r} on the workers does not "
                f"define ({error}): the workers import another version of {module!r}. Restart "
                "them after changing it.")
    if missing and missing != module and not module.startswith(missing + "."):
        return (f"it refers to {module}.{name}, whose module needs {missing!r}, which the workers "
                f"cannot import ({error}). Install {missing!r} where the workers run.")
    return (f"it refers to {module}.{name}, and the workers cannot import module {module!r} "
            f"({error}). Make {module!r} importable where the workers run (installed in their "
            "environment, or its folder on their sys.path when they start), or send it by value: "
            f"cloudpickle.register_pickle_by_value({module}) before the call.")


def _run(index, item_data, fn_blob, shared_blobs, chunk_size, backend, flag=None):
    fn = _load_on_worker(_load_blob, fn_blob, "fn", backend)
    shared = [
        _load_on_worker(_load_blob, b, f"shared arg {j}", backend)
        for j, b in enumerate(shared_blobs)
    ]
    item = _load_on_worker(loads, item_data, f"item {index}", backend)
    ctx = contextvars.Context()
    ctx.run(_context.enter_worker, chunk_size, keep_settings=False)
    ctx.run(_abandon.enter, flag)
    _abandon.watch(flag)
    try:
        result = ctx.run(fn, item, *shared)
    except _abandon.Abandoned:  # the map raised meanwhile: nobody reads this
        return None
    except Exception as exc:
        reason = why_unsendable(exc)
        if reason is None:
            raise
        failure: Exception = stand_in(exc, reason)
    except BaseException as exc:  # sys.exit(), KeyboardInterrupt, GeneratorExit, ...
        if backend != "dask":  # a process worker sends it back as it is (_lane.serve)
            raise
        failure = BaseExceptionRaised(exc)  # a Dask worker could die of it, and the map with it
    else:
        return dumps_out_of_band(result, f"the result of item {index}", backend)
    finally:
        _abandon.leave(flag)
    # raised out of the except block: with the original as its __context__, Dask's
    # serializer tried to pickle that too, failed, and sent a bare Exception instead
    raise failure


class BaseExceptionRaised(Exception):
    """A ``BaseException`` that is no ``Exception`` (``sys.exit()``, ``KeyboardInterrupt``,
    ``GeneratorExit``, a bare ``BaseException``) raised by a task on a Dask worker, carried
    back as an error: the worker died of it (for ``sys.exit()``, the map reported "item 0
    of 4 was lost" 4 s later; a ``KeyboardInterrupt`` could close the worker and its
    nanny). The caller raises ``original()``, as inline code would have."""

    def __init__(self, exc: BaseException) -> None:
        super().__init__(*exc.args)
        self.kind = type(exc)
        self.notes = [str(n) for n in getattr(exc, "__notes__", [])]
        self.attributes = _plain_attributes(exc)  # which chunk of a task raised, say

    def __reduce__(self):
        return (_base_exception_raised, (self.kind, self.args, self.notes, self.attributes))

    def original(self) -> BaseException:
        return _rebuilt(self.kind, self.args, self.notes, self.attributes)


def _base_exception_raised(kind, args, notes, attributes):
    return BaseExceptionRaised(_rebuilt(kind, args, notes, attributes))


def _rebuilt(kind, args, notes, attributes):
    try:
        exc = kind(*args)
    except Exception:  # a class of the user's whose __init__ takes other arguments
        exc = BaseException(*args)
    exc = _with_notes(exc, notes)
    exc.__dict__.update(attributes)
    return exc


def _plain_attributes(exc):
    """What of ``exc``'s attributes surely pickles: numbers, strings, booleans, and where
    in a map it was raised (:class:`~executors.base.WhereRaised`)."""
    return {name: value for name, value in vars(exc).items() if type(value) in (int, float, str, bool, WhereRaised)}


def _with_notes(exit, notes):
    if notes:
        exit.__notes__ = list(notes)  # (add_note is Python >= 3.11)
    return exit


def stand_in(exc, reason):
    """A RemoteError for ``exc``, which cannot be pickled: its notes (the element that
    raised) and its plain attributes (an error code) go with it."""
    err = RemoteError(f"{type(exc).__module__}.{type(exc).__qualname__}", str(exc), reason)
    own = vars(err).keys()  # type_name, message, reason: the exception's own do not replace them
    err.__dict__.update({k: v for k, v in _plain_attributes(exc).items() if k not in own})
    notes = getattr(exc, "__notes__", None)
    if isinstance(notes, list):
        err.__notes__ = [str(n) for n in notes]
    return err


def why_unsendable(exc):
    """None if ``exc`` survives a pickle round trip, else the reason it does not."""
    import cloudpickle

    try:
        pickle.loads(cloudpickle.dumps(exc))
    except Exception as why:
        return f"{type(why).__name__}: {why}"
    return None


def load_result(data: tuple[bytes, list[Any]], index: int, backend: str) -> Any:
    """Unpickle a result in the parent, ``(header, buffers)`` as :func:`dumps_out_of_band`
    made it; a failure names the item."""
    header, buffers = data
    try:
        return pickle.loads(header, buffers=buffers)
    except Exception as exc:
        raise SerializationError(
            f"could not unpickle the result of item {index} sent back by the {backend!r} "
            f"executor's worker: {type(exc).__name__}: {exc}"
        ) from exc
