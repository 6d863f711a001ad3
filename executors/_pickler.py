"""The pickler of what crosses a process boundary: cloudpickle's, except that code sent
by value (functions of ``__main__``, lambdas, closures) keeps its file name.

cloudpickle (3.0 on) names every such code object's file ``<dynamic-code>``, so that the
bytes do not depend on where the function was written; a traceback from a worker then
reads ``File "<dynamic-code>", line 4, in loss``. Here the file name travels beside the
code and is put back as the code is rebuilt on the worker, nested functions' too, so the
traceback names the user's file and line, and shows the line where the file is readable.
"""

from __future__ import annotations

import io
import types
from collections import ChainMap
from typing import Any, Callable

__all__ = ["pickler", "dumps"]

_pickler: type | None = None
_code_reduce: Callable[[types.CodeType], tuple[Any, tuple[Any, ...]]] | None = None


def pickler() -> type:
    """The pickler class, made once (cloudpickle is imported on first use)."""
    global _pickler, _code_reduce
    if _pickler is None:
        import cloudpickle

        table = cloudpickle.Pickler.dispatch_table
        _code_reduce = table.get(types.CodeType)
        extra = {} if _code_reduce is None else {types.CodeType: _reduce_code}

        class Pickler(cloudpickle.Pickler):
            dispatch_table = ChainMap(extra, table)

        _pickler = Pickler
    return _pickler


def dumps(obj: Any, buffer_callback: Callable[[Any], Any] | None = None) -> bytes:
    """``cloudpickle.dumps(obj, protocol=5, buffer_callback=buffer_callback)`` with code
    keeping its file name.

    >>> import pickle
    >>> g = lambda x: x + 1
    >>> f = pickle.loads(dumps(g))
    >>> f(1), f is g, f.__code__.co_filename == g.__code__.co_filename
    (2, False, True)
    """
    buf = io.BytesIO()
    pickler()(buf, protocol=5, buffer_callback=buffer_callback).dump(obj)
    return buf.getvalue()


def _reduce_code(code: types.CodeType) -> tuple[Any, tuple[Any, ...]]:
    assert _code_reduce is not None
    make, args = _code_reduce(code)
    return _code_in_file, (make, args, code.co_filename)


def _code_in_file(make: Callable[..., types.CodeType], args: tuple[Any, ...], filename: str) -> types.CodeType:
    return make(*args).replace(co_filename=filename)
