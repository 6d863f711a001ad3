"""Tangent types with ChainRules' names and meanings.

* ``NoTangent()`` - the value has no tangent space (integers, indices, strings, a
  plain function's "self" slot).
* ``ZeroTangent()`` - the derivative is exactly zero; cheaper than an array of zeros.
* ``Tangent(primal_type, ...)`` - a structural tangent for an object: fields by
  attribute (``t.w``) and by item (``t["w"]`` or ``t[0]``); missing fields are zero.
* ``Thunk(fn)`` / ``InplaceableThunk(add_into, thunk)`` - a tangent computed only when
  asked for, so a rule never computes an input gradient nobody needs.
* ``unthunk(x)`` - the value of a thunk (anything else unchanged).

Thunks are internal to rules: the tracer unthunks before any pullback sees a value,
and nothing lazy crosses a process boundary.
"""

from __future__ import annotations

from typing import Any, Callable, Iterator, TypeVar

import numpy as np

from ._state import TracedValue

_T = TypeVar("_T")
_Z = TypeVar("_Z", bound="AbstractZero")


class AbstractZero:
    """Shared arithmetic of the two zero-like tangents: they absorb ``*`` and vanish in ``+``."""

    __slots__ = ()
    _instance: Any = None  # the one instance of each subclass

    def __array_ufunc__(self, ufunc: Any, method: str, *inputs: Any, **kwargs: Any) -> Any:
        """NumPy's linear ufuncs of a zero, as its operators give them (``np.conj(dx)``,
        ``np.multiply(dx, 2)`` in a rule: numpy refused them); ``ndarray + zero`` lands
        here too. Any other ufunc of a zero is not a tangent: NumPy's TypeError."""
        if method != "__call__" or set(kwargs) - {"out"}:
            return NotImplemented
        linear = _LINEAR_UFUNCS.get(ufunc.__name__)
        result = NotImplemented if linear is None else linear(*inputs)
        out = kwargs.get("out")
        if result is NotImplemented or not out or out[0] is result:
            return result
        out[0][...] = 0.0 if isinstance(result, AbstractZero) else result  # np.add(x, dx, out=x)
        return out[0]

    def __new__(cls: type[_Z]) -> _Z:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"

    def __reduce__(self) -> tuple[type, tuple[()]]:
        return (type(self), ())

    def __bool__(self) -> bool:
        return False

    def __add__(self, other: _T) -> _T:
        return other

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        return -other

    def __rsub__(self, other: _T) -> _T:
        return other

    def __neg__(self: _Z) -> _Z:
        return self

    def __mul__(self: _Z, other: object) -> _Z:
        return self

    __rmul__ = __truediv__ = __matmul__ = __rmatmul__ = __mul__

    def __iter__(self: _Z) -> Iterator[_Z]:
        # itself, once (ChainRules' iterate); without this, Python iterated through
        # __getitem__, which never ends: list(ZeroTangent()) hung
        return iter((self,))

    # ChainRules' convert(Float64, ZeroTangent()) == 0.0
    def __float__(self) -> float:
        return 0.0

    def __int__(self) -> int:
        return 0

    def __complex__(self) -> complex:
        return 0j

    def __getitem__(self: _Z, key: object) -> _Z:
        return self

    def __getattr__(self: _Z, name: str) -> _Z:
        if name.startswith("__"):
            raise AttributeError(name)
        return self

    def __call__(self: _Z, *args: object, **kwargs: object) -> _Z:
        # a method of a zero is zero: np.sum(dp.w) calls dp.w.sum(axis=None, ...)
        return self

    def __eq__(self, other: object) -> bool:
        # ChainRules: the two zeros are different values (a test asserting NoTangent()
        # for an index must fail on ZeroTangent())
        return type(other) is type(self)

    def __hash__(self) -> int:
        return hash(type(self))


def _first_zero(*inputs: Any) -> Any:
    return next(x for x in inputs if isinstance(x, AbstractZero))


