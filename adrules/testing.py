"""Checks of rules and gradients against finite differences, for users' test suites.

* ``check_rrule(f, *args)`` - the registered rrule: primal, slot count, cotangent
  shapes and dtypes, thunk handling, unmutated inputs, and every float argument's
  cotangent against finite differences for a random output cotangent.
* ``check_frule(f, *args)`` - the registered frule against finite differences along a
  random tangent.
* ``check_grads(f, *args, modes=("fwd", "rev"), order=2)`` - the whole tracer on
  ``f``: reverse and forward mode, and derivatives of derivatives up to ``order``.

Non-float positional arguments (ints, tuples, strings, index arrays) are held fixed.
Finite differences use a five-point central stencil evaluated in float64 (complex128).
Failures raise ``AssertionError`` naming the function, the argument and the size of
the error.

Complex arguments are moved along their real and imaginary parts, with ChainRules'
convention: the cotangent of a complex ``z = x + iy`` for a real loss ``L`` is
``∂L/∂x + i ∂L/∂y``, and a pullback is checked through the real inner product
``Re(sum(conj(ȳ) * ẏ)) == Re(sum(conj(x̄) * ż))`` for random complex ``ȳ`` and ``ż``.
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Collection

import numpy as np

from .api import DEFAULT_CONFIG, DerivativeName, frule, jvp, named_jvp, named_pullback, pullback, rrule
from .projection import ProjectionError, project_like
from .pytrees import flatten, tangent_leaves, unflatten
from .registry import SCALAR, ComplexRuleError, call_frule, call_rrule, function_name, is_primitive
from .tracer import SECOND_ORDER, TracerError, in_place_writes_explained, rrule_misfit
from .tangents import InplaceableThunk, NoTangent, ZeroTangent, is_float_value, is_zero, unthunk

_STEP = 1e-3  # finite differences' step; then, if they disagree, one fitted to x (_steps)
_MAX_ELEMENTWISE = 64  # beyond this many elements, check along random directions instead


def _is_float_leaf(x):
    return is_float_value(x)  # a complex one is moved along its real and imaginary parts


def _is_low_precision(args):
    leaves = flatten(list(args))[0]
    return any(getattr(x, "dtype", np.float64) in (np.float32, np.float16, np.complex64) for x in leaves
               if _is_float_leaf(x))


def _as64(x):
    """``x`` as a float64 array, or complex128 when it is complex (its imaginary part kept)."""
    return np.asarray(x, dtype=np.complex128 if np.iscomplexobj(x) else np.float64)


def _tolerances(args, rtol, atol):
    low = _is_low_precision(args)
    return (rtol if rtol is not None else (2e-3 if low else 1e-6),
            atol if atol is not None else (2e-3 if low else 1e-7))


def _random_like(x, rng):
    """A 'nice' random tangent shaped like float leaf ``x`` (same dtype; a complex one
    moves along both its real and imaginary parts)."""
    if isinstance(x, complex):
        return complex(rng.uniform(-1, 1), rng.uniform(-1, 1))
    if isinstance(x, (float, np.floating, np.complexfloating)):
        t = rng.uniform(-1, 1) + (1j * rng.uniform(-1, 1) if np.iscomplexobj(x) else 0)
        return type(x)(t) if not isinstance(x, float) else float(t)
    t = rng.uniform(-1, 1, size=x.shape)
    if x.dtype.kind == "c":
        t = t + 1j * rng.uniform(-1, 1, size=x.shape)
    return t.astype(x.dtype)


def _random_tangent(tree, rng):
    leaves, tdef = flatten(tree)
    return unflatten(tdef, [_random_like(x, rng) if _is_float_leaf(x) else NoTangent() for x in leaves])


def _steps(*trees):
    """The finite-difference steps to try, in order: ``_STEP``, then one fitted to the
    magnitude of the arguments ``trees`` moved (1e-3 of the smallest, counted from 1e-3 up
    below 1, by its square root above), where that is shorter or longer. The fixed step
    alone failed correct rules near zero (log at 0.01 off by 1e-4, sqrt at 1e-3 stepping
    below 0) and at 1e8 (x ** 2 lost to rounding); the fitted one alone failed others (a
    big constant added near zero, sin of 1e4). A rule passes when either agrees; each is
    an estimate of the same derivative, so a wrong rule agrees with neither."""
    scales = []
    for tree in trees:
        for x in flatten(tree)[0]:
            if _is_float_leaf(x) and np.size(x):
                a = np.abs(_as64(x))
                a = a[np.isfinite(a)]
                if a.size:
                    scales.append(np.min(np.where(a < 1.0, np.maximum(a, 1e-3), np.sqrt(a))))
    fitted = _STEP * float(min(scales)) if scales else _STEP
    return (_STEP,) if fitted == _STEP else (_STEP, fitted)


def _agreeing(compare, estimate, steps):
    """``compare(estimate(step))`` for each of ``steps`` until one passes; else the first
    failure is raised."""
    first = None
    for step in steps:
        try:
            return compare(estimate(step))
        except AssertionError as e:
            first = first or e
    raise first


def _inner(a, b):
    """The real inner product ``Re(sum(conj(a) * b))`` summed over float leaves, in float64
    (for real leaves the sum of the elementwise product)."""
    la, lb = flatten(a)[0], flatten(b)[0]
    total = 0.0
    for x, y in zip(la, lb):
        x, y = unthunk(x), unthunk(y)
        if is_zero(x) or is_zero(y) or not _is_number_like(x) or not _is_number_like(y):
            continue
        x, y = _as64(x), _as64(y)
        if x.dtype.kind == "c" or y.dtype.kind == "c":
            total += float(np.sum(np.real(x) * np.real(y) + np.imag(x) * np.imag(y)))
        else:
            total += float(np.sum(x * y))
    return total


def _is_number_like(x):
    return isinstance(x, (float, int, complex, np.number, np.ndarray)) and not isinstance(x, bool)


def _as_float64(tree):
    leaves, tdef = flatten(tree)
    return unflatten(tdef, [_as64(x) if isinstance(x, np.ndarray) and x.dtype.kind in "fc" else
                            (_as64(x)[()] if isinstance(x, (np.floating, np.complexfloating)) else x)
                            for x in leaves])


def _shifted(args, i, direction, h):
    """``args`` with argument i moved by h * direction (leaf by leaf, float64)."""
    out = list(args)
    leaves, tdef = flatten(_as_float64(args[i]))
    dirs = flatten(direction)[0]
    out[i] = unflatten(tdef, [x + h * _as64(d) if _is_float_leaf(x) and not
                              is_zero(d) else x for x, d in zip(leaves, dirs)])
    return out


def _fd_directional(fn, args, i, direction, step):
    """Five-point central difference of ``fn(*args)`` along ``direction`` in argument i."""
    with np.errstate(invalid="ignore", divide="ignore"):  # a step out of f's domain: nan, then the next step
        return _stencil([fn(*_shifted(args, i, direction, k * step)) for k in (-2, -1, 1, 2)], step)


def _stencil(vals, step):
    """The five-point central difference from outputs at steps -2h, -h, h, 2h (leaf by leaf)."""
    leaves = [flatten(_to_plain(v))[0] for v in vals]
    tdef = flatten(_to_plain(vals[0]))[1]
    out = []
    for m2, m1, p1, p2 in zip(*leaves):
        if not _is_number_like(m2) or (isinstance(m2, np.ndarray) and m2.dtype.kind not in "fc"):
            out.append(NoTangent())
            continue
        m2, m1, p1, p2 = (_as64(v) for v in (m2, m1, p1, p2))
        out.append((m2 - 8 * m1 + 8 * p1 - p2) / (12 * step))
    return unflatten(tdef, out)


def _fd_cotangent(fn, args, i, ybar, rng):
    """Finite-difference cotangent of argument i for output cotangent ``ybar``, as a
    function of the step.

    Elementwise for small arguments (so errors are located), else along random
    directions (a list of (direction, <ȳ, J·direction>) pairs instead). A complex
    element's cotangent is <ȳ, J·e> + i <ȳ, J·(i e)>: ∂/∂x + i ∂/∂y of the real loss
    <ȳ, f>, ChainRules' convention."""
    leaves, tdef = flatten(args[i])
    size = sum(np.size(x) for x in leaves if _is_float_leaf(x))
    if size > _MAX_ELEMENTWISE:
        directions = [_random_tangent(args[i], rng) for _ in range(3)]
        return lambda step: ("probes", [(d, _inner(ybar, _fd_directional(fn, args, i, d, step)))
                                        for d in directions])

    def dense(step):
        grads = []
        for j, leaf in enumerate(leaves):
            if not _is_float_leaf(leaf):
                grads.append(NoTangent())
                continue
            units = (1.0, 1j) if np.iscomplexobj(leaf) else (1.0,)
            g = np.zeros(np.shape(leaf), dtype=np.complex128 if len(units) == 2 else np.float64)
            for k in np.ndindex(np.shape(leaf)):
                for unit in units:
                    e = np.zeros(np.shape(leaf), dtype=g.dtype)
                    e[k] = unit
                    dirs = [e if jj == j else ZeroTangent() for jj in range(len(leaves))]
                    g[k] += unit * _inner(ybar, _fd_directional(fn, args, i, unflatten(tdef, dirs), step))
            grads.append(g if np.ndim(leaf) else g[()].item())
        return "dense", unflatten(tdef, grads)

    return dense


