"""Traced values, the tape, and the NumPy protocols that feed it.

    gradient(f, x) -- Trace(config) -- x boxed as Traced(value, trace, slot)
        f(x) calls plain numpy --> Traced.__array_ufunc__ / __array_function__ / methods
            --> apply(f, args): keywords to positions (keywords.py), unbox
                the args of the innermost trace, look up the rule
            --> record(f, entry, ...): run the rule on the unboxed values, box the
                output, append a node (entry, out, arg_slots, values, pullback, y) to the
                tape. Every traced operation ends here; the operators (_binary) only
                open their boxes faster than apply.
        backprop(trace): walk the tape backwards, call pullbacks, accumulate cotangents
            per slot in tape order (a fixed order: no sets, no id-keyed iteration)

Nesting: every trace gets a level from a global counter, so a trace opened inside
another has the higher level. ``apply`` handles the highest level among its
arguments and calls the rule on values that may still be boxes of lower levels; those
calls are traced by the outer traces in turn. That is what makes gradients of
gradients right and keeps perturbations of different levels apart.

Forward mode uses the same boxes: a forward trace's boxes carry a tangent instead
of a tape slot, and ``record`` calls the frule instead of the rrule.

A trace belongs to the thread that made it: boxes carry their trace, so two threads
differentiating at once never share state. The only process-wide value is the count
of open traces, which lets ``@primitive`` functions skip all checks when it is zero.
"""

from __future__ import annotations

import contextlib
import dis
import itertools
import sys
import threading

import numpy as np

from . import _state, ops, unsupported
from ._state import TracedValue
from .callables import Lifted, Rebuild, split_callable
from .keywords import fit_slots, keeps_keywords, keywords_to_positions, with_defaults
from .projection import ProjectionError, Spec, project_like
from .pytrees import LEAF, LEAF_TYPES, flatten, tangent_leaves, unflatten
from .registry import (NONDIFF, ONE, SCALAR, call_frule, call_rrule, complex_refused, frule as _frules,
                       function_name, holds_complex, rrule as _rrules, scalar_rule_misfit)
from .tangents import AbstractZero, NoTangent, Thunk, ZeroTangent, dense_zeros, is_float_value, is_zero, unthunk

_next_level = itertools.count(1).__next__
_active_lock = threading.Lock()
STATE = _state.STATE

_ndarray = np.ndarray
_BIG = 1 << 12  # elements: below this, allocation is cheaper than the checks
# Python 3.14 may skip reference-count increments for stack references, which would make
# a shared array look like a temporary: backprop writes into a temporary it made (elides
# a copy) only where the count is reliable.
_ELIDE = sys.version_info < (3, 14)


class Trace:
    """One differentiation: a tape (reverse) or a tangent level (forward), and the
    ``config`` that rules of higher-order functions registered with ``config=True``
    receive (``config.rrule_via_ad``)."""

    __slots__ = ("level", "nodes", "n_slots", "forward", "config", "stop")

    def __init__(self, config, forward=False):
        self.level = _next_level()
        self.nodes = []
        self.n_slots = 0
        self.forward = forward
        self.config = config
        # Inside a task of a map: whether the map has raised (Ctrl-C in the caller, an error
        # in another chunk), asked as each traced value is made, so that a long chunk stops
        # at its next operation rather than run on while the script or the next map waits
        # for it; else None
        self.stop = STATE.stop_test()

    def leaf(self, value, tangent=None):
        """Box ``value`` as an input of this trace."""
        return Traced(value, self, tangent)


# The tape, ``Trace.nodes``: one node per operation traced in reverse mode, in the order
# they ran, each made by ``record`` and read by ``backprop``. A node is the plain tuple
#
#     (entry, out, arg_slots, values, pullback, y)
#
# whose fields the constants below number (``node[NODE_ARG_SLOTS]``). A plain tuple, not
# a named one or a class: one is made per traced operation, and making a tuple and
# unpacking it in backprop's loop are CPython's fastest paths, where a NamedTuple or a
# ``__slots__`` class costs a measurable share of an operation (asv_benchmarks/RESULTS.md).
#
# ``entry``: the registry entry whose rule was applied to the primal arguments ``values``.
# ``out``: the output's slot, or a tuple of slots for several outputs (``NO_SLOT`` for one
# that carries no derivative). ``arg_slots``: where each argument's cotangent goes, one per
# argument (the kinds are described above ``_unbox``). ``pullback``: the rule's, or None
# for a scalar rule, whose partials are in ``entry``. ``y``: the output where backprop
# needs it (a scalar rule's partials read it; unused outputs of several get zeros shaped
# like it; an ``_Outputs`` for a container output), else None.
#
# Backprop reads a big argument only for its shape and dtype (to project the cotangent),
# unless a scalar rule's partials read it: such arguments are kept as a ``Spec``, so the
# tape does not keep forward intermediates alive that no pullback reads.
NODE_ENTRY, NODE_OUT, NODE_ARG_SLOTS, NODE_VALUES, NODE_PULLBACK, NODE_Y = range(6)

#: The slot of an argument (or output) that carries no derivative: a constant.
NO_SLOT = -1


class TraceOpen:
    """Count a trace as open, process-wide, while the ``with`` block runs: ``@primitive``
    functions look for traced arguments only while some trace is open (``STATE.active``).

    >>> before = STATE.active
    >>> with TraceOpen():
    ...     STATE.active - before
    1
    """

    __slots__ = ()

    def __enter__(self):
        with _active_lock:
            STATE.active += 1

    def __exit__(self, *exc):
        with _active_lock:
            STATE.active -= 1


class TracerError(TypeError):
    """A traced value was used in a way that would lose or corrupt its gradient."""


class NoRuleError(TracerError):
    """A function reached by a traced value has no derivative rule."""


class NoFruleError(NoRuleError):
    """A function reached in forward mode has no frule (it may have an rrule: ``hessian``
    and ``hvp`` then go reverse-over-reverse)."""


_ESCAPE = (
    "{what} of a traced value would drop its gradient. This also happens with math.* "
    "functions (use np.sin(x), not math.sin(x)) and when storing a traced value into a "
    "NumPy array (a[i] = x; build the array with np.stack([...]) instead). If you really "
    "want the number without its derivative (printing, logging), use x.value; f-strings "
    "(f'{{x:.3f}}') print traced values, where '%.3f' % x and logging's %-formatting call float().")


_ASSIGN = (
    "assigning a traced value into a NumPy array (y[i] = x) is not differentiable: build the "
    "array with np.stack / np.concatenate / np.where instead (y = np.stack([x[0], 0.0]) rather "
    "than y = np.zeros(2); y[0] = x[0]). If you want the number without its derivative, use "
    "x.value.")


#: Said by errors that explain an in-place write met in a rule traced for a second derivative.
SECOND_ORDER = "differentiates the rules' pullbacks themselves"
_IN_PLACE_SIGNS = ("in place", "in-place", "assigning a traced value", "storing it into a NumPy array")