def _added(a: Any, b: Any) -> Any:
    return b if isinstance(a, AbstractZero) else a


def _subtracted(a: Any, b: Any) -> Any:
    return -b if isinstance(a, AbstractZero) else a


def _divided(a: Any, b: Any) -> Any:
    return a if isinstance(a, AbstractZero) else NotImplemented  # x / zero: no tangent


_LINEAR_UFUNCS: dict[str, Callable[..., Any]] = {
    "negative": _first_zero, "positive": _first_zero, "conjugate": _first_zero,
    "multiply": _first_zero, "matmul": _first_zero,
    "add": _added, "subtract": _subtracted, "divide": _divided,
    # ndarray == zero: what __eq__ says (the two zeros differ, and neither is an array)
    "equal": lambda a, b: type(a) is type(b), "not_equal": lambda a, b: type(a) is not type(b),
}


class ZeroTangent(AbstractZero):
    """The derivative is zero.

    >>> import numpy as np
    >>> ZeroTangent() + np.ones(2)
    array([1., 1.])
    """

    __slots__ = ()
    _instance = None


class NoTangent(AbstractZero):
    """The value has no tangent space (ints, bools, strings, indices, plain functions).

    With ``ZeroTangent()`` it wins ``+`` and loses ``*``, as in ChainRules.

    >>> NoTangent() * 3.0, NoTangent() + ZeroTangent(), NoTangent() * ZeroTangent()
    (NoTangent(), NoTangent(), ZeroTangent())
    """

    __slots__ = ()
    _instance = None

    def __add__(self, other: Any) -> Any:
        return self if type(other) is ZeroTangent else other

    __radd__ = __add__

    def __sub__(self, other: Any) -> Any:
        return self if type(other) is ZeroTangent else -other

    def __mul__(self, other: object) -> Any:
        return other if type(other) is ZeroTangent else self

    __rmul__ = __mul__


def is_float_value(x: object, *, allow_complex: bool = True) -> bool:
    """True when ``x`` has a tangent space: a float (or complex) number or array,
    traced or not. Integers, booleans, strings and other objects have none.

    >>> import numpy as np
    >>> [is_float_value(v) for v in (1.0, np.float32(1), np.ones(2), 1j, 1, True, np.arange(2), "a", np.float64)]
    [True, True, True, True, False, False, False, False, False]
    >>> is_float_value(np.ones(2, complex), allow_complex=False)
    False
    """
    dt = getattr(x, "dtype", None)  # arrays, NumPy scalars, traced values
    if dt is not None:
        kind = getattr(dt, "kind", None)  # None for a class such as np.float64 (a dtype argument)
        return kind == "f" or (allow_complex and kind == "c")
    return isinstance(x, float) or (allow_complex and isinstance(x, complex))


def is_zero(x: object) -> bool:
    """True for ``ZeroTangent()``, ``NoTangent()`` and ``None`` (the tracer's 'no cotangent yet')."""
    return x is None or isinstance(x, AbstractZero)


def dense_zeros(x: Any) -> Any:
    """Zeros shaped like the value ``x`` (a traced value's, a list's as an array), in the
    floating type of its tangent: where a zero tangent must be written out.

    >>> import numpy as np
    >>> dense_zeros(2.5), dense_zeros(np.float32(1)), dense_zeros([1, 2])
    (0.0, np.float32(0.0), array([0., 0.]))
    """
    while isinstance(x, TracedValue):
        x = x.value  # type: ignore[attr-defined]
    if isinstance(x, float):  # a Python float's gradient stays a Python float
        return 0.0
    if type(x) in (list, tuple):
        x = np.asarray(x)
    dtype = np.result_type(x, 1.0)
    if isinstance(x, np.generic) or not isinstance(x, np.ndarray):
        return dtype.type(0)
    return np.zeros_like(x, dtype=dtype)


