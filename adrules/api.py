"""The user-facing differentiation functions, and rules called from outside a trace.

    gradient / pullback / jvp: box the float leaves of the arguments on a new Trace,
        call f, read the output (and for reverse mode, backprop the tape)
    rrule(f, *args) / frule(tangents, f, *args): apply a registered rule directly
    rrule_via_ad / frule_via_ad: a registered rule, otherwise trace f
    RuleConfig: what rules registered with ``config=True`` receive; every Trace carries one
"""

from __future__ import annotations

import functools
import types
from typing import Any, Callable, Iterable, Sequence

import numpy as np

from . import registry
from .pytrees import LEAF, PyTree, TreeDef, flatten, node_children, tangent_leaves as _match_structure, unflatten
from .registry import Pullback, RuleRegistry, call_frule, call_rrule, function_name
from .tangents import NoTangent, Tangent, ZeroTangent, dense_zeros, is_float_value, is_zero, unthunk
from .tracer import F64_SCALARS, NO_SLOT, Trace, Traced, TraceOpen, TracerError, backprop, frule_misfit, rrule_misfit

_CONST_TYPES = (bool, int, str, bytes, type(None), np.integer, np.bool_)


def leaf_is_differentiable(leaf: Any, fname: object, where: str) -> bool:
    """True for float leaves, False for constants; raises for what cannot be handled."""
    if type(leaf) is Traced:
        return True
    if isinstance(leaf, DROPPED_SUBCLASSES) and leaf.dtype.kind in "fc":
        raise subclass_refused(fname, where, leaf)
    if is_float_value(leaf):  # float or complex: a complex z's cotangent is ∂f/∂x + i ∂f/∂y
        return True
    if isinstance(leaf, np.ndarray):
        if leaf.dtype.kind in "biu":
            return False
        raise TypeError(
            f"{fname}: {where} is an array of dtype {leaf.dtype}, which cannot be differentiated. "
            f"Pass a float array, or pass it through a closure if it is data.")
    if isinstance(leaf, _CONST_TYPES):
        return False
    if callable(leaf):  # a function passed along: a constant
        fields = _float_fields(leaf)
        # ... unless it is a user's model the tracer cannot open (rrule_via_ad's f aside:
        # a higher-order rule's functor may carry float settings)
        if fields and not (isinstance(fname, DerivativeName) and type(fname.f) is _CallOfArgument):
            raise TypeError(
                f"{fname}: {where} is an object of class {type(leaf).__name__} whose attributes "
                f"{', '.join(fields)} hold floats, but adrules cannot look inside a plain class: "
                f"its gradient would be "
                f"NoTangent(). Make the class a @dataclass, or register it with "
                f"adrules.register_node(...), so its fields are differentiated; or pass it "
                f"through a closure if it is data.")
        return False
    raise TypeError(
        f"{fname}: {where} is a {type(leaf).__name__}, which is neither an array, a number nor a "
        f"known container. Register its type with adrules.register_node(...) so its fields are "
        f"differentiated, or pass it through a closure (functools.partial) if it is data.")


#: Array subclasses whose meaning a traced value would drop: the tracer sees the data only.
DROPPED_SUBCLASSES = (np.ma.MaskedArray, np.matrix)


def subclass_refused(fname: object, where: str, leaf: Any) -> TypeError:
    """The error for a masked array or an np.matrix given as a point to differentiate at."""
    if isinstance(leaf, np.ma.MaskedArray):  # np.sum(x) leaves masked elements out; traced, it would not
        return TypeError(f"{fname}: {where} is a masked array, whose mask would be dropped (every "
                         f"element differentiated, as if unmasked). Pass x.filled(0.0), or "
                         f"x.data with the mask in a closure: np.where(mask, 0.0, x).")
    return TypeError(f"{fname}: {where} is an np.matrix, whose * and reductions differ from an "
                     f"array's; pass np.asarray(m) and write products with @.")


def _is_int_point(leaf: Any) -> bool:
    return isinstance(leaf, (int, np.integer, np.bool_, np.ndarray)) and np.asarray(leaf).dtype.kind in "biu"


def _short(leaf: Any) -> str:
    return repr(leaf) if np.ndim(leaf) == 0 else f"an array of dtype {np.asarray(leaf).dtype}"


def _float_fields(obj: Any) -> list[str]:
    """The attributes holding floats of an object of a plain class (not a function)."""
    if isinstance(obj, (types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                        functools.partial, type, np.ufunc)):
        return []
    attributes = dict(getattr(obj, "__dict__", None) or {})
    for cls in type(obj).__mro__:  # and those a class keeps in __slots__
        slots = cls.__dict__.get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                attributes.setdefault(name, getattr(obj, name))
    # floats directly, or in lists and dicts (self.layers = [w1, w2])
    return [k for k, v in attributes.items()
            if any(is_float_value(leaf) for leaf in flatten(v)[0])]


