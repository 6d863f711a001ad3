"""Rules: products, einsum and numpy.linalg.

Products are contractions, so most pullbacks are one einsum with the output's
subscripts swapped in for the operand's: ``einsum('ij,jk->ik', a, b)`` pulls ``g`` back
to ``a`` as ``einsum('ik,jk->ij', g, b)``. ``tensordot``, ``inner`` and the N-D cases of
``dot`` are written as einsums and share that pullback; ``matmul`` (and ``dot`` of
matrices) keep the direct BLAS formulas. Every product is bilinear, so every frule is
``f(da, b) + f(a, db)``.

Complex values follow ChainRules' convention: a pullback is the adjoint of the frule for
the real inner product Re tr(xᴴ y), so transposes become conjugate transposes (matmul:
ā = ḡ bᴴ, b̄ = aᴴ ḡ) and a holomorphic function's pullback multiplies by its conjugate
derivative (det). Conjugates are taken only of complex arrays (``_conj``, ``_H``): real
products run as they did.

Factorizations (cholesky, eigh, eigvalsh, eig, eigvals, qr, svd) use the standard formulas for
stacks of matrices (``...ij``), real or complex. cholesky and eigh(/eigvalsh) read one triangle
of a matrix that is meant to be symmetric (Hermitian): the rules here give the derivatives on
Hermitian matrices (the cotangent is Hermitian, the tangent is made Hermitian first), as in
autograd and JAX, and ``linalg_composed`` composes them with the read triangle's mirroring.
Eigen- and singular vectors have a gauge (a sign, or a phase for complex ones) that NumPy
picks: a loss of them must not depend on it, as in JAX (see eig, eigh and svd below).

Optional trailing arguments (``axis``, ``mode``, ``UPLO``...) follow ``_utils.py``: rules
take NumPy's own parameters and ``numpy_rrule`` fits each pullback to the call.
"""

import functools

import numpy as np

from ..registry import frule, rrule
from ..tangents import NoTangent, Thunk, ZeroTangent, is_zero, unthunk
from ._utils import numpy_frule, numpy_rrule, tangent_at

_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
_NUMPY2 = np.lib.NumpyVersion(np.__version__) >= "2.0.0"


def _T(x):
    return np.swapaxes(x, -1, -2)


def _is_complex(x):
    dtype = getattr(x, "dtype", None)  # (np.iscomplexobj costs a dispatch on every product)
    return dtype.kind == "c" if dtype is not None else isinstance(x, complex)


def _conj(x):
    """``x``'s complex conjugate; ``x`` itself when real (np.conjugate would copy it)."""
    return np.conjugate(x) if _is_complex(x) else x


def _H(x):
    """The conjugate transpose of a stack of matrices (the transpose of real ones)."""
    return np.conjugate(_T(x)) if _is_complex(x) else _T(x)


def _herm(x):
    """The Hermitian (symmetric, for real x) part of a stack of matrices."""
    return 0.5 * (x + _H(x))


def _indexable(g):
    """A Python-number cotangent (``back(1.0)``) as a NumPy scalar, which takes ``g[..., None]``."""
    if type(g) in (int, float):
        return np.float64(g)
    return np.complex128(g) if type(g) is complex else g


def _bilinear_tangent(f, a, b, da, db, *args):
    """The tangent of a bilinear product ``f(a, b, *args)``: ``f(da, b) + f(a, db)``."""
    dy = ZeroTangent()
    if not is_zero(da):
        dy = f(da, b, *args)
    if not is_zero(db):
        dy = dy + f(a, db, *args)
    return dy


def _unused(g):
    """Whether the cotangent ``g`` of a factor (eigen- or singular vectors) is zero: the
    loss read only the values. Its term is then skipped, not multiplied out: at repeated
    values (an identity, an isotropic covariance) ``_inverse_gaps`` is infinite, and
    inf · 0 would make the values' gradient NaN (JAX and PyTorch skip it alike)."""
    return is_zero(g) or (type(g) is np.ndarray and not g.any())


def _inverse_gaps(w):
    """F[..., i, j] = 1 / (w_j - w_i) off the diagonal, 0 on it (eigen- and singular-vector
    derivatives). Infinite when two values coincide: those derivatives do not exist."""
    n = np.shape(w)[-1]
    eye = np.eye(n)
    return (1.0 - eye) / (w[..., None, :] - w[..., :, None] + eye)


# ---- einsum, and the contractions written as einsums ---------------------------------
def _parse_einsum(subscripts):
    """(input subscripts, output subscripts) of an einsum, the implicit output made explicit."""
    if not isinstance(subscripts, str):
        raise NotImplementedError(
            "numpy.einsum: the interleaved form einsum(a, [0, 1], b, [1, 2]) has no rule; write "
            "the subscripts as a string, einsum('ij,jk->ik', a, b).")
    spec = subscripts.replace(" ", "")
    ins, arrow, out = spec.partition("->")
    ins = ins.split(",")
    if not arrow:  # numpy's implicit output: the labels used once, in ASCII order
        labels = "".join(ins).replace(".", "")
        once = sorted(c for c in set(labels) if labels.count(c) == 1)
        out = ("..." if "..." in spec else "") + "".join(once)
    for k, s in enumerate(ins):
        labels = s.replace("...", "")
        repeated = sorted(c for c in set(labels) if labels.count(c) > 1)
        if repeated:
            raise NotImplementedError(
                f"numpy.einsum({subscripts!r}): index {repeated[0]!r} repeats within operand {k} "
                f"({s!r}), which has no rule yet; take that diagonal first with np.diagonal "
                f"(np.trace for a sum over it), then contract.")
    return ins, out