def dense(t: Any, x: Any) -> Any:
    """The tangent ``t`` of value ``x``, as zeros (``dense_zeros(x)``) when it is a zero tangent.

    >>> import numpy as np
    >>> dense(ZeroTangent(), np.ones(2)), dense(3.0, 1.0)
    (array([0., 0.]), 3.0)
    """
    return dense_zeros(x) if is_zero(t) else t


class Thunk:
    """A tangent computed on demand; ``unthunk`` evaluates it (once).

    >>> import numpy as np
    >>> t = Thunk(lambda: np.ones(2) * 3)
    >>> unthunk(t)
    array([3., 3.])
    """

    __slots__ = ("_fn", "_value", "_done")
    _fn: Any  # the function, None once evaluated

    def __init__(self, fn: Callable[[], Any]) -> None:
        self._fn = fn
        self._done = False
        self._value = None

    def __call__(self) -> Any:
        if not self._done:
            try:
                value = self._fn()
            except TypeError as e:  # (free unless raised)
                misfit = _thunk_misfit(self, e)
                if misfit is e:  # from the function's own body: as it was
                    raise
                raise misfit from e
            self._value = unthunk(value)
            self._done = True
            self._fn = None
        return self._value

    def __repr__(self) -> str:
        return "Thunk(...)" if not self._done else f"Thunk({self._value!r})"

    def __reduce__(self) -> tuple[Callable[[_T], _T], tuple[Any]]:
        # Nothing lazy crosses a process boundary: pickling evaluates the thunk.
        return (_identity, (self(),))

    # Arithmetic acts on the value, as ChainRules' thunks do (2 * t, t + x, x - t); a zero
    # keeps the thunk unevaluated, as in ChainRules.
    __array_ufunc__ = None  # ``ndarray + thunk`` defers to the operators below

    def __array__(self, dtype: Any = None, copy: bool | None = None) -> Any:
        import numpy as np

        value = np.asarray(self(), dtype=dtype)
        return value.copy() if copy else value

    def __add__(self, other: Any) -> Any:
        return self if is_zero(other) else self() + unthunk(other)

    def __radd__(self, other: Any) -> Any:
        return self if is_zero(other) else unthunk(other) + self()

    def __sub__(self, other: Any) -> Any:
        return self if is_zero(other) else self() - unthunk(other)

    def __rsub__(self, other: Any) -> Any:
        return -self() if is_zero(other) else unthunk(other) - self()

    def __mul__(self, other: Any) -> Any:
        return other if is_zero(other) else self() * unthunk(other)

    def __rmul__(self, other: Any) -> Any:
        return other if is_zero(other) else unthunk(other) * self()

    def __truediv__(self, other: Any) -> Any:
        return self() / unthunk(other)

    def __rtruediv__(self, other: Any) -> Any:
        return unthunk(other) / self()

    def __matmul__(self, other: Any) -> Any:
        return other if is_zero(other) else self() @ unthunk(other)

    def __rmatmul__(self, other: Any) -> Any:
        return other if is_zero(other) else unthunk(other) @ self()

    def __neg__(self) -> Any:
        return -self()

    def __getitem__(self, key: Any) -> Any:
        return self()[key]


class InplaceableThunk(Thunk):
    """A thunk that also knows how to add itself into an existing buffer.

    ``add_into(buffer)`` must return ``buffer`` plus the tangent, mutating ``buffer``
    when it is allowed to.

    >>> import numpy as np
    >>> t = InplaceableThunk(lambda b: b.__iadd__(1.0), Thunk(lambda: np.ones(2)))
    >>> unthunk(t), t.add_into(np.zeros(2))
    (array([1., 1.]), array([1., 1.]))
    """

    __slots__ = ("add_into",)

    def __init__(self, add_into: Callable[[Any], Any], thunk: Thunk | Callable[[], Any]) -> None:
        for name, fn in (("add_into", add_into), ("thunk", thunk)):
            if not callable(fn):
                raise TypeError(f"InplaceableThunk(add_into, thunk): {name} is a {type(fn).__name__}, "
                                f"not a function; write InplaceableThunk(lambda b: b.__iadd__(dx), "
                                f"lambda: dx): the function adding into a buffer, then the one "
                                f"computing the tangent.")
        super().__init__(thunk.__call__ if isinstance(thunk, Thunk) else thunk)
        self.add_into = add_into


