"""Function transforms with JAX's names and meanings: ``grad`` and ``value_and_grad``
take a function and return one that computes its gradient; autograd's
``elementwise_grad`` is here too, since code written for autograd calls it.

    grad(f, argnums=1)(w, x)  ==  gradient(lambda x: f(w, x), x)[0]

The arguments ``argnums`` names are differentiated; the others, and keyword arguments,
are passed to ``f`` as they are (data, flags, integer counts), as in JAX. An argument
named in ``argnums`` that can carry no derivative (an integer, a boolean, an object of
a class adrules cannot look inside) raises a TypeError, as ``gradient`` does.
"""

from __future__ import annotations

import operator
from typing import Any, Callable, Sequence

import numpy as np

from .api import DerivativeName, check_callable, named_pullback, named_value_and_gradient, refuse_underivable
from .pytrees import flatten, unflatten
from .tracer import Traced, TracerError, top_trace

__all__ = ["grad", "value_and_grad", "elementwise_grad"]


def checked_argnums(api: str, argnums: Any, argnum: Any) -> int | tuple[int, ...]:
    """``argnums`` checked: an int, or a tuple of distinct ints (a list is taken as one);
    ``argnum`` is autograd's spelling of it.

    >>> checked_argnums("grad", [0, 2], None), checked_argnums("grad", 0, 1)
    ((0, 2), 1)
    """
    if argnum is not None:
        if argnums != 0:
            raise TypeError(f"{api}: give argnums or argnum (autograd's spelling of it), not both.")
        argnums = argnum
    if isinstance(argnums, (list, tuple)):
        if not argnums or not all(isinstance(a, (int, np.integer)) and not isinstance(a, (bool, np.bool_))
                                  for a in argnums):
            raise TypeError(f"{api}: argnums must be an int or a non-empty tuple of ints, got {argnums!r}.")
        nums = tuple(operator.index(a) for a in argnums)
        repeated = sorted({a for a in nums if nums.count(a) > 1})
        if repeated:
            raise ValueError(f"{api}: argnums={argnums!r} names argument {repeated[0]} more than once; "
                             f"name each argument once: argnums={tuple(dict.fromkeys(nums))!r}.")
        return nums
    if isinstance(argnums, (int, np.integer)) and not isinstance(argnums, (bool, np.bool_)):
        return operator.index(argnums)
    raise TypeError(f"{api}: argnums must be an int or a tuple of ints, got {type(argnums).__name__} "
                    f"{argnums!r}.")


def _positions(api: str, argnums: int | tuple[int, ...], n: int) -> tuple[int, ...]:
    """The positions ``argnums`` names among ``n`` positional arguments (negatives count
    from the end), checked against the call."""
    nums = (argnums,) if isinstance(argnums, int) else argnums
    out = []
    for a in nums:
        if not -n <= a < n:
            raise TypeError(f"{api}: argnums={argnums!r} names argument {a}, but f was called with {n} "
                            f"positional argument{'s' if n != 1 else ''}; argnums counts the positional "
                            f"arguments of the call from 0 (keyword arguments are never differentiated).")
        out.append(a % n)
    if len(set(out)) != len(out):
        raise ValueError(f"{api}: argnums={argnums!r} names the same argument twice among {n} arguments.")
    return tuple(out)


class PartialCall:
    """``f`` as a function of the arguments at ``positions`` alone, the others fixed;
    with ``has_aux``, it returns the first of f's pair and keeps the second, opened."""

    def __init__(self, api: str, f: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any],
                 positions: tuple[int, ...], has_aux: bool) -> None:
        self.api, self.f, self.args, self.kwargs = api, f, args, kwargs
        self.positions, self.has_aux = positions, has_aux
        self.aux: Any = None
        self.__name__ = getattr(f, "__name__", "f")

    def __call__(self, *moving: Any) -> Any:
        full = list(self.args)
        for i, v in zip(self.positions, moving):
            full[i] = v
        out = self.f(*full, **self.kwargs)
        if not self.has_aux:
            return out
        if type(out) not in (tuple, list) or len(out) != 2:
            what = f"a {type(out).__name__} of {len(out)}" if type(out) in (tuple, list) else \
                f"a {type(out).__name__}"
            raise TypeError(f"{self.api}({self.__name__}, has_aux=True): f must return a pair "
                            f"(value, aux), got {what}; return (loss, aux), or drop has_aux=True.")
        trace = top_trace(flatten(list(moving))[0])  # this differentiation's (the innermost)
        leaves, tree = flatten(out[1])
        # aux is returned as values, as JAX returns it: no derivative flows through it
        self.aux = unflatten(tree, [v.value if type(v) is Traced and v.owner is trace else v for v in leaves])
        return out[0]


