"""The rule registries: ``rrule`` and ``frule`` keyed by primitive.

A rule is registered for one callable the tracer can intercept: a NumPy ufunc, a
NumPy function that dispatches through ``__array_function__``, or a user function
decorated with ``@primitive``. Lookup is a dict access; there is no dispatch magic,
so precedence is explicit: a registered rule, otherwise an error that says how to
register one.

Three kinds of entries share the registries:

* a general rule, written by hand (``@rrule.register(f)`` / ``@frule.register(f)``);
* a scalar rule, from one list of partial derivatives (``scalar_rule``), giving both
  the rrule and the frule and a fast path in the tracer that stores no closure;
* a non-differentiable function (``non_differentiable``): outputs carry no tangent.

``call_rrule`` / ``call_frule`` call an entry of any kind: ``adrules.rrule(f, *args)``
(in ``api.py``) uses them, and the tracer's ``record`` for general rules; ``record`` runs
scalar and non-differentiable entries itself, with no closure. Keyword arguments reach
rules at their positions (``keywords.py``); the rules users register are sent to worker
processes by ``worker_rules.py``.
"""

from __future__ import annotations

import dis
import functools
import inspect
import sys
import types
from typing import Any, Callable, NoReturn, Sequence, TypeVar

import numpy as np

from . import _state
from .keywords import fit_slots, keeps_keywords, keywords_to_positions
from .projection import project_like
from .tangents import NoTangent, Thunk, ZeroTangent, is_float_value, is_zero, unthunk

#: A pullback: takes the output's cotangent, returns ``(f̄, x̄1, ..., x̄n)``.
Pullback = Callable[[Any], tuple[Any, ...]]
_F = TypeVar("_F", bound=Callable[..., Any])

RULE, SCALAR, NONDIFF = "rule", "scalar", "nondiff"


class ComplexRuleError(TypeError):
    """A complex value reached a rule not written for complex values."""


def holds_complex(values: Sequence[Any]) -> bool:
    """Whether any of ``values`` (arrays, numbers, traced boxes, lists of them) is complex."""
    for v in values:
        dtype = getattr(v, "dtype", None)
        if dtype is not None:
            if dtype.kind == "c":
                return True
        elif type(v) is complex:
            return True
        elif type(v) in (list, tuple) and holds_complex(v):
            return True
    return False


def complex_refused(entry: RuleEntry, mode: str, where: str) -> ComplexRuleError:
    """The error for a complex ``where`` ("argument", "output") reaching ``entry``'s rule."""
    name = entry.name
    how = (f"ad.scalar_rule({name}, ..., complex=True)" if entry.kind is SCALAR
           else f"@ad.{mode}.register({name}, complex=True)")
    return ComplexRuleError(
        f"{name}: a complex {where} reached its {mode}, which is written for real values only "
        f"(a real formula would give a silently wrong derivative). Differentiate the real and "
        f"imaginary parts separately (np.real(z), np.imag(z)), or, for your own function, make "
        f"its rule right for complex values (ChainRules' convention: the pullback multiplies "
        f"by the conjugate derivative; ad.testing.check_{mode}(f, z) checks it) and register "
        f"it with {how}.")


def ONE(*args: Any) -> float:
    """The partial derivative 1: ``scalar_rule(np.add, ONE, ONE)`` lets the tracer pass
    the cotangent through without multiplying by one."""
    return 1.0


class RuleEntry:
    """One registration: the rule function and how to call it.

    For a scalar rule called with one argument per partial, ``unread`` lists the inputs
    no partial reads and ``reads_y`` says whether some partial reads the output: the tape
    need not keep the others alive. ``drop_arity`` is the number of arguments of such a
    full call, or -1 when the partials read everything.

    ``complex`` says the rule was written and tested for complex values: the tracer
    refuses to run one that was not on a complex argument or output, whose formula may be
    right only for real numbers. Non-differentiable entries make it unless told otherwise
    (``np.sign``, constant on the real line, is ``z / |z|`` for complex ``z``).
    """

    __slots__ = ("fn", "kind", "config", "partials", "name", "unread", "reads_y", "drop_arity", "complex")
    fn: Any  # the rule function; None for scalar and non-differentiable entries

    def __init__(
        self,
        fn: Callable[..., Any] | None,
        kind: str,
        config: bool = False,
        partials: tuple[Callable[..., Any] | None, ...] = (),
        name: str = "",
        complex: bool = False,
    ) -> None:
        self.fn, self.kind, self.config, self.partials, self.name = fn, kind, config, partials, name
        self.complex = complex
        reads = [any(r) for r in zip(*(_parameters_read(d, len(partials) + 1) for d in partials))]
        self.unread = tuple(i for i, r in enumerate(reads[:-1]) if not r)
        self.reads_y = bool(reads[-1]) if reads else True
        self.drop_arity = -1 if not self.unread and self.reads_y else len(partials)

    def __reduce__(self) -> tuple[Callable[..., RuleEntry], tuple[Any, ...]]:
        # the tracer compares kinds by identity: a copy from another process must get the
        # module's own strings back, not equal ones
        return (_entry, (self.fn, self.kind, self.config, self.partials, self.name, self.complex))


