"""Containers as inputs and outputs: flatten to leaves, rebuild the same structure.

Built-in nodes: list, tuple, dict, NamedTuple and dataclass instances. Other types
join with ``register_node``. Everything else is a leaf.
"""

from __future__ import annotations

import dataclasses
import itertools
from typing import Any, Callable, Iterable, Iterator

import numpy as np

from .tangents import Tangent, ZeroTangent, is_zero, unthunk

#: What ``flatten`` accepts and the differentiation functions take and return: an array,
#: a number, or a container of them (list, tuple, dict, NamedTuple, dataclass, a type
#: registered with ``register_node``), nested. An alias of ``Any``: no static type can say
#: "containers of arrays, any depth" without rejecting what users pass.
PyTree = Any

REGISTERED_NODES: dict = {}


def register_node(
    cls: type,
    flatten: Callable[[Any], tuple[Iterable[Any], Any]],
    unflatten: Callable[[Any, list[Any]], Any],
) -> None:
    """Let containers of type ``cls`` be differentiated through.

    ``flatten(obj) -> (children, aux)`` gives the differentiable children and any
    static data; ``unflatten(aux, children) -> obj`` rebuilds one. Gradients of a
    ``cls`` argument come back as a ``cls`` holding the children's gradients.

    >>> import numpy as np, adrules as ad
    >>> class Affine:
    ...     def __init__(self, w, b):
    ...         self.w, self.b = w, b
    >>> ad.register_node(Affine, lambda m: ((m.w, m.b), None), lambda aux, c: Affine(*c))
    >>> g = ad.gradient(lambda m: m.w * 3.0 + m.b, Affine(1.0, 2.0))[0]
    >>> g.w, g.b
    (3.0, 1.0)
    """
    REGISTERED_NODES[cls] = (flatten, unflatten)
    try:  # see _NodeTravel
        setattr(cls, "__adrules_node__", _NodeTravel(cls))
    except (TypeError, AttributeError):  # a built-in type: importable, never pickled by value
        pass


class _NodeTravel:
    """Carries a container type's registration wherever the type is pickled by value.

    A class defined in ``__main__`` reaches process and Dask workers as a copy that
    cloudpickle rebuilds from its ``__dict__``; the script that registered it never runs
    there, so the copy's instances would be leaves. This object sits in that ``__dict__``:
    pickling it captures the registration, unpickling makes it for the copy (as
    ``registry.RulesTravel`` does for a primitive's rules). A class importable by name
    travels by reference: its module registers it when a worker imports it.
    """

    __slots__ = ("cls",)

    def __init__(self, cls: type) -> None:
        self.cls = cls

    def __reduce__(self) -> tuple[Callable[..., _NodeTravel], tuple[Any, ...]]:
        return (_adopt_node, (self.cls, REGISTERED_NODES.get(self.cls)))


def _adopt_node(cls: type, entry: Any) -> _NodeTravel:
    if entry is not None:
        REGISTERED_NODES[cls] = entry
    return _NodeTravel(cls)


class TreeDef:
    """The structure of a flattened container: kind, static data and child structures."""

    __slots__ = ("kind", "aux", "children", "n_leaves")

    def __init__(self, kind: type | None, aux: Any, children: tuple[TreeDef, ...]) -> None:
        self.kind, self.aux, self.children = kind, aux, children
        # counted once: the psum primitive asks for its parts' counts several times a call
        self.n_leaves: int = 1 if kind is None else sum(c.n_leaves for c in children)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, TreeDef) and self.kind is other.kind
                and (self.aux is other.aux or _same_aux(self.aux, other.aux))
                and self.children == other.children)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self.kind is None:
            return "*"
        parts = [repr(c) for c in self.children]
        names = self.aux
        if (isinstance(names, (tuple, list)) and len(names) == len(parts)
                and all(isinstance(k, str) for k in names)):  # dict keys, dataclass fields
            parts = [f"{k}={p}" for k, p in zip(names, parts)]
        return f"{getattr(self.kind, '__name__', self.kind)}({', '.join(parts)})"


LEAF = TreeDef(None, None, ())