def prepare_call(api: str, f: Callable[..., Any], argnums: int | tuple[int, ...], has_aux: bool,
                 args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[PartialCall, tuple[Any, ...], DerivativeName]:
    """A call ``f(*args, **kwargs)`` split for transform ``api``: ``f`` as a function of the
    arguments ``argnums`` names alone, those arguments (each checked to carry a
    derivative), and the name errors give.

    >>> partial, moving, name = prepare_call("grad", lambda w, n: n * w, 0, False, (2.0, 3), {})
    >>> partial(5.0), moving, str(name)
    (15.0, (2.0,), 'grad(<lambda>)')
    """
    positions = _positions(api, argnums, len(args))
    moving = tuple(args[i] for i in positions)
    fname = DerivativeName(api, f)

    def leave_out(i: int) -> str | None:
        name = getattr(f, "__name__", "f")
        rest = [p for p in positions if p != i] or [p for p in range(len(args)) if p != i][:1]
        if not rest:
            return None
        nums = str(rest[0]) if len(rest) == 1 else f"({', '.join(map(str, rest))})"
        return f"if it is data, leave it out of argnums: {api}({name}, argnums={nums})"

    refuse_underivable(fname, moving, leave_out, positions)
    return PartialCall(api, f, args, kwargs, positions, has_aux), moving, fname


def named_transform(fn: Callable[..., Any], kind: str, f: Callable[..., Any], argnums: Any) -> Callable[..., Any]:
    """``fn``, the transform ``kind`` of ``f``, named after both (not functools.wraps:
    copying f's __dict__ would copy @primitive's marks onto fn).

    >>> def loss(w): return w
    >>> named_transform(lambda w: 1.0, "grad", loss, 0).__name__
    'grad_loss'
    """
    name = getattr(f, "__name__", "f")
    fn.__name__ = fn.__qualname__ = f"{kind}_{name}"
    fn.__doc__ = f"The {kind.replace('_', ' ')} of {name} with respect to positional argument(s) {argnums!r}."
    return fn


def _check_has_aux(api: str, has_aux: Any) -> None:
    if type(has_aux) is not bool:
        raise TypeError(f"{api}: has_aux must be True or False, got {has_aux!r}.")


def value_and_grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
                   argnum: int | Sequence[int] | None = None) -> Callable[..., Any]:
    """A function that returns ``(f(*args), gradient)``, the gradient with respect to the
    positional arguments ``argnums`` names: one gradient for an int, a tuple of them for
    a tuple. With ``has_aux=True``, ``f`` returns ``(value, aux)`` and the function
    returns ``((value, aux), gradient)``, as ``jax.value_and_grad`` does. ``argnum`` is
    autograd's spelling of ``argnums``.

    >>> import numpy as np, adrules as ad
    >>> loss = lambda w, x: np.sum((x @ w) ** 2)
    >>> value, g = ad.value_and_grad(loss)(np.array([1.0, 2.0]), np.eye(2))
    >>> value, g
    (np.float64(5.0), array([2., 4.]))
    >>> (value, n), g = ad.value_and_grad(lambda w, n: (n * np.sum(w), n), has_aux=True)(np.ones(2), 3)
    >>> value, n, g
    (np.float64(6.0), 3, array([3., 3.]))
    """
    check_callable("value_and_grad", f, "f")
    nums = checked_argnums("value_and_grad", argnums, argnum)
    _check_has_aux("value_and_grad", has_aux)

    def value_and_grad_f(*args: Any, **kwargs: Any) -> Any:
        partial, moving, fname = prepare_call("value_and_grad", f, nums, has_aux, args, kwargs)
        value, grads = named_value_and_gradient(fname, partial, moving)
        g = grads[0] if isinstance(nums, int) else grads
        return ((value, partial.aux), g) if has_aux else (value, g)

    return named_transform(value_and_grad_f, "value_and_grad", f, nums)