def _parameters_read(d: Callable[..., Any] | None, n: int) -> tuple[bool, ...]:
    """For partial ``d`` called with ``n`` positional arguments: which of them its body
    reads (all of them when that cannot be told from its code)."""
    # Read from the bytecode because nothing simpler tells it: a partial is usually a lambda
    # (no source to parse when defined in a notebook or among others on one line), and calling
    # it cannot show what it does not read. What it buys is memory: the tape drops a large
    # input no partial reads (tanh's reads only y). Anything unusual answers "reads all",
    # which only keeps more alive; tests/test_registry.py checks it on every Python we support.
    if d is None or d is ONE:
        return (False,) * n
    code = getattr(d, "__code__", None)
    if type(d) is not types.FunctionType or code is None or code.co_kwonlyargcount:
        return (True,) * n
    names = list(code.co_varnames[:code.co_argcount])
    if code.co_flags & inspect.CO_VARARGS:
        names += [code.co_varnames[code.co_argcount]] * (n - len(names))
    if len(names) != n or {"locals", "vars", "eval", "exec"} & set(code.co_names):
        return (True,) * n
    loaded = set(code.co_cellvars)  # captured by an inner function: read there
    for ins in dis.get_instructions(code):
        if ins.opname.startswith(("LOAD_FAST", "LOAD_DEREF", "LOAD_CLOSURE", "DELETE_FAST")):
            loaded.update(ins.argval if isinstance(ins.argval, tuple) else (ins.argval,))
    return tuple(name in loaded for name in names)


def _entry(fn: Callable[..., Any] | None, kind: str, config: bool,
           partials: tuple[Callable[..., Any] | None, ...], name: str, complex: bool = False) -> RuleEntry:
    return RuleEntry(fn, {RULE: RULE, SCALAR: SCALAR, NONDIFF: NONDIFF}[kind], config, partials, name,
                     complex)


def _ufunc_name(u: np.ufunc) -> str:
    """A ufunc's name where users import it from. Ufuncs carry no ``__module__``, and
    ``__name__`` can differ from the public name (``scipy.special.digamma.__name__`` is
    ``"psi"``), so look the object up: in ``numpy``, then in ``scipy.special`` when
    SciPy is already imported (never imported here just for a name).

    >>> import numpy as np
    >>> _ufunc_name(np.exp)
    'numpy.exp'
    """
    name: str = u.__name__
    if getattr(np, name, None) is u:
        return f"numpy.{name}"
    special = sys.modules.get("scipy.special")
    if special is not None:
        if getattr(special, name, None) is u:
            return f"scipy.special.{name}"
        for name, obj in vars(special).items():
            if obj is u and not name.startswith("_"):
                return f"scipy.special.{name}"
    for name, obj in vars(np).items():  # an alias (np.absolute is np.abs)
        if obj is u and not name.startswith("_"):
            return f"numpy.{name}"
    return u.__name__


def function_name(f: Any) -> str:  # any object: repr() as the last resort
    """A readable dotted name for a primitive, for error messages.

    >>> import numpy as np
    >>> function_name(np.sin), function_name(np.linalg.inv)
    ('numpy.sin', 'numpy.linalg.inv')
    """
    if isinstance(f, np.ufunc):
        return _ufunc_name(f)
    owner = getattr(f, "__self__", None)
    if isinstance(owner, np.ufunc):
        return f"{_ufunc_name(owner)}.{f.__name__}"
    module = getattr(f, "__module__", None) or ""
    name = getattr(f, "__qualname__", None) or getattr(f, "__name__", None) or repr(f)
    if module.startswith("numpy"):
        module = "numpy.linalg" if "linalg" in module else "numpy.fft" if "fft" in module else "numpy"
    return f"{module}.{name}" if module else name