def _compare_cotangent(label, what, got, fd, rtol, atol):
    kind, ref = fd
    if kind == "probes":
        for d, expected in ref:
            actual = _inner(got, d)
            if not np.isclose(actual, expected, rtol=rtol, atol=atol * max(1.0, abs(expected))):
                raise AssertionError(
                    f"{label}: {what} disagrees with finite differences along a random direction: "
                    f"<x̄, d> = {actual:.6g}, finite differences give {expected:.6g} "
                    f"(rtol={rtol}, atol={atol}).")
        return
    for j, (g, r) in enumerate(zip(flatten(got)[0], flatten(ref)[0])):
        g = unthunk(g)
        if is_zero(r) and not _is_number_like(r):
            continue
        g = np.zeros_like(_as64(r)) if is_zero(g) else _as64(g)
        r = _as64(r)
        scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
        if g.shape != r.shape or not np.allclose(g, r, rtol=rtol, atol=atol * scale):
            err = np.max(np.abs(g - r)) if g.shape == r.shape else float("nan")
            raise AssertionError(
                f"{label}: {what}{f' (leaf {j})' if len(flatten(ref)[0]) > 1 else ''} differs from "
                f"finite differences by {err:.3g} (max abs; shapes {g.shape} vs {r.shape}, "
                f"rtol={rtol}, atol={atol}).\n  got:      {np.array2string(g, precision=6)}\n"
                f"  expected: {np.array2string(r, precision=6)}")


