"""Keyword arguments moved to their positions, so that a rule's slots line up with them.

``np.take(x, indices=i)`` and ``np.take(x, i)`` are one operation: the tracer records
both as ``take(x, i)``, and a rule sees the call the same way whichever spelling the user
chose. This module is the one place that reads a function's signature for that:

* :func:`keywords_to_positions` moves the keyword arguments of one call, from the
  function's positional parameters, read once per function and cached;
* :func:`keeps_keywords` says when a rule takes constant keywords as keywords instead
  (a user's ``@primitive`` with a hand-written rule, ChainRules' convention);
* :func:`with_defaults` gives a scalar rule's partials every argument, defaults included.

NumPy functions written in C have no introspectable signature on some NumPy versions;
their parameters are read from the first line of their docstring, which NumPy writes as a
Python signature (``bincount(x, /, weights=None, minlength=0)``), parsed, never run.
"""

from __future__ import annotations

import ast
import builtins
import inspect
from typing import Any, Callable

import numpy as np

from . import _state
from .tangents import NoTangent

_NOVALUE = getattr(np, "_NoValue", object())  # NumPy's "argument not given" default

#: Keyword-only aliases NumPy accepts for positional parameters (``np.clip(x, min=0)``);
#: NumPy uses them when neither aliased parameter is given.
KEYWORD_ALIASES = {np.clip: {"min": "a_min", "max": "a_max"}}


class PositionalParameters:
    """What moving keywords needs of one function's signature: its positional parameters
    (names, defaults) and where its trailing options begin."""

    __slots__ = ("names", "index", "defaults", "options", "aliases")
    aliases: Any  # {alias: parameter} or None; _resolve_aliases is called only with a dict

    def __init__(self, params: list[inspect.Parameter], aliases: dict[str, str] | None) -> None:
        self.names = [p.name for p in params]
        self.index = {p.name: i for i, p in enumerate(params) if p.kind is p.POSITIONAL_OR_KEYWORD}
        self.defaults = [p.default for p in params]
        # A trailing run of parameters defaulting to NumPy's "not given" (keepdims, initial,
        # where) are options NumPy forwards by keyword only when passed: they stay keywords,
        # so rules see them as NumPy's implementation does.
        options = len(params)
        while options and params[options - 1].default is _NOVALUE:
            options -= 1
        self.options = options
        self.aliases = aliases


_parameters: dict = {}


def positional_parameters(f: Callable[..., Any]) -> PositionalParameters | None:
    """``f``'s positional parameters, or None for a ufunc (whose inputs no keyword names)
    or a function whose signature cannot be read; read once per function.

    >>> import numpy as np
    >>> positional_parameters(np.take).names
    ['a', 'indices', 'axis', 'out', 'mode']
    """
    try:
        return _parameters[f]
    except KeyError:
        pass
    except TypeError:  # unhashable callable: read uncached
        return _read_parameters(f)
    p = _parameters[f] = _read_parameters(f)
    return p


def _read_parameters(f: Callable[..., Any]) -> PositionalParameters | None:
    if isinstance(f, np.ufunc) or isinstance(getattr(f, "__self__", None), np.ufunc):
        return None  # ufunc inputs are positional-only; NumPy normalizes reduce's options
    try:
        params: list[inspect.Parameter] | None = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        params = documented_parameters(f)
    if params is None:
        return None
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return PositionalParameters(positional, KEYWORD_ALIASES.get(f))


def documented_parameters(f: Callable[..., Any]) -> list[inspect.Parameter] | None:
    """The parameters a NumPy function without an introspectable signature gives in its
    docstring's first line, parsed as a ``def`` (never run); None when there is no such
    line or a default is not a constant, a builtin or a NumPy name.

    >>> def bincount(): pass
    >>> bincount.__module__, bincount.__doc__ = "numpy", "bincount(x, /, weights=None, minlength=0)"
    >>> [(p.name, p.default) for p in documented_parameters(bincount)]
    [('x', <class 'inspect._empty'>), ('weights', None), ('minlength', 0)]
    """
    if not str(getattr(f, "__module__", "")).startswith("numpy"):  # NumPy's own text only
        return None
    name, doc = getattr(f, "__name__", None), getattr(f, "__doc__", None) or ""
    line = next((ln.strip() for ln in doc.splitlines() if ln.strip()), "")
    if not name or not line.startswith(name + "(") or not line.endswith(")"):
        return None
    try:
        tree = ast.parse(f"def {name}{line[len(name):]}: pass")
        a = tree.body[0].args  # type: ignore[attr-defined]
        positional = [*a.posonlyargs, *a.args]
        defaults = [inspect.Parameter.empty] * (len(positional) - len(a.defaults))
        defaults += [_constant(d) for d in a.defaults]
        kinds = ([inspect.Parameter.POSITIONAL_ONLY] * len(a.posonlyargs)
                 + [inspect.Parameter.POSITIONAL_OR_KEYWORD] * len(a.args))
        params = [inspect.Parameter(p.arg, k, default=d) for p, k, d in zip(positional, kinds, defaults)]
        if a.vararg is not None:
            params.append(inspect.Parameter(a.vararg.arg, inspect.Parameter.VAR_POSITIONAL))
        params += [inspect.Parameter(p.arg, inspect.Parameter.KEYWORD_ONLY,
                                     default=inspect.Parameter.empty if d is None else _constant(d))
                   for p, d in zip(a.kwonlyargs, a.kw_defaults)]
        return params
    except (SyntaxError, ValueError, TypeError, AttributeError):  # not a signature of constants
        return None