def _einsum_cotangent(ins, out, operands, k, g, optimize=False):
    """The cotangent of operand ``k`` of ``einsum(ins -> out)``: ``g`` contracted with the
    other operands (their conjugates, for complex ones) into operand k's subscripts.

    An ellipsis stands for the broadcast of every operand's ellipsis axes, which operand k
    may have fewer of, or of size 1, anywhere in its subscripts: the contraction puts them
    first ("...ij"), with all of the broadcast's axes, then sums away those operand k does
    not have, and moves the rest to where operand k's ellipsis is."""
    target, shape = ins[k], np.shape(operands[k])
    subs = [out] + [s for i, s in enumerate(ins) if i != k]
    args = [g] + [_conj(x) for i, x in enumerate(operands) if i != k]  # linear in operand k
    head, dots, tail = target.partition("...")
    sizes = dict(zip(head, shape))
    sizes.update(zip(tail, shape[len(shape) - len(tail):]))
    missing = "".join(c for c in head + tail if c not in "".join(subs))
    if missing:  # labels summed within operand k alone: the cotangent is constant along them
        subs.append(missing)
        args.append(np.ones([sizes[c] for c in missing]))
    if not any("..." in s for s in ins):
        return np.einsum(",".join(subs) + "->" + target, *args, optimize=optimize)
    wide = np.broadcast_shapes(*(_ellipsis_shape(s, np.shape(x)) for s, x in zip(ins, operands)))
    if "..." not in out:  # summed in the output: constant along the ellipsis axes
        subs.append("...")
        args.append(np.ones(wide))
    dx = np.einsum(",".join(subs) + "->..." + head + tail, *args, optimize=optimize)
    own = _ellipsis_shape(target, shape) if dots else ()
    lead = len(wide) - len(own)
    if lead:
        dx = np.sum(dx, axis=tuple(range(lead)))
    ones = tuple(i for i, n in enumerate(own) if n == 1 and wide[lead + i] != 1)
    if ones:
        dx = np.sum(dx, axis=ones, keepdims=True)
    if dots and head:  # the ellipsis axes back after the head's
        n = len(own)
        dx = np.moveaxis(dx, tuple(range(n)), tuple(range(len(head), len(head) + n)))
    return dx


def _ellipsis_shape(sub, shape):
    """The axes of an operand of ``shape`` that its subscripts' ellipsis stands for."""
    head, dots, tail = sub.partition("...")
    return tuple(shape[len(head):len(shape) - len(tail)]) if dots else ()


def _einsum_cotangents(ins, out, operands, g, optimize=False):
    """One lazy cotangent per operand (a constant operand's is never computed)."""
    return tuple(Thunk(functools.partial(_einsum_cotangent, ins, out, operands, k, g, optimize))
                 for k in range(len(operands)))


@rrule.register(np.einsum, complex=True)
def einsum_rrule(subscripts, *operands, **kwargs):
    ins, out = _parse_einsum(subscripts)
    optimize = kwargs.get("optimize", False)

    def einsum_pullback(g):
        g = unthunk(g)
        return NoTangent(), NoTangent(), *_einsum_cotangents(ins, out, operands, g, optimize)

    return np.einsum(subscripts, *operands, **kwargs), einsum_pullback


@frule.register(np.einsum, complex=True)
def einsum_frule(tangents, subscripts, *operands, **kwargs):
    _parse_einsum(subscripts)
    dy = ZeroTangent()
    for k, dx in enumerate(tangents[2:]):
        if not is_zero(dx):
            dy = dy + np.einsum(subscripts, *operands[:k], dx, *operands[k + 1:], **kwargs)
    return np.einsum(subscripts, *operands, **kwargs), dy


def _tensordot_subscripts(na, nb, axes):
    """(ins, out) with ``einsum(ins -> out, a, b) == np.tensordot(a, b, axes)``."""
    if isinstance(axes, (int, np.integer)):
        axes_a, axes_b = list(range(na - axes, na)), list(range(axes))
    else:
        axes_a, axes_b = (list(np.atleast_1d(x)) for x in axes)
    axes_a, axes_b = [x % na for x in axes_a], [x % nb for x in axes_b]
    sa, sb = list(_LETTERS[:na]), list(_LETTERS[na:na + nb])
    for i, j in zip(axes_a, axes_b):
        sb[j] = sa[i]
    out = [c for i, c in enumerate(sa) if i not in axes_a] + [c for j, c in enumerate(sb) if j not in axes_b]
    return ["".join(sa), "".join(sb)], "".join(out)


def _dot_subscripts(na, nb):
    """(ins, out) with ``einsum(ins -> out, a, b) == np.dot(a, b)`` in every ndim case."""
    if na == 0 or nb == 0:
        return [_LETTERS[:na], _LETTERS[:nb]], _LETTERS[:max(na, nb)]
    return _tensordot_subscripts(na, nb, ([na - 1], [max(nb - 2, 0)]))