def is_primitive(f: object) -> bool:
    """True when the tracer records ``f`` as one call (and so uses its rules).

    >>> import numpy as np
    >>> is_primitive(np.exp), is_primitive(lambda x: x)
    (True, False)
    """
    if isinstance(f, np.ufunc) or hasattr(f, "__adrules_primitive__"):
        return True
    if type(f).__name__ == "_ArrayFunctionDispatcher" and hasattr(f, "_implementation"):
        return True
    return isinstance(getattr(f, "__self__", None), np.ufunc)  # np.add.reduce and friends


def _check_key(f: Callable[..., Any], call: str) -> None:
    """``call``: how the user registered, for the message ("rrule.register", "scalar_rule")."""
    if is_primitive(f):
        return
    if isinstance(f, functools.partial):
        name = f"functools.partial({function_name(f.func)}, ...)"
        raise TypeError(
            f"{call}({name}): a functools.partial is a new object, not a primitive, and the "
            f"tracer steps into it. Register the rule for {function_name(f.func)} decorated with "
            f"@adrules.primitive, and call the partial of that.")
    name = function_name(f)
    if isinstance(f, (list, tuple, set)):
        one = "non_differentiable(*functions)" if call == "non_differentiable" else f"one {call} per function"
        raise TypeError(f"{call}({name}): got a {type(f).__name__}, not a function; pass the functions "
                        f"themselves: {one}.")
    if isinstance(f, (types.FunctionType, types.MethodType)):
        plain = (f"{name} is a plain Python function, so the tracer would step into its body and "
                 f"never use this rule. Decorate it with @adrules.primitive (above its def) and "
                 f"register the rule for the decorated function.")
        if call.endswith(".register"):  # @rrule.register with no (f): the rule itself came here
            short = getattr(f, "__name__", name)
            bare = (f"if {short} is the rule, the decorator lacks the function it is for: write "
                    f"@adrules.{call}(f) above def {short}")
            plain = (f"{bare[0].upper()}{bare[1:]}. Otherwise: {plain}" if "rule" in short
                     else f"{plain} (Or, {bare}.)")
        raise TypeError(f"{call}({name}): {plain}")
    raise TypeError(
        f"{call}({name}): the tracer cannot intercept calls to {name!s} "
        f"(traced values never reach it). Rules can be registered for NumPy ufuncs, NumPy "
        f"functions and functions decorated with @adrules.primitive.")


_MISSING: Any = object()  # an argument not given, where None could be a user's mistake