def _same_aux(a: Any, b: Any) -> bool:
    """``a == b`` for a node's static data, which may hold arrays (a mask, a scale), where
    ``==`` answers elementwise and ``bool`` of that raises."""
    try:
        return bool(a == b)
    except (ValueError, TypeError):
        pass
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return type(a) is type(b) and a.shape == b.shape and bool(np.array_equal(a, b))
    if type(a) in (tuple, list) and type(b) is type(a):
        return len(a) == len(b) and all(x is y or _same_aux(x, y) for x, y in zip(a, b))
    if type(a) is dict and type(b) is dict:
        return a.keys() == b.keys() and all(a[k] is b[k] or _same_aux(a[k], b[k]) for k in a)
    return False


class _FlatDef(TreeDef):
    """A list, tuple or dict of leaves only (a model's dict of arrays): flattened and
    rebuilt without a call per leaf."""

    __slots__ = ()

    def __init__(self, kind: type, aux: Any, n: int) -> None:
        self.kind, self.aux, self.children, self.n_leaves = kind, aux, (LEAF,) * n, n


def _is_namedtuple(x: object) -> bool:
    return isinstance(x, tuple) and hasattr(type(x), "_fields")


#: Types known to be leaves, checked first: most of what is flattened is arrays and numbers.
LEAF_TYPES = {float, int, bool, complex, str, bytes, type(None), np.ndarray, np.float64,
              np.float32, np.float16, np.int64, np.int32, np.bool_}


def node_children(x: Any) -> tuple[type, Any, list[Any]] | None:
    """(kind, aux, children) for a container, or None for a leaf."""
    t = type(x)
    if t in LEAF_TYPES:
        return None
    if t is list or t is tuple:
        return t, None, list(x)
    if t is dict:
        keys = tuple(x)
        return dict, keys, [x[k] for k in keys]
    if t in REGISTERED_NODES:
        out = REGISTERED_NODES[t][0](x)
        if type(out) is not tuple or len(out) != 2 or type(out[0]) not in (tuple, list):
            # (m.w, m.b) would be taken as children m.w, aux m.b: silently wrong
            raise TypeError(f"register_node({t.__name__}): flatten returned {_what(out)}; it must return "
                            f"(children, aux), children a tuple or list: lambda m: ((m.w, m.b), None).")
        return t, out[1], list(out[0])
    if _is_namedtuple(x):
        return t, None, list(x)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        names = tuple(f.name for f in dataclasses.fields(x))
        return t, names, [getattr(x, n) for n in names]
    return None


def _what(out: Any) -> str:
    if type(out) is tuple:
        return f"a tuple of {len(out)} ({', '.join(type(v).__name__ for v in out)})"
    return f"a {type(out).__name__}"


def flatten(tree: PyTree) -> tuple[list[Any], TreeDef]:
    """``(leaves, treedef)`` of a container.

    >>> leaves, tdef = flatten({"a": [1.0, 2.0], "b": (3.0,)})
    >>> leaves, tdef
    ([1.0, 2.0, 3.0], dict(a=list(*, *), b=tuple(*)))
    """
    leaves: list[Any] = []
    return leaves, _flatten_into(tree, leaves)


def _flatten_into(x: Any, leaves: list[Any]) -> TreeDef:
    if type(x) in LEAF_TYPES:  # most of what is flattened: skip node_children's call
        leaves.append(x)
        return LEAF
    t = type(x)
    if (t is list or t is tuple) and LEAF_TYPES.issuperset(map(type, x)):
        leaves.extend(x)  # a flat list of numbers or arrays: no call per leaf
        return _FlatDef(t, None, len(x))
    if t is dict and LEAF_TYPES.issuperset(map(type, x.values())):
        leaves.extend(x.values())  # a dict of arrays (a model's parameters): the same
        return _FlatDef(dict, tuple(x), len(x))
    parts = node_children(x)
    if parts is None:
        leaves.append(x)
        return LEAF
    kind, aux, children = parts
    return TreeDef(kind, aux, tuple(_flatten_into(c, leaves) for c in children))


def unflatten(treedef: TreeDef, leaves: Iterable[Any]) -> PyTree:
    """Rebuild a container of ``treedef``'s structure from ``leaves``.

    >>> unflatten(flatten([1.0, (2.0, 3.0)])[1], [4.0, 5.0, 6.0])
    [4.0, (5.0, 6.0)]
    """
    it = iter(leaves)
    out = _build(treedef, it)
    return out


