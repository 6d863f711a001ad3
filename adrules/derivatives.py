"""Jacobians, Hessians and Hessian-vector products.

Jacobian columns (forward mode) and rows (reverse mode), and Hessian columns
(forward-over-reverse; reverse-over-reverse where a primitive has an rrule but no frule,
the Hessian being symmetric), are independent pieces of work: they are computed in chunks
on an executor. Chunks depend only on the number of columns and ``chunk_size``, and
each column is computed by the same operations wherever it runs, so the result is
bitwise identical on every backend and worker count.

Inside another differentiation (``gradient(lambda x: np.sum(hessian(f, x)), x)``,
``jacobian`` of a ``jacobian``) the arguments, or values ``f`` captured, are traced:
they live on this thread's tape and cannot travel, so the pieces run here, in chunk
order, and are assembled with NumPy calls the outer differentiation records.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Literal, Sequence, Union, overload

import numpy as np
from numpy.typing import NDArray

import executors

from . import _state
from .api import (DROPPED_SUBCLASSES, DerivativeName, check_callable, gradient, jvp, leaf_is_differentiable,
                  named_value_and_gradient, pullback, refuse_underivable, subclass_refused)
from .pytrees import LEAF, PyTree, TreeDef, flatten, tangent_leaves, treedef_field_names, unflatten
from ._psum.parallel import chunk_ranges_for
from ._psum.policy import resolve_dispatch
from ._psum.schedule import PerItem, run, work_key
from .tangents import Tangent, is_float_value, is_zero
from .tracer import SECOND_ORDER, NoFruleError, NoRuleError, Traced, TracerError, in_place_writes_explained
from .transforms import PartialCall, checked_argnums, named_transform, prepare_call

#: What ``jacobian``, ``hessian`` and ``hvp`` differentiate at: a float array or a number.
FloatArg = Union[float, np.floating[Any], np.integer[Any], NDArray[np.floating[Any]]]


def _rules_differentiated(fname: str) -> contextlib.AbstractContextManager[None]:
    """Name an in-place write in a rule's pullback or frule, which a second derivative
    traces as ordinary code (NumPy's "setting an array element with a sequence" came last)."""
    return in_place_writes_explained(lambda text: (
        f"{fname}: a second derivative {SECOND_ORDER} (and frules), traced as ordinary "
        f"code, and one of them writes in place: {text} Write it with out-of-place NumPy "
        f"calls (return 2 * x * g rather than filling out = np.zeros(...); out[...] = ...); "
        f"adrules.testing.check_grads(f, x, order=2) finds which."))


def _int_array(fname: str, where: str, dtype: Any) -> TypeError:
    return TypeError(f"{fname}: {where} is an array of dtype {dtype}; Jacobians and Hessians are "
                     f"taken with respect to float arrays. Pass x.astype(float) to differentiate "
                     f"at those values, or capture it in a closure if it is data.")


def _as_array_arg(fname: str, where: str, x: Any) -> Any:
    if type(x) is Traced:  # nested in another differentiation
        return x
    if isinstance(x, (bool, np.bool_)):  # (a boolean array: _int_array's message)
        raise TypeError(f"{fname}: {where} is a boolean ({x!r}); Jacobians and Hessians are "
                        f"taken with respect to every argument, and a flag has no derivative. "
                        f"Capture it in a closure: {fname.split('(')[0]}(lambda x: f(x, flag), x).")
    if isinstance(x, (np.floating, np.complexfloating)):  # np.float32(2.0): its dtype kept, as a float32 array's is
        return np.asarray(x)
    if isinstance(x, complex):
        return np.asarray(x)
    if isinstance(x, (float, int, np.integer)):  # an integer point too, in float
        return np.asarray(x, dtype=float)
    if isinstance(x, DROPPED_SUBCLASSES) and x.dtype.kind in "fc":
        raise subclass_refused(fname, where, x)
    if isinstance(x, np.ndarray) and is_float_value(x):  # complex too
        return x
    if isinstance(x, np.ndarray):
        raise _int_array(fname, where, x.dtype)
    raise TypeError(f"{fname}: {where} is a {type(x).__name__}; Jacobians and Hessians are "
                    f"taken with respect to float arrays or numbers, or containers of them (a "
                    f"class of your own: register it with adrules.register_node).")


def _as_leaf(fname: str, where: str, x: Any) -> Any:
    """A container's leaf as an array. An integer is refused, not taken as a point as an
    argument is: in a container it is a count, an index or an option more often."""
    if isinstance(x, (bool, np.bool_, int, np.integer)):
        what = "a boolean" if isinstance(x, (bool, np.bool_)) else "an integer"
        raise TypeError(f"{fname}: {where} is {what} ({x!r}); Jacobians and Hessians are taken "
                        f"with respect to every leaf, each a float array or number. If it is "
                        f"data, take it out of the container and capture it in a closure; pass "
                        f"{float(x)!r} to differentiate at that value.")
    if type(x) is Traced or isinstance(x, (np.ndarray, float, complex, np.floating, np.complexfloating)):
        return _as_array_arg(fname, where, x)
    raise TypeError(f"{fname}: {where} is a {type(x).__name__}; Jacobians and Hessians are "
                    f"taken with respect to float arrays or numbers. If it is data, take it out "
                    f"of the container and capture it in a closure.")


def _paths(tree: TreeDef) -> list[str]:
    """Where each leaf of a container sits, as the user indexes it: ``['w']``, ``[0]``, ``.bias``."""
    if tree.kind is None:
        return [""]
    names = treedef_field_names(tree)
    if names is None:  # a list, a tuple, a registered node
        steps = [f"[{k}]" for k in range(len(tree.children))]
    else:
        steps = [f"[{k!r}]" if tree.kind is dict else f".{k}" for k in names]
    return [step + path for step, child in zip(steps, tree.children) for path in _paths(child)]


def _in_a_closure(api: str) -> Callable[[int], str]:
    """How to leave an argument out of ``api``, which differentiates every argument."""
    return lambda i: f"if it is data, capture it in a closure: {api}(lambda x: f(x, data), x)"


def _points(fname: str, args: tuple[Any, ...]) -> tuple[list[TreeDef], tuple[Any, ...]]:
    """Each argument's structure, and the leaves of all of them as arrays, in order."""
    api = fname.partition("(")[0]
    hint = _in_a_closure(api)
    if len(args) == 1 and isinstance(args[0], (int, np.integer)) and not isinstance(args[0], (bool, np.bool_)):
        hint = lambda i: (f"{_in_a_closure(api)(i)}; or, if {args[0]!r} is autograd's argnum, "  # noqa: E731
                          f"name it: {api}(f, argnum={args[0]!r})")
    refuse_underivable(fname, args, hint)
    trees, points = [], []
    for i, arg in enumerate(args):
        leaves, tree = flatten(arg)
        trees.append(tree)
        if tree.kind is None:
            points.append(_as_array_arg(fname, f"argument {i}", arg))
        else:
            points += [_as_leaf(fname, f"argument {i}{path}", v) for path, v in zip(_paths(tree), leaves)]
    return trees, tuple(points)


class _OnLeaves:
    """``f`` called with the leaves of its container arguments, which it rebuilds (picklable)."""

    def __init__(self, f: Callable[..., Any], trees: list[TreeDef]) -> None:
        self.f, self.trees = f, trees
        self.__name__ = getattr(f, "__name__", "f")

    def __call__(self, *leaves: Any) -> Any:
        it = iter(leaves)
        return self.f(*(unflatten(tree, it) for tree in self.trees))


def _per_argument(trees: list[TreeDef], blocks: list[Any]) -> list[Any]:
    """``blocks``, one per leaf of the arguments in order, rebuilt into each argument's structure."""
    it = iter(blocks)
    return [unflatten(tree, it) for tree in trees]


def _array(v: Any) -> Any:
    """``v`` as an array; a traced value (this derivative nested in another) stays traced."""
    return v if type(v) is Traced else np.asarray(v)


def _pieces(fn: Callable[..., Any], chunks: Sequence[range], fn_args: tuple[Any, ...], f: Callable[..., Any],
            executor: executors.Executor | str | None, label: str) -> list[Any]:
    """``[fn(chunk, *fn_args) for chunk in chunks]``, on the executor unless some
    differentiation is open: then traced values may be among the arguments or captured
    by ``f``, and they cannot leave this thread."""
    if _state.STATE.active:
        return [fn(chunk, *fn_args) for chunk in chunks]
    while isinstance(f, (_OnLeaves, _OneArray, _Raveled, PartialCall)):  # the user's function names the work
        f = f.f
    return run(executors.resolve(executor), PerItem(fn), chunks, fn_args, key=work_key(f),
               dispatch=resolve_dispatch(label), label=label, user_f=f)


def _basis(x: Any, k: int) -> NDArray[Any]:
    e = np.zeros(x.size, dtype=x.dtype)
    e[k] = 1
    return e.reshape(x.shape)


def _columns_forward(cols: range, f: Callable[..., Any], args: tuple[Any, ...], i: int,
                     cotangent: bool = False) -> list[Any]:
    """Forward-mode columns ``cols`` (flat input indices) of argument i's Jacobian; with
    ``cotangent`` (a real output, a complex argument i) each is ∂y/∂x + i ∂y/∂y, the
    tangents along the element's real and imaginary parts."""
    out = []
    for k in cols:
        tangents = [np.zeros(a.shape, dtype=a.dtype) for a in args]
        tangents[i] = _basis(args[i], k)
        y, dy = jvp(f, args, tangents)
        # an int or bool output has no tangent: its column is zero
        col = np.zeros(np.shape(y)) if is_zero(dy) else _array(dy)
        if cotangent:
            tangents[i] = 1j * tangents[i]
            dy = jvp(f, args, tangents)[1]
            col = col + 1j * (np.zeros(np.shape(y)) if is_zero(dy) else _array(dy))
        out.append(col)
    return out


def _rows_reverse(rows: range, f: Callable[..., Any], args: tuple[Any, ...],
                  rows_of: str = "real") -> list[tuple[Any, ...]]:
    """Reverse-mode rows ``rows`` (flat output indices): one tuple of arg cotangents each.
    ``rows_of`` says what the output and arguments are: ``"real"`` (a real output; a
    complex argument's row is its cotangent), ``"complex of real"`` (a row is the pullback
    of e_k plus i times that of i e_k: ∂y_k/∂x, complex) or ``"holomorphic"`` (the
    conjugate of the pullback: f'(z), as ChainRules' pullbacks multiply by conj(f'(z)))."""
    y, back = pullback(f, *args)
    y = _array(y)
    out = []
    for k in rows:
        seed = np.zeros(y.size, dtype=y.dtype)
        seed[k] = 1
        seed = seed.reshape(y.shape) if y.shape else seed[0]
        row = back(seed)
        if rows_of == "complex of real":
            row = tuple(r + 1j * ri for r, ri in zip(row, back(1j * seed)))
        elif rows_of == "holomorphic":
            row = tuple(np.conj(r) for r in row)
        out.append(row)
    return out


def _check_numbers(fname: str, out: Any, where: str = "") -> None:
    y = _array(out)
    if type(y) is not Traced and y.dtype.kind not in "biufc":
        what = f"an array of dtype {y.dtype}" if type(out) is np.ndarray else f"a {type(out).__name__}"
        raise TypeError(f"{fname}: f returned {what}{where}; a Jacobian is of numbers or arrays of "
                        f"numbers.")


def _of_sequences(tree: TreeDef) -> bool:
    return tree.kind is None or (tree.kind in (list, tuple) and all(map(_of_sequences, tree.children)))


@overload
def jacobian(f: Callable[..., Any], /, *, argnums: int | Sequence[int] | None = None,
             argnum: int | Sequence[int] | None = None, mode: Literal["fwd", "rev"] | None = None,
             executor: executors.Executor | str | None = None,
             chunk_size: int | None = None) -> Callable[..., Any]: ...


@overload
def jacobian(f: Callable[..., Any], x: FloatArg, /, *args: FloatArg, mode: Literal["fwd", "rev"] | None = None,
             executor: executors.Executor | str | None = None,
             chunk_size: int | None = None, holomorphic: bool = False) -> tuple[NDArray[np.floating], ...]: ...


@overload
def jacobian(f: Callable[..., Any], x: PyTree, /, *args: PyTree, mode: Literal["fwd", "rev"] | None = None,
             executor: executors.Executor | str | None = None,
             chunk_size: int | None = None, holomorphic: bool = False) -> tuple[Any, ...]: ...


def jacobian(
    f: Callable[..., Any],
    *args: Any,  # the overloads above say what users pass
    argnums: int | Sequence[int] | None = None,
    argnum: int | Sequence[int] | None = None,
    mode: Literal["fwd", "rev"] | None = None,
    executor: executors.Executor | str | None = None,
    chunk_size: int | None = None,
    holomorphic: bool = False,
) -> Any:
    """Jacobians of ``f`` with respect to each argument: shape ``y.shape + x.shape``.

    ``mode`` is ``"fwd"`` (one jvp per input element), ``"rev"`` (one pullback per
    output element) or None to pick the cheaper by input and output size.

    Every argument is differentiated, so each must be a float (or complex) array or number, or a
    container of them: an integer or boolean (array) raises a TypeError; data and flags go
    in a closure, ``jacobian(lambda x: f(x, data), x)``.

    >>> import numpy as np, adrules as ad
    >>> ad.jacobian(lambda x: x ** 2, np.array([1.0, 2.0]))[0]
    array([[2., 0.],
           [0., 4.]])

    An argument may be a container of float arrays and numbers (dict, list, tuple,
    NamedTuple, dataclass, a ``register_node`` type), and ``f`` may return a dict, NamedTuple
    or dataclass of values (a list or tuple of values is one array, stacked). As with
    ``jax.jacobian``, argument i's Jacobian is then shaped like the output, and each of its
    leaves like argument i: ``J[out][in]`` of shape ``out.shape + in.shape``.

    >>> p = {"w": np.array([1.0, 2.0]), "b": 3.0}
    >>> (J,) = ad.jacobian(lambda p: {"y": p["w"] * p["b"], "s": np.sum(p["w"])}, p)
    >>> J["y"]["w"]
    array([[3., 0.],
           [0., 3.]])
    >>> J["y"]["b"], J["s"]["w"]
    (array([1., 2.]), array([1., 1.]))

    It nests like every derivative: the derivative of ``x0 * x1**3``'s gradient is its Hessian.

    >>> ad.jacobian(lambda x: ad.jacobian(lambda u: u[0] * u[1] ** 3, x)[0], np.array([2.0, 1.0]))[0]
    array([[ 0.,  3.],
           [ 3., 12.]])

    Given only the function, ``jacobian(f, argnums=0)`` is the transform of autograd and
    JAX: a function of ``f``'s arguments that returns the Jacobian with respect to the
    arguments ``argnums`` names (one array for an int, a tuple for a tuple; the other
    arguments and keyword arguments are passed along, as in ``grad``; ``argnum`` is
    autograd's spelling, by keyword: ``jacobian(f, 1)`` is refused, 1 being a point with
    no derivative). ``jacfwd`` and ``jacrev`` are this with ``mode`` set.

    >>> ad.jacobian(lambda x, k: k * x ** 2)(np.array([1.0, 2.0]), 3)
    array([[ 6.,  0.],
           [ 0., 12.]])

    Complex values, with ChainRules' convention: for a real output and a complex
    argument ``z = x + iy``, row k is the cotangent of ``y[k]``, ``∂y[k]/∂x + i ∂y[k]/∂y``
    (what ``gradient`` gives); for a complex output and a real argument, column j is the
    complex tangent ``∂y/∂x[j]``. A complex output of a complex argument has a complex
    Jacobian only when ``f`` is holomorphic: say so with ``holomorphic=True`` (as in JAX)
    to get ``f'(z)``.

    >>> z = np.array([1 + 2j])
    >>> ad.jacobian(lambda z: np.abs(z) ** 2, z)[0]
    array([[2.+4.j]])
    >>> ad.jacobian(lambda z: z ** 2, z, holomorphic=True)[0]
    array([[2.+4.j]])
    """
    check_callable("jacobian", f)
    if not args:
        return _as_transform("jacobian", jacobian, f, argnums, argnum,
                             {"mode": mode, "executor": executor, "chunk_size": chunk_size,
                              "holomorphic": holomorphic})
    fname = f"jacobian({getattr(f, '__name__', 'f')})"
    _no_argnums(fname, argnums, argnum)
    if type(holomorphic) is not bool:
        raise TypeError(f"{fname}: holomorphic must be True or False, got {holomorphic!r}.")
    trees, points = _points(fname, args)
    if any(tree.kind is not None for tree in trees):  # the array Jacobians of its leaves, rebuilt
        f = _OnLeaves(f, trees)
    out = f(*points)
    values, out_tree = flatten(out)
    if type(out) in (list, tuple) and _of_sequences(out_tree):  # [x[0] * x[1], x[2]]: one array, in both modes
        f = _OneArray(fname, f)
        out, out_tree = f.stacked(out), LEAF
    elif out_tree.kind is not None:  # {"y": .., "s": ..}: rows of one vector, split by value below
        for path, v in zip(_paths(out_tree), values):
            _check_numbers(fname, v, f" at output{path}")
        f = _Raveled(f)
        out = f.raveled(out)
    _check_numbers(fname, out)
    jacs = _jacobian(fname, f, points, _array(out), mode, executor, chunk_size,
                     _complex_kind(fname, points, _array(out), holomorphic))
    if out_tree.kind is None:
        return tuple(_per_argument(trees, list(jacs)))
    starts = np.cumsum([0] + [np.size(v) for v in values])
    per_value = [_per_argument(trees, [np.reshape(jac[a:b], np.shape(v) + np.shape(x))
                                       for jac, x in zip(jacs, points)])
                 for v, a, b in zip(values, starts, starts[1:])]
    return tuple(unflatten(out_tree, [of_value[i] for of_value in per_value]) for i in range(len(trees)))


def _complex_kind(fname: str, args: tuple[Any, ...], y: Any, holomorphic: bool) -> str:
    """Which Jacobian a complex value asks for (``_rows_reverse``'s ``rows_of``): "real"
    (a real output), "complex of real" (a complex output of real arguments) or
    "holomorphic"; a complex output of a complex argument needs ``holomorphic=True``."""
    complex_in = [i for i, a in enumerate(args) if a.dtype.kind == "c"]
    if holomorphic:
        if y.dtype.kind != "c" or len(complex_in) != len(args):
            real_in = [i for i in range(len(args)) if i not in complex_in]
            what = "its output is real" if y.dtype.kind != "c" else f"argument {real_in[0]} is real"
            raise TypeError(f"{fname}: holomorphic=True is for a complex function of complex "
                            f"arguments, but {what}: drop holomorphic=True (a real output's rows "
                            f"are cotangents, a real argument's columns complex tangents), or pass "
                            f"x.astype(complex).")
        return "holomorphic"
    if y.dtype.kind != "c":
        return "real"
    if complex_in:
        raise TypeError(
            f"{fname}: f returned complex values and argument {complex_in[0]} is complex: its "
            f"derivative is a complex matrix only when f is holomorphic (exp, z ** 2, matmul by a "
            f"constant). If it is, pass holomorphic=True to get f'(z); if not (np.conj, np.abs, "
            f"np.real inside), take the Jacobians of the real and imaginary parts as functions "
            f"of the real and imaginary parts: jacobian(lambda x, y: np.real(f(x + 1j * y)), "
            f"z.real, z.imag), and the same with np.imag.")
    return "complex of real"


def _jacobian(fname: str, f: Callable[..., Any], args: tuple[Any, ...], y: Any,
              mode: Literal["fwd", "rev"] | None, executor: executors.Executor | str | None,
              chunk_size: int | None, rows_of: str = "real") -> tuple[Any, ...]:
    """The Jacobians of ``f``, whose value ``y`` at ``args`` is one array, at its array
    arguments (``rows_of``: see ``_complex_kind``)."""
    n_in = sum(a.size for a in args)
    if mode is None:  # the cheaper mode, else the one the primitives have rules for
        order: tuple[Literal["fwd", "rev"], Literal["fwd", "rev"]] = (
            ("fwd", "rev") if n_in <= y.size else ("rev", "fwd"))
        first, then = order
        try:
            return _jacobian(fname, f, args, y, first, executor, chunk_size, rows_of)
        except NoRuleError as e:  # NoFruleError in forward mode: an rrule-only primitive
            if (first == "fwd") != isinstance(e, NoFruleError):
                raise
            mode = then
    if mode not in ("fwd", "rev"):
        raise ValueError(f"{fname}: mode must be 'fwd', 'rev' or None, got {mode!r}")
    if mode == "fwd":
        jacs = []
        for i, a in enumerate(args):
            chunks = chunk_ranges_for(a.size, chunk_size)
            cotangent = rows_of == "real" and a.dtype.kind == "c"
            parts = _pieces(_columns_forward, chunks, (f, args, i, cotangent), f, executor,
                            "jacobian columns")
            cols = [c for part in parts for c in part]
            jac = np.stack(cols, axis=-1) if cols else np.zeros(y.shape + (0,), _zeros_dtype(y, a))
            jacs.append(jac.reshape(y.shape + a.shape))
        return tuple(jacs)
    chunks = chunk_ranges_for(y.size, chunk_size)
    parts = _pieces(_rows_reverse, chunks, (f, args, rows_of), f, executor, "jacobian rows")
    rows = [r for part in parts for r in part]
    return tuple(np.stack([_array(r[i]) for r in rows]).reshape(y.shape + a.shape)
                 if rows else np.zeros(y.shape + a.shape, _zeros_dtype(y, a)) for i, a in enumerate(args))


def _zeros_dtype(y: Any, a: Any) -> Any:
    """An empty Jacobian's dtype: complex where the output or the argument is."""
    return complex if "c" in (y.dtype.kind, a.dtype.kind) else float


class _OneArray:
    """``f`` whose list or tuple of values is stacked into one array (picklable)."""

    def __init__(self, fname: str, f: Callable[..., Any]) -> None:
        self.fname, self.f = fname, f
        self.__name__ = getattr(f, "__name__", "f")

    def __call__(self, *args: Any) -> Any:
        return self.stacked(self.f(*args))

    def stacked(self, out: Any) -> Any:
        if type(out) not in (list, tuple):
            return out
        parts = [self.stacked(v) for v in out]  # [[a, b], [c, d]], as np.array reads it
        shapes = {np.shape(v) for v in parts}
        if len(shapes) > 1:
            raise TypeError(f"{self.fname}: f returned a {type(out).__name__} of values of shapes "
                            f"{sorted(shapes)}; a Jacobian is of one array: return "
                            f"np.concatenate([np.ravel(v) for v in values]), or one Jacobian per value.")
        return np.stack(parts) if parts else np.zeros(0)


class _Raveled:
    """``f`` whose dict, NamedTuple or dataclass of values is raveled into one vector (picklable)."""

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f
        self.__name__ = getattr(f, "__name__", "f")

    def __call__(self, *args: Any) -> Any:
        return self.raveled(self.f(*args))

    @staticmethod
    def raveled(out: Any) -> Any:
        values = flatten(out)[0]
        return np.concatenate([np.ravel(v) for v in values]) if values else np.zeros(0)


def _hessian_columns(cols: range, f: Callable[..., Any], x: Any) -> list[Any]:
    grad = _grad_of(f)
    try:
        return [_array(jvp(grad, (x,), (_basis(x, k),))[1]) for k in cols]
    except NoFruleError:  # an rrule-only primitive: row k by reverse-over-reverse (H symmetric)
        return [_array(gradient(lambda x, k=k: np.reshape(grad(x), -1)[k], x)[0]) for k in cols]


class _grad_of:
    """``x -> gradient(f, x)[0]`` as a picklable object; its errors name ``api``, the
    derivative the user called."""

    def __init__(self, f: Callable[..., Any], api: str = "hessian") -> None:
        self.f, self.api = f, api

    def __call__(self, x: Any) -> Any:
        return named_value_and_gradient(DerivativeName(self.api, self.f), self.f, (x,))[1][0]


def _hessian_blocks(cols: range, f: Callable[..., Any], args: tuple[Any, ...],
                    offsets: NDArray[Any]) -> list[tuple[Any, ...]]:
    """Columns ``cols`` (flat indices over all arguments, in order) of the block Hessian:
    for column c of argument j, the tuple over i of d(gradient_i)/d(args[j].flat[c])."""
    grads = _grads_of(f)
    out = []
    for c in cols:
        j = int(np.searchsorted(offsets, c, side="right")) - 1
        tangents = [np.zeros(a.shape, dtype=a.dtype) for a in args]
        tangents[j] = _basis(args[j], c - offsets[j])
        try:
            dg = jvp(grads, args, tangents)[1]
        except NoFruleError:  # as in _hessian_columns: the gradient of gradient_j's entry c
            dg = gradient(lambda *a, j=j, k=c - offsets[j]: np.reshape(grads(*a)[j], -1)[k], *args)
        out.append(tuple(np.zeros(a.shape) if is_zero(d) else _array(d) for a, d in zip(args, dg)))
    return out


class _grads_of:
    """``(*args) -> gradient(f, *args)`` as a picklable object, whose errors name ``hessian``."""

    def __init__(self, f: Callable[..., Any]) -> None:
        self.f = f

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        return tuple(named_value_and_gradient(DerivativeName("hessian", self.f), self.f, args)[1])


@overload
def hessian(f: Callable[..., Any], /, *, argnums: int | Sequence[int] | None = None,
            argnum: int | Sequence[int] | None = None, executor: executors.Executor | str | None = None,
            chunk_size: int | None = None) -> Callable[..., Any]: ...


@overload
def hessian(f: Callable[..., Any], x: FloatArg, /, *, executor: executors.Executor | str | None = None,
            chunk_size: int | None = None) -> NDArray[np.floating]: ...


@overload
def hessian(f: Callable[..., Any], x: FloatArg, y: FloatArg, /, *args: FloatArg,
            executor: executors.Executor | str | None = None,
            chunk_size: int | None = None) -> tuple[tuple[NDArray[np.floating], ...], ...]: ...


@overload
def hessian(f: Callable[..., Any], x: PyTree, /, *args: PyTree, executor: executors.Executor | str | None = None,
            chunk_size: int | None = None) -> Any: ...


def hessian(
    f: Callable[..., Any],
    *args: Any,  # the overloads above say what users pass
    argnums: int | Sequence[int] | None = None,
    argnum: int | Sequence[int] | None = None,
    executor: executors.Executor | str | None = None,
    chunk_size: int | None = None,
) -> Any:
    """The Hessian of scalar ``f`` at ``x`` (shape ``x.shape + x.shape``), by
    forward-over-reverse, one column per input element, computed on an executor (by
    reverse-over-reverse, one row each, where a primitive has an rrule but no frule).

    >>> import numpy as np, adrules as ad
    >>> ad.hessian(lambda x: x[0] ** 2 * x[1], np.array([1.0, 3.0]))
    array([[6., 2.],
           [2., 0.]])

    With several arguments, ``hessian(f, a, b)`` returns the blocks, like ``jacobian``: a
    tuple of tuples with ``H[i][j]`` (shape ``args[i].shape + args[j].shape``) the
    derivative of the gradient of argument i with respect to argument j.

    >>> (Haa, Hab), (Hba, Hbb) = ad.hessian(lambda a, b: np.sum(a ** 2 * b), np.ones(2), np.ones(2))
    >>> Hab
    array([[2., 0.],
           [0., 2.]])

    At a container (a dict of parameters, a dataclass), as with ``jax.hessian``, the
    Hessian is shaped like ``x`` and each of its leaves like ``x``: ``H[a][b]`` of shape
    ``x[a].shape + x[b].shape``, the derivative of the gradient's ``a`` by ``x[b]``.

    >>> H = ad.hessian(lambda p: np.sum(p["w"] ** 2) * p["b"], {"w": np.array([1.0, 2.0]), "b": 3.0})
    >>> H["w"]["b"], H["b"]["b"]
    (array([2., 4.]), array(0.))

    Given only the function, ``hessian(f, argnums=0)`` is the transform of autograd and
    JAX: a function of ``f``'s arguments that returns the Hessian with respect to argument
    ``argnums`` (the blocks for a tuple), the other arguments passed along.

    >>> ad.hessian(lambda x, k: k * np.sum(x ** 3))(np.array([1.0, 2.0]), 2.0)
    array([[12.,  0.],
           [ 0., 24.]])
    """
    check_callable("hessian", f)
    if not args:
        return _as_transform("hessian", hessian, f, argnums, argnum,
                             {"executor": executor, "chunk_size": chunk_size})
    fname = f"hessian({getattr(f, '__name__', 'f')})"
    _no_argnums(fname, argnums, argnum)
    trees, points = _points(fname, args)
    _refuse_complex_hessian(fname, trees, points)
    g = f if all(tree.kind is None for tree in trees) else _OnLeaves(f, trees)
    with _rules_differentiated(fname):
        h = _hessian(fname, g, points, executor, chunk_size)
    if g is f:
        return h
    # the blocks of the leaves: row k (the gradient's leaf k) rebuilt into each argument's
    # structure, then the rows of argument i into its structure
    rows = [_per_argument(trees, list(row)) for row in (((h,),) if len(points) == 1 else h)]
    ends = np.cumsum([tree.n_leaves for tree in trees])
    blocks = tuple(tuple(unflatten(a, [row[j] for row in rows[end - a.n_leaves:end]]) for j in range(len(trees)))
                   for a, end in zip(trees, ends))
    return blocks[0][0] if len(trees) == 1 else blocks


def _refuse_complex_hessian(fname: str, trees: list[TreeDef], points: tuple[Any, ...]) -> None:
    """A complex point has no Hessian matrix: the second derivative of a real f of
    z = x + iy is real-linear in (x, y), not complex-linear in z, so no complex n x n matrix
    holds it (packing its four real blocks into one would lose two). hvp gives its
    products, and the (x, y) form its blocks."""
    paths = [f"argument {i}{path}" for i, tree in enumerate(trees) for path in _paths(tree)]
    for where, p in zip(paths, points):
        if p.dtype.kind == "c":
            name = fname.partition("(")[2][:-1]
            name = name if name.isidentifier() else "f"
            raise TypeError(
                f"{fname}: {where} is complex. The Hessian of a real function of z = x + iy is a "
                f"real-linear map on (x, y), which no complex matrix holds. Take its blocks as "
                f"the Hessian of a function of the real and imaginary parts, hessian(lambda x, y: "
                f"{name}(x + 1j * y), z.real, z.imag), or its products with hvp({name}, z, v), "
                f"v complex: the derivative of the gradient along v.")


def _hessian(fname: str, f: Callable[..., Any], args: tuple[Any, ...],
             executor: executors.Executor | str | None,
             chunk_size: int | None) -> NDArray[np.floating] | tuple[tuple[NDArray[np.floating], ...], ...]:
    """The Hessian of ``f`` at one array, or its blocks at none or several."""
    if len(args) != 1:
        offsets = np.cumsum([0] + [a.size for a in args])
        parts = _pieces(_hessian_blocks, chunk_ranges_for(int(offsets[-1]), chunk_size), (f, args, offsets),
                        f, executor, "hessian columns")
        cols = [c for part in parts for c in part]
        return tuple(
            tuple((np.stack([col[i] for col in cols[offsets[j]:offsets[j + 1]]], axis=-1)
                   if b.size else np.zeros(a.shape + (0,))).reshape(a.shape + b.shape)
                  for j, b in enumerate(args))
            for i, a in enumerate(args))
    (x,) = args
    if x.size == 0:
        return np.zeros(x.shape + x.shape)
    parts = _pieces(_hessian_columns, chunk_ranges_for(x.size, chunk_size), (f, x), f, executor, "hessian columns")
    cols = [c for part in parts for c in part]
    return np.stack(cols, axis=-1).reshape(x.shape + x.shape)


def hvp(f: Callable[..., Any], x: PyTree, v: PyTree) -> Any:
    """Hessian-vector product ``H(x) @ v`` of scalar ``f`` without forming ``H``, by
    forward-over-reverse (reverse-over-reverse where a primitive has no frule). ``x`` may
    be a container (a list of models, a dict of parameters); ``v`` then has its structure
    and the product comes back in it. A ``psum`` inside ``f`` computes each chunk's
    product on its executor.

    At a complex ``z = x + iy`` (``v`` complex too) it is the derivative along ``v`` of
    the gradient ``∂f/∂x + i ∂f/∂y``: the Hessian of ``f`` as a function of ``(x, y)``
    applied to ``(Re v, Im v)``, packed back as ``Hxx Re v + Hxy Im v + i (Hyx Re v +
    Hyy Im v)``. (``hessian`` refuses a complex point: that map has no complex matrix.)

    >>> import numpy as np, adrules as ad
    >>> ad.hvp(lambda x: np.sum(x ** 3), np.array([1.0, 2.0]), np.array([1.0, 0.0]))
    array([6., 0.])
    >>> h = ad.hvp(lambda p: p["a"] ** 2 * p["b"], {"a": 1.0, "b": 3.0}, {"a": 1.0, "b": 0.0})
    >>> float(h["a"]), float(h["b"])
    (6.0, 2.0)
    >>> ad.hvp(lambda z: np.sum(np.abs(z) ** 2), np.array([1 + 2j]), np.array([1j]))  # f = x² + y²
    array([0.+2.j])
    """
    check_callable("hvp", f, "f, x, v")
    fname = f"hvp({getattr(f, '__name__', 'f')})"
    refuse_underivable(fname, (x,), _in_a_closure("hvp"), ("x",))
    (x_leaves, x_tree), (flat_v, v_tree) = flatten(x), flatten(v)
    # a dict, or a Tangent(T, ...), is read by name as jvp reads it: {"b": .., "a": ..} for
    # a dict x built in another order, {"w": ..} for a dataclass x
    v_leaves = (flat_v if v_tree == x_tree else
                tangent_leaves(v, x_tree) if type(v) is dict or isinstance(v, Tangent) else None)
    if v_leaves is None:
        raise TypeError(f"{fname}: v has structure {v_tree} but x has structure {x_tree}; "
                        f"give v the structure of x.")
    for k, (a, b) in enumerate(zip(x_leaves, v_leaves)):
        if not is_zero(b) and np.shape(a) != np.shape(b):
            where = "" if x_tree.kind is None else f" at leaf {k} of x"
            raise TypeError(f"{fname}: v has shape {np.shape(b)} but x has shape {np.shape(a)}"
                            f"{where}; give v the shape of x.")
        # named here, not by the jvp below, which would name itself
        where = "x" if x_tree.kind is None else f"leaf {k} of x"
        if isinstance(a, np.ndarray) and a.dtype.kind in "biu" and not is_zero(b) and np.any(np.asarray(b) != 0):
            raise _int_array(fname, where, a.dtype)
        leaf_is_differentiable(a, fname, where)
        if not is_zero(b) and np.iscomplexobj(b) and not np.iscomplexobj(a):
            raise TypeError(f"{fname}: v is complex{'' if x_tree.kind is None else f' at leaf {k}'} but "
                            f"{where} is real: a real point moves along real directions. Pass a complex "
                            f"point (x.astype(complex)) to move it off the real line.")
    try:
        with _rules_differentiated(fname):
            return _hvp(f, x, v, v_leaves)
    except TracerError as e:
        if type(x) is not tuple:
            raise
        # JAX's recipe is hvp(f, primals, tangents), with tuples: here f got the tuple
        raise TracerError(f"{e} Note: x is a tuple, and f received that tuple as its argument: "
                          f"hvp takes the point itself, hvp(f, x, v), not a tuple of arguments "
                          f"as jax.jvp does.") from e


def _hvp(f: Callable[..., Any], x: Any, v: Any, v_leaves: list[Any]) -> Any:
    """Forward over reverse; reverse over reverse where a primitive has an rrule only
    (the gradient of <gradient f(x), v>)."""
    try:
        return jvp(_grad_of(f, "hvp"), (x,), (v,))[1]
    except NoFruleError:
        return gradient(lambda x: _inner(_grad_of(f, "hvp")(x), v_leaves), x)[0]


def _inner(g: Any, v_leaves: list[Any]) -> Any:
    """The sum over leaves of ``sum(g_leaf * v_leaf)`` (leaves without a gradient skipped);
    for complex leaves the real inner product ``Re(sum(g_leaf * conj(v_leaf)))``, whose
    gradient is H v packed as complex."""
    total = 0.0
    for gl, vl in zip(flatten(g)[0], v_leaves):
        if not is_zero(gl) and not is_zero(vl):  # vl: ZeroTangent() for a field Tangent(T, ...) left out
            total = total + (np.sum(np.real(gl * np.conj(vl))) if np.iscomplexobj(vl) or np.iscomplexobj(gl) else np.sum(gl * vl))
    return total


def _as_transform(api: str, derivative: Callable[..., Any], f: Callable[..., Any], argnums: Any, argnum: Any,
                  options: dict[str, Any]) -> Callable[..., Any]:
    """``api(f, argnums=...)`` given no point: the function autograd's and JAX's ``api(f)``
    returns, ``derivative`` with respect to the arguments ``argnums`` names, as ``grad``
    takes them (one result for an int, a tuple for a tuple)."""
    nums = checked_argnums(api, 0 if argnums is None else argnums, argnum)

    def derivative_f(*args: Any, **kwargs: Any) -> Any:
        if not args:
            raise TypeError(f"{api}({getattr(f, '__name__', 'f')}) returns a function: call it with "
                            f"the point, {api}(f)(x), or write {api}(f, x).")
        partial, moving, _ = prepare_call(api, f, nums, False, args, kwargs)
        out = derivative(partial, *moving, **options)
        # jacobian(f, x) is a tuple of one per argument; hessian(f, x) the array itself
        return out[0] if isinstance(nums, int) and derivative is jacobian else out

    return named_transform(derivative_f, api, f, nums)


def _no_argnums(fname: str, argnums: Any, argnum: Any) -> None:
    if argnums is not None or argnum is not None:
        api = fname.partition("(")[0]
        raise TypeError(f"{fname}: argnums is for the function form, {api}(f, argnums=1)(*args); "
                        f"{api}(f, *args) differentiates every argument: capture the others in a "
                        f"closure, {api}(lambda x: f(data, x), x).")