class DerivativeName:
    """``"gradient(f)"`` for error messages, formatted only if an error needs it.
    ``shown``: the function the user passed, where ``f`` is a wrapper of it
    (``rrule_via_ad`` traces ``_CallOfArgument``, which calls the user's function)."""

    __slots__ = ("api", "f", "shown")

    def __init__(self, api: str, f: Callable[..., Any], shown: object = None) -> None:
        self.api, self.f, self.shown = api, f, f if shown is None else shown

    def __str__(self) -> str:
        return f"{self.api}({getattr(self.shown, '__name__', 'f')})"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


#: How ``gather_gradients`` reads one argument's gradient: (structure, leaves, each leaf's tape slot,
#: -1 for a constant). Slots, not boxes: ``x *= 2`` gives the box of argument x a new slot.
_BoxedArgument = tuple[TreeDef, list[Any], list[int]]


def _box_args(fname: object, args: tuple[Any, ...], trace: Trace) -> tuple[list[Any], list[_BoxedArgument]]:
    """Box the float leaves of ``args`` on ``trace``; returns (boxed args, per-arg leaf plans)."""
    boxed, plans = [], []
    for i, arg in enumerate(args):
        if type(arg) is np.ndarray and arg.dtype.kind == "f" or type(arg) is float:
            box = trace.leaf(arg)  # fast path for the common plain-array argument
            boxed.append(box)
            plans.append((LEAF, [arg], [box.slot]))
            continue
        leaves, tdef = flatten(arg)
        new = []
        for j, leaf in enumerate(leaves):
            if type(leaf) is float or type(leaf) is np.ndarray and leaf.dtype.kind == "f":
                new.append(Traced(leaf, trace))  # plain floats and float arrays: nothing to check
                continue
            where = f"argument {i}" if tdef is LEAF else f"leaf {j} of argument {i}"
            new.append(trace.leaf(_numpy_complex(leaf)) if leaf_is_differentiable(leaf, fname, where) else leaf)
        boxed.append(new[0] if tdef is LEAF else unflatten(tdef, new))
        plans.append((tdef, leaves, [b.slot if type(b) is Traced and b is not leaf else -1 for b in new]))
    return boxed, plans


def _numpy_complex(leaf: Any) -> Any:
    """A Python complex as np.complex128, whose dtype the rules read to tell a complex
    value from a real one (np.sign of a Python complex is not abs's partial)."""
    return np.complex128(leaf) if type(leaf) is complex else leaf


#: Top-level arguments that are options, not points: passed along, their gradient NoTangent().
_OPTION_TYPES = (str, bytes, type(None), types.FunctionType, types.BuiltinFunctionType, types.MethodType,
                 functools.partial, type, np.ufunc)


def without_derivative(arg: Any) -> str | None:
    """What ``arg``, an argument differentiated as a whole, is when it can carry no
    derivative (its gradient would silently be ``NoTangent()``): an integer or boolean
    number or array, or an object of a class adrules cannot look inside. None for
    anything else: floats, containers (whose integer leaves get ``NoTangent()``),
    options (strings, None, functions), and values other checks refuse.

    >>> import numpy as np
    >>> without_derivative(3), without_derivative(np.arange(2)), without_derivative(np.ones(2))
    ('an integer (3)', 'an array of dtype int64', None)
    """
    t = type(arg)
    if t is float or t is Traced or t is np.ndarray and arg.dtype.kind in "fc":
        return None  # the common case, first
    if isinstance(arg, (bool, np.bool_)):
        return f"a boolean ({arg!r})"
    if isinstance(arg, (int, np.integer)):
        return f"an integer ({arg!r})"
    if isinstance(arg, np.ndarray):
        return f"an array of dtype {arg.dtype}" if arg.dtype.kind in "biu" else None
    if isinstance(arg, (float, complex, np.generic, *_OPTION_TYPES)) or node_children(arg) is not None:
        return None
    fields = _float_fields(arg)
    held = f" whose attributes {', '.join(fields)} hold floats" if fields else ""
    return f"an object of class {t.__name__}{held}"