def _positional_capacity(fn: Callable[..., Any]) -> tuple[float, list[str]] | None:
    """How many positional arguments ``fn`` accepts (inf with ``*args``) and its required
    keyword-only parameters; None when its signature cannot be read."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_POSITIONAL for p in params):
        return float("inf"), []
    n = sum(p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)
    return n, [p.name for p in params if p.kind is p.KEYWORD_ONLY and p.default is p.empty]


def _check_rule(kind: str, f: Callable[..., Any], rule: object, config: bool) -> None:
    """Refuse, when registered, a rule that could never be called: it is not callable, or
    takes too few positional arguments (an frule without its tangents)."""
    name = function_name(f)
    if not callable(rule):
        raise TypeError(f"{kind}.register({name}) decorated a {type(rule).__name__}, not a "
                        f"function: put it above def {name.rpartition('.')[2]}_{kind}(...).")
    capacity = _positional_capacity(rule)  # (keyword-only parameters: f's own keywords)
    needed = 1 + (kind == "frule") + config
    if capacity is None or capacity[0] >= needed:
        return
    first = (["config"] if config else []) + (["tangents"] if kind == "frule" else [])
    form = f"def {getattr(rule, '__name__', 'rule')}({', '.join(first + ['x1', '...'])})"
    raise TypeError(f"{kind}.register({name}): the rule takes {int(capacity[0])} positional "
                    f"argument{'s' if capacity[0] != 1 else ''}, but an {kind} receives "
                    f"{' then '.join(first + ['the arguments of ' + name])}: {form}.")


class RuleRegistry:
    """A table of rules keyed by primitive: ``register`` adds one, ``lookup`` finds one.

    ``adrules.rrule`` and ``adrules.frule`` are these tables made callable (in
    ``api.py``): calling one applies the rule outside any differentiation.
    """

    def __init__(self, name: str, rules: dict[Any, RuleEntry] | None = None) -> None:
        self.name = name
        self.rules: dict = {} if rules is None else rules

    def register(self, f: Callable[..., Any] = _MISSING, *, config: bool = False,
                 complex: bool = False) -> Callable[[_F], _F]:
        """Decorator: register a rule for primitive ``f``.

        The rule receives ``f``'s arguments (an rrule returns ``(y, pullback)``, an
        frule takes the tuple of tangents first and returns ``(y, ẏ)``); with
        ``config=True`` it also receives a ``RuleConfig`` first, for
        ``config.rrule_via_ad``.

        ``complex=True`` promises the rule is right for complex arguments and outputs
        (ChainRules' convention: a pullback multiplies by the conjugate derivative, and
        ``ad.testing.check_rrule`` with complex arguments checks it). Without it, a complex
        value reaching the rule raises an error rather than risk a real-only formula.

        >>> import numpy as np, adrules as ad
        >>> @ad.primitive
        ... def cube(x):
        ...     return x ** 3
        >>> @ad.rrule.register(cube)
        ... def cube_rrule(x):
        ...     return cube(x), lambda g: (ad.NoTangent(), 3 * x ** 2 * g)
        >>> ad.gradient(cube, 2.0)
        (12.0,)
        """
        if f is _MISSING:
            raise TypeError(f"{self.name}.register(): give the function the rule is for, "
                            f"@adrules.{self.name}.register(f), above def f_{self.name}.")
        _check_key(f, f"{self.name}.register")

        def decorate(rule: _F) -> _F:
            _check_rule(self.name, f, rule, config)
            self.rules[f] = RuleEntry(rule, RULE, config=config, name=function_name(f), complex=complex)
            USER_REGISTRATIONS.note(f, sys._getframe(1), (self.name,))
            return rule

        return decorate

    def lookup(self, f: object) -> RuleEntry | None:
        """The ``RuleEntry`` for ``f``, or None."""
        try:
            return self.rules.get(f)
        except TypeError:  # unhashable callable
            return None

    def __contains__(self, f: object) -> bool:
        return self.lookup(f) is not None


rrule = RuleRegistry("rrule")
frule = RuleRegistry("frule")


def _nondiff_pullback(n_args: int) -> Pullback:
    def nondiff_pullback(g: Any) -> tuple[NoTangent, ...]:
        return (NoTangent(),) * (n_args + 1)

    return nondiff_pullback


def _times_partial(g: Any, d: Any, args: tuple[Any, ...], y: Any, reverse: bool = False) -> Any:
    """``g * d`` (a tangent) or ``g * conj(d)`` (``reverse``: a cotangent)."""
    if d is ONE:
        return g
    return g * (conj_if_complex(d(*args, y)) if reverse else d(*args, y))


def conj_if_complex(d: Any) -> Any:
    """``d``'s complex conjugate when it is complex, else ``d`` itself (no copy)."""
    if type(d) is complex or type(d) is not float and getattr(d, "dtype", _REAL).kind == "c":
        return np.conjugate(d)
    return d


_REAL = np.dtype(float)


def scalar_rrule(f: Callable[..., Any], partials: Sequence[Any], args: tuple[Any, ...],
                 kwargs: dict[str, Any]) -> tuple[Any, Pullback]:
    y = f(*args, **kwargs)

    def scalar_pullback(g: Any) -> tuple[Any, ...]:
        g = unthunk(g)
        slots: list[Any] = [NoTangent()]
        for arg, d in zip(args, partials):
            if d is None:  # no derivative in this argument (np.where's condition)
                slots.append(NoTangent())
            elif is_float_value(arg) and not is_zero(g):
                slots.append(Thunk(functools.partial(_one_partial, d, args, y, g, arg, f, partials)))
            else:
                slots.append(NoTangent() if not is_float_value(arg) else ZeroTangent())
        return tuple(slots)

    return y, scalar_pullback


def _one_partial(d: Any, args: tuple[Any, ...], y: Any, g: Any, arg: Any, f: Any = None,
                 partials: Sequence[Any] = ()) -> Any:
    try:
        return project_like(_times_partial(g, d, args, y, reverse=True), arg)
    except TypeError as e:  # named as the tracer names it (ad.rrule(f, x) called directly)
        _raise_misfit(_partial_misfit(f, partials, d, args, y, e), e)