def _inner_subscripts(na, nb):
    if na == 0 or nb == 0:
        return _dot_subscripts(na, nb)
    return _tensordot_subscripts(na, nb, ([na - 1], [nb - 1]))


@numpy_rrule(np.tensordot, complex=True)
def tensordot_rrule(a, b, axes=2):
    ins, out = _tensordot_subscripts(np.ndim(a), np.ndim(b), axes)

    def tensordot_pullback(g):
        return NoTangent(), *_einsum_cotangents(ins, out, (a, b), g, True)

    return np.tensordot(a, b, axes), tensordot_pullback


@numpy_frule(np.tensordot, complex=True)
def tensordot_frule(tangents, a, b, axes=2):
    da, db = tangents[1], tangent_at(tangents, 1)
    return np.tensordot(a, b, axes), _bilinear_tangent(np.tensordot, a, b, da, db, axes)


@rrule.register(np.inner, complex=True)
def inner_rrule(a, b):
    ins, out = _inner_subscripts(np.ndim(a), np.ndim(b))

    def inner_pullback(g):
        g = unthunk(g)
        return NoTangent(), *_einsum_cotangents(ins, out, (a, b), g, True)

    return np.inner(a, b), inner_pullback


@frule.register(np.inner, complex=True)
def inner_frule(tangents, a, b):
    _, da, db = tangents
    return np.inner(a, b), _bilinear_tangent(np.inner, a, b, da, db)


# ---- matrix products ------------------------------------------------------------
def _matmul_cotangents(a, b, g):
    """Lazy (ā, b̄) = (ḡ bᴴ, aᴴ ḡ) of ``a @ b``; a 1-D operand is promoted as matmul does (a
    row on the left, a column on the right) and the promoted axis is dropped again."""
    a_vector, b_vector = np.ndim(a) == 1, np.ndim(b) == 1
    if a_vector and b_vector:  # an inner product: g is a scalar, no promotion needed
        if a is b:  # x @ x: one product serves both (the tracer adds them: the same bits)
            both = Thunk(lambda: g * _conj(b))
            return both, both
        return Thunk(lambda: g * _conj(b)), Thunk(lambda: g * _conj(a))
    g = _indexable(g)
    if b_vector:
        g, b = g[..., None], b[..., None]
    if a_vector:
        g, a = g[..., None, :], a[None, :]
    ga = Thunk(lambda: (g @ _H(b))[..., 0, :] if a_vector else g @ _H(b))
    gb = Thunk(lambda: (_H(a) @ g)[..., 0] if b_vector else _H(a) @ g)
    return ga, gb


@rrule.register(np.matmul, complex=True)
def matmul_rrule(a, b, **kwargs):
    if "axes" in kwargs or "axis" in kwargs:
        raise NotImplementedError("numpy.matmul(..., axes=...) has no rule yet; move the axes "
                                  "with np.moveaxis first.")

    def matmul_pullback(g):
        g = unthunk(g)
        return NoTangent(), *_matmul_cotangents(a, b, g)

    # np.matmul(a, b) without an empty **kwargs: the operator `a @ b` passes none, and
    # unpacking an empty dict costs as much as a small product
    return (np.matmul(a, b, **kwargs) if kwargs else np.matmul(a, b)), matmul_pullback


@frule.register(np.matmul, complex=True)
def matmul_frule(tangents, a, b, **kwargs):
    _, da, db = tangents
    return np.matmul(a, b, **kwargs), _bilinear_tangent(np.matmul, a, b, da, db)


@numpy_rrule(np.dot, complex=True)
def dot_rrule(a, b, out=None):
    na, nb = np.ndim(a), np.ndim(b)
    ins, result = _dot_subscripts(na, nb)

    def dot_pullback(g):
        if na >= 1 and 1 <= nb <= 2:  # the same contraction as matmul: BLAS
            return NoTangent(), *_matmul_cotangents(a, b, g)
        return NoTangent(), *_einsum_cotangents(ins, result, (a, b), g, True)

    return np.dot(a, b), dot_pullback


@numpy_frule(np.dot, complex=True)
def dot_frule(tangents, a, b, out=None):
    da, db = tangents[1], tangent_at(tangents, 1)
    return np.dot(a, b), _bilinear_tangent(np.dot, a, b, da, db)


@rrule.register(np.vdot, complex=True)
def vdot_rrule(a, b):
    def vdot_pullback(g):  # y = Σ conj(a) b: ā = conj(ḡ) b, b̄ = ḡ a
        g = unthunk(g)
        return NoTangent(), _conj(g) * np.reshape(b, np.shape(a)), g * np.reshape(a, np.shape(b))

    return np.vdot(a, b), vdot_pullback


@frule.register(np.vdot, complex=True)
def vdot_frule(tangents, a, b):
    _, da, db = tangents
    return np.vdot(a, b), _bilinear_tangent(np.vdot, a, b, da, db)


@numpy_rrule(np.outer, complex=True)
def outer_rrule(a, b, out=None):
    def outer_pullback(g):
        ga = Thunk(lambda: np.reshape(g @ _conj(np.ravel(b)), np.shape(a)))
        gb = Thunk(lambda: np.reshape(_conj(np.ravel(a)) @ g, np.shape(b)))
        return NoTangent(), ga, gb

    return np.outer(a, b), outer_pullback