@contextlib.contextmanager
def in_place_writes_explained(explain):
    """Re-raise an in-place write into an array of traced values (or NumPy's "setting an
    array element with a sequence" it caused) made while a rule ran as
    ``TracerError(explain(message))``: a second derivative traces the rules' pullbacks
    and frules as ordinary code. The same error from the differentiated function's own
    code (``x @ w`` where ``x`` is a tuple), or one explained already, passes through."""
    try:
        yield
    except (TypeError, ValueError) as e:
        cause = e if isinstance(e, TracerError) else e.__cause__
        text = str(cause)
        if not isinstance(cause, TracerError) or SECOND_ORDER in text or not any(
                sign in text for sign in _IN_PLACE_SIGNS) or not _raised_in_a_rule(e):
            raise
        raise TracerError(explain(text)) from e


def _raised_in_a_rule(e):
    """Whether ``e`` came from a rule the tracer called: a pullback run by backprop, an
    rrule or an frule."""
    tb = e.__traceback__
    while tb is not None:
        if tb.tb_frame.f_code in _RULE_CALLS:
            return True
        tb = tb.tb_next
    return False


def _escape(what):
    """The error for float()/int()/complex() of a traced value. NumPy converts the value
    with float() when it is stored into a plain array (y[i] = x) and then replaces our
    error by "setting an array element with a sequence", keeping ours as __cause__; the
    caller's current instruction being a subscript store tells that case apart."""
    return _assign_error(sys._getframe(2)) if _in_store(3) else _ESCAPE.format(what=what)


def _assign_error(frame):
    """The error for a traced value stored into a plain array by ``frame``: a library's
    function named (``np.piecewise`` of a plain x), or the user's own write."""
    return unsupported.store_site(frame) or _ASSIGN


def _in_store(depth):
    """Whether the Python frame ``depth`` levels up (the user's; NumPy's C code between
    adds no frame) is executing a subscript store ``y[i] = ...``."""
    try:
        frame = sys._getframe(depth)
        return frame.f_code.co_code[frame.f_lasti] == _STORE_SUBSCR
    except (ValueError, IndexError, AttributeError):  # no such frame / unusual interpreter
        return False


_STORE_SUBSCR = dis.opmap["STORE_SUBSCR"]


class Traced(TracedValue):
    """A value being differentiated. Behaves like the array (or float) it wraps.

    ``x.value`` is the wrapped primal (a plain number or array, or a traced value
    of an outer differentiation when derivatives are nested).

    >>> import numpy as np, adrules as ad
    >>> def f(x):
    ...     assert isinstance(x, ad.tracer.Traced)
    ...     return np.sum(np.sin(x) * x.T)
    >>> ad.gradient(f, np.zeros(2))[0]
    array([0., 0.])
    """

    __slots__ = ("value", "_trace", "slot", "tangent")
    __array_priority__ = 1000

    def __init__(self, value, trace, tangent=None):
        if trace.stop is not None and trace.stop():  # every traced operation makes one
            raise STATE.Abandoned()
        self.value = value
        self._trace = trace
        if trace.forward:
            self.slot = NO_SLOT
            self.tangent = tangent
        else:
            self.slot = trace.n_slots
            trace.n_slots += 1

    @property
    def owner(self):
        """The ``Trace`` (one differentiation) this value is traced by; read-only.

        >>> import numpy as np, adrules as ad
        >>> def f(x):
        ...     assert x.owner is (x * 2.0).owner  # the same differentiation
        ...     return np.sum(x)
        >>> ad.gradient(f, np.zeros(2))[0]
        array([1., 1.])
        """
        return self._trace

    # -- NumPy protocols -----------------------------------------------------
    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        if not kwargs and method == "__call__":  # np.sin(x), np.add(x, y): the common case
            return _ufunc_call(ufunc, inputs)
        if kwargs:
            out = kwargs.get("out")
            if out is not None:
                if type(out) is tuple and len(out) == 1 and len(inputs) == 2 and out[0] is inputs[0] \
                        and ufunc in _IN_PLACE_SYMBOLS:
                    op = _IN_PLACE_SYMBOLS[ufunc]
                    raise TracerError(
                        f"x {op}= y (numpy.{ufunc.__name__}(x, y, out=x)) writes in place into x, a "
                        f"plain NumPy array, which cannot hold the derivative of the traced y: write "
                        f"x = x {op} y (a new array). An accumulator may start as total = 0.0.")
                raise TracerError(
                    f"numpy.{ufunc.__name__}(..., out=...) writes in place into an array, which "
                    f"cannot be differentiated: drop out= and use the returned array.")
            kwargs.pop("out", None)
        f = ufunc if method == "__call__" else getattr(ufunc, method)
        return apply(f, inputs, kwargs)

    def __array_function__(self, func, types, args, kwargs):
        if kwargs:
            if kwargs.get("out") is not None:
                raise TracerError(
                    f"{function_name(func)}(..., out=...) writes in place into an array, which "
                    f"cannot be differentiated: drop out= and use the returned array.")
        composed = COMPOSED.get(func)
        if composed is not None:
            return composed(*args, **kwargs)
        if _top_in_sequences(args) is None and _top_in_sequences(tuple(kwargs.values())) is None:
            # boxes deeper than one list: NumPy would dispatch back here for ever
            raise TracerError(
                f"{function_name(func)}: traced values inside lists of lists cannot be "
                f"differentiated; join the inner lists first (np.stack, np.concatenate).")
        return apply(func, args, kwargs, sequences=True)

    @property
    def __array_interface__(self):
        # A property that raises (rather than __array__) so NumPy passes our error on
        # instead of replacing it with "setting an array element with a sequence".
        if _in_store(2):  # y[1:3] = x
            raise TracerError(_assign_error(sys._getframe(1)))
        where, advice = unsupported.conversion_site(sys._getframe(1))
        if advice is not None:  # in a library's function, which the tracer cannot enter
            raise TracerError(f"np.asarray of a traced value in {where} would drop its gradient. {advice} "
                              "If you want its value without a derivative, pass x.value.")
        raise TracerError(
            "np.asarray / np.array of a traced value, or storing it into a NumPy array "
            f"(a[i] = x), would drop its gradient{f' (in {where})' if where else ''}. If you passed a Python list or tuple of "
            "traced values to a NumPy function (np.array([a, b]), np.mean([a, b]), ...), build the "
            "array with np.stack([a, b]) first: NumPy gives no hook for lists. A plain array's "
            "method given a traced argument converts it too (X.dot(w)): write X @ w or "
            "np.dot(X, w). If you really want the values without their derivative, use x.value.")

    # -- Python-scalar escapes ---------------------------------------------------
    def __float__(self):
        raise TracerError(_escape("float()"))

    def __int__(self):
        raise TracerError(_escape("int()"))

    def __complex__(self):
        raise TracerError(_escape("complex()"))

    def __index__(self):
        raise TracerError(
            "a traced value cannot be used as an index or size: indices carry no gradient. "
            "Use an integer array, or x.value if the number is deliberately constant.")

    def item(self, *args):
        raise TracerError(_ESCAPE.format(what=".item()"))

    def tolist(self):
        raise TracerError(_ESCAPE.format(what=".tolist()"))

    def __setitem__(self, key, value):
        raise TracerError(
            "in-place write into a traced array (x[i] = v) cannot be differentiated: build a "
            "new array instead, e.g. np.where(mask, v, x), np.concatenate([...]) or "
            "np.stack([...]).")

    def __bool__(self):
        return bool(self.value)

    def __round__(self, ndigits=None):
        # round(float) is an int, a constant: so is round() of a traced number. Given
        # digits, it is np.round, whose derivative is zero
        if np.shape(self.value) != ():
            raise TypeError("round() of a traced array: NumPy arrays define no round(); use "
                            "np.round(x, decimals).")
        if ndigits is None:
            return round(self.value)
        return apply(np.round, (self, ndigits), {})

    def __divmod__(self, other):
        return self // other, self % other

    def __rdivmod__(self, other):
        return other // self, other % self

    def __reduce__(self):
        raise TracerError(
            "a traced value cannot be pickled or sent to another process: its derivative lives "
            "on this thread's tape. Pass it to psum/pmap as a shared argument instead of "
            "capturing it: psum(loss, models, x) calls loss(model, x) for each model.")

    def __len__(self):
        return len(self.value)

    def __iter__(self):
        if not self.shape:
            raise TypeError("iteration over a 0-d traced value")
        return (self[i] for i in range(self.shape[0]))

    def __repr__(self):
        kind = "forward" if self._trace.forward else "reverse"
        return f"Traced({self.value!r}, {kind} level {self._trace.level})"

    def __format__(self, spec):
        # Formatting the primal value: a string never feeds back into the computation, so
        # printing or logging a traced value (f"{loss:.3f}") cannot change any gradient.
        # Raising instead would only make debugging prints inside f harder.
        if not spec:  # format(x, "") is str(x), as for every object
            return str(self)
        try:
            return format(self.value, spec)
        except (TypeError, ValueError) as e:
            raise TypeError(
                f"format spec {spec!r} cannot format a traced value of shape {self.shape}: "
                f"format single elements (f\"{{x[0]:{spec}}}\") or use "
                f"np.array2string(x.value, ...) for a whole array.") from e

    __hash__ = object.__hash__

    # -- array attributes --------------------------------------------------------
    @property
    def shape(self):
        return np.shape(self.value)

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def size(self):
        return int(np.prod(self.shape))

    @property
    def dtype(self):
        dt = getattr(self.value, "dtype", None)
        return dt if dt is not None else np.dtype(type(self.value))

    @property
    def T(self):
        return apply(np.transpose, (self,), {})

    @property
    def real(self):
        return apply(np.real, (self,), {})

    @property
    def imag(self):
        return apply(np.imag, (self,), {})

    def __pos__(self):
        # a new array in NumPy: z = +y; z += 1 must leave y as it was
        return _ufunc_call(np.positive, (self,))