def refuse_underivable(fname: object, args: Sequence[Any], leave_out: Callable[[Any], str | None],
                       positions: Sequence[Any] | None = None) -> None:
    """Raise TypeError for the first of ``args`` (argument ``positions[k]`` of f, or the
    parameter that string names) that can
    carry no derivative, naming it, its type or dtype, and the fixes: cast it to float or
    register its class, or ``leave_out(position)``, the way to leave it out of this
    derivative (None: there is none). Integer leaves inside containers are not refused:
    they get NoTangent().

    >>> refuse_underivable("gradient(f)", (1.5, 2), lambda i: "leave it out")
    Traceback (most recent call last):
    TypeError: gradient(f): argument 1 is an integer (2), which carries no derivative: its gradient would be NoTangent(), and a step w - lr * g would silently leave it as it is. Cast it to float (float(x)) to differentiate at that value; or leave it out.
    """
    for k, arg in enumerate(args):
        what = without_derivative(arg)
        if what is None:
            continue
        i = k if positions is None else positions[k]
        other = leave_out(i)
        other = f"; or {other}" if other else ""
        if what.startswith("an object"):
            name = type(arg).__name__
            fix = (f"Make {name} a @dataclass, or register it with adrules.register_node({name}, "
                   f"flatten, unflatten), so that its fields are differentiated{other}")
        else:
            cast = "float(x)" if np.ndim(arg) == 0 else "x.astype(float)"
            fix = f"Cast it to float ({cast}) to differentiate at that value{other}"
        why = "which adrules cannot look inside" if what.startswith("an object") else "which carries no derivative"
        label = f"argument {i}" if isinstance(i, int) else i
        raise TypeError(f"{fname}: {label} is {what}, {why}: its gradient would be NoTangent(), "
                        f"and a step w - lr * g would silently leave it as it is. {fix}.")


def _argnums_hint(f: Callable[..., Any], n: int) -> Callable[[int], str | None]:
    """How to leave argument i of ``n`` out of ``gradient(f, *args)``: ``adrules.grad``
    with the other positions as argnums (None for a single argument: nothing is left)."""
    def hint(i: int) -> str | None:
        others = [k for k in range(n) if k != i]
        nums = str(others[0]) if len(others) == 1 else f"({', '.join(map(str, others))}{',' if len(others) == 1 else ''})"
        name = getattr(f, "__name__", "f")
        if not others:
            return None
        return (f"leave it out: adrules.grad({name}, argnums={nums})(*args) differentiates only "
                f"the arguments argnums names")

    return hint


def _no_arguments(api: str, f: Callable[..., Any]) -> TypeError:
    name = getattr(f, "__name__", "f")
    return TypeError(f"{api}({name}) was given no arguments to differentiate at: {api}({name}, x, ...) "
                     f"returns its result at x. For a function that returns gradients, as jax.grad and "
                     f"autograd.grad do, write adrules.grad({name}) (or adrules.value_and_grad) and "
                     f"call it: adrules.grad({name})(x).")


def check_callable(api: str, f: object, call: str = "f, x") -> None:
    """Name ``f`` when it cannot be called (NumPy's "object is not callable" named neither
    the derivative nor the argument; ``gradient(x, f)`` is the usual slip)."""
    if not callable(f):
        raise TypeError(f"{api}({call}): f must be the function to differentiate, got "
                        f"{'an array' if isinstance(f, np.ndarray) else f'a {type(f).__name__}'}: "
                        f"write {api}({call}).")


def _fresh(g: Any, seen: set[int]) -> Any:
    """A gradient the user may write into: no read-only broadcast views, no array shared
    with another gradient (rules pass cotangents through without copying)."""
    if type(g) is np.ndarray and (not g.flags.writeable or id(g) in seen):
        g = g.copy()
    seen.add(id(g))
    return g


def gather_gradients(plans: list[_BoxedArgument], cot: Sequence[Any]) -> tuple[Any, ...]:
    """Per-argument cotangents, in the structure of each argument."""
    out: list[Any] = []
    seen: set[int] = set()
    for plan in plans:
        grads = leaf_gradients(plan, cot, seen)
        out.append(grads[0] if plan[0] is LEAF else unflatten(plan[0], grads))
    return tuple(out)


def leaf_gradients(plan: _BoxedArgument, cot: Sequence[Any], seen: set[int] | None = None) -> list[Any]:
    """The cotangents of one argument's leaves, in ``flatten``'s order (``plan``: one of
    ``traced_call``'s); with ``seen``, arrays the user may write into (see ``_fresh``),
    else as the tape holds them (for a caller that adds them up first).

    >>> trace, plans, out = traced_call("f", lambda d: d["a"] * 3.0, ({"a": 2.0},))
    >>> leaf_gradients(plans[0], backprop(trace, [(out.slot, 1.0)]))
    [3.0]
    """
    tdef, leaves, slots = plan
    grads: list[Any] = []
    for leaf, slot in zip(leaves, slots):
        if slot < 0:
            grads.append(NoTangent())
            continue
        g = cot[slot]
        if type(g) is np.ndarray and type(leaf) is np.ndarray:  # the common case, first
            grads.append(g if seen is None else _fresh(g, seen))
        elif type(leaf) is float and type(g) in F64_SCALARS:  # _float_cotangent's case, sooner
            grads.append(float(g))
        elif isinstance(leaf, float):
            grads.append(_float_cotangent(g))
        elif g is None or is_zero(g):
            grads.append(dense_zeros(leaf))
        else:
            if type(leaf) is np.ndarray and type(g) is not np.ndarray and type(g) is not Traced:
                g = np.asarray(g)  # a 0-d array's gradient: NumPy's ops on it give scalars
            grads.append(g if seen is None else _fresh(g, seen))
    return grads