def _thunk_misfit(thunk: Thunk, exc: TypeError) -> TypeError:
    """The error for a thunk whose function cannot be called with no arguments (``exc``
    itself when it can, and the TypeError came from its body)."""
    import inspect

    fn = thunk._fn
    if callable(fn):
        try:
            inspect.signature(fn).bind()
            return exc  # callable with no arguments: the error came from its body
        except ValueError:  # no signature to read
            return exc
        except TypeError:
            what = "a function that needs arguments"
    else:
        what = f"a {type(fn).__name__}"
    if isinstance(thunk, InplaceableThunk):
        return TypeError(f"InplaceableThunk(add_into, thunk): its thunk is {what} ({exc}); the "
                         f"function adding into a buffer comes first, then the function of no "
                         f"arguments computing the tangent: InplaceableThunk(lambda b: b.__iadd__(dx), "
                         f"lambda: dx).")
    return TypeError(f"Thunk(fn): fn is {what} ({exc}); a Thunk holds a function of no arguments "
                     f"that computes the tangent when asked: Thunk(lambda: 2 * x * g).")


def _identity(x: _T) -> _T:
    return x


def unthunk(x: Any) -> Any:
    """Evaluate a thunk; return any other value unchanged.

    >>> unthunk(Thunk(lambda: 2.0)), unthunk(5.0)
    (2.0, 5.0)
    """
    return x() if isinstance(x, Thunk) else x


def _field_order(cls: type) -> tuple[str, ...] | None:
    """The fields of a dataclass or NamedTuple type in order, or None for any other type (a
    dict's keys, a registered node's children: not known from the type)."""
    fields = getattr(cls, "__dataclass_fields__", None)
    if fields is not None:
        return tuple(fields)
    names = getattr(cls, "_fields", None)
    return tuple(names) if isinstance(names, tuple) else None


def _field_names(cls: type) -> set[str] | None:
    names = _field_order(cls)
    return None if names is None else set(names)