_ZEROS = (ZeroTangent, NoTangent)


def _method(f):
    """``x.name(*args, **kwargs)`` is ``f(x, *args, **kwargs)``."""
    def method(self, *args, **kwargs):
        return apply(f, (self, *args), kwargs)

    return method


def _shape_method(f):
    """``x.reshape(2, 3)`` is ``x.reshape((2, 3))``: the shape (or axes) as varargs or one tuple."""
    def method(self, *shape, **kwargs):
        return apply(f, (self, shape[0] if len(shape) == 1 else (shape or None)), kwargs)

    return method


def _operator(f):
    """``x ⊕ y`` is ``f(x, y)``; zero tangents handle arithmetic with a traced value themselves."""
    def op(self, other):
        if type(other) in _ZEROS:
            return NotImplemented
        return _binary(f, self, other)

    return op


def _reflected(f):
    """``y ⊕ x`` (``x`` traced, ``y`` not) is ``f(y, x)``."""
    def rop(self, other):
        if type(other) in _ZEROS:
            return NotImplemented
        return _binary(f, other, self)

    return rop


def _power(f):
    """``x ** y``; ``x ** 2`` is ``np.square(x)``, quicker, as ``ndarray.__pow__`` does."""
    def pow_(self, other):
        if type(other) in (int, float) and other == 2:
            return apply(np.square, (self,), {})
        if type(other) in _SEQUENCES:  # x ** [a[0], 2.0]: as the other operators take lists
            return _binary(f, self, other)
        if type(other) in _ZEROS:
            return NotImplemented
        return apply(f, (self, other), {})

    return pow_


#: Every array method and operator of ``Traced``: the NumPy function it calls, as
#: ``ndarray`` does (``&`` is ``bitwise_and``, not ``logical_and``), and how.
_METHODS = [
    ("sum", np.sum, _method), ("mean", np.mean, _method), ("max", np.max, _method),
    ("min", np.min, _method), ("prod", np.prod, _method), ("var", np.var, _method),
    ("std", np.std, _method), ("cumsum", np.cumsum, _method), ("cumprod", np.cumprod, _method),
    ("squeeze", np.squeeze, _method), ("swapaxes", np.swapaxes, _method), ("clip", np.clip, _method),
    ("argmax", np.argmax, _method), ("argmin", np.argmin, _method), ("argsort", np.argsort, _method),
    ("any", np.any, _method), ("all", np.all, _method), ("trace", np.trace, _method),
    ("diagonal", np.diagonal, _method), ("repeat", np.repeat, _method), ("take", np.take, _method),
    ("dot", np.dot, _method), ("ravel", np.ravel, _method), ("flatten", np.ravel, _method),
    ("copy", np.copy, _method), ("astype", ops.astype, _method), ("__getitem__", ops.getitem, _method),
    ("conj", np.conjugate, _method), ("conjugate", np.conjugate, _method),
    ("reshape", np.reshape, _shape_method), ("transpose", np.transpose, _shape_method),
    ("__neg__", np.negative, _method), ("__abs__", np.absolute, _method),
    ("__invert__", np.invert, _method),
    ("__add__", np.add, _operator), ("__radd__", np.add, _reflected),
    ("__sub__", np.subtract, _operator), ("__rsub__", np.subtract, _reflected),
    ("__mul__", np.multiply, _operator), ("__rmul__", np.multiply, _reflected),
    ("__truediv__", np.true_divide, _operator), ("__rtruediv__", np.true_divide, _reflected),
    ("__floordiv__", np.floor_divide, _operator), ("__rfloordiv__", np.floor_divide, _reflected),
    ("__mod__", np.remainder, _operator), ("__rmod__", np.remainder, _reflected),
    ("__pow__", np.power, _power), ("__rpow__", np.power, _reflected),
    ("__matmul__", np.matmul, _operator), ("__rmatmul__", np.matmul, _reflected),
    ("__and__", np.bitwise_and, _operator), ("__rand__", np.bitwise_and, _reflected),
    ("__or__", np.bitwise_or, _operator), ("__ror__", np.bitwise_or, _reflected),
    ("__xor__", np.bitwise_xor, _operator), ("__rxor__", np.bitwise_xor, _reflected),
    ("__lt__", np.less, _operator), ("__le__", np.less_equal, _operator),
    ("__gt__", np.greater, _operator), ("__ge__", np.greater_equal, _operator),
    ("__eq__", np.equal, _operator), ("__ne__", np.not_equal, _operator),
]

for _name, _f, _make in _METHODS:
    _m = _make(_f)
    _m.__name__ = _m.__qualname__ = _name
    _m.__doc__ = f"Same as {function_name(_f)} on the traced value."
    setattr(Traced, _name, _m)