def _check_not_mutated(label, before, after):
    for j, (a, b) in enumerate(zip(flatten(before)[0], flatten(after)[0])):
        if isinstance(a, np.ndarray) and not np.array_equal(a, b, equal_nan=True):
            raise AssertionError(f"{label}: the rule mutated its input (leaf {j} of the arguments).")


def _checked_call(api, f, args, fkwargs):
    """``fkwargs`` as a dict, once ``f``, ``args`` and ``fkwargs`` are what ``api`` takes
    (NumPy's or Python's own error named neither the check nor the argument)."""
    if not callable(f):
        raise TypeError(f"{api}(f, *args): f must be the function whose rule to check, got a "
                        f"{type(f).__name__}: write {api}(f, x).")
    if not args:
        raise TypeError(f"{api}({function_name(f)}): give the arguments to check the rule at: "
                        f"{api}(f, x1, ..., xn).")
    if not hasattr(f, "__adrules_primitive__"):  # NumPy's functions: a list of numbers is an array
        for i, a in enumerate(args):
            if type(a) in (list, tuple) and a and all(_is_float_leaf(v) and np.ndim(v) == 0 for v in a):
                raise TypeError(f"{api}({function_name(f)}): argument {i} is a {type(a).__name__} of "
                                f"numbers: the tracer hands {function_name(f)} such a {type(a).__name__} "
                                f"as an array, but called directly its rule takes it as it is, with no "
                                f"cotangent; pass np.array({a!r}).")
    if fkwargs is not None and not isinstance(fkwargs, dict):
        raise TypeError(f"{api}({function_name(f)}): fkwargs must be a dict of keyword arguments "
                        f"for f, got a {type(fkwargs).__name__}: fkwargs={{'axis': 0}}.")
    return fkwargs or {}


def _call_fn(f, fkwargs):
    return lambda *a: f(*a, **fkwargs)