def _partial_misfit(f: Any, partials: Sequence[Any], d: Any, args: tuple[Any, ...], y: Any,
                    exc: TypeError) -> TypeError:
    """The error for partial ``d`` of ``f`` failing with ``exc``: scalar_rule_misfit's when
    ``d`` cannot be called as ``d(*args, y)``, else ``exc`` itself (an error in its body)."""
    try:
        inspect.signature(d).bind(*args, y)
        return exc
    except ValueError:  # no signature to read
        return exc
    except TypeError:
        entry = RuleEntry(None, SCALAR, partials=tuple(partials), name=function_name(f))
        return scalar_rule_misfit(entry, len(args), exc)


def scalar_frule(f: Callable[..., Any], partials: Sequence[Any], dargs: Sequence[Any],
                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
    y = f(*args, **kwargs)
    dy = ZeroTangent()
    for arg, d, da in zip(args, partials, dargs):
        da = unthunk(da)
        if d is not None and not is_zero(da):
            try:
                dy = dy + _times_partial(da, d, args, y)
            except TypeError as e:  # (as in _one_partial)
                _raise_misfit(_partial_misfit(f, partials, d, args, y, e), e)
    return y, project_like(dy, y) if holds_complex((dy,)) else dy  # a real y's tangent is real


def call_rrule(entry: RuleEntry, config: Any, f: Callable[..., Any],
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Pullback]:
    """``(y, pullback)`` from ``f``'s registered ``entry``, whatever its kind. Keyword
    arguments are moved first (``keywords.keywords_to_positions``), so the rule sees them
    at their positions; the pullback still returns one slot per argument passed
    positionally (ChainRules' convention). ``config`` goes to rules registered with
    ``config=True``. The tracer's ``record`` runs scalar and non-differentiable entries
    itself, with no pullback closure.

    >>> import numpy as np
    >>> from adrules.tangents import unthunk
    >>> y, back = call_rrule(rrule.lookup(np.negative), None, np.negative, (2.0,), {})
    >>> y, [unthunk(t) for t in back(1.0)]
    (np.float64(-2.0), [NoTangent(), -1.0])
    """
    if kwargs:
        n = len(args)
        args, kwargs = keywords_to_positions(f, args, kwargs, keeps_keywords(f, entry))
        if len(args) > n:  # the caller passed these by keyword: they get no slot
            y, pullback = call_rrule(entry, config, f, args, kwargs)
            return y, _first_slots(pullback, n + 1)
    kind = entry.kind
    if not entry.complex and holds_complex(args):
        raise complex_refused(entry, "rrule", "argument")
    if kind is NONDIFF:
        return f(*args, **kwargs), _nondiff_pullback(len(args))
    if kind is SCALAR:
        out = scalar_rrule(f, entry.partials, args, kwargs)
    else:
        try:  # (free unless raised)
            out = entry.fn(config, *args, **kwargs) if entry.config else entry.fn(*args, **kwargs)
        except TypeError as e:
            _raise_misfit(_rule_misfit("rrule", entry, args, kwargs, e), e)
    if not entry.complex and type(out) is tuple and len(out) == 2 and holds_complex((out[0],)):
        raise complex_refused(entry, "rrule", "output")
    return out


def _raise_misfit(misfit: BaseException, exc: BaseException) -> NoReturn:
    """Raise ``misfit`` from ``exc``, or ``exc`` as it was when they are the same (an error
    in the user's own code: ``raise exc from exc`` made it its own cause)."""
    if misfit is exc:
        raise exc
    raise misfit from exc


def _rule_misfit(kind: str, entry: RuleEntry, args: tuple[Any, ...], kwargs: dict[str, Any],
                 exc: TypeError) -> TypeError:
    """The error for a rule that cannot take the call it was given (``exc`` itself when it
    can, and the TypeError came from its body)."""
    first = (("config",) if entry.config else ()) + (("tangents",) if kind == "frule" else ())
    try:
        inspect.signature(entry.fn).bind(*first, *args, **kwargs)
        return exc
    except ValueError:  # no signature to read
        return exc
    except TypeError:
        shown = ", ".join((*first, *(f"x{i + 1}" for i in range(len(args))), *(f"{k}=..." for k in kwargs)))
        return TypeError(f"the {kind} of {entry.name} cannot be called as rule({shown}), the call "
                         f"{entry.name} received: {exc}. Give the rule {entry.name}'s parameters"
                         f"{', after ' + ' and '.join(first) if first else ''}.")


def _first_slots(pullback: Pullback, n: int) -> Pullback:
    def keyword_pullback(g: Any) -> tuple[Any, ...]:
        return fit_slots(tuple(pullback(g)), n)

    return keyword_pullback


def call_frule(entry: RuleEntry, config: Any, tangents: Sequence[Any],
               f: Callable[..., Any], args: tuple[Any, ...],
               kwargs: dict[str, Any]) -> tuple[Any, Any]:
    """``(y, ẏ)`` from ``f``'s registered ``entry``, ``tangents`` holding the self
    slot's then one per argument; the forward twin of ``call_rrule``.

    >>> import numpy as np
    >>> call_frule(frule.lookup(np.negative), None, (NoTangent(), 3.0), np.negative, (2.0,), {})
    (np.float64(-2.0), -3.0)
    """
    if kwargs:
        args, kwargs = keywords_to_positions(f, args, kwargs, keeps_keywords(f, entry))
        if len(tangents) <= len(args):  # arguments moved from keywords: constants
            tangents = (*tangents, *(ZeroTangent(),) * (len(args) + 1 - len(tangents)))
    kind = entry.kind
    if not entry.complex and holds_complex(args):
        raise complex_refused(entry, "frule", "argument")
    if kind is NONDIFF:
        return f(*args, **kwargs), NoTangent()
    if kind is SCALAR:
        out = scalar_frule(f, entry.partials, tangents[1:], args, kwargs)
    else:
        try:  # (free unless raised)
            out = (entry.fn(config, tuple(tangents), *args, **kwargs) if entry.config
                   else entry.fn(tuple(tangents), *args, **kwargs))
        except TypeError as e:
            _raise_misfit(_rule_misfit("frule", entry, args, kwargs, e), e)
    if not entry.complex and type(out) is tuple and len(out) == 2 and holds_complex((out[0],)):
        raise complex_refused(entry, "frule", "output")
    return out


def scalar_rule(f: Callable[..., Any], *partials: Callable[..., Any] | None,
                complex: bool = False) -> None:
    """Register elementwise ``f`` by its partial derivatives: gives the rrule and the frule.

    One partial per positional input, each called as ``d(x1, ..., xn, y)`` with the
    output ``y`` last; ``None`` for an input with no derivative (``np.where``'s condition).
    The tangent of ``y`` is the sum of ``d * ẋ``; a cotangent flows back as
    ``conj(d) * ȳ``.

    ``complex=True`` says the partials are right for complex arguments too: ``f'(z)`` for
    a holomorphic ``f`` (``exp``, ``sin``), and ``∂f/∂x - i ∂f/∂y`` for a real-valued ``f``
    of ``z = x + iy`` (``abs``: ``conj(z) / |z|``), whose complex tangent the tracer
    projects onto the real output. A function that is neither (``conj``) needs an rrule
    and an frule of its own. Without it a complex value reaching ``f`` raises an error.

    >>> import numpy as np, adrules as ad
    >>> @ad.primitive
    ... def softplus(x):
    ...     return np.logaddexp(0.0, x)
    >>> ad.scalar_rule(softplus, lambda x, y: 1 / (1 + np.exp(-x)))
    >>> round(ad.gradient(softplus, 0.0)[0], 6)
    0.5
    """
    _check_key(f, "scalar_rule")
    _check_partials(f, partials)
    entry = RuleEntry(None, SCALAR, partials=tuple(partials), name=function_name(f), complex=complex)
    rrule.rules[f] = entry
    frule.rules[f] = entry
    USER_REGISTRATIONS.note(f, sys._getframe(1))


def _check_partials(f: Callable[..., Any], partials: tuple[Any, ...]) -> None:
    """Refuse partials that could never be called as ``d(x1, ..., xn, y)``: none given, one
    that is not a function, or one taking too few positional arguments (no ``y``)."""
    name = function_name(f)
    call = {1: "d(x, y)", 2: "d(x1, x2, y)"}.get(len(partials), f"d(x1, ..., x{len(partials)}, y)")
    if not partials:
        raise TypeError(f"scalar_rule({name}) was given no partials: give one per positional "
                        f"input, each called as d(x, y) with the output y last: "
                        f"scalar_rule({name}, lambda x, y: ...).")
    inputs: float | None = f.nin if isinstance(f, np.ufunc) else None
    if inputs is None:
        capacity = _positional_capacity(getattr(f, "__adrules_primitive__", f))
        inputs = None if capacity is None else capacity[0]
    if inputs is not None and inputs < len(partials):
        raise TypeError(f"scalar_rule({name}) was given {len(partials)} partials, but {name} takes "
                        f"{int(inputs)} positional argument{'s' if inputs != 1 else ''}: give one "
                        f"partial per input, each called as d(x1, ..., xn, y) with the output y last.")
    for i, d in enumerate(partials):
        if d is None or d is ONE:
            continue
        if not callable(d):
            hint = (" (the partials go one by one, not in a tuple: scalar_rule(f, d1, d2))"
                    if isinstance(d, (tuple, list)) else "; None for an input with no derivative")
            raise TypeError(f"scalar_rule({name}): partial {i} is a {type(d).__name__}, not a "
                            f"function{hint}.")
        capacity = _positional_capacity(d)
        if capacity is not None and (capacity[0] < _arguments_at_least(f, len(partials)) + 1 or capacity[1]):
            why = (f"has keyword-only parameters {', '.join(capacity[1])}" if capacity[1]
                   else f"takes {int(capacity[0])} positional argument{'s' if capacity[0] != 1 else ''}")
            raise TypeError(f"scalar_rule({name}): partial {i} {why}, but each partial is called "
                            f"as {call}, with every input and then the output y last.")


def _arguments_at_least(f: Callable[..., Any], n_partials: int) -> int:
    """How many arguments every call of ``f`` passes its partials, at least: one per partial
    when ``f`` takes that many (the tracer fills in defaults), else (its signature unknown)
    only the one that is traced."""
    inputs: float | None = f.nin if isinstance(f, np.ufunc) else None
    if inputs is None:
        capacity = _positional_capacity(getattr(f, "__adrules_primitive__", f))
        inputs = None if capacity is None else capacity[0]
    return n_partials if inputs is not None and inputs >= n_partials else 1


def scalar_rule_misfit(entry: RuleEntry, n_args: int, exc: BaseException) -> TypeError:
    """The error for a call whose arguments a ``scalar_rule``'s partials do not fit:
    fewer partials than arguments, or a partial that fails when called as
    ``d(x1, ..., xn, y)`` (keyword arguments count, at their positions).

    >>> entry = RuleEntry(None, SCALAR, partials=(ONE,), name="mul")
    >>> print(scalar_rule_misfit(entry, 2, IndexError()))  # doctest: +ELLIPSIS
    scalar_rule(mul) has 1 partial, but mul was called with 2 arguments...
    """
    n = len(entry.partials)
    call = {1: "d(x, y)", 2: "d(x1, x2, y)"}.get(n_args, f"d(x1, ..., x{n_args}, y)")
    if n < n_args:
        return TypeError(
            f"scalar_rule({entry.name}) has {n} partial{'s' if n != 1 else ''}, but {entry.name} was "
            f"called with {n_args} arguments (keyword arguments count, at their positions): give "
            f"one partial per argument, each called as {call}.")
    return TypeError(
        f"a partial of scalar_rule({entry.name}) failed when called as {call}, with every "
        f"argument of the call (keyword arguments at their positions) and then the output: "
        f"{type(exc).__name__}: {exc}")


def non_differentiable(*fs: Callable[..., Any], complex: bool = True) -> None:
    """Mark functions whose outputs carry no tangent (argmax, floor, comparisons...).

    ``complex=False``: only for real arguments; a complex one raises an error (``np.sign``,
    piecewise constant on the real line, is ``z / |z|`` off it).

    >>> import numpy as np, adrules as ad
    >>> ad.non_differentiable(np.argsort)
    >>> ad.rrule(np.argsort, np.array([2.0, 1.0]))[0]
    array([1, 0])
    """
    if not fs:
        raise TypeError("non_differentiable() was given no functions: non_differentiable(np.argmax, ...).")
    for f in fs:
        _check_key(f, "non_differentiable")
        entry = RuleEntry(None, NONDIFF, name=function_name(f), complex=complex)
        rrule.rules[f] = entry
        frule.rules[f] = entry
        USER_REGISTRATIONS.note(f, sys._getframe(1))


def primitive(fn: _F = _MISSING) -> _F:
    """Make ``fn`` one node for the tracer, so its registered rules are used.

    Called with no traced argument it costs one attribute check on top of ``fn``.

    >>> import numpy as np, adrules as ad
    >>> @ad.primitive
    ... def logsumexp(x):
    ...     m = np.max(x)
    ...     return m + np.log(np.sum(np.exp(x - m)))
    >>> @ad.rrule.register(logsumexp)
    ... def logsumexp_rrule(x):
    ...     y = logsumexp(x)
    ...     return y, lambda g: (ad.NoTangent(), g * np.exp(x - y))
    >>> ad.gradient(logsumexp, np.zeros(2))[0]
    array([0.5, 0.5])
    """
    if fn is _MISSING:
        raise TypeError("primitive() takes the function it decorates: write @adrules.primitive, "
                        "without parentheses, above its def.")
    if not callable(fn):
        raise TypeError(f"primitive({function_name(fn)}): a {type(fn).__name__} is not a function; "
                        f"decorate a def with @adrules.primitive.")
    state = _state.STATE

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if state.active:
            return state.dispatch(wrapper, args, kwargs)
        return fn(*args, **kwargs)

    wrapper.__adrules_primitive__ = fn  # type: ignore[attr-defined]  # marks a primitive
    wrapper.__adrules_rules__ = RulesTravel(wrapper)  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]  # fn's signature, as functools.wraps keeps it


