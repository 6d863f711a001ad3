"""The differentiable state of a callable: a model's parameters, a closure's captures.

Higher-order rules (``psum``, user rules with ``config=True``) receive functions. When
a function carries values being differentiated — fields of a callable dataclass, the
``self`` of a bound method, ``functools.partial`` arguments, cells of a closure — that
state must become explicit inputs, or its gradient would be lost. ``split_callable``
finds it; ``Lifted`` is a callable whose state is a flat list of leaves, so the tracer
can route the state's cotangents (the rule's self-slot tangent for that function) back
to the values it came from.
"""

from __future__ import annotations

import functools
import os
import types
from typing import Any

from ._state import STATE as _STATE, TracedValue
from .pytrees import REGISTERED_NODES, flatten, node_children, register_node, unflatten
from .tangents import add_tangents, is_zero


def has_traced(tree: Any) -> bool:
    """True when any leaf of ``tree`` is a traced value (never while no trace is open).

    >>> import numpy as np, adrules as ad
    >>> seen = []
    >>> _ = ad.gradient(lambda x: seen.append(has_traced({"x": x})) or x, 1.0)
    >>> has_traced([np.ones(2)]), seen
    (False, [True])
    """
    if not _STATE.active:
        return False
    return any(isinstance(leaf, TracedValue) for leaf in flatten(tree)[0])


class _Closure:
    """Rebuild a closure with its lifted cells refilled. It keeps a copy of the function
    whose lifted cells are empty, so pickling it (cloudpickle, for process backends)
    carries neither the traced values nor more globals than the function uses."""

    def __init__(self, fn, lifted):
        cells = tuple(types.CellType() if i in lifted else c for i, c in enumerate(fn.__closure__))
        self.template = _with_cells(fn, cells)
        self.lifted = lifted

    def __call__(self, contents):
        cells = list(self.template.__closure__)
        for i, value in zip(self.lifted, contents):
            cells[i] = types.CellType(value)
        return _with_cells(self.template, tuple(cells))

    @property
    def code(self):
        """The code of the function this rebuilds (what identifies the user's work)."""
        return self.template.__code__


def _with_cells(fn, cells):
    new = types.FunctionType(fn.__code__, fn.__globals__, fn.__name__, fn.__defaults__, cells)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new


def _identity(state):
    return state


class _Method:
    def __init__(self, name):
        self.name = name

    def __call__(self, owner):
        return getattr(owner, self.name)


class _Partial:
    def __init__(self, func, keywords):
        self.func, self.keywords = func, keywords

    def __call__(self, args):
        return functools.partial(self.func, *args, **self.keywords)


def _cell_has_traced(cell):
    try:
        return has_traced(cell.cell_contents)
    except ValueError:  # an empty cell
        return False


def split_callable(f):
    """``(state, rebuild)`` with ``rebuild(state)`` equivalent to ``f``, where ``state``
    holds the traced values ``f`` carries; ``(None, None)`` when it carries none.

    >>> import numpy as np
    >>> w = np.ones(2)
    >>> split_callable(lambda x: w @ x)
    (None, None)
    """
    if type(f) is types.FunctionType and f.__closure__ is None and type(f) not in REGISTERED_NODES:
        return None, None  # a plain function carries no state
    if node_children(f) is not None and has_traced(f):  # a callable model: its parameters
        return f, _identity
    if isinstance(f, types.MethodType) and node_children(f.__self__) is not None and has_traced(f.__self__):
        return f.__self__, _Method(f.__func__.__name__)
    if isinstance(f, functools.partial) and has_traced((f.args, f.keywords)):
        if has_traced(f.keywords):
            raise TypeError("functools.partial: pass differentiated values positionally, "
                            "not as keywords (keywords are never differentiated)")
        return tuple(f.args), _Partial(f.func, f.keywords)
    cells = getattr(f, "__closure__", None) or ()
    lifted = [i for i, c in enumerate(cells) if _cell_has_traced(c)]
    if lifted:
        return tuple(cells[i].cell_contents for i in lifted), _Closure(f, lifted)
    return None, None


def code_of(f):
    """The code of the user's function behind ``f``: a plain function's own, or that
    of the closure a ``split_callable`` rebuild refills; None for other callables.

    >>> code_of(lambda x: x).co_name
    '<lambda>'
    >>> code_of(print) is None
    True
    """
    code = getattr(f, "__code__", None)
    if code is None and type(f) is _Closure:
        code = f.code
    return code


def describe(f: Any) -> str:
    """``name (file:line)`` of a user's function, for log lines and messages.

    >>> def loss(w):
    ...     return w
    >>> describe(loss).startswith("loss (")
    True
    """
    code = getattr(f, "__code__", None)
    if code is None:
        code = getattr(getattr(type(f), "__call__", None), "__code__", None)
    name = getattr(f, "__qualname__", None) or type(f).__qualname__
    if code is None:
        return name
    return f"{name} ({os.path.basename(code.co_filename)}:{code.co_firstlineno})"


class Lifted:
    """A callable with its differentiable state held as a flat list of leaves.

    Its tangent is a ``Lifted`` of the leaves' tangents: it adds and scales leaf by
    leaf, and ``t[j]`` is leaf j's tangent.

    >>> f = Lifted([2.0], lambda leaves: lambda x: x * leaves[0])
    >>> f(3.0), f[0]
    (6.0, 2.0)
    """

    __slots__ = ("leaves", "rebuild")

    def __init__(self, leaves, rebuild):
        self.leaves, self.rebuild = tuple(leaves), rebuild

    def __call__(self, *args, **kwargs):
        return self.rebuild(self.leaves)(*args, **kwargs)

    def __getitem__(self, j):
        return self.leaves[j]

    def __len__(self):
        return len(self.leaves)

    def __add__(self, other):
        if is_zero(other):
            return self
        return Lifted([add_tangents(a, b) for a, b in zip(self.leaves, other.leaves)], self.rebuild)

    __radd__ = __add__

    def __mul__(self, scalar):
        return Lifted([v if is_zero(v) else v * scalar for v in self.leaves], self.rebuild)

    __rmul__ = __mul__

    def __repr__(self):
        return f"Lifted({list(self.leaves)!r})"


class Rebuild:
    """``leaves -> callable``: unflatten the state, then rebuild the callable."""

    def __init__(self, treedef, rebuild):
        self.treedef, self.rebuild = treedef, rebuild

    def __call__(self, leaves):
        return self.rebuild(unflatten(self.treedef, leaves))


register_node(Lifted, lambda c: (c.leaves, c.rebuild), lambda rebuild, leaves: Lifted(leaves, rebuild))