class Tangent:
    """Structural tangent of an object: a container of field tangents.

    Positional fields give a tuple-like tangent, keyword fields a record-like one.
    Missing fields read as ``ZeroTangent()``; reading a field evaluates a thunk held there.
    As in ChainRules, tangents add, subtract, negate and scale by numbers, and adding one
    to a value of its primal type (a dataclass, NamedTuple, tuple or dict) gives a new value.

    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Line:
    ...     w: float
    ...     b: float
    >>> t = Tangent(Line, w=2.0)
    >>> t.w, t["w"], t.b
    (2.0, 2.0, ZeroTangent())
    >>> (t + Tangent(Line, w=1.0, b=3.0)).backing
    {'w': 3.0, 'b': 3.0}
    >>> Line(1.0, 1.0) + t
    Line(w=3.0, b=1.0)
    """

    __slots__ = ("primal_type", "backing")
    __array_ufunc__ = None  # ``ndarray * tangent`` defers to the tangent's own operators
    primal_type: type
    backing: tuple[Any, ...] | dict[str, Any]

    def __init__(self, primal_type: type, *args: Any, **fields: Any) -> None:
        if args and fields:
            raise TypeError("Tangent: give positional fields or keyword fields, not both")
        known = _field_names(primal_type)
        if fields and known is not None and not set(fields) <= known:
            unknown = ", ".join(sorted(set(fields) - known))
            raise TypeError(f"Tangent({primal_type.__name__}, ...): {primal_type.__name__} has no "
                            f"field {unknown}; its fields are {', '.join(sorted(known))}.")
        object.__setattr__(self, "primal_type", primal_type)
        object.__setattr__(self, "backing", tuple(args) if args else dict(fields))

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            # not a field: copy.deepcopy and NumPy probe for such names, and a ZeroTangent
            # there made deepcopy(t) return ZeroTangent()
            raise AttributeError(name)
        backing = object.__getattribute__(self, "backing")
        if isinstance(backing, dict):
            return unthunk(backing.get(name, ZeroTangent()))
        raise AttributeError(f"Tangent of a tuple-like value has no field {name!r}")

    def __getitem__(self, key: Any) -> Any:
        backing = self.backing
        if isinstance(backing, dict):
            if type(key) is int and key not in backing:
                names = _field_order(self.primal_type)
                if names is not None:  # t[1] is the second field (ChainRules' getindex)
                    key = names[key]
            return unthunk(backing.get(key, ZeroTangent()))
        return unthunk(backing[key])

    def __setattr__(self, name: str, value: object) -> None:
        raise TypeError("Tangent is immutable: build a new one")

    def __reduce__(self) -> tuple[Callable[..., Tangent], tuple[Any, ...]]:
        # (copy and pickle set slots with setattr, which a Tangent refuses)
        return (_rebuilt_tangent, (self.primal_type, self.backing))

    def __iter__(self) -> Iterator[Any]:
        return iter(self.backing.values() if isinstance(self.backing, dict) else self.backing)

    def __len__(self) -> int:
        return len(self.backing)

    def _map(self, fn: Callable[[Any], Any]) -> Tangent:
        if isinstance(self.backing, dict):
            return Tangent(self.primal_type, **{k: fn(v) for k, v in self.backing.items()})
        return Tangent(self.primal_type, *(fn(v) for v in self.backing))

    def __add__(self, other: object) -> Any:
        if is_zero(other):
            return self
        other = unthunk(other)
        if not isinstance(other, Tangent):
            if _is_primal_of(other, self.primal_type):
                return _add_to_primal(other, self)
            return NotImplemented
        if other.primal_type is not self.primal_type:
            raise TypeError(f"cannot add a Tangent of {_name(other.primal_type)} to a Tangent of "
                            f"{_name(self.primal_type)}: they are tangents of different types.")
        a, b = self.backing, other.backing
        if isinstance(a, dict) and isinstance(b, dict):
            keys = list(a) + [k for k in b if k not in a]
            return Tangent(self.primal_type, **{k: add_tangents(a.get(k), b.get(k)) for k in keys})
        if isinstance(a, dict) or isinstance(b, dict):
            raise TypeError(f"cannot add a Tangent of {_name(self.primal_type)} with named fields to "
                            f"one with positional fields.")
        if len(self.backing) != len(other.backing):  # zip would drop fields
            raise ValueError(f"Tangent({self.primal_type.__name__}, ...): cannot add tangents of "
                             f"{len(self.backing)} and {len(other.backing)} positional fields.")
        return Tangent(self.primal_type, *(add_tangents(a, b) for a, b in zip(self.backing, other.backing)))

    __radd__ = __add__

    def __neg__(self) -> Tangent:
        return self._map(lambda v: -unthunk(v))

    def __sub__(self, other: object) -> Any:
        if is_zero(other):
            return self
        other = unthunk(other)
        return self + -other if isinstance(other, Tangent) else NotImplemented

    def __rsub__(self, other: object) -> Any:
        return -self if is_zero(other) else NotImplemented

    def __mul__(self, scalar: Any) -> Any:
        scalar = unthunk(scalar)
        if is_zero(scalar):
            return scalar  # ChainRules: a tangent times ZeroTangent() is ZeroTangent()
        if isinstance(scalar, Tangent):  # ChainRules defines no product of two tangents
            return NotImplemented
        return self._map(lambda v: unthunk(v) * scalar)

    __rmul__ = __mul__

    def __truediv__(self, scalar: Any) -> Any:
        scalar = unthunk(scalar)
        if isinstance(scalar, Tangent) or is_zero(scalar):
            return NotImplemented
        return self._map(lambda v: unthunk(v) / scalar)

    def __eq__(self, other: object) -> bool:
        # ChainRules: a missing field equals an explicit ZeroTangent(), thunks compare by value
        if not isinstance(other, Tangent) or self.primal_type is not other.primal_type:
            return False
        a, b = self.backing, other.backing
        if isinstance(a, dict) != isinstance(b, dict):
            return False
        if isinstance(a, dict):
            assert isinstance(b, dict)
            keys = list(a) + [k for k in b if k not in a]
            return all(_tangents_equal(self[k], other[k]) for k in keys)
        return len(a) == len(b) and all(_tangents_equal(unthunk(x), unthunk(y)) for x, y in zip(a, b))

    __hash__ = None  # type: ignore[assignment]  # equal by value (arrays inside): unhashable

    def __repr__(self) -> str:
        name = getattr(self.primal_type, "__name__", repr(self.primal_type))
        if isinstance(self.backing, dict):
            inner = ", ".join(f"{k}={v!r}" for k, v in self.backing.items())
        else:
            inner = ", ".join(repr(v) for v in self.backing)
        return f"Tangent[{name}]({inner})"