# NumPy functions computed from NumPy calls that have rules when traced values reach them
COMPOSED = {np.block: ops.block}

_IN_PLACE_SYMBOLS = {np.add: "+", np.subtract: "-", np.multiply: "*", np.true_divide: "/",
                     np.floor_divide: "//", np.remainder: "%", np.power: "**", np.matmul: "@"}


def primal_value(x):
    """``x`` without its boxes (an outer differentiation's, when nested).

    >>> primal_value(2.0)
    2.0
    """
    while type(x) is Traced:
        x = x.value
    return x


def _in_place(name):
    """``x ⊕= y``. NumPy writes into the array ``x``, and every other name for it (an
    alias, a helper's parameter, a list holding it) sees the new values. A traced array's
    box takes the result likewise, where Python would only rebind the name ``x`` (a
    helper ``normalize_(a): a /= a.sum()`` then changed nothing, silently). Numbers are
    immutable in NumPy too: rebound. The caller's own array is never written: the box
    takes the new array (views of it, which the tracer makes as copies, do not see it)."""
    outer = getattr(Traced, name.replace("__i", "__", 1))

    def iop(self, other):
        new = outer(self, other)
        primal = primal_value(self)
        if type(primal) is not np.ndarray or new is NotImplemented:
            return new
        result = primal_value(new)
        if np.shape(result) != primal.shape:  # NumPy writes into x: the result must fit it
            raise ValueError(f"non-broadcastable output operand with shape {primal.shape} doesn't "
                             f"match the broadcast shape {np.shape(result)}")
        if getattr(result, "dtype", primal.dtype) != primal.dtype:  # and takes x's dtype
            new = ops.astype(new, primal.dtype)
        trace = self._trace
        if type(new) is Traced and new._trace is trace:
            if trace.forward:
                self.value, self.tangent = new.value, new.tangent
            else:
                self.value, self.slot = new.value, new.slot
        elif type(new) is not Traced:  # x //= 0.5: no derivative, a constant from now on
            self.value = new
            if trace.forward:
                self.tangent = _ZERO
            else:
                self.slot = trace.n_slots  # a slot no operation feeds
                trace.n_slots += 1
        else:  # a box of another differentiation: rebound
            return new
        return self

    return iop


for _name in ("__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__",
              "__ipow__", "__imatmul__"):
    _m = _in_place(_name)
    _m.__name__ = _m.__qualname__ = _name
    setattr(Traced, _name, _m)

LEAF_TYPES.add(Traced)  # flatten checks this set first


# ---------------------------------------------------------------------------
# apply: one primitive call on traced arguments
# ---------------------------------------------------------------------------

def top_trace(args):
    """The innermost (highest-level) trace among ``args``, or None."""
    top = None
    for a in args:
        if type(a) is Traced:
            t = a._trace
            if top is None or t.level > top.level:
                top = t
    return top


def _top_in_sequences(args):
    top = None
    for a in args:
        if type(a) is Traced:
            t = a._trace
        elif type(a) in (list, tuple):
            t = top_trace(a)
            if t is None:
                continue
        else:
            continue
        if top is None or t.level > top.level:
            top = t
    return top


def _traced_keyword(f, kwargs):
    """Raise for a keyword argument left holding a traced value after binding."""
    for k, v in kwargs.items():
        if _top_in_sequences((v,)) is not None:
            raise TracerError(
                f"{function_name(f)}: keyword argument {k!r} holds a traced value, but {k!r} is "
                f"not a positional parameter and rules differentiate positional arguments only. "
                f"Pass it positionally (for your own @primitive, make {k!r} a positional parameter).")


_ZERO = ZeroTangent()


# What a trace tracks of each argument of an operation: ``tracked``, one item per
# argument, made by ``_unbox`` (then ``_lift_callables`` and ``_open_containers`` for the
# arguments that hold boxes out of its sight). Its kinds:
#
#   reverse mode: where the argument's cotangent goes, kept in the node as ``arg_slots``
#     int              the argument's slot; ``NO_SLOT`` for a constant
#     _ElementSlots    a list or tuple argument holding boxes, or a lifted callable (its
#                      leaves): one slot per element, ``NO_SLOT`` for a constant element
#     _ContainerSlots  a container argument (dict, dataclass, ...) holding boxes
#   forward mode: the argument's tangent, as its frule receives it
#     ``ZeroTangent()`` for a constant; a list or tuple of tangents for a list or tuple
#     argument; a ``Lifted`` of its leaves' tangents for a lifted callable; a container of
#     the argument's structure for a container.


class _ElementSlots(tuple):
    """The slots of a list or tuple argument's elements, or of a lifted callable's leaves
    (``Lifted``): the rule's cotangent for the argument, indexed by element, is spread
    over them."""

    __slots__ = ()


class _ContainerSlots:
    """The slots of a container argument (a dict, dataclass, NamedTuple, registered node)
    holding boxes: the rule received the container with its values, and its cotangent for
    the argument, structural (``Tangent(T, **fields)``) or of the container's own type, is
    spread over these leaves' slots."""

    __slots__ = ("treedef", "slots", "leaves")

    def __init__(self, treedef, slots, leaves):
        self.treedef, self.slots, self.leaves = treedef, slots, leaves


def _unbox(args, top):
    """``(values, tracked)``: ``args`` with ``top``'s boxes opened, and for each argument
    what ``top`` tracks of it (see above): its slot in reverse mode, its tangent in
    forward mode. A list or tuple argument holding boxes gets its elements' slots (an
    ``_ElementSlots``), or a list or tuple of their tangents."""
    forward = top.forward
    constant = _ZERO if forward else NO_SLOT
    values, tracked = [], []
    for a in args:
        if type(a) is Traced and a._trace is top:
            values.append(a.value)
            tracked.append(a.tangent if forward else a.slot)
        elif type(a) in (list, tuple) and top_trace(a) is top:
            opened = [(b.value, b.tangent if forward else b.slot) if type(b) is Traced and b._trace is top
                      else (b, constant) for b in a]
            values.append(type(a)(v for v, _ in opened))
            tracked.append(type(a)(m for _, m in opened) if forward else _ElementSlots(m for _, m in opened))
        else:
            values.append(a)
            tracked.append(constant)
    return values, tracked


# NumPy functions whose rules take a list of arrays as such
_JOINS = frozenset(getattr(np, name) for name in ("stack", "concatenate", "hstack", "vstack", "dstack",
                                                  "column_stack", "block") if hasattr(np, name))


def _numbers_as_arrays(args, top):
    """A list of traced numbers where NumPy takes an array (``np.dot([a[0], a[1]], a)``),
    as the traced ``np.stack`` of it: NumPy reads the list as that array, and rules
    compute with their arguments as arrays (``g * b``)."""
    out = None
    for i, a in enumerate(args):
        if type(a) in _SEQUENCES and a and _numbers_inside(a, top):
            if out is None:
                out = list(args)
            out[i] = _stacked(a)
    return args if out is None else tuple(out)


def _numbers_inside(seq, top):
    """Whether ``seq`` is a list of numbers, or of such lists (nested as NumPy reads an
    array), with a box of ``top`` among them."""
    if all(type(v) in _SEQUENCES for v in seq):
        return any(_numbers_inside(v, top) for v in seq) and all(v and _only_numbers(v) for v in seq)
    return top_trace(seq) is top and all(np.ndim(primal_value(v)) == 0 for v in seq)