def grad(f: Callable[..., Any], argnums: int | Sequence[int] = 0, has_aux: bool = False, *,
         argnum: int | Sequence[int] | None = None) -> Callable[..., Any]:
    """A function that returns the gradient of scalar ``f`` (or of its one element, for an
    output of shape ``(1,)``, as autograd takes it) with respect to the positional
    arguments ``argnums`` names (by default the first): one gradient for an int, a tuple
    of them for a tuple, each shaped like its argument (containers come back as the same
    container). With ``has_aux=True``, ``f`` returns ``(value, aux)`` and the function
    returns ``(gradient, aux)``. The other arguments and keyword arguments are passed
    along, never differentiated. As ``jax.grad``; ``argnum`` is autograd's spelling.

    >>> import numpy as np, adrules as ad
    >>> loss = lambda w, x, y: np.mean((x @ w - y) ** 2)
    >>> x, y = np.array([[1.0, 0.0], [0.0, 2.0]]), np.array([1.0, 1.0])
    >>> ad.grad(loss)(np.zeros(2), x, y)
    array([-1., -2.])
    >>> gw, gx = ad.grad(loss, argnums=(0, 1))(np.zeros(2), x, y)
    >>> gx
    array([[0., 0.],
           [0., 0.]])
    >>> ad.grad(ad.grad(lambda t: t ** 3))(2.0)  # derivatives of derivatives
    12.0

    At a complex ``z = x + iy`` the gradient is ChainRules' ``∂f/∂x + i ∂f/∂y`` (so
    ``z - lr * g`` descends); ``jax.grad`` returns its conjugate. ``f`` must be real.

    >>> ad.grad(lambda z: np.sum(np.abs(z) ** 2))(np.array([1 + 2j]))  # x² + y²: 2x + 2iy
    array([2.+4.j])
    """
    check_callable("grad", f, "f")
    nums = checked_argnums("grad", argnums, argnum)
    _check_has_aux("grad", has_aux)

    def grad_f(*args: Any, **kwargs: Any) -> Any:
        partial, moving, fname = prepare_call("grad", f, nums, has_aux, args, kwargs)
        grads = named_value_and_gradient(fname, partial, moving)[1]
        g = grads[0] if isinstance(nums, int) else grads
        return (g, partial.aux) if has_aux else g

    return named_transform(grad_f, "grad", f, nums)


def elementwise_grad(f: Callable[..., Any], argnum: int | Sequence[int] = 0) -> Callable[..., Any]:
    """autograd's ``elementwise_grad``: a function that returns the gradient of the sum of
    ``f``'s outputs with respect to argument ``argnum``, the vector-Jacobian product with
    ones. For an elementwise ``f`` that is its derivative at each element. Complex
    arguments get ChainRules' cotangents, ``∂f/∂x + i ∂f/∂y``; ``f``'s values must be real.

    >>> import numpy as np, adrules as ad
    >>> ad.elementwise_grad(np.sin)(np.array([0.0, np.pi]))
    array([ 1., -1.])
    """
    check_callable("elementwise_grad", f, "f")
    nums = checked_argnums("elementwise_grad", argnum, None)

    def elementwise_grad_f(*args: Any, **kwargs: Any) -> Any:
        partial, moving, fname = prepare_call("elementwise_grad", f, nums, False, args, kwargs)
        y, back = named_pullback(fname, partial, moving)
        if type(y) is not Traced and not isinstance(y, (float, np.ndarray, np.floating)):
            raise TracerError(f"{fname}: f returned a {type(y).__name__}; elementwise_grad takes a function "
                              f"returning a float array or number (adrules.pullback takes any output).")
        if np.iscomplexobj(y):  # the sum of complex outputs is not a real loss to take the gradient of
            raise TracerError(
                f"{fname}: f returned complex values, but elementwise_grad needs real ones (the "
                f"gradient of their sum): return a real function (np.real(z), np.abs(z) ** 2), or "
                f"take the complex output's pullback, adrules.pullback(f, x), with a complex "
                f"cotangent.")
        grads = back(np.ones(np.shape(y), dtype=getattr(y, "dtype", np.float64)))
        return grads[0] if isinstance(nums, int) else grads

    return named_transform(elementwise_grad_f, "elementwise_grad", f, nums)
