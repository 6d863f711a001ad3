"""Projection of a cotangent back onto the space of its primal.

A rule may return a cotangent that is "too big": broadcast to the output's shape,
float64 for a float32 input, complex for a real input. ``ProjectTo(x)(dx)`` fixes all
of that, and the tracer applies it to every rule output automatically, so rule
authors never call it themselves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .tangents import NoTangent, Tangent, ZeroTangent, is_zero, unthunk


class ProjectionError(ValueError):
    """A cotangent cannot be projected onto its primal (wrong shape)."""


def _shape(x: Any) -> tuple[int, ...]:
    return getattr(x, "shape", ())


def _dtype(x: Any) -> np.dtype[Any] | None:
    dt = getattr(x, "dtype", None)
    if dt is None:
        return np.dtype(type(x)) if isinstance(x, (bool, int, float, complex)) else None
    return dt


def unbroadcast(g: Any, shape: tuple[int, ...]) -> Any:
    """Sum ``g`` over the axes that broadcasting added to an array of ``shape``.

    >>> import numpy as np
    >>> unbroadcast(np.ones((2, 3)), (3,))
    array([2., 2., 2.])
    >>> unbroadcast(np.ones((2, 3)), (2, 1))
    array([[3.],
           [3.]])
    """
    gshape = _shape(g)
    if gshape == shape:
        return g
    extra = len(gshape) - len(shape)
    if extra < 0:
        if _dtype(g) is None:  # a list or a string has no shape: "() is smaller" misled
            raise ProjectionError(_not_numbers(g))
        raise ProjectionError(f"cotangent of shape {gshape} is smaller than its primal's {shape}")
    if extra:
        g = np.sum(g, axis=tuple(range(extra)))
    axes = tuple(i for i, (n, m) in enumerate(zip(shape, _shape(g))) if n == 1 and m != 1)
    if axes:
        g = np.sum(g, axis=axes, keepdims=True)
    if _shape(g) != shape:
        raise ProjectionError(f"cotangent of shape {gshape} does not broadcast to its primal's {shape}")
    return g


def _not_numbers(g: Any) -> str:
    what = f"an array of dtype {g.dtype}" if isinstance(g, np.ndarray) else f"a {type(g).__name__}"
    return (f"the rule returned {what} where a number or an array of numbers belongs: return "
            f"NumPy values (np.array(...), np.stack(...))")


def project_like(g: Any, x: Any) -> Any:
    """Project cotangent ``g`` onto the space of primal value ``x`` (the tracer's hot path).

    >>> import numpy as np
    >>> project_like(np.ones((4, 3)), np.zeros(3, dtype=np.float32))
    array([4., 4., 4.], dtype=float32)
    """
    if is_zero(g):
        return g
    xdt = _dtype(x)
    if xdt is None or xdt.kind not in "fc":
        return NoTangent()
    shape = _shape(x)
    if _shape(g) != shape:
        g = unbroadcast(g, shape)
    gdt = _dtype(g)
    if gdt is None and isinstance(g, (str, bytes, list, tuple, dict)):
        raise ProjectionError(_not_numbers(g))
    if gdt is not None and gdt != xdt:
        if gdt.kind not in "biufc":  # NumPy: "could not convert string to float"
            raise ProjectionError(_not_numbers(g))
        if gdt.kind == "c" and xdt.kind != "c":
            g = np.real(g)
        g = g.astype(xdt) if hasattr(g, "astype") else xdt.type(g)
    return g


class ProjectTo:
    """Remember the space of a primal, then project cotangents onto it.

    Keeps float32 as float32, drops the imaginary part for a real primal, sums
    broadcast axes away, reshapes when only trivial dimensions differ, gives
    ``NoTangent()`` for integer or boolean primals, and raises on a size mismatch.
    Containers (list, tuple, dict) project element by element.

    >>> import numpy as np
    >>> p = ProjectTo(np.zeros((2, 1), dtype=np.float32))
    >>> p(np.ones((2, 3)))
    array([[3.],
           [3.]], dtype=float32)
    >>> ProjectTo(3)(1.5)
    NoTangent()
    """

    __slots__ = ("shape", "dtype", "children", "kind", "constant", "number")
    shape: tuple[int, ...]
    dtype: np.dtype[Any] | None
    children: Any  # a list or dict of ProjectTo for a container, else None
    kind: type | None  # the container type, None for a leaf
    constant: bool  # None or a string
    number: bool  # a number, not an array: its cotangent is a number too

    def __init__(self, x: Any) -> None:
        if isinstance(x, (list, tuple)):
            self.kind, self.children = type(x), [ProjectTo(v) for v in x]
        elif isinstance(x, dict):
            self.kind, self.children = dict, {k: ProjectTo(v) for k, v in x.items()}
        else:
            self.kind, self.children = None, None
        self.shape, self.dtype = _shape(x), _dtype(x)
        self.constant = x is None or isinstance(x, str)
        self.number = not isinstance(x, np.ndarray)

    def __call__(self, dx: Any) -> Any:
        dx = unthunk(dx)
        if isinstance(dx, Tangent) and self.kind is not None:  # read by key, field or position
            dx = _tangent_entries(dx, self.kind, len(self.children))
        if self.kind is dict:
            if not is_zero(dx):
                extra = sorted(map(repr, set(dx) - set(self.children)))
                if extra:  # dropping them would hide a misspelt key
                    raise ProjectionError(f"ProjectTo: the cotangent has keys {', '.join(extra)} that "
                                          f"the primal dict has not ({', '.join(map(repr, self.children))}).")
            return {k: p(dx[k]) if not is_zero(dx) and k in dx else ZeroTangent()
                    for k, p in self.children.items()}
        if self.kind is not None:
            if is_zero(dx):
                return _sequence(self.kind, [ZeroTangent() for _ in self.children])
            if len(dx) != len(self.children):  # zip would cut the longer one short
                raise ProjectionError(f"ProjectTo: a cotangent of {len(dx)} entries for a "
                                      f"{self.kind.__name__} of {len(self.children)}.")
            return _sequence(self.kind, [p(d) for p, d in zip(self.children, dx)])
        if is_zero(dx):
            return dx
        if self.constant:  # None, a string: no tangent space, as everywhere else
            return NoTangent()
        if self.dtype is None:  # an unknown type: leave its tangent alone
            return dx
        if self.dtype.kind not in "fc":
            return NoTangent()
        if _shape(dx) != self.shape and np.size(dx) == int(np.prod(self.shape)) and np.ndim(dx) != len(self.shape):
            trivial = tuple(n for n in _shape(dx) if n != 1) == tuple(n for n in self.shape if n != 1)
            if trivial:
                dx = np.reshape(dx, self.shape)
        dx = project_like(dx, Spec(self.shape, self.dtype))
        if self.number and isinstance(dx, np.ndarray) and dx.ndim == 0:
            return dx[()]  # a number's cotangent is a number (ChainRules: p(dx)::Float64)
        if not self.number and self.shape == () and not isinstance(dx, np.ndarray):
            return np.asarray(dx, dtype=self.dtype)  # and a 0-d array's a 0-d array
        return dx

    def __repr__(self) -> str:
        return f"ProjectTo(shape={self.shape}, dtype={self.dtype})"


def _sequence(kind: type, items: list[Any]) -> Any:
    """A list, tuple or NamedTuple of ``items`` (a NamedTuple takes them one by one)."""
    return kind(*items) if hasattr(kind, "_fields") else kind(items)


def _tangent_entries(dx: Tangent, kind: type, n: int) -> Any:
    """A ``Tangent``'s entries as ProjectTo of a ``kind`` container reads them: a dict by
    key, a NamedTuple's fields in order, a tuple's by position."""
    if kind is dict:
        return dict(dx.backing) if isinstance(dx.backing, dict) else dx.backing
    if isinstance(dx.backing, dict):
        names = getattr(kind, "_fields", None)
        if names is None:
            return list(dx.backing.values())  # (the length check names the misfit)
        return [dx[name] for name in names]
    return list(dx.backing)


class Spec:
    """A stand-in primal with only a shape and a dtype (what projection reads)."""

    __slots__ = ("shape", "dtype")

    def __init__(self, shape: tuple[int, ...], dtype: np.dtype[Any] | None) -> None:
        self.shape, self.dtype = shape, dtype