def _only_numbers(seq):
    # the primal's ndim: np.ndim of a box would be one more traced NumPy call
    return all(_only_numbers(v) if type(v) in _SEQUENCES else np.ndim(primal_value(v)) == 0 for v in seq)


def _stacked(seq):
    return apply(np.stack, ([_stacked(v) if type(v) in _SEQUENCES else v for v in seq],), {},
                 sequences=True)


def rrule_misfit(entry, out):
    """The error for an rrule that returned other than ``(y, pullback)``."""
    if type(out) is tuple and len(out) == 2 and callable(out[0]):
        got = "(pullback, y): the pair the other way round"
    elif type(out) is tuple:
        got = f"a tuple of {len(out)}" if len(out) != 2 else "a pair whose second value is not callable"
    else:
        got = f"a {type(out).__name__}"
    return TracerError(f"the rrule of {entry.name} returned {got}; it must return (y, pullback): "
                       f"the output, then the function from ȳ to the cotangents.")


def frule_misfit(entry, out):
    """The error for an frule that returned other than ``(y, ẏ)``, or None when it did not."""
    if type(out) is tuple and len(out) == 2:
        return None
    got = f"{len(out)} values" if type(out) is tuple else f"a {type(out).__name__}"
    return TracerError(f"the frule of {entry.name} returned {got}; it must return the pair "
                       f"(y, ẏ): the output and its tangent.")


def _no_rule(f, mode):
    name = function_name(f)
    registry = "rrule" if mode == "reverse" else "frule"
    error = NoRuleError if mode == "reverse" else NoFruleError
    why = unsupported.reason(name)
    if why is not None:  # a known gap: its reason and the way around it, not a registration
        return error(f"no {registry} for {name}: it {why}." if why.startswith("writes") else
                     f"no {registry} for {name}: {why}.")
    return error(
        f"no {registry} for {name}: a traced value reached it, but it has no derivative rule. "
        f"Register one with @adrules.{registry}.register({name}), or mark it with "
        f"adrules.non_differentiable({name}) if its output carries no derivative.")


def apply(f, args, kwargs, sequences=False, containers=False):
    """Call primitive ``f`` on arguments that may be traced; record it on the innermost trace.

    Finds that trace, opens its boxes and looks ``f``'s rule up, then hands over to
    ``record``. ``sequences``: look for traced values inside list and tuple arguments too
    (``np.stack([x, y])``); ufuncs and operators take none. ``containers``: the only
    traced values are inside containers (a user primitive's dataclass argument).
    """
    if kwargs:  # bound once here, before unboxing, so slots line up with positions
        keep = keeps_keywords(f, _rrule_table.get(f) or _frule_table.get(f))
        args, kwargs = keywords_to_positions(f, args, kwargs, keep)
        if kwargs:
            _traced_keyword(f, kwargs)
    if containers:
        top = _top_inside(args)
    else:
        top = _top_in_sequences(args) if sequences else top_trace(args)
    if top is None:
        return f(*args, **kwargs)
    if sequences and f not in _JOINS:
        args = _numbers_as_arrays(args, top)
    entry = (_frule_table if top.forward else _rrule_table).get(f)
    if entry is None:
        raise _no_rule(f, "forward" if top.forward else "reverse")
    values, tracked = _unbox(args, top)
    if sequences or type(f) is _ufunc:  # NumPy's own functions take lists as arrays
        _lists_as_arrays(f, values, tracked, top)
    out = record(f, entry, top, values, tracked, kwargs)
    if entry.kind is SCALAR and type(out) is Traced and type(out.value) in _SEQUENCES:
        # a user's function of several outputs: its partials would see the tuple as one value
        raise _scalar_rule_of_outputs(entry, out.value)
    return out


def record(f, entry, top, values, tracked, kwargs):
    """Run ``f``'s rule ``entry`` on the opened arguments ``values`` and box the output on
    ``top``: the one place a traced operation is recorded, in both modes.

    ``tracked`` holds, per argument, what ``top`` tracks of it (see above ``_unbox``). In
    reverse mode the operation becomes a node on the tape (its fields: see ``NODE_ENTRY``);
    a scalar rule's node keeps no pullback (backprop multiplies by the partials in
    ``entry``). In forward mode the output's box carries its tangent, and nothing is kept.
    """
    kind = entry.kind
    if kind is SCALAR:
        y = f(*values, **kwargs) if kwargs else f(*values)  # **{} doubles a small ufunc call's cost
        if not entry.complex and (holds_complex(values) or holds_complex((y,))):
            raise complex_refused(entry, "frule" if top.forward else "rrule",
                                  "argument" if holds_complex(values) else "output")
        if top.forward:
            return _box_forward(y, _scalar_tangent(entry, values, tracked, y), top)
        out = Traced(y, top)
        # An elementwise output is as big as its biggest input: small, nothing worth dropping.
        if type(y) is _ndarray and y.size >= _BIG and len(values) == entry.drop_arity:
            for i in entry.unread:
                _drop_if_big(values, i)
            if not entry.reads_y:
                y = None
        top.nodes.append((entry, out.slot, tracked, values, None, y))
        return out
    if kind is NONDIFF:  # outputs carry no tangent: nothing to record
        if not entry.complex and holds_complex(values):
            raise complex_refused(entry, "frule" if top.forward else "rrule", "argument")
        return f(*values, **kwargs)
    if entry.config:  # a higher-order rule: functions it receives may carry traced state
        _lift_callables(values, tracked, top)
    _open_containers(values, tracked, top)
    if top.forward:
        return _box_forward(*_frule_output(entry, top, f, values, tracked, kwargs), top)
    out = call_rrule(entry, top.config, f, values, kwargs)
    if type(out) is not tuple or len(out) != 2 or not callable(out[1]):
        raise rrule_misfit(entry, out)
    y, pullback = out
    for i, v in enumerate(values):  # the pullback keeps what it reads; the tape, shapes (_drop_if_big)
        if type(v) is _ndarray and v.size >= _BIG:
            values[i] = Spec(v.shape, v.dtype)
    if isinstance(y, (tuple, list)) and not any(type(v) in _NESTED for v in y):
        # several outputs (NamedTuples keep their type): eigh's (values, vectors)
        boxes = [Traced(v, top) if is_float_value(v) else v for v in y]
        out_slots = tuple(b.slot if type(b) is Traced else NO_SLOT for b in boxes)
        top.nodes.append((entry, out_slots, tracked, values, pullback, y))
        return _same_sequence(y, boxes)
    if not is_float_value(y):
        leaves, treedef = flatten(y)
        if treedef is LEAF:  # an int, a string: nothing to differentiate
            return y
        # a dict, a dataclass, nested tuples: every float leaf boxed, the cotangent rebuilt
        # in y's structure for the pullback
        boxes = [Traced(v, top) if is_float_value(v) else v for v in leaves]
        out_slots = tuple(b.slot if type(b) is Traced else NO_SLOT for b in boxes)
        top.nodes.append((entry, out_slots, tracked, values, pullback, _Outputs(treedef, leaves)))
        return unflatten(treedef, boxes)
    out = Traced(y, top)
    top.nodes.append((entry, out.slot, tracked, values, pullback, None))
    return out