def check_rrule(f: Callable[..., Any], *args: Any, fkwargs: dict[str, Any] | None = None,
                rtol: float | None = None, atol: float | None = None, seed: int = 0) -> None:
    """Check the registered rrule of ``f`` at ``args`` against finite differences.

    >>> import numpy as np
    >>> check_rrule(np.sin, np.array([0.1, 0.2]))
    >>> check_rrule(np.sum, np.ones((2, 3)), 1)
    """
    fkwargs = _checked_call("check_rrule", f, args, fkwargs)
    label = f"check_rrule({function_name(f)})"
    rtol, atol = _tolerances(args, rtol, atol)
    rng = np.random.default_rng(seed)
    before = copy.deepcopy(args)
    entry = rrule.lookup(f)
    if entry is None:
        raise AssertionError(_no_rule(label, "rrule", f))
    try:
        result = call_rrule(entry, DEFAULT_CONFIG, f, args, fkwargs)
    except ComplexRuleError as e:
        raise ComplexRuleError(_real_only(label, "rrule", entry)) from e
    if type(result) is not tuple or len(result) != 2 or not callable(result[1]):
        raise AssertionError(f"{label}: {rrule_misfit(entry, result)}")
    y, back = result
    expected = f(*before, **fkwargs)
    _compare_primal(label, y, expected, rtol, atol)
    ybar = _random_tangent(y, rng)  # of y's own type, a NamedTuple's too, as the tracer gives it
    ybar_before = copy.deepcopy(ybar)
    grads = back(ybar)
    _check_not_mutated(label, before, args)
    if any(not np.array_equal(a, b) for a, b in zip(flatten(ybar)[0], flatten(ybar_before)[0])):
        raise AssertionError(f"{label}: the pullback wrote into its cotangent ȳ; compute a new "
                             f"array (2 * g, not g *= 2): the tracer hands the same ȳ to other "
                             f"pullbacks.")
    if not isinstance(grads, tuple) or len(grads) != len(args) + 1:
        raise AssertionError(f"{label}: the pullback returned {len(grads) if isinstance(grads, tuple) else type(grads).__name__}"
                             f" slots; expected a tuple of {len(args) + 1} (self slot first).")
    if not isinstance(unthunk(grads[0]), NoTangent):  # ZeroTangent() too (ChainRulesTestUtils)
        raise AssertionError(f"{label}: the self slot of a plain function must be NoTangent(), "
                             f"got {unthunk(grads[0])!r}.")
    again = back(ybar)  # pullbacks may be called twice and must give the same answer
    _check_not_mutated(label, before, args)
    fn = _call_fn(f, fkwargs)
    for i, (arg, g) in enumerate(zip(args, grads[1:])):
        g = unthunk(g)
        if not any(_is_float_leaf(x) for x in flatten(arg)[0]):
            # ZeroTangent() says "a zero derivative" of a differentiable argument; an int, a
            # string or an index has no tangent space (ChainRulesTestUtils refuses it too)
            if not isinstance(g, NoTangent):
                raise AssertionError(f"{label}: argument {i} is not differentiable but got "
                                     f"cotangent {g!r}; return NoTangent().")
            continue
        g = _project_tree(label, i, g, arg)
        compare = lambda g, what=f"the cotangent of argument {i}": (  # noqa: E731
            lambda fd: _compare_cotangent(label, what, g, fd, rtol, atol))
        try:
            _agreeing(compare(g), _fd_cotangent(fn, before, i, ybar, rng), _steps(before[i]))
        except AssertionError as wrong:
            if not _holds_complex((arg, _to_plain(y))):
                raise
            # f'(z) * ȳ where conj(f'(z)) * ȳ is due: the conjugate of the pullback of conj(ȳ) is then right
            conjugated = _project_tree(label, i, _conj_tree(unthunk(back(_conj_tree(ybar))[i + 1])), arg)
            try:
                _agreeing(compare(conjugated), _fd_cotangent(fn, before, i, ybar, rng), _steps(before[i]))
            except AssertionError:
                raise wrong from None
            raise AssertionError(f"{wrong}\n  {_MISSING_CONJ}") from None
        g2 = _project_tree(label, i, unthunk(again[i + 1]), arg)
        _compare_cotangent(label, f"the cotangent of argument {i} on a second call", g2,
                           ("dense", g), rtol, atol)
        _check_inplaceable(label, i, grads[i + 1], g, rtol, atol)


_MISSING_CONJ = (
    "A missing conjugate? The conjugate of the pullback of conj(ȳ) agrees with finite differences: "
    "the pullback multiplies by the derivative where ChainRules' convention multiplies by its "
    "conjugate. For holomorphic f write x̄ = conj(f'(z)) * ȳ (np.conj(df) * g); for a real-valued "
    "f of z = x + iy, x̄ = (∂f/∂x + i ∂f/∂y) * ȳ; in ad.scalar_rule(..., complex=True) give the "
    "partial f'(z), or ∂f/∂x - i ∂f/∂y for a real-valued f (it is conjugated for you).")


_CONJ_IN_FRULE = (
    "A conjugate too many or too few? The conjugate of the frule's tangent along conj(ż) agrees "
    "with finite differences. An frule multiplies by the derivative itself, with no conjugate: "
    "ẏ = f'(z) * ż for holomorphic f; for a real-valued f of z = x + iy, ẏ = Re((∂f/∂x - i ∂f/∂y) "
    "* ż), the partial ad.scalar_rule(..., complex=True) takes.")