def _float_cotangent(g: Any) -> Any:
    """A number argument's gradient from its cotangent ``g`` on the tape: a float (0.0
    where none arrived); still traced under a higher-order derivative."""
    if g is None or is_zero(g):
        return 0.0
    return g if type(g) is Traced else float(g)


def one_like(v: Any) -> Any:
    """The seed ȳ = 1 for an output ``v``: a one of its dtype (a float where it has none)."""
    dt = getattr(v, "dtype", None)
    return dt.type(1) if dt is not None else 1.0


def value_and_gradient(f: Callable[..., Any], *args: PyTree) -> tuple[Any, tuple[PyTree, ...]]:
    """``(f(*args), gradient(f, *args))`` from one forward and one reverse pass.

    >>> import numpy as np, adrules as ad
    >>> ad.value_and_gradient(lambda x: np.sum(x ** 2), np.array([1.0, 2.0]))
    (np.float64(5.0), (array([2., 4.]),))
    """
    return named_value_and_gradient(_gradient_call("value_and_gradient", f, args), f, args)


def _gradient_call(api: str, f: Callable[..., Any], args: tuple[Any, ...]) -> DerivativeName:
    """The name of the derivative ``api`` of ``f`` in errors, once ``f`` and ``args`` are
    checked: each argument must carry a derivative."""
    check_callable(api, f)
    fname = DerivativeName(api, f)
    if not args:
        raise _no_arguments(api, f)
    refuse_underivable(fname, args, _argnums_hint(f, len(args)))
    return fname


def named_value_and_gradient(fname: DerivativeName, f: Callable[..., Any],
                             args: tuple[Any, ...]) -> tuple[Any, tuple[PyTree, ...]]:
    """``value_and_gradient`` for the derivative ``fname`` names in errors (``hessian``
    and ``hvp`` take gradients too: their user wrote no ``gradient`` call)."""
    trace, plans, out = traced_call(fname, f, args)
    if type(out) is Traced and out.owner is trace:
        value = out.value
        shape = getattr(value, "shape", ())
        if shape != () and value.size != 1:  # one element, (1,) or (1, 1): its gradient, as autograd's
            raise TracerError(
                f"{fname}: f returned an array of shape {np.shape(value)}, but {fname.api} needs "
                f"a scalar. Reduce it (np.sum, np.mean), or use adrules.pullback / adrules.jacobian.")
        if np.iscomplexobj(value):  # a gradient is of a real function (JAX's rule too)
            raise TracerError(
                f"{fname}: f returned a complex number, but {fname.api} needs a real scalar: return "
                f"a real loss (np.real(z), np.abs(z) ** 2), or differentiate the complex output with "
                f"adrules.pullback(f, x) and a complex cotangent, or adrules.jacobian.")
        cot = backprop(trace, [(out.slot, one_like(value) if shape == () else np.ones_like(value))])
    else:
        value = out
        if out is None:  # a zero gradient would hide it
            raise TracerError(f"{fname}: f returned None; is its return statement missing?")
        if isinstance(out, (dict, list, tuple, str)) or np.size(out) != 1:
            shape = "" if isinstance(out, (dict, list, tuple, str)) else f" of shape {np.shape(out)}"
            raise TracerError(
                f"{fname}: f must return a scalar, got {type(out).__name__}{shape}; use "
                f"adrules.pullback or adrules.jacobian for non-scalar outputs.")
        cot = [None] * trace.n_slots
    trace.nodes = None
    return value, gather_gradients(plans, cot)