@numpy_frule(np.outer, complex=True)
def outer_frule(tangents, a, b, out=None):
    da, db = tangents[1], tangent_at(tangents, 1)
    return np.outer(a, b), _bilinear_tangent(np.outer, a, b, da, db)


def _kron_subscripts(na, nb):
    """(padded shapes' ndim, subscripts of a, of b, of kron's output split into (a_i, b_i) pairs)."""
    nd = max(na, nb)
    sa, sb = _LETTERS[:nd], _LETTERS[nd:2 * nd]
    return nd, sa, sb, "".join(x + y for x, y in zip(sa, sb))


@rrule.register(np.kron, complex=True)
def kron_rrule(a, b):
    nd, sa, sb, sg = _kron_subscripts(np.ndim(a), np.ndim(b))
    shape_a = (1,) * (nd - np.ndim(a)) + np.shape(a)  # kron pads the smaller ndim with ones
    shape_b = (1,) * (nd - np.ndim(b)) + np.shape(b)
    split = [n for pair in zip(shape_a, shape_b) for n in pair]

    def kron_pullback(g):
        g = unthunk(g)
        g = np.reshape(g, split)  # kron's axis i is the pair (a_i, b_i)
        ga = Thunk(lambda: np.einsum(f"{sg},{sb}->{sa}", g, _conj(np.reshape(b, shape_b))))
        gb = Thunk(lambda: np.einsum(f"{sg},{sa}->{sb}", g, _conj(np.reshape(a, shape_a))))
        return NoTangent(), ga, gb

    return np.kron(a, b), kron_pullback


@frule.register(np.kron, complex=True)
def kron_frule(tangents, a, b):
    _, da, db = tangents
    return np.kron(a, b), _bilinear_tangent(np.kron, a, b, da, db)


# ---- inverses and solves ----------------------------------------------------------
def _vector_rhs(a, b):
    """Whether np.linalg.solve reads ``b`` as (a stack of) vectors rather than matrices."""
    return np.ndim(b) == 1 if _NUMPY2 else np.ndim(b) == np.ndim(a) - 1


@rrule.register(np.linalg.inv, complex=True)
def inv_rrule(a):
    y = np.linalg.inv(a)

    def inv_pullback(g):  # ā = -yᴴ ḡ yᴴ
        g = unthunk(g)
        yh = _H(y)
        return NoTangent(), -(yh @ g @ yh)

    return y, inv_pullback


@frule.register(np.linalg.inv, complex=True)
def inv_frule(tangents, a):
    _, da = tangents
    y = np.linalg.inv(a)
    return y, ZeroTangent() if is_zero(da) else -(y @ da @ y)


@rrule.register(np.linalg.solve, complex=True)
def solve_rrule(a, b):
    x = np.linalg.solve(a, b)
    vector = _vector_rhs(a, b)

    def solve_pullback(g):  # b̄ = a⁻ᴴ ḡ, ā = -b̄ xᴴ
        g = unthunk(g)
        gb = np.linalg.solve(_H(a), g[..., None] if vector else g)
        ga = -(gb @ _H(x[..., None] if vector else x))
        return NoTangent(), ga, gb[..., 0] if vector else gb

    return x, solve_pullback


@frule.register(np.linalg.solve, complex=True)
def solve_frule(tangents, a, b):
    _, da, db = tangents
    x = np.linalg.solve(a, b)
    vector = _vector_rhs(a, b)
    if is_zero(da) and is_zero(db):
        return x, ZeroTangent()
    rhs = ZeroTangent() if is_zero(db) else db[..., None] if vector else db  # b - a x moves by db - da x
    if not is_zero(da):
        rhs = rhs - da @ (x[..., None] if vector else x)
    dx = np.linalg.solve(a, rhs)
    return x, dx[..., 0] if vector else dx


def _cofactors(a, y):
    """∂ det(a) / ∂a, the cofactor matrix: det(a) a⁻ᵀ where a has an inverse (for complex
    a too: det is holomorphic, the pullback takes its conjugate). Where a
    matrix has none (rank-deficient input: the gradient still exists), from the SVD
    a = u diag(s) vh: det(u) det(vh) · u diag(∏_{j≠i} s_j) vh, with no division; in a
    batch, for those matrices only (the others' second derivatives stay those of a⁻¹)."""
    try:
        return y[..., None, None] * _T(np.linalg.inv(a))
    except np.linalg.LinAlgError:
        pass
    singular = np.equal(y, 0)  # what LAPACK's LU found no inverse for: an exact zero pivot
    if np.ndim(y) == 0:
        return _cofactors_by_svd(a)
    n = np.shape(a)[-1]
    where = singular[..., None, None]
    # each half computed on harmless stand-ins for the other half's matrices (an identity
    # has an inverse; distinct singular values keep the SVD's derivatives finite)
    regular = np.where(where, np.eye(n), a)
    spread = np.where(where, a, np.diag(np.arange(1.0, n + 1)))
    by_inverse = np.where(singular, 1.0, y)[..., None, None] * _T(np.linalg.inv(regular))
    return np.where(where, _cofactors_by_svd(spread), by_inverse)


