"""Deterministic chunking and reduction: the same bits on every backend.

::

    n_items, chunk_size ──▶ chunk_ranges ──▶ [range(0,c), range(c,2c), ...]
                             (never depends on the worker count)
    executor.map(work, chunks) ──▶ [r0, r1, r2, r3, r4]   (item order)
    tree_sum:   level 1   (r0+r1)   (r2+r3)   r4
                level 2   ((r0+r1)+(r2+r3))   r4
                level 3   (((r0+r1)+(r2+r3))+r4)

The tree depends only on the number of values, so the result is the same whatever
backend and worker count produced them, and ``TreeSum`` gives the same bits as results
stream in.
"""

from __future__ import annotations

import math
import operator
from typing import Any, Callable, Iterable, SupportsIndex, TypeVar, cast

from .base import check_positive_int

__all__ = ["chunk_ranges", "tree_sum", "TreeSum", "neumaier_sum", "DEFAULT_N_CHUNKS"]

#: without an explicit chunk_size, items are split into (at most) this many chunks
DEFAULT_N_CHUNKS = 16

_MISSING: Any = object()

T = TypeVar("T")


def chunk_ranges(n_items: SupportsIndex, chunk_size: SupportsIndex | None = None) -> list[range]:
    """Split ``range(n_items)`` into consecutive ranges of ``chunk_size`` items.

    Boundaries depend only on ``n_items`` and ``chunk_size`` (never on the number of
    workers); the last chunk may be shorter.  With ``chunk_size=None`` the size is
    ``ceil(n_items / 16)`` (at least 1); pass ``current_chunk_size()`` for the configured one.

    >>> chunk_ranges(10, 4)
    [range(0, 4), range(4, 8), range(8, 10)]
    >>> [len(r) for r in chunk_ranges(40)]
    [3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 1]
    >>> chunk_ranges(0)
    []
    """
    if n_items is None:
        raise ValueError("n_items must be a non-negative integer, got None")
    n = cast(int, check_positive_int(n_items, "n_items", minimum=0))
    size = check_positive_int(chunk_size, "chunk_size") or max(1, math.ceil(n / DEFAULT_N_CHUNKS))
    return [range(start, min(start + size, n)) for start in range(0, n, size)]


def tree_sum(values: Iterable[T], add: Callable[[T, T], T] = operator.add, *, zero: T = _MISSING) -> T:
    """Sum ``values`` with a fixed pairwise tree over their index.

    Level by level, pairs ``(0, 1), (2, 3), ...`` are added with ``add(left, right)``; an
    odd last value moves up unchanged.  The association depends only on ``len(values)``,
    so the bits do not depend on how, or in which order, the values were computed.  Empty
    input raises ValueError unless ``zero`` is given (returned as is, never added).
    ``operator.add`` leaves the inputs unmodified.

    >>> tree_sum([1, 2, 3, 4, 5])
    15
    >>> tree_sum(["a", "b", "c"])
    'abc'
    >>> tree_sum([], zero=0.0)
    0.0
    >>> tree_sum([0.1, 0.2, 0.3]) == (0.1 + 0.2) + 0.3
    True
    """
    level = list(values)
    if not level:
        if zero is _MISSING:
            raise ValueError("tree_sum() of an empty sequence: pass zero= to allow it")
        return zero
    while len(level) > 1:
        pairs = iter(level)  # map takes its two arguments from one iterator: (0, 1), (2, 3), ...
        nxt = list(map(add, pairs, pairs))
        if len(level) % 2:
            nxt.append(level[-1])
        level = nxt
    return level[0]


class TreeSum:
    """:func:`tree_sum` computed as values arrive in index order, holding only
    O(log n) partial sums: equal-sized blocks merge as soon as both exist, the
    leftovers merge from the right at the end. Same association, same bits.

    >>> acc = TreeSum(add=lambda a, b: f"({a}+{b})")
    >>> for v in "abcde":
    ...     acc.push(v)
    >>> acc.result(), tree_sum("abcde", add=lambda a, b: f"({a}+{b})")
    ('(((a+b)+(c+d))+e)', '(((a+b)+(c+d))+e)')
    """

    __slots__ = ("_add", "_blocks", "count")

    def __init__(self, add: Callable[[Any, Any], Any] = operator.add) -> None:
        self._add = add
        self._blocks: list = []  # [size, value] with sizes strictly decreasing
        self.count = 0

    def push(self, value: Any) -> None:
        """Add the next value (index ``self.count``)."""
        size = 1
        while self._blocks and self._blocks[-1][0] == size:
            value = self._add(self._blocks.pop()[1], value)
            size *= 2
        self._blocks.append((size, value))
        self.count += 1

    def result(self, zero: Any = _MISSING) -> Any:
        """The sum of every value pushed (``zero`` when none was, if given)."""
        if not self._blocks:
            if zero is _MISSING:
                raise ValueError("TreeSum.result() of no values: pass zero= to allow it")
            return zero
        value = self._blocks[-1][1]
        for _, left in reversed(self._blocks[:-1]):
            value = self._add(left, value)
        return value


def neumaier_sum(values: Iterable[Any], *, zero: Any = _MISSING) -> Any:
    """Compensated (Neumaier) sum of scalars or same-shape arrays, left to right.

    Elementwise for arrays (broadcasting like ``+``); complex values are compensated in
    their real and imaginary parts separately.  Nearly as accurate as ``math.fsum``;
    infinities and NaNs propagate as in plain summation.  Python numbers give a float,
    arrays an array of the promoted dtype.

    >>> neumaier_sum([1e100, 1.0, -1e100])
    1.0
    >>> (1e100 + 1.0) + -1e100   # a plain left fold loses the 1.0
    0.0
    >>> import numpy as np
    >>> neumaier_sum([np.array([1e16, 1.0]), np.array([1.0, 1e-16]), np.array([-1e16, 0.0])])
    array([1., 1.])
    """
    import numpy as np

    vals = list(values)
    if not vals:
        if zero is _MISSING:
            raise ValueError("neumaier_sum() of an empty sequence: pass zero= to allow it")
        return zero
    python_scalars = all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals)
    arrs = [np.asarray(v) for v in vals]
    dtype = np.result_type(*arrs)
    if not np.issubdtype(dtype, np.inexact):
        dtype = np.result_type(dtype, np.float64)
    if np.issubdtype(dtype, np.complexfloating):
        part = np.finfo(dtype).dtype
        re = _neumaier([a.real.astype(part) for a in arrs])
        im = _neumaier([a.imag.astype(part) for a in arrs])
        out = np.empty(np.shape(re), dtype=dtype)
        out.real, out.imag = re, im
    else:
        out = _neumaier([a.astype(dtype, copy=False) for a in arrs])
    if python_scalars:
        return float(out)
    return out[()] if isinstance(out, np.ndarray) and out.ndim == 0 else out


def _neumaier(arrs):
    import numpy as np

    with np.errstate(invalid="ignore", over="ignore"):
        s = np.array(arrs[0], copy=True)
        c = np.zeros_like(s)
        for v in arrs[1:]:
            t = s + v
            big_s = np.abs(s) >= np.abs(v)
            corr = np.where(big_s, (s - t) + v, (v - t) + s)
            s, c = t, c + corr
        out = np.where(np.isfinite(s), s + c, s)
    return out