def _constant(node: ast.expr) -> Any:
    """The value of a default written in a docstring: a literal, a builtin (``float``) or a
    name of NumPy (``np.float64``); ValueError for anything else."""
    if isinstance(node, ast.Name) and hasattr(builtins, node.id):
        return getattr(builtins, node.id)
    if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and node.value.id in ("np", "numpy")):
        return getattr(np, node.attr)
    return ast.literal_eval(node)


def keeps_keywords(f: Callable[..., Any], entry: Any) -> bool:
    """Whether ``f``'s rule takes constant keyword arguments as keywords: the rrule or
    frule a user wrote for an ``@primitive`` (ChainRules' convention: ``scale(x,
    factor=3.0)`` calls ``rrule(x, factor=3.0)`` and its frule gets one tangent per
    positional argument). NumPy's rules, and scalar rules (whose partials take every
    argument by position), see keywords at their positions.

    >>> import numpy as np, adrules as ad
    >>> keeps_keywords(np.sum, ad.rrule.lookup(np.sum))
    False
    """
    # a hand-written rule: scalar and non-differentiable entries hold no rule function
    return entry is not None and entry.fn is not None and hasattr(f, "__adrules_primitive__")


def keywords_to_positions(f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                          keep_constants: bool = False) -> tuple[tuple[Any, ...], dict[str, Any]]:
    """``(args, kwargs)`` of the call ``f(*args, **kwargs)`` with every keyword argument
    that names a positional parameter of ``f`` moved to its position, so a rule sees
    ``np.take(x, indices=i)`` as ``np.take(x, i)`` and its slots line up with positions.

    Intervening positions get the parameters' defaults. Keyword-only arguments, and
    trailing options defaulting to NumPy's "not given" (``keepdims``, ``where``), stay
    keywords unless they hold a traced value; with ``keep_constants`` (``keeps_keywords``)
    every keyword argument does. Callers skip it when ``kwargs`` is empty.

    >>> import numpy as np
    >>> keywords_to_positions(np.take, ("x",), {"mode": "clip", "indices": [0]})
    (('x', [0], None, None, 'clip'), {})
    >>> keywords_to_positions(np.sum, ("x",), {"keepdims": True, "axis": 0})
    (('x', 0), {'keepdims': True})
    """
    try:
        b = _parameters[f]
    except (KeyError, TypeError):
        b = positional_parameters(f)
    if b is None:
        return args, kwargs
    index, n = b.index, len(args)
    if b.aliases is not None:
        kwargs = _resolve_aliases(b, n, kwargs)
    last = -1
    for name, value in kwargs.items():
        i = index.get(name, -1)
        if i > last and i >= n and ((i < b.options and not keep_constants) or _holds_traced(value)):
            last = i
    if last < 0:
        return args, kwargs
    names, defaults = b.names, b.defaults
    moved, taken = list(args), 0
    for i in range(n, last + 1):
        name = names[i]
        if name in kwargs:
            moved.append(kwargs[name])
            taken += 1
        else:
            moved.append(defaults[i])
    if taken == len(kwargs):
        return tuple(moved), {}
    return tuple(moved), {k: v for k, v in kwargs.items() if index.get(k, last + 1) > last}


def _holds_traced(value: object) -> bool:
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, _state.TracedValue) for v in value)
    return isinstance(value, _state.TracedValue)


def _resolve_aliases(b: PositionalParameters, n: int, kwargs: dict[str, Any]) -> dict[str, Any]:
    aliases = b.aliases
    if (not any(k in aliases for k in kwargs) or any(k in kwargs for k in aliases.values())
            or any(b.index[t] < n for t in aliases.values())):
        return kwargs  # nothing to resolve, or a clash NumPy itself reports
    out = {}
    for k, v in kwargs.items():
        out[aliases.get(k, k)] = v
    for target in aliases.values():
        out.setdefault(target, None)  # NumPy: an alias given, the other bound is None
    return out


def with_defaults(f: Callable[..., Any], args: tuple[Any, ...], n: int) -> tuple[Any, ...]:
    """``args`` and the defaults of ``f``'s next parameters, up to ``n``: a scalar rule's
    partials are called with every argument (``leaky(x)`` of ``leaky(x, alpha=0.1)``
    gives ``d(x, 0.1, y)``). ``args`` unchanged when they cannot all be filled. The
    parameters are read once per function (``positional_parameters``).

    >>> def leaky(x, alpha=0.1): pass
    >>> with_defaults(leaky, (2.0,), 2)
    (2.0, 0.1)
    """
    p = positional_parameters(f)
    defaults = [] if p is None else p.defaults[len(args):n]
    if len(defaults) != n - len(args) or any(d is inspect.Parameter.empty for d in defaults):
        return args  # scalar_rule_misfit explains it
    return (*args, *defaults)


def fit_slots(slots: tuple[Any, ...], n: int) -> tuple[Any, ...]:
    """A pullback's ``slots`` as ``n``: the self slot and one per argument the call passed
    positionally. Arguments moved from keywords get no slot (cut), and trailing options a
    rule left out get ``NoTangent()`` (padded), so the slots line up with the call whichever
    way the rule counted.

    >>> fit_slots((NoTangent(), 1.0, 2.0), 2)
    (NoTangent(), 1.0)
    >>> fit_slots((NoTangent(), 1.0), 3)
    (NoTangent(), 1.0, NoTangent())
    """
    return slots[:n] + (NoTangent(),) * (n - len(slots))