def _rebuilt_tangent(primal_type: type, backing: Any) -> Tangent:
    if isinstance(backing, dict):
        return Tangent(primal_type, **backing)
    return Tangent(primal_type, *backing)


def _name(cls: type) -> str:
    return getattr(cls, "__name__", repr(cls))


def _tangents_equal(x: Any, y: Any) -> bool:
    import numpy as np

    if is_zero(x) or is_zero(y):
        return is_zero(x) and is_zero(y)
    if isinstance(x, Tangent) or isinstance(y, Tangent):
        return x == y
    return bool(np.array_equal(x, y))


def _is_primal_of(value: object, primal_type: type) -> bool:
    """Whether ``value`` is a value of the type a tangent was made for (a dict for a
    ``Tangent(dict, ...)``, which may be any mapping's)."""
    try:
        return isinstance(value, primal_type)
    except TypeError:  # primal_type is not a class
        return False


def _add_to_primal(primal: Any, tangent: Tangent) -> Any:
    """``primal + tangent`` (ChainRules' ``construct``): a new value of the primal's type,
    each field moved by its tangent; missing fields and zeros leave a field as it is."""
    import dataclasses

    def moved(value: Any, dx: Any) -> Any:
        dx = unthunk(dx)
        return value if is_zero(dx) else value + dx

    backing = tangent.backing
    kind = type(primal)
    if isinstance(primal, dict):
        assert isinstance(backing, dict)
        out = dict(primal)
        for k, dx in backing.items():
            out[k] = moved(out[k], dx) if k in out else unthunk(dx)
        return out if kind is dict else kind(out)
    if isinstance(backing, tuple):
        fields = list(primal) if isinstance(primal, tuple) else None
        if fields is None or len(fields) != len(backing):
            raise TypeError(f"cannot add a Tangent of {len(backing)} positional fields to "
                            f"{_name(kind)} {primal!r}.")
        values = [moved(v, dx) for v, dx in zip(fields, backing)]
        return kind(*values) if hasattr(kind, "_fields") else kind(values)
    changes = {k: moved(getattr(primal, k), dx) for k, dx in backing.items()}
    if hasattr(primal, "_replace"):  # a NamedTuple
        return primal._replace(**changes)
    if dataclasses.is_dataclass(primal):
        return dataclasses.replace(primal, **changes)  # type: ignore[type-var]
    raise TypeError(f"cannot add a Tangent to a {_name(kind)}: adrules builds new values of "
                    f"dataclasses, NamedTuples, tuples and dicts; add the fields yourself.")


def add_tangents(a: Any, b: Any) -> Any:
    """Accumulate two tangents (out of place): zeros vanish, thunks are evaluated.

    >>> add_tangents(ZeroTangent(), 2.0), add_tangents(Thunk(lambda: 1.0), 2.0)
    (2.0, 3.0)
    """
    if is_zero(a):
        return unthunk(b) if b is not None else ZeroTangent()
    if is_zero(b):
        return unthunk(a)
    return unthunk(a) + unthunk(b)