def gradient(f: Callable[..., Any], *args: PyTree) -> tuple[PyTree, ...]:
    """Gradients of scalar ``f`` with respect to each positional argument.

    Arrays and floats get dense gradients of the same shape and dtype; containers
    (dict, list, tuple, NamedTuple, dataclass, registered nodes) get the same
    structure back, and their integer, boolean and None leaves get ``NoTangent()``.

    >>> import numpy as np, adrules as ad
    >>> ad.gradient(lambda p: p["k"] * np.sum(p["w"] ** 2), {"w": np.array([1.0, 3.0]), "k": 2})
    ({'w': array([ 4., 12.]), 'k': NoTangent()},)

    An argument that can carry no derivative as a whole (an integer, a boolean, an integer
    array, an object of a class adrules cannot look inside) raises a TypeError, as
    ``jax.grad`` does, rather than get a gradient that would silently be ``NoTangent()``:
    leave such data out with ``adrules.grad(f, argnums=...)``, or pass it through a
    closure.

    >>> ad.gradient(lambda w, k: k * np.sum(w ** 2), np.ones(2), 2)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    TypeError: gradient(<lambda>): argument 1 is an integer (2), which carries no derivative: ...
    """
    return named_value_and_gradient(_gradient_call("gradient", f, args), f, args)[1]


def pullback(f: Callable[..., Any], *args: PyTree) -> tuple[PyTree, Pullback]:
    """``(y, back)``: the value of ``f(*args)`` and its pullback.

    ``y`` may be any array or container; ``back(ȳ)`` takes a cotangent of ``y``'s
    structure and returns the tuple of argument cotangents. ``back`` may be called
    more than once.

    >>> import numpy as np, adrules as ad
    >>> y, back = ad.pullback(lambda x: x * 3.0, np.array([1.0, 2.0]))
    >>> y, back(np.array([1.0, 10.0]))
    (array([3., 6.]), (array([ 3., 30.]),))
    """
    check_callable("pullback", f)
    fname = DerivativeName("pullback", f)
    refuse_underivable(fname, args, lambda i: ("leave it out: pass it through a closure, "
                                               "pullback(lambda x: f(x, data), x)"))
    return named_pullback(fname, f, args)


def named_pullback(fname: DerivativeName, f: Callable[..., Any], args: tuple[Any, ...]) -> tuple[PyTree, Pullback]:
    """``pullback`` for the function ``fname`` names in errors (``rrule_via_ad``,
    ``check_grads``: their users wrote no ``pullback`` call)."""
    trace, plans, out = traced_call(fname, f, args)
    if out is None or type(out) is str:  # a zero pullback would hide it
        raise TracerError(f"{fname}: f returned {'None' if out is None else 'a string'}; "
                          f"{'is its return statement missing?' if out is None else 'it has no derivative.'}")
    return pullback_of(fname, trace, plans, out)


def traced_call(fname: object, f: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Trace, list[_BoxedArgument], Any]:
    """``(trace, plans, out)``: ``f`` called on ``args`` boxed on a new reverse trace."""
    trace = Trace(DEFAULT_CONFIG)
    with TraceOpen():
        boxed, plans = _box_args(fname, args, trace)
        out = f(*boxed)
    return trace, plans, out


def pullback_of(fname: object, trace: Trace, plans: list[_BoxedArgument], out: Any,
                gather: Callable[[list[_BoxedArgument], Sequence[Any]], Any] = gather_gradients,
                ) -> tuple[PyTree, Pullback]:
    """``pullback``'s ``(y, back)`` for what ``traced_call`` returned; ``back`` gives what
    ``gather`` makes of the plans and the cotangents by slot."""
    out_leaves, out_def = flatten(out)
    out_slots = [b.slot if type(b) is Traced and b.owner is trace else NO_SLOT for b in out_leaves]
    y = unflatten(out_def, [b.value if s >= 0 else b for b, s in zip(out_leaves, out_slots)])

    def back(ybar: PyTree) -> tuple[PyTree, ...]:
        bars = _match_structure(unthunk(ybar), out_def)
        if bars is None:
            raise TracerError(
                f"{fname}: the cotangent has structure {flatten(ybar)[1]} but the output has "
                f"{out_def}; pass a cotangent shaped like the output.")
        seeds = []
        for i, (slot, bar, leaf) in enumerate(zip(out_slots, bars, out_leaves)):
            if slot < 0 or is_zero(bar):
                continue
            if np.shape(bar) != np.shape(leaf.value):
                raise TracerError(
                    f"{fname}: cotangent leaf {i} has shape {np.shape(bar)} but the output's "
                    f"has shape {np.shape(leaf.value)}.")
            if type(bar) in (list, tuple) and type(leaf.value) is np.ndarray:  # [1.0, 1.0] for an array
                bar = np.asarray(bar, dtype=leaf.value.dtype)
            if np.iscomplexobj(bar) and not np.iscomplexobj(leaf.value):
                raise TracerError(f"{fname}: cotangent leaf {i} is complex, but the output is real, "
                                  f"so its cotangent is real too: pass np.real(...) of it.")
            if isinstance(bar, (int, float)):  # rules may index their cotangent: give a NumPy scalar
                bar = np.asarray(bar, dtype=getattr(leaf.value, "dtype", np.float64))[()]
            seeds.append((slot, bar))
        return gather(plans, backprop(trace, seeds, consume=False))

    return y, back