class RulesTravel:
    """Carries a primitive's rules wherever the primitive is pickled by value.

    A primitive defined in ``__main__`` (or a module workers cannot import) reaches
    process and Dask workers as a copy, made by cloudpickle from its code; the script
    that registered its rules never runs there. This object sits in the primitive's
    ``__dict__``, which cloudpickle sends along: pickling it captures the rules
    registered at that moment, and unpickling registers them for the copy. Primitives
    importable by name travel by reference, without their ``__dict__``: their module
    registers their rules when the worker imports it.
    """

    __slots__ = ("primitive",)

    def __init__(self, primitive: Callable[..., Any]) -> None:
        self.primitive = primitive

    def __reduce__(self) -> tuple[Callable[..., RulesTravel], tuple[Any, ...]]:
        f = self.primitive
        return (adopt_primitive_rules, (f, rrule.rules.get(f), frule.rules.get(f)))


def adopt_primitive_rules(f: Callable[..., Any], reverse: RuleEntry | None,
                          forward: RuleEntry | None) -> RulesTravel:
    """Register rules that travelled with primitive ``f`` (see ``RulesTravel``)."""
    if reverse is not None:
        rrule.rules[f] = reverse
    if forward is not None:
        frule.rules[f] = forward
    return RulesTravel(f)


