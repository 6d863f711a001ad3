"""Rules: numpy.linalg functions composed from the core linalg rules, the NumPy 2 linalg
aliases, and the einsum call forms the einsum rule does not take, rewritten into the
form it does.

* ``pinv``: the derivative of the Moore-Penrose inverse at constant rank (Golub and
  Pereyra 1973), one formula for the frule and its adjoint for the rrule, in NumPy calls
  so it is traced again for higher derivatives.
* ``matrix_power``, ``multi_dot``, ``lstsq``, ``cond``, ``tensorinv``, ``tensorsolve``:
  compositions of matmul, inv, solve, pinv, norm and svd.
* ``eigh`` / ``eigvalsh`` honour ``UPLO``, and ``cholesky`` its ``upper``: they read one
  triangle, so the gradient lies in that triangle (off-diagonal entries count twice, the
  other triangle gets zero), as finite differences of NumPy's functions give; of a complex
  matrix they read the diagonal's real part only, as LAPACK does.
* Complex values: ``pinv``'s formula with conjugate transposes; ``vecdot`` and ``vecmat``
  conjugate their first argument, as NumPy's do; ``lstsq``'s residuals are real.
* ``einsum`` in the interleaved form ``einsum(a, [0, 1], b, [1, 2])`` and with an index
  repeated inside one operand (``'ii->i'``): rewritten into the string form, taking the
  repeated index's diagonal first.
"""

import functools

import numpy as np

from ..registry import frule, non_differentiable, rrule
from ..tangents import NoTangent, ZeroTangent, is_zero
from ._compose import composite_rule, extend_rule


def _T(a):
    return np.swapaxes(a, -1, -2)


def _H(a):
    """The conjugate transpose (the transpose of a real matrix, not copied)."""
    return np.conj(_T(a)) if np.iscomplexobj(a) else _T(a)


def _eye_like(a, side):
    n = np.shape(a)[-2 if side == "rows" else -1]
    return np.eye(n, dtype=np.result_type(a, np.float32))


# ---- pinv: dP = -P dA P + P Pᴴ dAᴴ (I - A P) + (I - P A) dAᴴ Pᴴ P ---------------------------
@rrule.register(np.linalg.pinv, complex=True)
def pinv_rrule(a, *options, **kwargs):
    p = np.linalg.pinv(a, *options, **kwargs)

    def pinv_pullback(g):  # the adjoint for Re tr(xᴴ y): the two projectors are Hermitian
        rows_left = _eye_like(a, "rows") - a @ p  # I - A P, the projector off range(A)
        cols_left = _eye_like(a, "cols") - p @ a  # I - P A, the projector onto null(A)
        ph, gh = _H(p), _H(g)
        da = -ph @ g @ ph + rows_left @ gh @ p @ ph + ph @ p @ gh @ cols_left
        return (NoTangent(), da) + (NoTangent(),) * len(options)

    return p, pinv_pullback


@frule.register(np.linalg.pinv, complex=True)
def pinv_frule(tangents, a, *options, **kwargs):
    p = np.linalg.pinv(a, *options, **kwargs)
    da = tangents[1]
    if is_zero(da):
        return p, ZeroTangent()
    rows_left = _eye_like(a, "rows") - a @ p
    cols_left = _eye_like(a, "cols") - p @ a
    ph, dah = _H(p), _H(da)
    dp = -p @ da @ p + p @ ph @ dah @ rows_left + cols_left @ dah @ ph @ p
    return p, dp


# ---- compositions ------------------------------------------------------------------------------
def matrix_power(a, n):
    if n == 0:
        return np.broadcast_to(np.eye(np.shape(a)[-1], dtype=np.result_type(a)), np.shape(a)).copy()
    if n < 0:
        a, n = np.linalg.inv(a), -n
    result, square = None, a
    while n:  # binary powering, like NumPy
        if n & 1:
            result = square if result is None else result @ square
        n >>= 1
        if n:
            square = square @ square
    return result


def multi_dot(arrays, *, out=None):
    return functools.reduce(np.dot, arrays)


def lstsq(a, b, rcond=None):
    x = np.linalg.pinv(a) @ b
    rank = np.linalg.matrix_rank(a)
    m, n = np.shape(a)
    if rank == n and m > n:
        r = b - a @ x
        residuals = np.sum(np.abs(r) ** 2 if np.iscomplexobj(r) else r ** 2, axis=0)
        residuals = np.reshape(residuals, (1,)) if np.ndim(b) == 1 else residuals
    else:  # (real, for complex a and b too)
        residuals = np.zeros(0, dtype=np.finfo(np.result_type(a, b, np.float32)).dtype)
    return x, residuals, rank, np.linalg.svd(a, compute_uv=False)