def _cofactors_by_svd(a):
    n = np.shape(a)[-1]
    if n == 2:  # polynomials in a's entries: derivatives of every order exist, also at 0
        return np.stack([np.stack([a[..., 1, 1], -a[..., 1, 0]], -1),
                         np.stack([-a[..., 0, 1], a[..., 0, 0]], -1)], -2)
    if n == 3:  # each row the cross product of the other two
        r0, r1, r2 = a[..., 0, :], a[..., 1, :], a[..., 2, :]
        return np.stack([np.cross(r1, r2), np.cross(r2, r0), np.cross(r0, r1)], -2)
    # larger: the SVD's, whose second derivatives are NaN where singular values repeat
    u, s, vh = np.linalg.svd(a)
    sign = np.linalg.det(u) * np.linalg.det(vh)  # ±1; a phase for complex a
    u, vh = _conj(u), _conj(vh)  # det(a) a⁻ᵀ = sign conj(u) diag(∏_{j≠i} s_j) conj(vh)
    ones = np.ones_like(s[..., :1])
    before = np.cumprod(np.concatenate([ones, s[..., :-1]], axis=-1), axis=-1)  # ∏_{j<i}
    after = np.flip(np.cumprod(np.flip(np.concatenate([s[..., 1:], ones], axis=-1), -1), -1), -1)
    return sign[..., None, None] * (u * (before * after)[..., None, :]) @ vh


@rrule.register(np.linalg.det, complex=True)
def det_rrule(a):
    y = np.linalg.det(a)

    def det_pullback(g):  # d det = tr(cofactorsᵀ da) = det · tr(a⁻¹ da) where a⁻¹ exists
        g = unthunk(g)
        return NoTangent(), _indexable(g)[..., None, None] * _conj(_cofactors(a, y))

    return y, det_pullback


@frule.register(np.linalg.det, complex=True)
def det_frule(tangents, a):
    _, da = tangents
    y = np.linalg.det(a)
    if is_zero(da):
        return y, ZeroTangent()
    return y, np.einsum("...ij,...ij->...", _cofactors(a, y), da)


# With t = tr(a⁻¹ da): d logabsdet = Re t, and d sign = i Im(t) sign (a phase, for complex
# a; for real a the sign is piecewise constant and Im t = 0).
@rrule.register(np.linalg.slogdet, complex=True)
def slogdet_rrule(a):
    sign, logabsdet = np.linalg.slogdet(a)

    def slogdet_pullback(g):  # ā = (l̄ + i Re(i conj(s̄) sign)) a⁻ᴴ
        g = unthunk(g)
        gsign, glogabsdet = g
        if _is_complex(a):
            glogabsdet = np.real(glogabsdet) if not is_zero(glogabsdet) else np.zeros(np.shape(sign))
            if not is_zero(gsign):
                glogabsdet = glogabsdet - 1j * np.imag(np.conj(gsign) * sign)
        return NoTangent(), _indexable(glogabsdet)[..., None, None] * _H(np.linalg.inv(a))

    return (sign, logabsdet), slogdet_pullback


@frule.register(np.linalg.slogdet, complex=True)
def slogdet_frule(tangents, a):
    _, da = tangents
    sign, logabsdet = np.linalg.slogdet(a)
    if is_zero(da):
        return (sign, logabsdet), ZeroTangent()
    t = np.einsum("...ij,...ji->...", np.linalg.inv(a), da)
    if not _is_complex(t):
        return (sign, logabsdet), (ZeroTangent(), t)
    return (sign, logabsdet), (1j * np.imag(t) * sign, np.real(t))


# ---- factorizations -----------------------------------------------------------------
def _cholesky_phi(n):
    """Φ of Murray (2016) as a mask: the lower triangle, the diagonal halved."""
    return np.tri(n) - 0.5 * np.eye(n)


@rrule.register(np.linalg.cholesky, complex=True)
def cholesky_rrule(a, upper=False):
    L = np.linalg.cholesky(a)
    phi = _cholesky_phi(np.shape(a)[-1])

    def cholesky_pullback(g):  # ā = herm(L⁻ᴴ Φ(Lᴴ ḡ) L⁻¹), Murray (2016) eq. 10
        g = unthunk(g)
        p = phi * (_H(L) @ (_H(g) if upper else g))
        return NoTangent(), _herm(np.linalg.solve(_H(L), _H(np.linalg.solve(_H(L), _H(p)))))

    return _H(L) if upper else L, cholesky_pullback


@frule.register(np.linalg.cholesky, complex=True)
def cholesky_frule(tangents, a, upper=False):
    _, da = tangents
    L = np.linalg.cholesky(a)
    if is_zero(da):
        return _H(L) if upper else L, ZeroTangent()
    x = np.linalg.solve(L, _H(np.linalg.solve(L, _herm(da))))  # L⁻¹ da L⁻ᴴ (Hermitian)
    dL = L @ (_cholesky_phi(np.shape(a)[-1]) * x)
    return (_H(L), _H(dL)) if upper else (L, dL)