def _holds_complex(tree):
    return any(np.iscomplexobj(x) for x in flatten(tree)[0] if _is_number_like(unthunk(x)))


def _conj_tree(tree):
    leaves, tdef = flatten(tree)
    return unflatten(tdef, [np.conj(x) if _is_number_like(x) and np.iscomplexobj(x) else x for x in leaves])


def _real_only(label, kind, entry):
    """check_rrule's and check_frule's word on a complex value refused by a rule
    registered without ``complex=True``."""
    name = entry.name
    how = (f"ad.scalar_rule({name}, ..., complex=True)" if entry.kind is SCALAR
           else f"@ad.{kind}.register({name}, complex=True)")
    body = "pullback" if kind == "rrule" else "frule"
    convention = ("its pullback multiplies ȳ by the conjugate derivative, x̄ = conj(f'(z)) * ȳ"
                  if kind == "rrule" else "its tangent is ẏ = f'(z) * ż")
    return (f"{label}: a complex value reached the {kind} of {name}, which was registered without "
            f"complex=True, so it is refused before it runs (a formula written for real numbers "
            f"would give a silently wrong derivative). To check it at complex arguments, make its "
            f"{body} right for complex values (ChainRules' convention: {convention}) and register it "
            f"with {how}; {label.split('(')[0]} then compares it with finite differences along the "
            f"real and imaginary parts.")


def _no_rule(label, kind, f):
    name = function_name(f)
    if not is_primitive(f):  # registering for it would be refused: say what would work
        return (f"{label}: {name} has no {kind}, and it is not a primitive, so the tracer steps "
                f"into its body: check that with check_grads({getattr(f, '__name__', 'f')}, *args), "
                f"or decorate it with @adrules.primitive and register a rule with "
                f"@adrules.{kind}.register.")
    return f"{label}: no {kind} registered; register one with @adrules.{kind}.register({name})."


def _check_inplaceable(label, i, raw, dense, rtol, atol):
    """An InplaceableThunk's add_into must agree with its value."""
    if not isinstance(raw, InplaceableThunk) or is_zero(dense):
        return
    for leaf in flatten(dense)[0]:
        base = np.ones_like(np.asarray(leaf))
        added = raw.add_into(base.copy())
        expected = base + np.asarray(unthunk(raw))
        if not np.allclose(added, expected, rtol=rtol, atol=atol):
            raise AssertionError(f"{label}: the InplaceableThunk for argument {i} adds a different "
                                 f"value than it unthunks to.")


def _to_plain(y):
    return tuple(y) if isinstance(y, tuple) else y


def _project_tree(label, i, g, arg):
    if is_zero(g):
        return g
    al, tdef = flatten(arg)
    gl = tangent_leaves(g, tdef)  # a Tangent(T, **fields) read by field, as the tracer reads it
    if gl is None:
        n = len(flatten(g)[0])
        raise AssertionError(f"{label}: the cotangent of argument {i} ({type(g).__name__}, {n} "
                             f"leaves) does not match the argument's structure {tdef} ({len(al)} "
                             f"leaves): return a Tangent(T, **fields), a value of the argument's "
                             f"type, or ZeroTangent().")
    out = []
    for x, d in zip(al, gl):
        d = unthunk(d)
        if not _is_float_leaf(x):
            out.append(NoTangent())
            continue
        try:
            p = project_like(d, x)
        except ProjectionError as e:
            raise AssertionError(f"{label}: the cotangent of argument {i} has the wrong shape: {e}") from None
        if not is_zero(p) and getattr(p, "dtype", None) not in (None, np.asarray(x).dtype):
            raise AssertionError(f"{label}: cotangent dtype {p.dtype} for argument {i} of dtype "
                                 f"{np.asarray(x).dtype}.")
        out.append(p)
    return unflatten(tdef, out)


def _compare_primal(label, got, expected, rtol, atol):
    for j, (a, b) in enumerate(zip(flatten(_to_plain(got))[0], flatten(_to_plain(expected))[0])):
        if _is_number_like(b) and not np.allclose(a, b, rtol=rtol, atol=atol, equal_nan=True):
            raise AssertionError(f"{label}: the rule's primal output (leaf {j}) differs from "
                                 f"calling the function: {a} vs {b}.")