def cond(x, p=None):
    if p in (None, 2, -2):
        s = np.linalg.svd(x, compute_uv=False)
        return s[..., 0] / s[..., -1] if p != -2 else s[..., -1] / s[..., 0]
    return np.linalg.norm(x, p, (-2, -1)) * np.linalg.norm(np.linalg.inv(x), p, (-2, -1))


def tensorinv(a, ind=2):
    shape = np.shape(a)
    rows = int(np.prod(shape[:ind]))
    return np.reshape(np.linalg.inv(np.reshape(a, (rows, -1))), shape[ind:] + shape[:ind])


def tensorsolve(a, b, axes=None):
    if axes is not None:
        order = [d for d in range(np.ndim(a)) if d not in [k % np.ndim(a) for k in axes]]
        a = np.transpose(a, order + [k % np.ndim(a) for k in axes])
    unknown_shape = np.shape(a)[np.ndim(b):]
    matrix = np.reshape(a, (int(np.prod(np.shape(b))), int(np.prod(unknown_shape))))
    return np.reshape(np.linalg.solve(matrix, np.ravel(b)), unknown_shape)


# ---- eigh / eigvalsh read one triangle -------------------------------------------------------------
def _from_triangle(a, uplo):
    """The symmetric (Hermitian) matrix NumPy's eigh sees: the ``uplo`` triangle of ``a``
    mirrored (conjugated, and the diagonal's real part only, for complex ``a``, as LAPACK)."""
    if np.iscomplexobj(a):
        part = np.tril(a, -1) if uplo.upper() == "L" else np.triu(a, 1)
        return part + np.conj(_T(part)) + np.real(a) * np.eye(np.shape(a)[-1])
    if uplo.upper() == "L":
        return np.tril(a) + _T(np.tril(a, -1))
    return np.triu(a) + _T(np.triu(a, 1))


def _eigh_rewrite(previous, a, UPLO="L"):
    def eigh_of_triangle(a, *ignored):
        return previous(_from_triangle(a, UPLO), UPLO)

    return eigh_of_triangle


def _cholesky_rewrite(previous, a, upper=False):
    # cholesky reads the lower triangle (the upper one with upper=True) as eigh does: its
    # rules' symmetric gradient, pulled back through the mirroring, is the one finite
    # differences of NumPy's function give, which check_grads compares with
    def cholesky_of_triangle(a, *ignored):
        return previous(_from_triangle(a, "U" if upper else "L"), upper=upper)

    return cholesky_of_triangle


# ---- einsum call forms -------------------------------------------------------------------------------
_SUBLIST_LETTERS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"  # NumPy's order: 0 is 'A'


def _letters(sublist):
    return "".join("..." if s is Ellipsis else _SUBLIST_LETTERS[s]
                   for s in sublist)


def _tokens(subscript):
    """``'i...j'`` as ``['i', '...', 'j']``."""
    head, dots, tail = subscript.partition("...")
    return list(head) + ([dots] if dots else []) + list(tail)


def _explicit(subscripts):
    """(input subscripts, output subscript) with NumPy's implicit output made explicit."""
    subscripts = subscripts.replace(" ", "")
    if "->" in subscripts:
        ins, out = subscripts.split("->")
        return ins.split(","), out
    ins = subscripts.split(",")
    letters = [c for sub in ins for c in sub if c.isalpha()]
    once = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    return ins, ("..." if "..." in subscripts else "") + once


def _axis(tokens, k, ndim):
    if "..." in tokens and k > tokens.index("..."):
        return ndim - (len(tokens) - k)
    return k


def _without_repeats(sub, operand):
    """Take diagonals until no index repeats within this operand."""
    tokens = _tokens(sub)
    while True:
        letters = [t for t in tokens if t != "..."]
        repeated = next((c for c in letters if letters.count(c) > 1), None)
        if repeated is None:
            return "".join(tokens), operand
        i = tokens.index(repeated)
        j = tokens.index(repeated, i + 1)
        ndim = np.ndim(operand)
        operand = np.diagonal(operand, 0, _axis(tokens, i, ndim), _axis(tokens, j, ndim))
        tokens = [t for k, t in enumerate(tokens) if k not in (i, j)] + [repeated]