def _tangent_numbers(fname: object, where: str, tangent: Any, primal: Any) -> Any:
    """A tangent as numbers: a list or tuple becomes an array of the primal's dtype (``x * 2``
    on a list repeats it); a string or an object array is named (a rule met it first)."""
    if type(tangent) in (list, tuple):
        tangent = np.asarray(tangent)
        if tangent.dtype.kind in "biuf":
            tangent = tangent.astype(np.result_type(primal.value if type(primal) is Traced else primal))
    kind = tangent.dtype.kind if isinstance(tangent, (np.ndarray, np.generic)) else np.asarray(tangent).dtype.kind
    if kind not in "biufc":
        what = (f"an array of dtype {tangent.dtype}" if type(tangent) is np.ndarray
                else "a str" if isinstance(tangent, (str, bytes)) else f"a {type(tangent).__name__}")
        raise TypeError(f"{fname}: the tangent of {where} is {what}; a tangent is a number or an "
                        f"array of numbers shaped like the primal.")
    return tangent


def jvp(f: Callable[..., Any], primals: Iterable[PyTree], tangents: Iterable[PyTree]) -> tuple[PyTree, PyTree]:
    """``(y, ẏ)``: the value of ``f(*primals)`` and its directional derivative along
    ``tangents``, by forward mode.

    >>> import numpy as np, adrules as ad
    >>> ad.jvp(lambda x: np.sin(x) * 2.0, (0.0,), (1.0,))
    (np.float64(0.0), np.float64(2.0))
    """
    check_callable("jvp", f, "f, (x,), (dx,)")
    return named_jvp(DerivativeName("jvp", f), f, primals, tangents)


def named_jvp(fname: DerivativeName, f: Callable[..., Any], primals: Iterable[PyTree],
              tangents: Iterable[PyTree]) -> tuple[PyTree, PyTree]:
    """``jvp`` for the function ``fname`` names in errors (``frule_via_ad``, ``check_grads``)."""
    for name, given in (("primals", primals), ("tangents", tangents)):
        if type(given) not in (tuple, list):  # an array would be taken as its rows
            raise TypeError(f"{fname}: {name} must be a tuple with one entry per argument of f, "
                            f"got {type(given).__name__}: write {fname.api}(f, (x,), (dx,)).")
    primals, tangents = tuple(primals), tuple(tangents)
    if len(primals) != len(tangents):
        raise TypeError(f"{fname}: got {len(primals)} primals but {len(tangents)} tangents; "
                        f"give one tangent per primal.")
    trace = Trace(DEFAULT_CONFIG, forward=True)
    boxed = []
    for i, (p, t) in enumerate(zip(primals, tangents)):
        leaves, tdef = flatten(p)
        # a dict's tangent read by key, a Tangent(T, ...) by field, as pullbacks' are read
        tleaves = _match_structure(t, tdef)
        if tleaves is None:
            raise TypeError(f"{fname}: tangent {i} has structure {flatten(t)[1]}, primal {i} has "
                            f"{tdef}; give tangents shaped like the primals.")
        new = []
        for j, (leaf, tl) in enumerate(zip(leaves, tleaves)):
            where = f"argument {i}" if tdef is LEAF else f"leaf {j} of argument {i}"
            if (tdef is LEAF and not is_zero(tl)
                    and (without_derivative(leaf) or "").startswith("an object")):  # its tangent dropped
                refuse_underivable(fname, (leaf,), lambda i: "give it ZeroTangent() as its tangent, "
                                   "which holds it fixed", (i,))
            differentiable = leaf_is_differentiable(leaf, fname, where)
            if not differentiable and not is_zero(tl) and _is_int_point(leaf) and np.any(np.asarray(tl) != 0):
                raise TypeError(
                    f"{fname}: {where} is {'a boolean' if np.asarray(leaf).dtype.kind == 'b' else 'an integer'} "
                    f"({_short(leaf)}), which has no tangent, but "
                    f"its tangent is not zero. Pass a float (np.asarray(x, float)) to "
                    f"differentiate at that point, or ZeroTangent() to hold it fixed.")
            if differentiable and not is_zero(tl):
                if type(tl) is not Traced and type(tl) is not float:
                    tl = _tangent_numbers(fname, where, tl, leaf)
                shape_p = np.shape(leaf.value if type(leaf) is Traced else leaf)
                if np.shape(tl) != shape_p:
                    raise TypeError(f"{fname}: the tangent of {where} has shape {np.shape(tl)} "
                                    f"but the primal has shape {shape_p}.")
                if np.iscomplexobj(tl) and type(tl) is not Traced and not np.iscomplexobj(
                        leaf.value if type(leaf) is Traced else leaf):  # it would be cut to its real part
                    raise TypeError(f"{fname}: the tangent of {where} is complex, but the primal is "
                                    f"real: a real point moves along real directions. Pass a complex "
                                    f"primal (x.astype(complex)) to move it off the real line.")
                new.append(trace.leaf(_numpy_complex(leaf), tl))
            else:
                new.append(leaf)
        boxed.append(new[0] if tdef is LEAF else unflatten(tdef, new))
    with TraceOpen():
        out = f(*boxed)
    if out is None:  # (None, NoTangent()) would hide it, as a zero gradient would
        raise TracerError(f"{fname}: f returned None; is its return statement missing?")
    leaves, tdef = flatten(out)
    ys, dys = [], []
    for leaf in leaves:
        if type(leaf) is Traced and leaf.owner is trace:
            ys.append(leaf.value)
            dys.append(leaf.tangent)
        else:
            ys.append(leaf)
            dys.append(dense_zeros(leaf) if is_float_value(leaf) else NoTangent())
    return unflatten(tdef, ys), unflatten(tdef, dys)


