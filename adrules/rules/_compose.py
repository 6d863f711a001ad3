"""Rules made from an implementation in differentiable NumPy calls.

Many NumPy functions (``diff``, ``cross``, ``median``, ``multi_dot``...) are short
compositions of functions that already have rules. ``composite_rule(f, impl)`` gives
``f`` an rrule and an frule that trace ``impl`` (``rrule_via_ad`` / ``frule_via_ad``):
its pullback runs the recorded NumPy calls' pullbacks, which are NumPy calls again, so
higher derivatives work like everywhere else. The cost is one small tape per call.

``extend_rule(f, rewrite)`` keeps the rule ``f`` already has and adds call forms it
rejects: ``rewrite(*args, **kwargs)`` returns an implementation for the new form (traced
as above) or None to hand the call to the rule registered before.

``composed(f, implementation)`` has the tracer call ``implementation`` in place of ``f``
on the traced arguments, recording its NumPy calls on the caller's own tape: for
functions that call the user's functions (``np.piecewise``), whose closures may hold
traced values that a rule, run on unboxed arguments inside a tape of its own, would not
see. ``np.block`` is done this way too (``tracer.COMPOSED``).

Besides that table, only the public registration API is used here (``api``,
``registry``, ``tangents``).
"""

import numpy as np

from ..api import frule_via_ad, rrule_via_ad
from ..registry import frule, primitive, rrule
from ..tangents import NoTangent
from ..tracer import COMPOSED


def _short_name(f):
    owner = getattr(f, "__self__", None)
    if isinstance(owner, np.ufunc):
        return f"{owner.__name__}_{f.__name__}"
    return getattr(f, "__name__", "composite")


_CONSTANT_TYPES = (str, bytes, type(None), type(Ellipsis), bool, int, np.integer, np.bool_, np.dtype,
                   type, slice)


def _is_constant(arg):
    """Options (modes, axes, dtypes, tuples of them), integer arrays and lists of plain
    numbers: held fixed, never traced."""
    if isinstance(arg, np.ndarray):
        return arg.dtype.kind not in "fc"
    if type(arg) in (list, tuple):  # plain numbers in a list: NumPy reads them as data, untraceable
        return all(_is_constant(a) or type(a) in (float, complex) for a in arg)
    return isinstance(arg, _CONSTANT_TYPES) or callable(arg) and not hasattr(arg, "shape")


def _holding_constants(implementation, args, kwargs):
    """The positions of ``args`` to trace, and ``implementation`` as a function of those
    alone (the constants and keyword options closed over)."""
    moving = [i for i, a in enumerate(args) if not _is_constant(a)]

    def of_moving(*values):
        full = list(args)
        for i, v in zip(moving, values):
            full[i] = v
        return implementation(*full, **kwargs)

    return moving, of_moving


def _traced_rrule(name, implementation, args, kwargs):
    moving, of_moving = _holding_constants(implementation, args, kwargs)
    y, back = rrule_via_ad(of_moving, *(args[i] for i in moving))

    def composite_pullback(g):
        slots = [NoTangent()] * (len(args) + 1)
        for i, gi in zip(moving, back(g)[1:]):
            slots[i + 1] = gi
        return tuple(slots)

    composite_pullback.__name__ = composite_pullback.__qualname__ = f"{name}named_pullback"
    return y, composite_pullback


def _traced_frule(implementation, tangents, args, kwargs):
    moving, of_moving = _holding_constants(implementation, args, kwargs)
    return frule_via_ad((NoTangent(), *(tangents[i + 1] for i in moving)), of_moving,
                        *(args[i] for i in moving))


def composite_rule(f, implementation):
    """Register an rrule and an frule for ``f`` that differentiate ``implementation``
    (same signature as ``f``, written in NumPy calls that have rules).

    >>> import numpy as np, adrules as ad
    >>> @ad.primitive
    ... def sumsq(x):
    ...     return float(np.sum(x ** 2))
    >>> composite_rule(sumsq, lambda x: np.sum(x ** 2))
    >>> ad.gradient(sumsq, np.array([1.0, 2.0]))[0]
    array([2., 4.])
    """
    name = _short_name(f)

    def composite_rrule(*args, **kwargs):
        return _traced_rrule(name, implementation, args, kwargs)

    def composite_frule(tangents, *args, **kwargs):
        return _traced_frule(implementation, tangents, args, kwargs)

    composite_rrule.__name__ = composite_rrule.__qualname__ = f"{name}_rrule"
    composite_frule.__name__ = composite_frule.__qualname__ = f"{name}_frule"
    # right for complex values whenever the rules it is traced through are (they check)
    rrule.register(f, complex=True)(composite_rrule)
    frule.register(f, complex=True)(composite_frule)


def extend_rule(f, rewrite):
    """Add call forms to the rules ``f`` already has.

    ``rewrite(previous, *args, **kwargs)`` returns an implementation of the call (a
    function of the call's positional arguments, traced like ``composite_rule``) or None
    to use the previous rules. ``previous`` is a primitive that calls ``f`` with the
    previous rules, for implementations that end in a call of the supported form.

    >>> import numpy as np, adrules as ad
    >>> ad.gradient(lambda a: np.einsum("ii->", a), np.eye(2))[0]
    array([[1., 0.],
           [0., 1.]])
    """
    previous_r, previous_f = rrule.lookup(f), frule.lookup(f)
    name = _short_name(f)

    @primitive
    def previous(*args, **kwargs):
        return f(*args, **kwargs)

    previous.__name__ = previous.__qualname__ = f"{name}_previous_rules"
    rrule.register(previous, complex=previous_r.complex)(previous_r.fn)
    frule.register(previous, complex=previous_f.complex)(previous_f.fn)

    def extended_rrule(*args, **kwargs):
        implementation = rewrite(previous, *args, **kwargs)
        if implementation is None:
            return previous_r.fn(*args, **kwargs)
        return _traced_rrule(name, implementation, args, {})

    def extended_frule(tangents, *args, **kwargs):
        implementation = rewrite(previous, *args, **kwargs)
        if implementation is None:
            return previous_f.fn(tangents, *args, **kwargs)
        return _traced_frule(implementation, tangents, args, {})

    # the implementations are traced through checked rules; the previous rules keep their word
    rrule.register(f, complex=previous_r.complex)(extended_rrule)
    frule.register(f, complex=previous_f.complex)(extended_frule)


def composed(f, implementation):
    """Have the tracer call ``implementation`` (same signature as ``f``, written in NumPy
    calls that have rules) when a traced value reaches ``f``.

    >>> import numpy as np, adrules as ad
    >>> ad.gradient(lambda x: np.sum(np.apply_along_axis(np.prod, 0, x)), np.ones((2, 2)))[0]
    array([[1., 1.],
           [1., 1.]])
    """
    COMPOSED[f] = implementation