def _drop_if_big(values, i):
    """Keep only the shape and dtype of big argument ``i``: backprop projects onto it."""
    v = values[i]
    if type(v) is _ndarray and v.size >= _BIG:
        values[i] = Spec(v.shape, v.dtype)


def _scalar_tangent(entry, values, tangents, y):
    """The tangent of a scalar rule's output: the partials times the arguments' tangents."""
    dy = _ZERO
    try:
        for i, dx in enumerate(tangents):
            if not is_zero(dx):
                d = entry.partials[i]
                if d is not None:  # None: no derivative in this argument
                    dy = dy + (dx if d is ONE else dx * d(*values, y))
    except (IndexError, TypeError) as e:
        misfit = _partials_misfit(entry, values, y, [not is_zero(dx) for dx in tangents])
        if misfit is None:
            raise
        raise misfit from e
    return dy


def _frule_output(entry, top, f, values, tangents, kwargs):
    """``(y, ẏ)`` from an frule, checked for the mistakes rule authors make."""
    out = call_frule(entry, top.config, (NoTangent(), *tangents), f, values, kwargs)
    if type(out) is not tuple or len(out) != 2:
        raise frule_misfit(entry, out)
    y, dy = out
    if type(y) in (tuple, list) and y and isinstance(y[0], (NoTangent, AbstractZero)) \
            and not entry.name.startswith("adrules."):
        # def g_frule(x, dx): it received the tangents as x, and returned them as its output
        raise TracerError(f"the frule of {entry.name} returned an output holding {type(y[0]).__name__}"
                          f"s: an frule takes the tuple of tangents first, def rule(tangents, *args), "
                          f"tangents[0] the function's own and tangents[i] argument i's.")
    return y, unthunk(dy)


_NESTED = frozenset((tuple, list, dict))


def _filled(gs, ys):
    """Cotangents of several outputs, zeros for those that received none."""
    return [g if g is not None else dense_zeros(y) if is_float_value(y) else NoTangent() for g, y in zip(gs, ys)]


class _Outputs:
    """A rule's output that is a container other than a flat tuple or list: its structure
    and leaves, from which backprop rebuilds the cotangent the pullback receives."""

    __slots__ = ("treedef", "leaves")

    def __init__(self, treedef, leaves):
        self.treedef, self.leaves = treedef, leaves


_rrule_table = _rrules.rules
_frule_table = _frules.rules


def _scalar_rule_of_outputs(entry, y):
    return TracerError(
        f"{entry.name} returned a {type(y).__name__} of {len(y)} outputs, but it has a "
        f"scalar_rule, which is for a function of one output (the gradient through any of "
        f"them would be zero): register an rrule (and an frule) for it instead, whose "
        f"pullback takes one cotangent per output.")


# The operators and one-argument ufuncs: ``apply`` without its general search, for the
# common case of boxes of one trace and no lists. ``tests/test_fast_path.py`` checks that
# they give apply's values and derivatives.

def _ufunc_call(f, args):
    """``apply(f, args, {})`` for a ufunc called without keywords, one of whose
    arguments is a box."""
    if len(args) == 2:
        return _binary(f, args[0], args[1])
    if len(args) == 1:
        a = args[0]
        top = a._trace
        if top.forward:
            entry, tracked = _frule_table.get(f), a.tangent
        else:
            entry, tracked = _rrule_table.get(f), a.slot
        if entry is not None:
            return record(f, entry, top, [a.value], [tracked], _NO_KWARGS)
    return apply(f, args, _NO_KWARGS)


def _binary(f, a, b):
    """``apply(f, (a, b), {})`` for an operator, one of whose operands is a box."""
    if a is b and f is _multiply:
        # x * x is how NumPy squares, so np.square gives the same bits, and its pullback
        # makes one full-size product where multiply's makes two and adds them
        return _ufunc_call(np.square, (a,))
    ta, tb = type(a), type(b)
    top = a._trace if ta is Traced else b._trace
    lists = ta is not Traced and ta in _SEQUENCES or tb is not Traced and tb in _SEQUENCES
    if lists:  # np.maximum([a[0], 0.7], x): NumPy's array of the list
        pair = (a, b)
        stacked = _numbers_as_arrays(pair, top)
        if stacked is not pair:
            return _binary(f, *stacked)
    if ta is Traced and tb is Traced and a._trace is not b._trace:
        return apply(f, (a, b), _NO_KWARGS)
    if top.forward:
        entry = _frule_table.get(f)
        tracked = [a.tangent if ta is Traced else _ZERO, b.tangent if tb is Traced else _ZERO]
    else:
        entry = _rrule_table.get(f)
        tracked = [a.slot if ta is Traced else NO_SLOT, b.slot if tb is Traced else NO_SLOT]
    if entry is None:
        return apply(f, (a, b), _NO_KWARGS)
    values = [a.value if ta is Traced else a, b.value if tb is Traced else b]
    if lists:  # x * [1.0, 2.0]: the rule gets the array
        values = [np.asarray(v) if type(v) in _SEQUENCES else v for v in values]
    return record(f, entry, top, values, tracked, _NO_KWARGS)


_NO_KWARGS: dict = {}
_multiply = np.multiply
_ufunc = np.ufunc
_SEQUENCES = frozenset((list, tuple))


def _lists_as_arrays(f, values, tracked, top):
    """Give a NumPy function's rule arrays where the call passed lists of numbers for
    arguments no box is in, as NumPy itself would take them (``np.dot([0.5, 2.0], x)``:
    a rule computing ``g * b`` would multiply a list). A ufunc's inputs are all arrays;
    other functions' lists are converted only when they hold numbers, one a float at least,
    so shapes and axes (tuples of ints) stay as they are."""
    for i, v in enumerate(values):
        if type(v) not in _SEQUENCES or not _is_constant(tracked[i], top):  # no box in it
            continue
        if type(f) is _ufunc or _holds_numbers(v):
            values[i] = np.asarray(v)


def _holds_numbers(v):
    """True for a (nested) list or tuple of numbers with a float among them."""
    stack, floats = [v], False
    while stack:
        for item in stack.pop():
            t = type(item)
            if t in _SEQUENCES:
                stack.append(item)
            elif t is float or t is np.float64 or t is np.float32:
                floats = True
            elif not (t is int or t is np.int64 or t is bool):
                return False
    return floats


def _open_containers(values, tracked, top):
    """Open the boxes of ``top`` inside container arguments, as a rule expects primal
    values (ChainRules' rrule receives a struct of plain fields). Lists and tuples of a
    NumPy function's arguments are opened by ``_unbox`` already. What is tracked of the
    argument becomes a ``_ContainerSlots`` of its leaves (reverse), or its tangent as a
    container of the same structure, ``ZeroTangent()`` for a leaf that carries none
    (forward), as gradients of containers come back."""
    for i, a in enumerate(values):
        if type(a) in LEAF_TYPES or type(a) is Traced:  # (_boxes_inside's first test, sooner)
            continue
        found = _boxes_inside(a, top) if _is_constant(tracked[i], top) else None
        if found is None:
            continue
        leaves, treedef = found
        mine = [type(v) is Traced and v._trace is top for v in leaves]
        opened = [v.value if m else v for v, m in zip(leaves, mine)]
        values[i] = unflatten(treedef, opened)
        if top.forward:
            tracked[i] = unflatten(treedef, [v.tangent if m else _ZERO for v, m in zip(leaves, mine)])
        else:
            tracked[i] = _ContainerSlots(treedef, [v.slot if m else NO_SLOT for v, m in zip(leaves, mine)], opened)