def _build(tdef: TreeDef, it: Iterator[Any]) -> Any:
    if tdef.kind is None:
        return next(it)
    kind, aux = tdef.kind, tdef.aux
    if type(tdef) is _FlatDef:
        flat = list(itertools.islice(it, tdef.n_leaves))  # no call per leaf
        if len(flat) < tdef.n_leaves:
            raise StopIteration  # too few leaves, as next(it) says it
        if kind is dict:
            return dict(zip(aux, flat))
        return flat if kind is list else tuple(flat)
    children = [_build(c, it) for c in tdef.children]
    if kind is list:
        return children
    if kind is tuple:
        return tuple(children)
    if kind is dict:
        return dict(zip(aux, children))
    if kind in REGISTERED_NODES:
        return REGISTERED_NODES[kind][1](aux, children)
    if issubclass(kind, tuple):  # NamedTuple
        return kind(*children)
    # dataclass: bypass __init__/__post_init__, which may validate or derive fields
    obj = object.__new__(kind)
    for name, value in zip(aux, children):
        object.__setattr__(obj, name, value)
    return obj


def tree_map(fn: Callable[..., Any], tree: PyTree, *rest: PyTree) -> PyTree:
    """Apply ``fn`` leaf by leaf over trees of the same structure.

    >>> tree_map(lambda a, b: a + b, {"x": 1.0}, {"x": 2.0})
    {'x': 3.0}
    """
    leaves, tdef = flatten(tree)
    others = [flatten(r)[0] for r in rest]
    return unflatten(tdef, [fn(*xs) for xs in zip(leaves, *others)])


def treedef_field_names(tdef: TreeDef) -> tuple[Any, ...] | None:
    """The keys of a dict's structure, the fields of a dataclass's or NamedTuple's (a
    registered node's static data is its own)."""
    if tdef.kind in REGISTERED_NODES:
        return None
    if tdef.kind is dict or (tdef.kind is not None and dataclasses.is_dataclass(tdef.kind)):
        return tuple(tdef.aux)
    kind, fields = tdef.kind, getattr(tdef.kind, "_fields", None)
    return tuple(fields) if fields is not None and kind is not None and issubclass(kind, tuple) else None


def tangent_leaves(tangent: Any, tdef: TreeDef) -> list[Any] | None:
    """Leaves of ``tangent`` aligned with structure ``tdef``: zeros stand for whole
    subtrees, and a ``Tangent`` is read by field or position. None if they do not fit.

    >>> from adrules.tangents import Tangent
    >>> tangent_leaves(Tangent(dict, b=2.0), flatten({"a": 1.0, "b": 1.0})[1])
    [ZeroTangent(), 2.0]
    >>> tangent_leaves({"b": 2.0, "a": 0.5}, flatten({"a": 1.0, "b": 1.0})[1])
    [0.5, 2.0]
    """
    if is_zero(tangent):
        return [ZeroTangent()] * tdef.n_leaves
    if tdef.kind is None:
        return [unthunk(tangent)]
    if isinstance(tangent, Tangent):
        if isinstance(tangent.backing, dict):
            names = tdef.aux if tdef.aux is not None else getattr(tdef.kind, "_fields", range(len(tdef.children)))
            if not set(tangent.backing) <= set(names):  # a misspelt field: not a silent zero
                return None
            children = [tangent[name] for name in names]
        else:
            children = list(tangent.backing)
    elif type(tangent) is dict:
        # by key, as dicts compare: {"b": 1.0, "a": 0.0} is the tangent of {"a": .., "b": ..},
        # and of a dataclass or NamedTuple with fields a and b
        names = treedef_field_names(tdef)
        if names is None or len(tangent) != len(names) or not all(k in tangent for k in names):
            return None
        children = [tangent[k] for k in names]
    else:
        parts = node_children(tangent)
        if parts is None:
            return None
        children = parts[2]
    if len(children) != len(tdef.children):
        return None
    out = []
    for child, child_def in zip(children, tdef.children):
        leaves = tangent_leaves(child, child_def)
        if leaves is None:
            return None
        out.extend(leaves)
    return out