# eigh of a Hermitian matrix: each eigenvector is defined up to a phase (a sign, if real),
# which NumPy picks; its derivative here keeps vᴴ dv's diagonal zero (as JAX). A loss of
# the eigenvectors must not depend on their phases (|v|², v diag(f(w)) vᴴ do): the
# derivative of one that does is not defined, and finite differences of NumPy's choice
# differ from this rule's.
@numpy_rrule(np.linalg.eigh, complex=True)
def eigh_rrule(a, UPLO="L"):
    w, v = np.linalg.eigh(a, UPLO)

    def eigh_pullback(g):  # ā = herm(v (diag(w̄) + F ∘ vᴴv̄) vᴴ)
        gw, gv = g
        inner = gw[..., None] * np.eye(np.shape(w)[-1])
        if not _unused(gv):
            inner = inner + _inverse_gaps(w) * (_H(v) @ gv)
        return NoTangent(), _herm(v @ inner @ _H(v))

    return (w, v), eigh_pullback


@numpy_frule(np.linalg.eigh, complex=True)
def eigh_frule(tangents, a, UPLO="L"):
    da = tangents[1]
    w, v = np.linalg.eigh(a, UPLO)
    if is_zero(da):
        return (w, v), ZeroTangent()
    p = _H(v) @ _herm(da) @ v
    dw = np.diagonal(p, 0, -2, -1)  # real: p is Hermitian
    return (w, v), (np.real(dw) if _is_complex(dw) else dw, v @ (_inverse_gaps(w) * p))


@numpy_rrule(np.linalg.eigvalsh, complex=True)
def eigvalsh_rrule(a, UPLO="L"):
    w, v = np.linalg.eigh(a, UPLO)

    def eigvalsh_pullback(g):  # ā = v diag(w̄) vᴴ
        return NoTangent(), (v * g[..., None, :]) @ _H(v)

    return w, eigvalsh_pullback


@numpy_frule(np.linalg.eigvalsh, complex=True)
def eigvalsh_frule(tangents, a, UPLO="L"):
    da = tangents[1]
    w, v = np.linalg.eigh(a, UPLO)
    if is_zero(da):
        return w, ZeroTangent()
    dw = np.einsum("...ji,...jk,...ki->...i", _conj(v), da, v)
    return w, np.real(dw) if _is_complex(dw) else dw


# ---- eig of general matrices -------------------------------------------------------------
# a = v diag(w) v⁻¹, eigenvalues and eigenvectors complex (real when all the eigenvalues
# of a real matrix are). NumPy scales each eigenvector to norm 1 and picks its phase: the
# derivative here keeps the norm (Re vᵢᴴ dvᵢ = 0) and leaves the phase where the formula
# puts it, so a loss of the eigenvectors must not depend on their phases (|v|²,
# v[j, i] conj(v[k, i]) within eigenvector i, v diag(f(w)) v⁻¹ do), as in JAX.
def _eig_tangents(w, v, da):
    x = np.linalg.solve(v, da @ v)  # v⁻¹ da v
    du = v @ (_inverse_gaps(w) * x)
    dv = du - v * np.real(np.sum(_conj(v) * du, axis=-2, keepdims=True))  # keeps |vᵢ| = 1
    return np.diagonal(x, 0, -2, -1), dv


def _eig_cotangent(w, v, gw, gv):
    """ā = v⁻ᴴ (diag(w̄) + conj(F) ∘ vᴴṽ) vᴴ, ṽ = v̄ - v Re(diag(vᴴv̄)): the frule's adjoint."""
    inner = ZeroTangent() if is_zero(gw) else gw[..., None] * np.eye(np.shape(w)[-1])
    if not _unused(gv):
        gv = gv - v * np.real(np.sum(_conj(v) * gv, axis=-2, keepdims=True))
        inner = inner + _conj(_inverse_gaps(w)) * (_H(v) @ gv)
    if is_zero(inner):
        return ZeroTangent()
    return np.linalg.solve(_H(v), inner @ _H(v))


@rrule.register(np.linalg.eig, complex=True)
def eig_rrule(a):
    w, v = np.linalg.eig(a)

    def eig_pullback(g):
        gw, gv = unthunk(g)
        return NoTangent(), _eig_cotangent(w, v, unthunk(gw), unthunk(gv))

    return (w, v), eig_pullback


@frule.register(np.linalg.eig, complex=True)
def eig_frule(tangents, a):
    _, da = tangents
    w, v = np.linalg.eig(a)
    return (w, v), ZeroTangent() if is_zero(da) else _eig_tangents(w, v, da)


@rrule.register(np.linalg.eigvals, complex=True)
def eigvals_rrule(a):
    w, v = np.linalg.eig(a)

    def eigvals_pullback(g):  # ā = v⁻ᴴ diag(w̄) vᴴ
        return NoTangent(), _eig_cotangent(w, v, unthunk(g), ZeroTangent())

    return w, eigvals_pullback


@frule.register(np.linalg.eigvals, complex=True)
def eigvals_frule(tangents, a):
    _, da = tangents
    w, v = np.linalg.eig(a)
    if is_zero(da):
        return w, ZeroTangent()
    return w, np.einsum("...ij,...ji->...i", np.linalg.inv(v), da @ v)


def _check_qr(a, mode):
    if mode != "reduced":
        raise NotImplementedError(f"numpy.linalg.qr(..., mode={mode!r}) has no rule; use the "
                                  f"default mode='reduced'.")
    m, n = np.shape(a)[-2:]
    if m < n:
        raise NotImplementedError(f"numpy.linalg.qr: the rule needs a square or tall matrix, got "
                                  f"{m}x{n}; factor the transpose instead.")