def _is_constant(tracked, top):
    """Whether ``tracked``, what ``top`` tracks of an argument (see above ``_unbox``), says
    the argument holds no box of ``top``."""
    return tracked is _ZERO if top.forward else type(tracked) is int and tracked == NO_SLOT


def _boxes_inside(a, top):
    """``(leaves, treedef)`` of a container argument holding boxes of ``top`` (a callable
    dataclass too), or None."""
    if type(a) in LEAF_TYPES or type(a) is Traced:
        return None
    leaves, treedef = flatten(a)
    if treedef is LEAF or not any(type(v) is Traced and v._trace is top for v in leaves):
        return None
    return leaves, treedef


def _spread(cot, opened, g, entry, position):
    """A container argument's cotangent ``g`` added to its traced leaves (see ``_ContainerSlots``)."""
    if is_zero(g):
        return
    parts = tangent_leaves(g, opened.treedef)
    if parts is None:
        raise TracerError(
            f"the pullback of {entry.name} returned a cotangent for argument {position} that does "
            f"not match its structure {opened.treedef}: give a Tangent(T, **fields), an object "
            f"of the argument's own type, or ZeroTangent().")
    for slot, part, primal in zip(opened.slots, parts, opened.leaves):
        if slot >= 0 and not is_zero(part):
            _accumulate(cot, slot, unthunk(part), primal, entry, position)


def _lift_callables(values, tracked, top):
    """Replace each callable argument carrying ``top``'s traced values by a ``Lifted``
    callable over the opened values. What is tracked of it becomes those values' slots
    (reverse), so the rule's cotangent for the callable reaches them, or a ``Lifted`` of
    their tangents (forward: an frule with ``config=True`` passes both on to
    ``config.frule_via_ad``; a closure's hidden boxes would reach the rule's own code)."""
    for i, a in enumerate(values):
        if not _is_constant(tracked[i], top) or not callable(a) or type(a) is Traced:
            continue
        state, rebuild = split_callable(a)
        if rebuild is None:
            continue
        leaves, treedef = flatten(state)
        mine = [type(v) is Traced and v._trace is top for v in leaves]
        if not any(mine):
            continue
        rebuilt = Rebuild(treedef, rebuild)
        values[i] = Lifted([v.value if m else v for v, m in zip(leaves, mine)], rebuilt)
        if top.forward:
            tracked[i] = Lifted([v.tangent if m else _ZERO for v, m in zip(leaves, mine)], rebuilt)
        else:
            tracked[i] = _ElementSlots(v.slot if m else NO_SLOT for v, m in zip(leaves, mine))


def _same_sequence(like, items):
    """``items`` as a list, tuple or NamedTuple, whichever ``like`` is."""
    if type(like) is list:
        return list(items)
    if hasattr(type(like), "_fields"):
        return type(like)(*items)
    return tuple(items)


def dispatch_primitive(f, args, kwargs):
    """Entry point for ``@primitive`` functions while some trace is open."""
    entry = _rrule_table.get(f) or _frule_table.get(f)
    if entry is not None and entry.kind is SCALAR:
        if kwargs:  # zeta(x, q=q): the partials take every argument by position
            args, kwargs = keywords_to_positions(f, args, kwargs)
        if not kwargs and len(args) < len(entry.partials):
            args = with_defaults(f, args, len(entry.partials))
    if top_trace(args) is None and top_trace(kwargs.values()) is None:
        if _top_inside((*args, *kwargs.values())) is None:
            return f.__adrules_primitive__(*args, **kwargs)
        return apply(f, args, kwargs, containers=True)  # boxes only inside a container
    return apply(f, args, kwargs)


def _top_inside(args):
    """The innermost trace among the leaves of container arguments, or None."""
    top = None
    for a in args:
        if type(a) in LEAF_TYPES or type(a) is Traced:
            continue
        t = top_trace(flatten(a)[0])
        if t is not None and (top is None or t.level > top.level):
            top = t
    return top


STATE.dispatch = dispatch_primitive


# ---------------------------------------------------------------------------
# reverse pass
# ---------------------------------------------------------------------------

_F8 = np.dtype(float)
F64_SCALARS = frozenset((float, np.float64))
#: what a pullback's self slot is checked for numbers in (``_self_slot_check``)
_FLOATS_AND_ARRAYS = frozenset((float, np.float64, np.float32, _ndarray))


def _accumulate(cot, slot, g, primal, entry, position):
    """Add ``g``, the cotangent ``entry``'s pullback gave argument ``position``, to
    ``cot[slot]``, projected first onto the space of the argument's value ``primal``."""
    if type(g) in F64_SCALARS and type(primal) in F64_SCALARS:
        pass  # float64 numbers: projection would return g as it is
    elif not (type(g) is _ndarray and type(primal) is _ndarray and g.shape == primal.shape
              and g.dtype == primal.dtype):  # the common case needs no projection
        try:
            g = project_like(g, primal)
        except ProjectionError as e:
            raise TracerError(
                f"the pullback of {entry.name} returned a cotangent of the wrong shape for "
                f"argument {position} (primal shape {getattr(primal, 'shape', ())}): {e}. Fix "
                f"the rule so argument {position}'s cotangent has its primal's shape.") from None
        if is_zero(g):
            return
    old = cot[slot]
    if old is None:
        cot[slot] = g
    elif (_ELIDE and type(old) is _ndarray and old.size >= _BIG and sys.getrefcount(old) <= 3
          and type(g) is _ndarray and g.shape == old.shape and g.dtype == old.dtype
          and old.flags.writeable and old.flags.owndata):
        # Only ``cot`` (and this frame) holds ``old``: a sum backprop made that nobody else
        # reads, so adding into it saves a fresh buffer and its page faults.
        np.add(old, g, out=old)
    else:
        cot[slot] = old + g



def _self_slot_check(entry, grads):
    """A pullback's slot 0 is the cotangent of the function itself, never used: numbers
    there are an argument's cotangent in the wrong slot (``(2 * g * x, NoTangent())``,
    the self slot forgotten or put last), whose gradient would silently be zero."""
    if np.any(grads[0] != 0):
        raise TracerError(
            f"the pullback of {entry.name} returned numbers in slot 0, the slot of "
            f"{entry.name} itself, which has no cotangent: the arguments' cotangents come "
            f"after it. Return (NoTangent(), {', '.join(f'x̄{i + 1}' for i in range(len(grads) - 1))}).")