def check_frule(f: Callable[..., Any], *args: Any, fkwargs: dict[str, Any] | None = None,
                rtol: float | None = None, atol: float | None = None, seed: int = 0) -> None:
    """Check the registered frule of ``f`` at ``args`` against finite differences.

    >>> import numpy as np
    >>> check_frule(np.exp, np.array([0.1, 0.2]))
    """
    fkwargs = _checked_call("check_frule", f, args, fkwargs)
    label = f"check_frule({function_name(f)})"
    rtol_given, atol_given = rtol, atol
    rng = np.random.default_rng(seed)
    before = copy.deepcopy(args)
    tangents = [_random_tangent(a, rng) if any(_is_float_leaf(x) for x in flatten(a)[0])
                else NoTangent() for a in args]
    entry = frule.lookup(f)
    if entry is None:
        raise AssertionError(_no_rule(label, "frule", f))
    try:
        result = call_frule(entry, DEFAULT_CONFIG, (NoTangent(), *tangents), f, args, fkwargs)
    except ComplexRuleError as e:
        raise ComplexRuleError(_real_only(label, "frule", entry)) from e
    if type(result) is not tuple or len(result) != 2:
        got = f"{len(result)} values" if type(result) is tuple else f"a {type(result).__name__}"
        raise AssertionError(f"{label}: the frule returned {got}; it must return the pair (y, ẏ): "
                             f"the output and its tangent.")
    y, dy = result
    if type(y) in (tuple, list) and y and is_zero(y[0]):  # def rule(x, tangents): it got them as x
        raise AssertionError(f"{label}: the frule returned an output holding {type(y[0]).__name__}s: "
                             f"an frule takes the tuple of tangents first, def rule(tangents, *args).")
    rtol, atol = _tolerances((args, _to_plain(y)), rtol_given, atol_given)  # a float32 output too
    _check_not_mutated(label, before, args)
    expected = f(*before, **fkwargs)
    try:
        _compare_primal(label, y, expected, rtol, atol)
    except AssertionError:
        if _same_values(dy, expected, rtol, atol):
            raise AssertionError(f"{label}: the frule returned (ẏ, y), the pair the other way "
                                 f"round: return (y, ẏ), the output first.") from None
        raise
    fn = _call_fn(f, fkwargs)
    try:
        _agreeing(lambda fd: _compare_tangent(label, "the output tangent", dy, fd, y, rtol, atol),
                  _fd_jvp(fn, before, tangents), _steps(*_moved(before, tangents)))
    except AssertionError as wrong:
        # along every argument at once, as ChainRules' test_frule: now find whose part is wrong
        moving = [i for i, t in enumerate(tangents) if not isinstance(t, NoTangent)]
        culprit = _wrong_argument(label, lambda t: _output_tangent(f, args, t, fkwargs),
                                  fn, before, tangents, moving, y, rtol, atol)
        if _holds_complex((args, _to_plain(y))):
            # ẏ = conj(f'(z)) * ż where f'(z) * ż is due: the conjugate of the tangent along conj(ż) is then right
            conjugated = _conj_tree(_output_tangent(f, args, [_conj_tree(t) for t in tangents], fkwargs))
            try:
                _agreeing(lambda fd: _compare_tangent(label, "", conjugated, fd, y, rtol, atol),
                          _fd_jvp(fn, before, tangents), _steps(*_moved(before, tangents)))
            except AssertionError:
                pass
            else:
                raise AssertionError(f"{culprit or wrong}\n  {_CONJ_IN_FRULE}") from wrong
        if culprit is None:
            raise
        raise culprit from wrong


def _same_values(a, b, rtol, atol):
    try:
        _compare_primal("", a, b, rtol, atol)
        return not is_zero(a)
    except (AssertionError, TypeError, ValueError):
        return False


def _output_tangent(f, args, tangents, fkwargs):
    result = frule((NoTangent(), *tangents), f, *args, **fkwargs)
    assert result is not None  # the same rule answered for all tangents at once
    return result[1]


def _wrong_argument(label, tangent_along, fn, args, tangents, moving, y, rtol, atol):
    """The error for the first of the ``moving`` arguments whose tangent alone (the others'
    zero) gives a wrong output tangent (``tangent_along(tangents)``), or None when each
    alone is right or only one moves."""
    if len(moving) < 2:
        return None
    for i in moving:
        alone = [t if k == i or k not in moving else ZeroTangent() for k, t in enumerate(tangents)]
        dy = tangent_along(alone)
        what = f"the output tangent along argument {i} (the others held fixed)"
        try:
            _agreeing(lambda fd: _compare_tangent(label, what, dy, fd, y, rtol, atol),
                      _fd_jvp(fn, args, alone), _steps(*_moved(args, alone)))
        except AssertionError as e:
            return e
    return None