class UserRegistrations:
    """The functions users (code outside adrules) registered rules for, in order, and a
    count that changes with every registration: ``worker_rules`` sends their rules to
    worker processes, which import adrules's own rules but never run the user's script.

    >>> import numpy as np
    >>> np.tanh in USER_REGISTRATIONS.keys
    False
    """

    __slots__ = ("keys", "version", "sites")

    def __init__(self) -> None:
        self.keys: dict = {}
        self.version = 0
        self.sites: dict = {}  # (kind, f) -> (file, line) of the user's registration

    def note(self, f: Callable[..., Any], caller: types.FrameType,
             kinds: tuple[str, ...] = ("rrule", "frule")) -> None:
        """``f``'s rules (of ``kinds``) were registered by the code of frame ``caller``. A
        second registration by users for the same function and kind replaces the first,
        as Julia's method redefinition does, and says so (a warning at the new site);
        replacing one of adrules's own rules is quiet: that is what registering is for."""
        if str(caller.f_globals.get("__name__", "")).partition(".")[0] == "adrules":
            return  # adrules's own library (also when loaded late, as its SciPy rules are)
        site = (caller.f_code.co_filename, caller.f_lineno)
        replaced = [(kind, self.sites[kind, f]) for kind in kinds if (kind, f) in self.sites]
        for kind in kinds:
            self.sites[kind, f] = site
        if replaced:
            import warnings

            where = ", ".join(f"{file}:{line}" for _, (file, line) in replaced)
            warnings.warn_explicit(
                f"{' and '.join(k for k, _ in replaced)} for {function_name(f)} registered again, "
                f"replacing the rule{'s' if len(replaced) > 1 else ''} registered at {where}",
                UserWarning, site[0], site[1],
                module=str(caller.f_globals.get("__name__", "")), registry=caller.f_globals.setdefault(
                    "__warningregistry__", {}))
        self.keys[f] = None
        self.version += 1


USER_REGISTRATIONS = UserRegistrations()
