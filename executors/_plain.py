"""Plain data: what the C pickler sends to a worker exactly as cloudpickle would.

cloudpickle calls a Python hook for every object it pickles, to send functions and
classes a worker cannot import (those of ``__main__``, lambdas) by value. Models, chunks
and gradients are mostly NumPy arrays in dicts, lists and tuples, which refer to no such
function or class: the C pickler writes the same bytes in half the time (16 small
models, one task of psum's small ensemble: ~230 µs instead of ~600 µs, timed alone;
within the noise of a whole ~25 ms call).
:func:`plain_arrays` tells such data apart; :func:`plain_record` admits a class of a
module every worker imports (adrules' chunk results) by what its ``__reduce_ex__`` gives.
"""

from __future__ import annotations

from typing import Any

__all__ = ["plain_arrays", "plain_record"]

_PLAIN_ATOMS = frozenset({type(None), bool, int, float, complex, str, bytes})
_ndarray: Any = None  # numpy.ndarray and numpy.generic, once a walk needs them: executors
_generic: Any = None  # does not import NumPy until data is sent
#: nesting beyond which data is not called plain (a list holding itself: cloudpickle's
#: memo handles the cycle)
_PLAIN_MAX_DEPTH = 64


def plain_arrays(obj: Any) -> list | None:
    """The NumPy arrays in ``obj`` when it is plain data — builtin numbers, strings and
    bytes, NumPy arrays and scalars of non-object dtype, in tuples, lists and dicts
    (the exact types, not subclasses) — else None. Plain data pickles without
    reference to any function or class a worker might not import.

    >>> import numpy as np
    >>> [a.shape for a in plain_arrays({"w": np.ones(3), "b": (1.0, None)})]
    [(3,)]
    >>> plain_arrays([abs]) is None
    True
    """
    global _ndarray, _generic
    if _ndarray is None:
        import numpy as np

        _ndarray, _generic = np.ndarray, np.generic
    arrays: list = []
    return arrays if _plain(obj, arrays, 0) else None


def _plain(o, arrays, depth):
    # Loops, not all() over generators, and arrays tested first: this walk runs over every
    # task and every result (a task of 16 small models: 40 µs, against 100 µs with
    # generators, beside the C pickler's ~400 µs).
    t = type(o)
    if t is _ndarray:
        if o.dtype.hasobject:
            return False
        arrays.append(o)
        return True
    if t in _PLAIN_ATOMS:
        return True
    if t is dict or t is list or t is tuple:
        if depth >= _PLAIN_MAX_DEPTH:
            return False
        depth += 1
        if t is dict:
            for k, v in o.items():
                if not (type(k) in _PLAIN_ATOMS or _plain(k, arrays, depth)):
                    return False
                if not _plain(v, arrays, depth):
                    return False
            return True
        for v in o:
            if not _plain(v, arrays, depth):
                return False
        return True
    if t in _PLAIN_RECORDS:
        how = o.__reduce_ex__(5)
        return len(how) == 2 and how[0] is t and _plain(how[1], arrays, depth + 1)
    return isinstance(o, _generic) and t.__module__ == "numpy" and not o.dtype.hasobject


#: classes whose instances are plain data when their ``__reduce_ex__`` arguments are
_PLAIN_RECORDS: set = set()


def plain_record(cls: type) -> type:
    """Class decorator: an instance of ``cls`` counts as plain data (see
    :func:`plain_arrays`) when what its ``__reduce_ex__`` gives is ``(cls, args)`` with
    plain ``args``. Only for classes of modules every worker imports (the C pickler
    refers to ``cls`` by name, where cloudpickle would send a class of ``__main__``
    by value).

    >>> import fractions
    >>> plain_arrays([fractions.Fraction(1, 3)]) is None
    True
    >>> plain_record(fractions.Fraction) is fractions.Fraction
    True
    >>> plain_arrays([fractions.Fraction(1, 3)])
    []
    """
    _PLAIN_RECORDS.add(cls)
    return cls