def _fd_jvp(fn, args, tangents):
    """Finite-difference directional derivative along all argument tangents at once, as
    a function of the step."""
    packed = lambda t: fn(*args_at(t))  # noqa: E731
    args64 = [_as_float64(a) for a in args]

    def args_at(t):
        return [_shifted(args64, i, tangents[i], t)[i] if not is_zero(tangents[i]) else args64[i]
                for i in range(len(args))]

    def at(step):
        with np.errstate(invalid="ignore", divide="ignore"):  # (as in _fd_directional)
            return _stencil([packed(k * step) for k in (-2, -1, 1, 2)], step)

    return at


def _moved(args, tangents):
    """The arguments whose tangent is not zero: those finite differences move."""
    return [a for a, t in zip(args, tangents) if not is_zero(t) and not isinstance(t, NoTangent)]


def _compare_tangent(label, what, got, ref, y, rtol, atol):
    got_leaves = flatten(_to_plain(got))[0] if not is_zero(got) else [ZeroTangent()] * len(flatten(_to_plain(ref))[0])
    for j, (g, r, yl) in enumerate(zip(got_leaves, flatten(_to_plain(ref))[0], flatten(_to_plain(y))[0])):
        g = unthunk(g)
        if is_zero(r) and not _is_number_like(r):
            continue
        r = _as64(r)
        if not is_zero(g) and np.asarray(g).dtype.kind not in "biufc":  # NumPy: "could not convert"
            raise AssertionError(f"{label}: {what}{f' (output leaf {j})' if j else ''} is a "
                                 f"{type(g).__name__}, not a number or an array of numbers.")
        if not is_zero(g) and np.ndim(g) != 0 and np.shape(g) != r.shape:
            raise AssertionError(f"{label}: {what}{f' (output leaf {j})' if j else ''} has shape "
                                 f"{np.shape(g)}, but the output has shape {r.shape}.")
        g = np.zeros_like(r) if is_zero(g) else np.broadcast_to(_as64(g), r.shape)
        if g.dtype.kind == "c" and r.dtype.kind != "c":  # a real output's tangent: its real part, as the tracer takes it
            g = np.real(g)
        scale = max(1.0, float(np.max(np.abs(r)))) if r.size else 1.0
        if not np.allclose(g, r, rtol=rtol, atol=atol * scale):
            raise AssertionError(
                f"{label}: {what}{f' (output leaf {j})' if j else ''} differs from finite "
                f"differences by {np.max(np.abs(g - r)):.3g} (rtol={rtol}, atol={atol}).\n"
                f"  got:      {np.array2string(g, precision=6)}\n  expected: {np.array2string(r, precision=6)}")


def _differentiating_rules(label, order, mode):
    """Re-raise an in-place write met while checking a derivative of a derivative with
    what it means there: order 2 traces each rule's pullback (forward mode: frule body) as
    ordinary code, and that code wrote into an array, which f's own first-order check
    could not have shown."""
    body = "pullback" if mode == "reverse" else "frule (its pushforward)"
    return in_place_writes_explained(lambda text: (
        f"{label}, order={order}: order {order} {SECOND_ORDER} (in {mode} mode, a rule's "
        f"{body} is traced as ordinary code), and one of them writes in place: {text} "
        f"Write the {body} with out-of-place NumPy calls (return 2 * x * g rather than "
        f"filling out = np.zeros(...); out[...] = ... or out += ...), or check with "
        f"order=1 if you only need first derivatives."))


def check_grads(f: Callable[..., Any], *args: Any, modes: Collection[str] = ("fwd", "rev"),
                order: int = 2, rtol: float | None = None, atol: float | None = None,
                seed: int = 0) -> None:
    """Check the tracer's derivatives of ``f`` at ``args`` against finite differences,
    in reverse (``"rev"``) and forward (``"fwd"``) mode, up to ``order``.

    >>> import numpy as np
    >>> check_grads(lambda x: np.sum(np.tanh(x) ** 2), np.array([0.3, -0.4]), order=2)
    """
    if not callable(f):
        raise TypeError(f"check_grads(f, *args): f must be the function to check, got a "
                        f"{type(f).__name__}: write check_grads(f, x).")
    label = DerivativeName("check_grads", f)
    # a misspelt mode, or nothing to differentiate, would pass without checking anything
    if isinstance(modes, str) or not modes or not set(modes) <= {"fwd", "rev"}:
        raise ValueError(f"{label}: modes must be a collection of 'fwd' and 'rev', got {modes!r}.")
    if type(order) is not int or order < 1:
        raise ValueError(f"{label}: order must be 1 or more, got {order!r}.")
    if not any(_is_float_leaf(x) for a in args for x in flatten(a)[0]):
        raise ValueError(f"{label}: no argument holds floats, so there is nothing to check; pass "
                         f"float arrays (x.astype(float)).")
    rtol, atol = _tolerances(args, rtol, atol)
    if order > 1:  # finite differences of finite differences lose digits
        rtol, atol = rtol * 10, atol * 10
    _check_grads(f, args, modes, order, rtol, atol, seed, label, 1)


