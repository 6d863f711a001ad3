"""autograd's and JAX's names for transforms adrules has, so that code written for them
ports by changing imports. Each is one line over ``jacobian``, ``hvp``, ``jvp`` or
``pullback``, with the anchor's argument order and return values:

    jacfwd(f)(x)                      ==  jacobian(f, x, mode="fwd")[0]
    jacrev(f)(x)                      ==  jacobian(f, x, mode="rev")[0]
    hessian_vector_product(f)(x, v)   ==  hvp(f, x, v)
    make_jvp(f)(x)(v)                 ==  jvp(f, (x,), (v,))
    make_vjp(f)(x)                    ==  (lambda g: pullback(f, x)[1](g)[0], f(x))

``argnums`` (JAX) and ``argnum`` (autograd) name the argument differentiated; the others,
and keyword arguments, are passed along, as in ``grad``.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from .api import check_callable, jvp, pullback
from .derivatives import hvp, jacobian
from .transforms import checked_argnums, named_transform, prepare_call

__all__ = ["jacfwd", "jacrev", "hessian_vector_product", "make_jvp", "make_vjp"]


def jacfwd(f: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """JAX's ``jacfwd``: a function returning the Jacobian of ``f`` by forward mode (one
    ``jvp`` per input element), ``jacobian(f, argnums=argnums, mode="fwd")``.

    >>> import numpy as np, adrules as ad
    >>> ad.jacfwd(lambda x: np.sin(x) * x[0])(np.array([0.0, np.pi / 2]))
    array([[0., 0.],
           [1., 0.]])
    """
    return jacobian(f, argnums=argnums, mode="fwd")


def jacrev(f: Callable[..., Any], argnums: int | Sequence[int] = 0) -> Callable[..., Any]:
    """JAX's ``jacrev``: a function returning the Jacobian of ``f`` by reverse mode (one
    pullback per output element), ``jacobian(f, argnums=argnums, mode="rev")``.

    >>> import numpy as np, adrules as ad
    >>> ad.jacrev(lambda w, x: x @ w, argnums=1)(np.array([1.0, 2.0]), np.ones((1, 2)))
    array([[[1., 2.]]])
    """
    return jacobian(f, argnums=argnums, mode="rev")


def _one_argument(api: str, f: Callable[..., Any], argnum: Any) -> int:
    check_callable(api, f)
    nums = checked_argnums(api, argnum, None)
    if not isinstance(nums, int):
        raise TypeError(f"{api}: argnum must be one int, got {argnum!r}; for several arguments, pass them "
                        f"as one tuple argument.")
    return nums


def hessian_vector_product(f: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
    """autograd's ``hessian_vector_product``: a function of ``(*args, v)`` returning the
    Hessian of scalar ``f`` with respect to argument ``argnum``, times ``v`` (the last
    argument), ``hvp`` without forming the Hessian.

    >>> import numpy as np, adrules as ad
    >>> ad.hessian_vector_product(lambda x: np.sum(x ** 3))(np.array([1.0, 2.0]), np.array([1.0, 1.0]))
    array([ 6., 12.])
    """
    num = _one_argument("hessian_vector_product", f, argnum)

    def hessian_vector_product_f(*args: Any, **kwargs: Any) -> Any:
        if len(args) < 2:
            raise TypeError(f"hessian_vector_product({getattr(f, '__name__', 'f')}): call it with f's "
                            f"arguments and then the vector: hessian_vector_product(f)(x, v).")
        partial, (x,), _ = prepare_call("hessian_vector_product", f, num, False, args[:-1], kwargs)
        return hvp(partial, x, args[-1])

    return named_transform(hessian_vector_product_f, "hessian_vector_product", f, num)


def make_jvp(f: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
    """autograd's ``make_jvp``: ``make_jvp(f)(x)`` is a function of a tangent ``v``
    returning ``(f(x), the derivative of f at x along v)``, by forward mode.

    >>> import numpy as np, adrules as ad
    >>> ad.make_jvp(np.sin)(0.0)(2.0)
    (np.float64(0.0), np.float64(2.0))
    """
    num = _one_argument("make_jvp", f, argnum)

    def make_jvp_f(*args: Any, **kwargs: Any) -> Callable[[Any], Any]:
        partial, (x,), _ = prepare_call("make_jvp", f, num, False, args, kwargs)
        return lambda v: jvp(partial, (x,), (v,))

    return named_transform(make_jvp_f, "make_jvp", f, num)


def make_vjp(f: Callable[..., Any], argnum: int = 0) -> Callable[..., Any]:
    """autograd's ``make_vjp``: ``make_vjp(f)(x)`` returns ``(vjp, f(x))``, in autograd's
    order, with ``vjp(g)`` the cotangent of ``x`` for the output cotangent ``g``, by one
    forward pass (``pullback``; JAX's ``vjp`` is ``pullback`` itself).

    >>> import numpy as np, adrules as ad
    >>> vjp, y = ad.make_vjp(lambda x: x ** 2)(np.array([1.0, 3.0]))
    >>> y, vjp(np.array([1.0, 10.0]))
    (array([1., 9.]), array([ 2., 60.]))
    """
    num = _one_argument("make_vjp", f, argnum)

    def make_vjp_f(*args: Any, **kwargs: Any) -> tuple[Callable[[Any], Any], Any]:
        partial, (x,), _ = prepare_call("make_vjp", f, num, False, args, kwargs)
        y, back = pullback(partial, x)
        return (lambda g: back(g)[0]), y

    return named_transform(make_vjp_f, "make_vjp", f, num)
