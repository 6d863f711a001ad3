"""Can psum's work be sent to worker processes? Checked before any chunk runs.

Process and Dask workers receive ``f`` (with what it captures), each shared argument and
the elements of ``xs`` by cloudpickle. Something that cannot be pickled (a lock, an open
file, a generator) would otherwise fail late, under internal names. ``check`` pickles
each of them once per call site and executor, before the call runs (also when its
chunks then run inline), and names the user's object::

    check(kind, f, plan, state, xs, shared, executor)
      f ─────────── the user's function, or the model it is; the first captured
                    variable (closure cell, global it reads, attribute) that fails
      shared[k] ─── "shared argument k of psum(f, xs, *shared)"
      xs[i] ─────── "element i of xs"

Rules registered in ``__main__`` travel with their primitives (``registry.RulesTravel``);
every user rule travels with each map's work (``worker_rules.UserRules``, pickled by
``schedule._Task``). ``as_received`` gives the arrays of chunks run inline the memory
layout a worker unpickles them in, so that a chunk gives the same bits wherever it runs.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np
from executors.base import Executor, SerializationError

from ..callables import describe
from ..pytrees import flatten, unflatten
from ..tracer import TracerError

_checked: set = set()
_lock = threading.Lock()


def _dumps(obj):
    """cloudpickle ``obj`` to check that it pickles; the contents of numeric arrays are
    left out (they always pickle, and copying a large training set into a throw-away
    bytes object would double the parent's memory for a check)."""
    import io

    import cloudpickle
    import numpy as np

    class Checker(cloudpickle.Pickler):
        def reducer_override(self, o):
            if (type(o) is np.ndarray or type(o) is np.memmap) and not o.dtype.hasobject:
                return (np.empty, (0,))
            return super().reducer_override(o)

    Checker(io.BytesIO(), protocol=5).dump(obj)


def _fails(obj):
    """The exception pickling ``obj`` raises, or None."""
    try:
        _dumps(obj)
    except Exception as exc:  # whatever the object's __reduce__ raises
        return exc
    return None


def check(kind: str, f: Callable[..., Any], plan: Any, state: Any, xs: Any, shared: Any,
          executor: Executor, key: Any) -> None:
    """Raise ``SerializationError`` naming the first of ``f``, the shared arguments and
    the elements of ``xs`` that cannot be sent to ``executor``'s workers."""
    site = (key, executor.name)
    with _lock:
        if site in _checked:
            return
    where = f"the {executor.name!r} executor's worker processes"
    exc = _fails(plan) or _fails(state)
    if exc is not None:
        raise SerializationError(
            f"{kind}: f ({describe(f)}) cannot be sent to {where}{_culprit(f)}: "
            f"{_why(exc)}") from exc
    for k, arg in enumerate(shared):
        exc = _fails(arg)
        if exc is not None:
            raise SerializationError(
                f"{kind}: shared argument {k} of {kind}(f, xs, *shared) (a {type(arg).__name__}) "
                f"cannot be sent to {where}: {_why(exc)}") from exc
    for i in range(len(xs)):
        exc = _fails(xs[i])
        if exc is not None:
            raise SerializationError(
                f"{kind}: element {i} of xs (a {type(xs[i]).__name__}) cannot be sent to "
                f"{where}: {_why(exc)}") from exc
    with _lock:
        if len(_checked) > 1024:
            _checked.clear()
        _checked.add(site)


def _why(exc):
    """The pickling error and what to do about it. A traced value's own error already
    says (pass it as a shared argument): no executor would take it, threads neither."""
    text = f"{type(exc).__name__}: {str(exc).rstrip('.')}."
    if isinstance(exc, TracerError):
        return text
    return (f"{text} Create it inside f instead, or use executor='threads' or 'serial', "
            "which send nothing.")


def _captured(f):
    """``(description, value)`` of what ``f`` carries: closure cells, the globals its
    code reads, a callable object's attributes, a partial's arguments."""
    code = getattr(f, "__code__", None)
    if code is not None:
        for name, cell in zip(code.co_freevars, getattr(f, "__closure__", None) or ()):
            try:
                yield f"captured variable {name!r}", cell.cell_contents
            except ValueError:  # an empty cell
                continue
        scope = getattr(f, "__globals__", {})
        for name in _names_read(code):
            if name in scope:
                yield f"global variable {name!r}", scope[name]
        return
    for name in ("func", "args", "keywords"):  # functools.partial
        if hasattr(f, name) and callable(getattr(f, "func", None)):
            yield f"partial's {name}", getattr(f, name)
    for name, value in getattr(f, "__dict__", {}).items():
        yield f"attribute {name!r}", value


def _names_read(code):
    """Global names read by ``code`` and the functions nested in it."""
    names = list(code.co_names)
    for const in code.co_consts:
        if hasattr(const, "co_names"):
            names.extend(_names_read(const))
    return names


def _culprit(f):
    for what, value in _captured(f):
        exc = _fails(value)
        if exc is not None:
            return f" (its {what}, a {type(value).__name__}, cannot be pickled)"
    return ""


def as_received(tree: Any) -> Any:
    """``tree`` with each NumPy array in the layout a worker process unpickles it in: one
    that is neither C- nor F-contiguous (a strided view such as ``X[:, ::2]`` or a
    column, a ``np.broadcast_to``) becomes a C-contiguous copy, an unaligned one an
    aligned copy; anything else is returned as it is (``tree`` itself when nothing
    changes).

    NumPy chooses its loops by memory layout (a strided ``X @ w`` does not go to BLAS),
    and the bits of a product or a sum follow. psum runs inline chunks on what pickling
    would hand a worker, so that the bits never depend on where a chunk ran.

    >>> X = np.arange(12.0).reshape(3, 4)
    >>> as_received(X) is X, as_received({"X": X[:, ::2]})["X"].flags.c_contiguous
    (True, True)
    """
    t = type(tree)
    if t is np.ndarray:
        return _as_received(tree)
    if tree is None or t in PLAIN_SCALARS:
        return tree
    if (t is list or t is tuple) and PLAIN_SCALARS.issuperset(map(type, tree)):
        return tree  # tiny work over numbers: nothing to look at
    leaves, treedef = flatten(tree)
    fixed = leaves_as_received(leaves)
    return tree if fixed is leaves else unflatten(treedef, fixed)


def leaves_as_received(leaves: list[Any]) -> list[Any]:
    """``as_received`` of each of a flat list of leaves (``leaves`` itself when none changes)."""
    out = None
    for i, a in enumerate(leaves):
        if type(a) is np.ndarray:
            flags = a.flags
            if flags.forc and flags.aligned:  # (_as_received's test, without the call)
                continue
            b = _as_received(a)
            if b is not a:
                if out is None:
                    out = list(leaves)
                out[i] = b
    return leaves if out is None else out


def _as_received(a):
    flags = a.flags
    if flags.forc and flags.aligned:  # as pickle keeps it: C or Fortran order
        return a
    return a.copy(order="K") if flags.forc else np.ascontiguousarray(a)


PLAIN_SCALARS = frozenset((float, int, np.float64, np.float32))  # the scalar types with no memory layout to fix