def _check_grads(f, args, modes, order, rtol, atol, seed, name, level):
    """``check_grads`` at derivative order ``level`` (``f`` is then a derivative of the user's
    function, which ``name`` names, with ``level``, in every message)."""
    fixed = [i for i, a in enumerate(args) if not any(_is_float_leaf(x) for x in flatten(a)[0])]
    if fixed:  # hold non-float arguments (ints, strings, index arrays) fixed
        moving = [i for i in range(len(args)) if i not in fixed]

        def of_floats(*floats, _f=f, _args=args):
            full = list(_args)
            for i, v in zip(moving, floats):
                full[i] = v
            return _f(*full)

        return _check_grads(of_floats, tuple(args[i] for i in moving), modes, order, rtol, atol, seed,
                            name, level)
    rng = np.random.default_rng(seed)
    if "rev" in modes:
        label = _order_label(name, level, "reverse")
        y, back = named_pullback(name, f, args)
        ybar = _random_tangent(_to_plain(y), rng)
        grads = back(ybar)
        plain = _to_plain(y)
        scalar = type(plain) is float or (isinstance(plain, (np.ndarray, np.generic)) and plain.ndim == 0
                                          and not np.iscomplexobj(plain))
        for i, g in enumerate(grads):
            if any(_is_float_leaf(x) for x in flatten(args[i])[0]):
                what = (f"the gradient of argument {i} (times ȳ = {float(ybar):.6g})" if scalar else
                        f"the cotangent of argument {i} for a random ȳ")
                _agreeing(lambda fd: _compare_cotangent(label, what, g, fd, rtol, atol),
                          _fd_cotangent(f, args, i, ybar, rng), _steps(args[i]))
        if order > 1:
            with _differentiating_rules(name, level + 1, "reverse"):
                _check_grads(lambda *a: pullback(f, *a)[1](ybar), args, modes, order - 1, rtol, atol,
                             seed + 1, name, level + 1)
    if "fwd" in modes:
        label = _order_label(name, level, "forward")
        tangents = [_random_tangent(a, rng) if any(_is_float_leaf(x) for x in flatten(a)[0])
                    else ZeroTangent() for a in args]
        y, dy = named_jvp(name, f, args, tangents)
        try:
            _agreeing(lambda fd: _compare_tangent(label, "the output tangent", dy, fd, y, rtol, atol),
                      _fd_jvp(f, args, tangents), _steps(*_moved(args, tangents)))
        except AssertionError as wrong:
            moving = [i for i, a in enumerate(args) if any(_is_float_leaf(x) for x in flatten(a)[0])]
            culprit = _wrong_argument(label, lambda t: jvp(f, args, t)[1], f, args,
                                      tangents, moving, y, rtol, atol)
            if culprit is None:
                raise
            raise culprit from wrong
        if order > 1:
            with _differentiating_rules(name, level + 1, "forward"):
                _check_grads(lambda *a: jvp(f, a, tangents)[1], args, modes, order - 1, rtol, atol,
                             seed + 1, name, level + 1)


def _order_label(name, level, mode):
    """``check_grads(f) (reverse mode)``; from order 2 on, what is differentiated there."""
    if level == 1:
        return f"{name} ({mode} mode)"
    of = "pullback" if mode == "reverse" else "jvp"
    return f"{name} ({mode} mode, order {level}: derivatives of the order-{level - 1} {of})"


def check_rules(f: Callable[..., Any], *args: Any, fkwargs: dict[str, Any] | None = None,
                order: int = 2) -> None:
    """``check_rrule`` and ``check_frule`` of primitive ``f`` at ``args``, then
    ``check_grads`` up to ``order`` through the tracer (skipped for float32 and complex64 inputs, whose
    finite differences are too coarse for second order): one line per rule in a test sweep.

    >>> import numpy as np
    >>> check_rules(np.sin, np.array([0.1, 0.2]))
    """
    fkwargs = _checked_call("check_rules", f, args, fkwargs)
    check_rrule(f, *args, fkwargs=fkwargs)
    check_frule(f, *args, fkwargs=fkwargs)
    if all(getattr(a, "dtype", np.float64) not in (np.float32, np.complex64) for a in args):
        check_grads(lambda *a: f(*a, **fkwargs), *args, order=order)