def _solve_right(x, r):
    """x r⁻¹ for a square r (a triangular solve, done as a general one since numpy has none)."""
    return _T(np.linalg.solve(_T(r), _T(x)))


# (LAPACK's r has a real diagonal, complex a too: the factorization has no phase to pick)
@numpy_rrule(np.linalg.qr, complex=True)
def qr_rrule(a, mode="reduced"):
    _check_qr(a, mode)
    q, r = np.linalg.qr(a)
    lower_half_diagonal = _cholesky_phi(np.shape(r)[-1])  # (the diagonal is 0 for real a)

    def qr_pullback(g):  # ā = q r̄ + (q (Φ(qᴴq̄ - q̄ᴴq + r r̄ᴴ - r̄ rᴴ) - qᴴq̄) + q̄) r⁻ᴴ
        gq, gr = g
        qgq, rgr = _H(q) @ gq, r @ _H(gr)
        lower = lower_half_diagonal * (qgq - _H(qgq) + rgr - _H(rgr))
        return NoTangent(), q @ gr + _solve_right(q @ (lower - qgq) + gq, _H(r))

    return (q, r), qr_pullback


@numpy_frule(np.linalg.qr, complex=True)
def qr_frule(tangents, a, mode="reduced"):
    _check_qr(a, mode)
    da = tangents[1]
    q, r = np.linalg.qr(a)
    if is_zero(da):
        return (q, r), ZeroTangent()
    x = _H(q) @ _solve_right(da, r)  # qᴴ da r⁻¹ = (skew-Hermitian qᴴdq) + (upper dr r⁻¹)
    below = np.tri(np.shape(r)[-1], k=-1) * x
    dr = x - below + _H(below)
    if _is_complex(x):  # dr's diagonal stays real
        dr = dr - 1j * np.eye(np.shape(r)[-1]) * np.imag(x)
    dr = dr @ r
    return (q, r), (_solve_right(da - q @ dr, r), dr)


# Complex svd: each pair (uᵢ, vᵢ) is defined up to one common phase, which NumPy picks; a
# loss of u and vh must not depend on it (u diag(s) vh, |u|², uᵢ vᵢᴴ do). The change of
# uᵢ's phase relative to vᵢ's (Im of (uᴴ da v)ᵢᵢ / sᵢ) is put in du, as JAX does.
def _svd_cotangent(u, s, vh, gu, gs, gvh):
    """ā for a = u diag(s) vh (reduced svd); Townsend (2016) for the u and vh terms."""
    ga = (u * gs[..., None, :]) @ vh
    if _unused(gu) and _unused(gvh):
        return ga
    v, gv = _H(vh), _H(gvh)
    m, n, k = np.shape(u)[-2], np.shape(v)[-2], np.shape(s)[-1]
    f = _inverse_gaps(s * s)
    utgu, vtgv = _H(u) @ gu, _H(v) @ gv
    inner = (f * (utgu - _H(utgu))) * s[..., None, :] + s[..., :, None] * (f * (vtgv - _H(vtgv)))
    if _is_complex(utgu):  # the relative phase of uᵢ and vᵢ
        inner = inner + 1j * np.eye(k) * (np.imag(np.diagonal(utgu, 0, -2, -1)) / s)[..., None, :]
    ga = ga + u @ inner @ vh
    if m > k:  # tall: the part of ū outside span(u)
        ga = ga + (gu - u @ utgu) / s[..., None, :] @ vh
    if n > k:  # wide: the part of v̄ outside span(v)
        ga = ga + (u / s[..., None, :]) @ _H(gv - v @ vtgv)
    return ga


def _svd_tangents(u, s, vh, da):
    """(du, ds, dvh) for a = u diag(s) vh (reduced svd)."""
    v = _H(vh)
    m, n, k = np.shape(u)[-2], np.shape(v)[-2], np.shape(s)[-1]
    p = _H(u) @ da @ v
    f = _inverse_gaps(s * s)
    ds = np.diagonal(p, 0, -2, -1)
    du = u @ (f * (p * s[..., None, :] + s[..., :, None] * _H(p)))
    dv = v @ (f * (s[..., :, None] * p + _H(p) * s[..., None, :]))
    if _is_complex(p):  # ds is real; the relative phase of uᵢ and vᵢ goes to du
        du = du + u * (1j * np.imag(ds) / s)[..., None, :]
        ds = np.real(ds)
    if m > k:
        du = du + (da @ v - u @ p) / s[..., None, :]
    if n > k:
        dv = dv + (_H(da) @ u - v @ _H(p)) / s[..., None, :]
    return du, ds, _H(dv)


def _check_svd(a, full_matrices, compute_uv, hermitian):
    m, n = np.shape(a)[-2:]
    if compute_uv and full_matrices and m != n:
        raise NotImplementedError("numpy.linalg.svd: the rule needs full_matrices=False (the extra "
                                  "columns of a full u or vh are not determined by a).")
    if hermitian:
        raise NotImplementedError("numpy.linalg.svd(..., hermitian=True) has no rule; use "
                                  "np.linalg.eigh for symmetric matrices.")