def _times(g, d):
    """``g * conj(d)``, the cotangent a partial ``d`` passes back (conjugated only when
    complex), written into ``d`` when ``d`` is a big temporary nobody else holds
    (refcount 2: the parameter and getrefcount's own argument), saving an allocation and its
    page faults: the same trick as NumPy's own temporary elision. Refcounts are
    reliable for this on CPython 3.10-3.13 (``_ELIDE``)."""
    if type(d) is complex or type(d) is not float and getattr(d, "dtype", _F8).kind == "c":
        d = np.conjugate(d)
    if (_ELIDE and type(d) is _ndarray and d.size >= _BIG and sys.getrefcount(d) <= 2 and d.flags.writeable
            and d.flags.owndata and np.shape(g) == d.shape and np.result_type(g, d) == d.dtype):
        return np.multiply(d, g, out=d)
    return g * d


def backprop(trace, seeds, consume=True):
    """Propagate cotangents ``seeds`` ({slot: ȳ}) backwards through ``trace``'s tape.

    Returns the list of cotangents by slot (None where nothing arrived). With
    ``consume`` the tape is emptied as it goes, releasing intermediates early.
    """
    cot = [None] * trace.n_slots
    for slot, g in seeds:
        if g is not None and not isinstance(g, AbstractZero):  # is_zero, inlined
            cot[slot] = g if cot[slot] is None else cot[slot] + g
    nodes = trace.nodes
    if consume:  # each node popped as it is reached, so its intermediates go early
        nodes.insert(0, None)  # where the popping stops
        order = iter(nodes.pop, None)
    else:
        order = reversed(nodes)
    stop = STATE.stop_test()  # this task's, as Trace.stop (the tape may be another task's)
    for entry, out, arg_slots, values, pullback, y in order:  # a node's fields: see NODE_ENTRY
        if stop is not None and stop():
            raise STATE.Abandoned()
        if type(out) is int:
            g = cot[out]
            if g is None:
                continue
            if consume:
                cot[out] = None
        else:
            g = _outputs_cotangent(cot, out, y)
            if g is None:
                continue
        if pullback is None:  # a scalar rule: g times each moving argument's partial
            try:
                for i, slot in enumerate(arg_slots):
                    if slot >= 0:
                        d = entry.partials[i]
                        if d is ONE:
                            _accumulate(cot, slot, g, values[i], entry, i)
                        elif d is not None:  # None: no derivative in this argument (np.where's condition)
                            _accumulate(cot, slot, _times(g, d(*values, y)), values[i], entry, i)
            except (IndexError, TypeError) as e:  # zero-cost unless raised
                misfit = _partials_misfit(entry, values, y, [s >= 0 for s in arg_slots])
                if misfit is None:
                    raise
                raise misfit from e
        else:
            _pull_rule(cot, entry, pullback(g), arg_slots, values)
    return cot


def _outputs_cotangent(cot, out, y):
    """The cotangent of a node of several outputs (slots ``out``), zeros for those that
    received none; None when none did."""
    gs = [cot[s] if s >= 0 else None for s in out]
    if all(x is None for x in gs):
        return None
    if type(y) is _Outputs:
        return unflatten(y.treedef, _filled(gs, y.leaves))
    return _same_sequence(y, _filled(gs, y))


def _pull_rule(cot, entry, grads, arg_slots, values):
    """Add a rule's pullback output ``grads`` (the self slot, then one per argument) to the
    cotangents of the arguments' slots ``arg_slots`` (their kinds: see above ``_unbox``)."""
    if type(grads) is tuple and len(grads) < len(arg_slots) + 1 and all(
            type(s) is int and s == NO_SLOT for s in arg_slots[len(grads) - 1:]):
        # slots only for the arguments passed by position (ChainRules' convention, and
        # call_rrule's): those bound from keywords are constants here, with no cotangent
        grads = fit_slots(grads, len(arg_slots) + 1)
    if type(grads) is not tuple or len(grads) != len(arg_slots) + 1:
        n = f"a {type(grads).__name__}" if type(grads) is not tuple else f"{len(grads)} slots"
        raise TracerError(
            f"the pullback of {entry.name} returned {n}; it must return a tuple of "
            f"{len(arg_slots) + 1}: the self slot (NoTangent() for a plain function) then one "
            f"cotangent per positional argument.")
    if type(grads[0]) in _FLOATS_AND_ARRAYS:
        _self_slot_check(entry, grads)
    for i, slots in enumerate(arg_slots):
        kind = type(slots)
        if kind is int:  # the argument's slot
            if slots >= 0:
                g = grads[i + 1]
                _accumulate(cot, slots, g() if isinstance(g, Thunk) else g, values[i], entry, i)  # unthunk
        elif kind is _ElementSlots:  # a list argument's, or a lifted callable's: one slot per element
            gi = unthunk(grads[i + 1])
            if not is_zero(gi):
                for j, sj in enumerate(slots):
                    if sj >= 0:
                        _accumulate(cot, sj, unthunk(gi[j]), values[i][j], entry, i)
        else:  # a container argument's
            _spread(cot, slots, unthunk(grads[i + 1]), entry, i)


#: where the tracer runs rules: an error raised below one of these came from a rule
_RULE_CALLS = frozenset((backprop.__code__, call_rrule.__code__, call_frule.__code__))


# ---------------------------------------------------------------------------
# forward pass
# ---------------------------------------------------------------------------

def _partials_misfit(entry, values, y, moving):
    """The error to raise when a scalar rule's partials do not fit the call (too few, or
    one that cannot be called as ``d(*values, y)``), or None when the failure was not
    theirs (a bad cotangent, say)."""
    partials = entry.partials
    for i, m in enumerate(moving):
        if not m:
            continue
        if i >= len(partials):
            return scalar_rule_misfit(entry, len(values), IndexError(i))
        if partials[i] is not ONE:
            try:
                partials[i](*values, y)
            except TypeError as e:
                return scalar_rule_misfit(entry, len(values), e)
    return None



def _broadcasts_to(shape, target):
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


def _box_forward(y, dy, top):
    if type(dy) is _ndarray and type(y) is _ndarray and dy.shape == y.shape and dy.dtype == y.dtype:
        return Traced(y, top, dy)  # the common case: nothing to check or fix
    if isinstance(y, (tuple, list)):
        dys = [ZeroTangent()] * len(y) if is_zero(dy) else dy
        return _same_sequence(y, [_box_forward(v, unthunk(d), top) for v, d in zip(y, dys)])
    if not is_float_value(y):
        leaves, treedef = flatten(y)
        if treedef is LEAF or is_zero(dy):
            return y
        # a dict or dataclass output: its tangent read leaf by leaf, as a cotangent is
        dys = tangent_leaves(dy, treedef)
        if dys is None:
            raise TracerError(f"an frule returned a tangent of structure {flatten(dy)[1]} for an "
                              f"output of structure {treedef}: give the output's structure.")
        return unflatten(treedef, [_box_forward(v, unthunk(d), top) for v, d in zip(leaves, dys)])
    if is_zero(dy):
        return y
    if np.shape(dy) != np.shape(y):
        # a tangent that broadcasts to the output stands for its broadcast (a + b's is
        # da + db, of b's shape where a is constant); one that would grow it is wrong
        if not _broadcasts_to(np.shape(dy), np.shape(y)):
            raise TracerError(f"an frule returned a tangent of shape {np.shape(dy)} for an output "
                              f"of shape {np.shape(y)}: the tangent has the output's shape.")
        dy = np.broadcast_to(dy, np.shape(y))
    return Traced(y, top, project_like(dy, y))

