"""Helpers shared by the rule files, as ChainRules.jl keeps ``utils.jl``.

A rule is registered one way: ``@rrule.register(f)`` / ``@frule.register(f)`` (public
as ``ad.rrule.register``), with one pullback slot per positional argument of the call.
``numpy_rrule`` and ``numpy_frule`` are a convenience on top of it for the built-in
rules of NumPy functions with optional trailing arguments (``axis``, ``order``,
``mode``, ...): the rule takes NumPy's own parameters with NumPy's names and defaults,
so they arrive positionally or by keyword alike, and its pullback lists cotangents in
NumPy's order up to the last differentiable parameter. ``numpy_rrule`` registers it for
each function given, fitting each pullback to the call: one slot per positional argument
received (trailing options get ``NoTangent()``; arguments passed by keyword get no
slot). An frule reads the tangent of positional parameter ``i`` with ``tangent_at``.

>>> import numpy as np, adrules as ad
>>> y, back = ad.rrule(np.take, np.array([1.0, 2.0, 3.0]), np.array([2, 2]), 0, None, "clip")
>>> len(back(np.ones(2)))  # the self slot, then a, indices, axis, out, mode
6
"""

import functools

import numpy as np

from ..keywords import fit_slots
from ..registry import frule, rrule
from ..tangents import NoTangent, ZeroTangent, is_zero, unthunk


def _fit_slots(rule):
    """Wrap ``rule`` so its pullback returns one slot per positional argument of the call:
    trailing non-differentiable arguments passed positionally (axis, shape...) get
    ``NoTangent()``, differentiable ones passed by keyword get no slot. It also unthunks
    the cotangent, for callers other than the tracer (which unthunks already)."""

    @functools.wraps(rule)
    def fitted_rule(*args, **kwargs):
        y, pullback = rule(*args, **kwargs)
        n = len(args) + 1

        def fitted_pullback(g):  # (no functools.wraps: it would cost more than the pullback)
            g = unthunk(g)
            slots = pullback([unthunk(gi) for gi in g] if type(g) in (list, tuple) else g)
            return fit_slots(slots, n)

        return y, fitted_pullback

    return fitted_rule


def numpy_rrule(*fs, complex=False):
    """Register one rrule for the NumPy functions ``fs``, its pullback fitted to each call by
    ``_fit_slots``; ``complex=True``: it is right for complex values (``rrule.register``)."""

    def decorate(rule):
        for f in fs:
            rrule.register(f, complex=complex)(_fit_slots(rule))
        return rule

    return decorate


def numpy_frule(*fs, complex=False):
    """Register one frule for the NumPy functions ``fs`` (``frule.register`` for each)."""

    def decorate(rule):
        for f in fs:
            frule.register(f, complex=complex)(rule)
        return rule

    return decorate


def no_derivative(function, parameter, why=""):
    """A partial for ``scalar_rule`` that refuses a derivative ``function`` (named in
    full, ``scipy.special.gammainc``) has none of with respect to ``parameter``, saying
    ``why`` where given.

    >>> no_derivative("scipy.special.gammainc", "a")(1.0, 2.0, 0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    NotImplementedError: scipy.special.gammainc: no derivative with respect to a; pass it as a constant ...
    """
    because = f" ({why})" if why else ""

    def no_derivative(*args):
        raise NotImplementedError(
            f"{function}: no derivative with respect to {parameter}{because}; pass it as a "
            f"constant (a plain number or array, not a traced value).")

    return no_derivative


def tangent_at(tangents, i):
    """The tangent of positional parameter ``i`` (0-based), ``ZeroTangent()`` if not passed positionally."""
    return tangents[i + 1] if i + 1 < len(tangents) else ZeroTangent()


def normalize_axes(axis, ndim):
    """``axis`` (None, an int or a sequence, negatives allowed) as a sorted tuple of axes."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if np.ndim(axis) == 0 else tuple(axis)
    return tuple(sorted(int(a) % ndim for a in axes))