def _einsum_rewrite(previous, *args, **kwargs):
    if isinstance(args[0], str):
        subscripts, positions = args[0], list(range(1, len(args)))
    else:  # einsum(op0, sublist0, op1, sublist1, ..., [output sublist])
        n_ops = len(args) // 2
        ins = [_letters(args[2 * k + 1]) for k in range(n_ops)]
        subscripts = ",".join(ins) + ("->" + _letters(args[-1]) if len(args) % 2 else "")
        positions = [2 * k for k in range(n_ops)]
    ins, out = _explicit(subscripts)
    repeats = any(len(set(t for t in _tokens(s) if t != "...")) < len([t for t in _tokens(s) if t != "..."])
                  for s in ins)
    if isinstance(args[0], str) and not repeats:
        return None

    def einsum_rewritten(*call):
        pairs = [_without_repeats(sub, call[p]) for sub, p in zip(ins, positions)]
        return previous(",".join(s for s, _ in pairs) + "->" + out, *(op for _, op in pairs), **kwargs)

    return einsum_rewritten


# ---- NumPy 2 names in numpy.linalg -------------------------------------------------------------------
def _vecdot(x1, x2, axis=-1):
    """Σ conj(x1) x2 along ``axis``: NumPy's vecdot conjugates its first argument."""
    return np.sum((np.conj(x1) if np.iscomplexobj(x1) else x1) * x2, axis)


def _vecmat(x1, x2):
    """conj(x1) @ x2 over the last axes: NumPy's vecmat conjugates the vector."""
    return np.einsum("...j,...ji->...i", np.conj(x1) if np.iscomplexobj(x1) else x1, x2)


def _vector_norm(x, /, *, axis=None, keepdims=False, ord=2):
    if axis is None:
        y = np.linalg.norm(np.ravel(x), ord)
        return np.reshape(y, (1,) * np.ndim(x)) if keepdims else y
    return np.linalg.norm(x, ord, axis, keepdims)


_LINALG_ALIASES = {
    "matmul": lambda x1, x2, /: np.matmul(x1, x2),
    "outer": lambda x1, x2, /: np.outer(x1, x2),
    "tensordot": lambda x1, x2, /, *, axes=2: np.tensordot(x1, x2, axes),
    "vecdot": lambda x1, x2, /, *, axis=-1: _vecdot(x1, x2, axis),
    "matrix_transpose": lambda x, /: _T(x),
    "trace": lambda x, /, *, offset=0, dtype=None: np.trace(x, offset, -2, -1, dtype),
    "diagonal": lambda x, /, *, offset=0: np.diagonal(x, offset, -2, -1),
    "cross": lambda x1, x2, /, *, axis=-1: np.cross(x1, x2, axis=axis),
    "svdvals": lambda x, /: np.linalg.svd(x, compute_uv=False),
    "vector_norm": _vector_norm,
    "matrix_norm": lambda x, /, *, keepdims=False, ord="fro": np.linalg.norm(x, ord, (-2, -1), keepdims),
}

# ---- the table -------------------------------------------------------------------------------------------
composite_rule(np.linalg.matrix_power, matrix_power)
composite_rule(np.linalg.multi_dot, multi_dot)
composite_rule(np.linalg.lstsq, lstsq)
composite_rule(np.linalg.cond, cond)
composite_rule(np.linalg.tensorinv, tensorinv)
composite_rule(np.linalg.tensorsolve, tensorsolve)
extend_rule(np.linalg.eigh, _eigh_rewrite)
extend_rule(np.linalg.eigvalsh, _eigh_rewrite)
extend_rule(np.linalg.cholesky, _cholesky_rewrite)
extend_rule(np.einsum, _einsum_rewrite)
non_differentiable(np.linalg.matrix_rank)
for _name, _implementation in _LINALG_ALIASES.items():
    if hasattr(np.linalg, _name) and getattr(np.linalg, _name) not in rrule:
        composite_rule(getattr(np.linalg, _name), _implementation)
if hasattr(np, "vecdot"):  # NumPy 2 gufuncs
    composite_rule(np.vecdot, lambda x1, x2, /, **kwargs: _vecdot(x1, x2, kwargs.get("axis", -1)))
if hasattr(np, "matvec"):
    composite_rule(np.matvec, lambda x1, x2, /, **kw: np.einsum("...ij,...j->...i", x1, x2))
if hasattr(np, "vecmat"):
    composite_rule(np.vecmat, lambda x1, x2, /, **kw: _vecmat(x1, x2))