# ---------------------------------------------------------------------------
# rules called directly, and rules of higher-order functions
# ---------------------------------------------------------------------------

class ReverseRules(RuleRegistry):
    """``adrules.rrule``: the table of rrules; calling it applies one.

    ``rrule(f, *args)`` returns ``(y, pullback)``, or None when ``f`` has no rule.

    >>> import numpy as np
    >>> import adrules as ad
    >>> y, back = ad.rrule(np.exp, 0.0)
    >>> [ad.unthunk(t) for t in back(2.0)]
    [NoTangent(), np.float64(2.0)]
    >>> ad.rrule(print, "no rule") is None
    True
    """

    def __call__(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Pullback] | None:
        return _rrule_call("rrule", f, args, kwargs)


def _rrule_call(api: str, f: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[Any, Pullback] | None:
    """``rrule(f, *args)`` for the function ``api`` the user called, in errors."""
    entry = rrule.lookup(f)
    if entry is None:
        return None
    out = call_rrule(entry, DEFAULT_CONFIG, f, args, kwargs)
    if type(out) is not tuple or len(out) != 2 or not callable(out[1]):
        # the tracer refuses it, and so does a direct call: None means "no rule"
        raise TracerError(f"{api}({function_name(f)}, *args): {rrule_misfit(entry, out)}")
    return out


class ForwardRules(RuleRegistry):
    """``adrules.frule``: the table of frules; calling it applies one.

    ``frule((ḟ, ẋ1, ...), f, *args)`` returns ``(y, ẏ)``, or None when ``f`` has no rule.

    >>> import numpy as np, adrules as ad
    >>> ad.frule((ad.NoTangent(), 3.0), np.exp, 0.0)
    (np.float64(1.0), np.float64(3.0))
    """

    def __call__(self, tangents: Sequence[Any], f: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> tuple[Any, Any] | None:
        if callable(tangents) and not callable(f) and type(f) in (tuple, list):
            raise TypeError(f"frule(tangents, f, *args): the tangents come first, then "
                            f"{function_name(tangents)}: frule((NoTangent(), ẋ), f, x).")
        return _frule_call("frule", tangents, f, args, kwargs)


def _frule_call(api: str, tangents: Sequence[Any], f: Callable[..., Any], args: tuple[Any, ...],
                kwargs: dict[str, Any]) -> tuple[Any, Any] | None:
    """``frule(tangents, f, *args)`` for the function ``api`` the user called, in errors."""
    entry = frule.lookup(f)
    if entry is None:
        return None
    _check_tangents(api, tangents, f, args)
    out = call_frule(entry, DEFAULT_CONFIG, tangents, f, args, kwargs)
    misfit = frule_misfit(entry, out)  # the tracer refuses it: so does a direct call
    if misfit is not None:
        raise TracerError(f"{api}(tangents, {function_name(f)}, *args): {misfit}")
    return out


def _check_tangents(api: str, tangents: Any, f: object, args: tuple[Any, ...]) -> None:
    """``tangents`` must be the tuple ``(ḟ, ẋ1, ..., ẋn)`` for ``f(*args)``."""
    dots = ", ".join(f"ẋ{i + 1}" for i in range(len(args))) if len(args) > 1 else "ẋ"
    fix = f"give the self slot first, then one per argument: (NoTangent(), {dots})."
    if type(tangents) not in (tuple, list):  # an array would be taken as its rows
        raise TypeError(f"{api}(tangents, {function_name(f)}, *args): tangents must be a tuple, "
                        f"got {type(tangents).__name__}; {fix}")
    if len(tangents) != len(args) + 1:
        raise TypeError(f"{api}(tangents, {function_name(f)}, *args): {len(tangents)} tangents for "
                        f"{len(args)} argument{'s' if len(args) != 1 else ''}; {fix}")


# The same tables the rule files register into (``registry.rrule.register``), callable.
rrule = ReverseRules("rrule", registry.rrule.rules)
frule = ForwardRules("frule", registry.frule.rules)


class _CallOfArgument:
    """``fn(*args, **kwargs)`` with ``fn`` an argument: ``rrule_via_ad`` and
    ``frule_via_ad`` differentiate it with respect to ``fn`` (a model's parameters) too."""

    __slots__ = ("kwargs",)
    __name__ = "f"

    def __init__(self, kwargs: dict[str, Any]) -> None:
        self.kwargs = kwargs

    def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(*args, **self.kwargs) if self.kwargs else fn(*args)

    def __reduce__(self) -> tuple[type, tuple[dict[str, Any]]]:
        return (_CallOfArgument, (self.kwargs,))


_call = _CallOfArgument({})


def rrule_via_ad(f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Pullback]:
    """A rule for ``f`` if one is registered, otherwise one made by tracing ``f``.

    Returns ``(y, pullback)`` with ``pullback(ȳ) -> (f̄, x̄1, ..., x̄n)``; ``f̄`` is the
    gradient of a callable model's parameters (``NoTangent()`` for a plain function).
    Used by rules of higher-order functions.

    >>> import numpy as np, adrules as ad
    >>> from dataclasses import dataclass
    >>> @dataclass
    ... class Scale:
    ...     w: np.ndarray
    ...     def __call__(self, x):
    ...         return np.sum(self.w * x)
    >>> y, back = ad.rrule_via_ad(Scale(np.array([2.0])), np.array([3.0]))
    >>> back(1.0)
    (Scale(w=array([3.])), array([2.]))
    """
    check_callable("rrule_via_ad", f, "f, x")
    rule = _rrule_call("rrule_via_ad", f, args, kwargs)
    if rule is not None:
        return rule
    # keywords in the call, not in a wrapper: f stays an argument, so its parameters get
    # their cotangent (a lambda around f would make f a constant of it: no gradient)
    call = _CallOfArgument(kwargs) if kwargs else _call
    return named_pullback(DerivativeName("rrule_via_ad", call, shown=f), call, (f, *args))


def frule_via_ad(tangents: Sequence[Any], f: Callable[..., Any], *args: Any,
                 **kwargs: Any) -> tuple[Any, Any]:
    """An frule for ``f`` if registered, otherwise forward-mode tracing of ``f``.

    >>> import numpy as np, adrules as ad
    >>> y, dy = ad.frule_via_ad((ad.NoTangent(), 1.0), lambda x: x * x, 3.0)
    >>> float(y), float(dy)
    (9.0, 6.0)
    """
    check_callable("frule_via_ad", f, "(NoTangent(), dx), f, x")
    _check_tangents("frule_via_ad", tangents, f, args)
    rule = _frule_call("frule_via_ad", tangents, f, args, kwargs)
    if rule is not None:
        return rule
    tf, *targs = tangents
    call = _CallOfArgument(kwargs) if kwargs else _call
    return named_jvp(DerivativeName("frule_via_ad", call, shown=f), call, (f, *args),
                     (ZeroTangent() if is_zero(tf) else tf, *targs))


class RuleConfig:
    """Passed to rules registered with ``config=True``: lets a rule of a higher-order
    function differentiate the function it was given.

    >>> import numpy as np
    >>> y, back = RuleConfig().rrule_via_ad(np.sin, 0.0)
    >>> float(y), float(unthunk(back(1.0)[1]))
    (0.0, 1.0)
    """

    __slots__ = ()

    def rrule_via_ad(self, f: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, Pullback]:
        """``adrules.rrule_via_ad``: a registered rule for ``f``, otherwise trace ``f``."""
        return rrule_via_ad(f, *args, **kwargs)

    def frule_via_ad(self, tangents: Sequence[Any], f: Callable[..., Any], *args: Any,
                     **kwargs: Any) -> tuple[Any, Any]:
        """``adrules.frule_via_ad``: a registered frule for ``f``, otherwise trace ``f`` forward."""
        return frule_via_ad(tangents, f, *args, **kwargs)


DEFAULT_CONFIG = RuleConfig()

__all__ = ["gradient", "value_and_gradient", "pullback", "jvp", "rrule", "frule", "rrule_via_ad",
           "frule_via_ad", "RuleConfig"]