@numpy_rrule(np.linalg.svd, complex=True)
def svd_rrule(a, full_matrices=True, compute_uv=True, hermitian=False):
    _check_svd(a, full_matrices, compute_uv, hermitian)
    u, s, vh = np.linalg.svd(a, full_matrices=False)

    def svd_pullback(g):
        gu, gs, gvh = g if compute_uv else (ZeroTangent(), g, ZeroTangent())
        return NoTangent(), _svd_cotangent(u, s, vh, gu, gs, gvh)

    return ((u, s, vh) if compute_uv else s), svd_pullback


@numpy_frule(np.linalg.svd, complex=True)
def svd_frule(tangents, a, full_matrices=True, compute_uv=True, hermitian=False):
    _check_svd(a, full_matrices, compute_uv, hermitian)
    da = tangents[1]
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    if not compute_uv:
        if is_zero(da):
            return s, ZeroTangent()
        ds = np.einsum("...ik,...ij,...kj->...k", _conj(u), da, _conj(vh))
        return s, np.real(ds) if _is_complex(ds) else ds
    return (u, s, vh), ZeroTangent() if is_zero(da) else _svd_tangents(u, s, vh, da)


# ---- norms ------------------------------------------------------------------------
def _norm_axes(x, ord, axis):
    """(axes reduced, whether it is a matrix norm) for np.linalg.norm(x, ord, axis)."""
    ndim = np.ndim(x)
    if axis is None:
        return tuple(range(ndim)), ord is not None and ndim == 2
    axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    return tuple(d % ndim for d in axes), len(axes) == 2


def _share_ties(hits, axes):
    """``hits`` (where the max/min is attained) shared equally among ties: a fair subgradient."""
    return hits / np.sum(hits, axis=axes, keepdims=True)


def _spectral_direction(x, ord, axes):
    """∂‖x‖/∂x for the nuclear norm and the largest/smallest singular value, via the svd."""
    u, s, vh = np.linalg.svd(np.moveaxis(x, axes, (-2, -1)), full_matrices=False)
    if ord == 2:
        u, vh = u[..., :, :1], vh[..., :1, :]
    elif ord == -2:
        u, vh = u[..., :, -1:], vh[..., -1:, :]
    return np.moveaxis(u @ vh, (-2, -1), axes)


def _sign(x):
    """x / |x| (0 at 0): np.sign, also for complex x (NumPy 1 takes the sign of the real part)."""
    if not _is_complex(x):
        return np.sign(x)
    size = np.abs(x)
    return x / np.where(size == 0, 1.0, size)


def _norm_direction(x, y, ord, axes, matrix):
    """∂‖x‖/∂x (∂/∂Re x + i ∂/∂Im x for complex x), given the norm ``y`` with the reduced
    axes kept."""
    if ord in (None, "fro") or (ord == 2 and not matrix):
        return x / np.where(y == 0, 1.0, y)  # the gradient at x = 0 is taken as 0
    if matrix and ord in ("nuc", 2, -2):
        return _spectral_direction(x, ord, axes)
    if matrix:  # ±1: extreme column sums, ±inf: extreme row sums, of |x|
        summed = axes[0] if ord in (1, -1) else axes[1]
        totals = np.sum(np.abs(x), axis=summed, keepdims=True)
        return _sign(x) * _share_ties(totals == y, axes)
    if ord in (np.inf, -np.inf):
        return _sign(x) * _share_ties(np.abs(x) == y, axes)
    if ord == 0:
        return 0.0 * x  # counts nonzeros: piecewise constant
    if ord == 1:
        return _sign(x)
    return _sign(x) * (np.abs(x) / np.where(y == 0, 1.0, y)) ** (ord - 1)


def _keep_axes(y, axes, ndim):
    """``y`` with the reduced ``axes`` put back as length-1 axes (what keepdims=True gives)."""
    return y[tuple(None if d in axes else slice(None) for d in range(ndim))]


@numpy_rrule(np.linalg.norm, complex=True)
def norm_rrule(x, ord=None, axis=None, keepdims=False):
    axes, matrix = _norm_axes(x, ord, axis)
    y = np.linalg.norm(x, ord, axis, keepdims)
    yk = y if keepdims else _keep_axes(y, axes, np.ndim(x))

    def norm_pullback(g):
        gk = g if keepdims else _keep_axes(_indexable(g), axes, np.ndim(x))
        return NoTangent(), gk * _norm_direction(x, yk, ord, axes, matrix)

    return y, norm_pullback


@numpy_frule(np.linalg.norm, complex=True)
def norm_frule(tangents, x, ord=None, axis=None, keepdims=False):
    dx = tangents[1]
    axes, matrix = _norm_axes(x, ord, axis)
    y = np.linalg.norm(x, ord, axis, keepdims)
    if is_zero(dx):
        return y, ZeroTangent()
    yk = y if keepdims else _keep_axes(y, axes, np.ndim(x))
    direction = _norm_direction(x, yk, ord, axes, matrix)
    if _is_complex(direction):  # dy = Re Σ conj(direction) dx: the norm is real
        return y, np.real(np.sum(np.conj(direction) * dx, axis=axes, keepdims=keepdims))
    return y, np.sum(direction * dx, axis=axes, keepdims=keepdims)
