"""Products and numpy.linalg with complex values, in both modes, against central finite
differences along the real and the imaginary direction of every input entry.

The convention (ChainRules'): for a real loss L of z = x + iy the cotangent is
∂L/∂x + i ∂L/∂y. A function with complex outputs is checked through
L = Re Σ conj(ȳ) f(z) for a random ȳ (its gradient is the pullback of ȳ) and, forward, by
comparing its jvp along a random complex direction with (f(z + hv) - f(z - hv)) / 2h.
Factorizations with a gauge (each eigenvector's phase) are checked through losses that
do not see it. Real inputs that give complex results (eig of a rotation) are among them."""

import numpy as np
import pytest

import adrules as ad
from adrules.registry import ComplexRuleError, frule, rrule
from adrules.rules import linalg

rng = np.random.default_rng(39)
H = 1e-6


def R(*shape):
    return rng.standard_normal(shape)


def C(*shape):
    return rng.standard_normal(shape) + 1j * rng.standard_normal(shape)


def hermitian(n, *batch):
    """A well-conditioned Hermitian positive definite matrix with spread eigenvalues."""
    q = np.linalg.qr(C(*batch, n, n))[0]
    return (q * np.arange(1.0, n + 1)) @ np.conj(np.swapaxes(q, -1, -2))


def _parts(y):
    return y if isinstance(y, tuple) else (y,)


def _like(y):
    """A random cotangent or tangent of y's kind: complex for complex y."""
    y = np.asarray(y)
    return C(*y.shape) if np.iscomplexobj(y) else R(*y.shape)


def fd_cotangent(loss, args, k):
    """∂L/∂x + i ∂L/∂y of the real ``loss(*args)`` with respect to ``args[k]``."""
    x = np.asarray(args[k])
    steps = (1.0, 1j) if np.iscomplexobj(x) else (1.0,)
    out = np.zeros(x.shape, complex if np.iscomplexobj(x) else float)
    for index in np.ndindex(x.shape):
        for unit in steps:
            e = np.zeros(x.shape, x.dtype)
            e[index] = unit * H
            up = loss(*args[:k], x + e, *args[k + 1:])
            down = loss(*args[:k], x - e, *args[k + 1:])
            out[index] += unit * (up - down) / (2 * H)
    return out


def fd_tangent(f, args, tangents):
    plus = f(*(a + H * t for a, t in zip(args, tangents)))
    minus = f(*(a - H * t for a, t in zip(args, tangents)))
    return tuple((p - m) / (2 * H) for p, m in zip(_parts(plus), _parts(minus)))


def check(f, *args, loss=None, rtol=1e-5, atol=1e-6):
    """Reverse: the gradient of a real loss of f's outputs; forward: f's jvp (or the
    loss's, when given: for outputs with a gauge), both against finite differences."""
    if loss is None:
        cotangents = [_like(y) for y in _parts(f(*args))]

        def real_loss(*a):
            return sum(np.real(np.sum(np.conj(c) * y)) for c, y in zip(cotangents, _parts(f(*a))))
    else:
        def real_loss(*a):
            return loss(f(*a))
    grads = ad.gradient(real_loss, *args)
    for k, g in enumerate(grads):
        expected = fd_cotangent(real_loss, args, k)
        np.testing.assert_allclose(g, expected, rtol=rtol, atol=atol, err_msg=f"reverse, argument {k}")
        assert np.iscomplexobj(g) == np.iscomplexobj(args[k]), f"cotangent {k} of the wrong kind"
    tangents = tuple(_like(a) for a in args)
    g = f if loss is None else real_loss
    _, dy = ad.jvp(g, args, tangents)
    for d, expected in zip(_parts(dy), fd_tangent(g, args, tangents)):
        np.testing.assert_allclose(d, expected, rtol=rtol, atol=atol, err_msg="forward")


def check_through(others, f, *args, **kwargs):
    """``check``, for a call whose derivative also runs through the rules of ``others``
    (shape functions, another family's): until those take complex values, the call must
    refuse with a ComplexRuleError rather than give a number."""
    if all(rrule.lookup(g).complex and frule.lookup(g).complex for g in others):
        check(f, *args, **kwargs)
    else:
        with pytest.raises(ComplexRuleError):
            check(f, *args, **kwargs)


# ---- products --------------------------------------------------------------------------
PRODUCTS = [
    (np.matmul, C(2, 3), C(3, 4)),
    (np.matmul, C(3), C(3)),
    (np.matmul, C(3), C(2, 3, 4)),
    (np.matmul, C(2, 4, 3), C(3)),
    (np.matmul, R(2, 3), C(3, 2)),  # a real operand: its cotangent stays real
    (np.dot, C(2, 3), C(3, 4)),
    (np.dot, C(3), C(3)),
    (np.dot, C(2, 2, 3), C(4, 3, 2)),
    (np.vdot, C(2, 3), C(3, 2)),
    (np.vdot, C(3), R(3)),
    (np.inner, C(2, 3), C(4, 3)),
    (np.outer, C(2, 3), C(4)),
    (np.kron, C(2, 3), C(2, 2)),
    (np.kron, R(2), C(3)),
    (lambda a, b: np.tensordot(a, b, 2), C(2, 3, 4), C(3, 4, 2)),
    (lambda a, b: np.tensordot(a, b, ([0], [1])), C(3, 2), C(4, 3)),
    (lambda a, b: np.einsum("ij,jk->ik", a, b), C(2, 3), C(3, 2)),
    (lambda a, b, c: np.einsum("ij,jk,k->i", a, b, c), C(2, 3), C(3, 2), C(2)),
    (lambda a, b: np.einsum("...ij,...j->...i", a, b), C(2, 3, 3), C(3)),
]


@pytest.mark.parametrize("case", PRODUCTS, ids=lambda c: getattr(c[0], "__name__", "f"))
def test_products(case):
    check(case[0], *case[1:])


def test_matrix_powers_and_chains():
    a, b, c = C(3, 3), C(3, 2), C(2, 3)
    check(lambda a: np.linalg.matrix_power(a, 3), a)
    check(lambda a: np.linalg.matrix_power(a + 3 * np.eye(3), -2), a)
    check(lambda a, b, c: np.linalg.multi_dot([a, b, c]), a, b, c)
    check(lambda a, b: np.linalg.matmul(a, b), a, b)
    check(lambda x, y: np.linalg.vecdot(x, y), C(2, 3), C(3))
    check(lambda x, y: np.vecdot(x, y), C(2, 3), C(3))
    check(lambda x, y: np.vecmat(x, y), C(3), C(2, 3, 2))
    check(lambda x, y: np.matvec(x, y), C(2, 3), C(3))


def test_numpy2_linalg_names():
    check(lambda x: np.linalg.vector_norm(x, axis=0, ord=3), C(3))
    check_through([np.ravel], lambda x: np.linalg.vector_norm(x), C(2, 3))
    check(lambda x: np.linalg.matrix_norm(x, ord="nuc"), C(3, 3))
    check(lambda x: np.linalg.svdvals(x), C(3, 2))
    check_through([np.swapaxes], lambda x: np.linalg.matrix_transpose(x), C(2, 3))
    check_through([np.trace], lambda x: np.linalg.trace(x @ x), C(3, 3))
    check_through([np.diagonal], lambda x: np.linalg.diagonal(x), C(3, 3))
    check_through([np.diagonal], lambda x, y: np.einsum("ii,ij->j", x, y), C(3, 3), C(3, 2))


# ---- inverses, solves, determinants ---------------------------------------------------
def well_conditioned(n, *batch):
    return C(*batch, n, n) + 3.0 * np.eye(n)


def test_inverse_and_solve():
    a = well_conditioned(3)
    check(np.linalg.inv, a)
    check(np.linalg.inv, well_conditioned(2, 2))
    check(np.linalg.solve, a, C(3))
    check(np.linalg.solve, a, C(3, 2))
    check(np.linalg.solve, R(3, 3) + 3 * np.eye(3), C(3))  # a real matrix, a complex right side
    check_through([np.reshape], lambda a: np.linalg.tensorinv(a, 1), well_conditioned(4))
    check_through([np.reshape], lambda a, b: np.linalg.tensorsolve(a, b),
                  well_conditioned(4).reshape(2, 2, 2, 2), C(2, 2))


def test_determinants():
    check(np.linalg.det, C(3, 3))
    check(np.linalg.det, C(2, 3, 3))
    singular = C(4, 4)
    singular[1] = 0.0  # no inverse: the cofactors come from the svd
    check(np.linalg.det, singular)
    check(np.linalg.slogdet, C(3, 3))  # a complex sign (a phase), a real log |det|
    check(np.linalg.slogdet, C(2, 3, 3))
    check(lambda a: np.linalg.slogdet(a)[1], R(3, 3))  # real: the sign is piecewise constant


# ---- Hermitian factorizations ---------------------------------------------------------
def _hermitian_in(a):
    """a, with the other triangle and the diagonal's imaginary part anything: cholesky and
    eigh read one triangle, and the real part of its diagonal, only (as LAPACK)."""
    return a + np.triu(C(*a.shape), 1) + 1j * np.diag(R(a.shape[-1]))


def test_cholesky():
    a = _hermitian_in(hermitian(3))
    by_triangle = [np.tril, np.triu, np.swapaxes]  # the triangle NumPy reads, mirrored
    check_through(by_triangle, np.linalg.cholesky, a)
    check_through(by_triangle, lambda a: np.linalg.cholesky(a, upper=True), np.conj(np.swapaxes(a, -1, -2)))
    check_through(by_triangle, np.linalg.cholesky, hermitian(2, 2))
    # the rules themselves (before the triangle's mirroring), on Hermitian matrices along
    # Hermitian directions
    _, back = linalg.cholesky_rrule(a := hermitian(3))
    g = C(3, 3)
    expected = fd_cotangent(lambda a: np.real(np.sum(np.conj(g) * np.linalg.cholesky((a + np.conj(a.T)) / 2))), (a,), 0)
    np.testing.assert_allclose(back(g)[1], expected, atol=1e-6)
    v = C(3, 3)
    v = v + np.conj(v.T)
    _, dl = linalg.cholesky_frule((ad.NoTangent(), v), a)
    np.testing.assert_allclose(dl, fd_tangent(np.linalg.cholesky, (a,), (v,))[0], atol=1e-6)


def _phase_free(out, c=C(3, 3), d=R(3)):
    """A loss of (w, v) that no eigenvector's phase changes."""
    w, v = out
    return np.sum(d * np.real(w)) + np.sum(np.real(c) * np.abs(v) ** 2)


def test_eigh_with_losses_blind_to_the_phases():
    a = _hermitian_in(hermitian(3))
    by_triangle = [np.tril, np.triu, np.swapaxes]
    check_through(by_triangle, np.linalg.eigh, a, loss=_phase_free)
    check_through(by_triangle, lambda a: np.linalg.eigh(a, "U"), np.conj(np.swapaxes(a, -1, -2)), loss=_phase_free)
    c = C(3, 3)
    check_through(by_triangle, np.linalg.eigh, a,
                  loss=lambda wv: np.real(np.sum(np.conj(c) * (wv[1] * np.exp(wv[0])) @ np.conj(wv[1].T))))
    check_through(by_triangle, np.linalg.eigvalsh, a)
    check_through(by_triangle, lambda a: np.linalg.eigvalsh(a, UPLO="U"), a)
    # the rules themselves, on a Hermitian matrix along a Hermitian direction
    a, v, g = hermitian(3), C(3, 3), R(3)
    v = v + np.conj(v.T)
    _, (dw, dv) = linalg.eigh_frule((ad.NoTangent(), v), a)
    np.testing.assert_allclose(dw, fd_tangent(lambda a: np.linalg.eigh(a)[0], (a,), (v,))[0], atol=1e-6)
    _, back = linalg.eigvalsh_rrule(a)
    expected = fd_cotangent(lambda a: np.sum(g * np.linalg.eigvalsh((a + np.conj(a.T)) / 2)), (a,), 0)
    np.testing.assert_allclose(back(g)[1], expected, atol=1e-6)


def test_eig_with_losses_blind_to_the_phases():
    c, d = C(3, 3), C(3)

    def loss(out):
        w, v = out
        return np.real(np.sum(np.conj(d) * w)) + np.sum(np.real(c) * np.abs(v) ** 2)

    check(np.linalg.eig, C(3, 3), loss=loss)
    check(np.linalg.eig, C(2, 3, 3), loss=loss)
    rotation = np.array([[0.0, -1.0, 0.3], [1.0, 0.2, 0.0], [0.1, 0.0, 2.0]])  # real, complex eigenvalues
    check(np.linalg.eig, rotation, loss=loss)
    check(np.linalg.eig, np.diag([1.0, 2.0, 3.5]) + 0.2 * R(3, 3), loss=loss)  # real, real eigenvalues
    check(lambda a: (np.linalg.eig(a)[1] * np.sin(np.linalg.eig(a)[0])) @ np.linalg.inv(np.linalg.eig(a)[1]),
          C(3, 3))  # v diag(sin w) v⁻¹ = sin(a): no gauge at all
    check(np.linalg.eigvals, C(3, 3))
    check(np.linalg.eigvals, rotation)


# ---- svd, qr, norms, pinv, lstsq ---------------------------------------------------------
@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 2)])
def test_svd(shape):
    a = C(*shape)
    check(lambda a: np.linalg.svd(a, compute_uv=False), a)
    c, k = C(*shape), min(shape[-2:])
    e, f = R(*shape[:-1], k), R(*shape[:-2], k, shape[-1])

    def loss(usv):  # u diag(s) vh is blind to each pair's common phase, not to their difference
        u, s, vh = usv
        return (np.real(np.sum(np.conj(c) * (u @ vh))) + np.sum(e * np.abs(u) ** 2)
                + np.sum(f * np.abs(vh) ** 2) + np.sum(s ** 2))

    check(lambda a: np.linalg.svd(a, full_matrices=False), a, loss=loss)


def test_qr():
    check(np.linalg.qr, C(3, 3))
    check(np.linalg.qr, C(4, 2))
    check(np.linalg.qr, C(2, 3, 2))


@pytest.mark.parametrize("ord", [None, 1, 2, 3, 0.5, np.inf, -np.inf])
def test_vector_norms(ord):
    check(lambda x: np.linalg.norm(x, ord), C(4))
    check(lambda x: np.linalg.norm(x, ord, axis=1), C(2, 3))


@pytest.mark.parametrize("ord", [None, "fro", "nuc", 1, -1, 2, -2, np.inf, -np.inf])
def test_matrix_norms(ord):
    check(lambda x: np.linalg.norm(x, ord), C(3, 3))


def test_condition_numbers():
    check(np.linalg.cond, C(3, 3))
    check(lambda a: np.linalg.cond(a, 1), well_conditioned(3))


def test_pinv_and_lstsq():
    check(np.linalg.pinv, C(3, 2))
    check(np.linalg.pinv, C(2, 3))
    a, b = C(4, 2), C(4)
    check(lambda a, b: np.linalg.lstsq(a, b)[0], a, b)
    check(lambda a, b: np.linalg.lstsq(a, b)[1], a, b)  # real residuals
    check(lambda a, b: np.linalg.lstsq(a, b)[0], R(4, 2), C(4, 2))


_B = C(3, 3)
SECOND_ORDER = {
    "inv of a product": lambda a: (np.real(np.sum(np.conj(_B) * np.linalg.inv(a @ a + 3 * np.eye(3))))
                                   + np.linalg.norm(a) ** 2),
    "det": lambda a: np.abs(np.linalg.det(a)) ** 2,
    "slogdet": lambda a: np.linalg.slogdet(a)[1] + np.real(np.linalg.slogdet(a)[0]),
    "eig": lambda a: np.sum(np.abs(np.linalg.eig(a)[1]) ** 2 * np.real(_B)) + np.real(np.sum(np.linalg.eigvals(a))),
    "svd": lambda a: np.real(np.sum(np.conj(_B) * (np.linalg.svd(a, full_matrices=False)[0]
                                                   @ np.linalg.svd(a, full_matrices=False)[2]))),
    "qr": lambda a: np.real(np.sum(np.conj(_B) * np.linalg.qr(a)[0])) + np.sum(np.abs(np.linalg.qr(a)[1]) ** 2),
    "nuclear norm": lambda a: np.linalg.norm(a, "nuc"),
}


@pytest.mark.parametrize("name", list(SECOND_ORDER))
def test_second_order(name):
    """The pullbacks are written in calls with complex rules: a Hessian-vector product of a
    real loss of complex matrices, as one of (Re a, Im a), against differences of gradients."""
    loss, a, v = SECOND_ORDER[name], C(3, 3), C(3, 3)
    fd = (ad.gradient(loss, a + H * v)[0] - ad.gradient(loss, a - H * v)[0]) / (2 * H)
    if not all(frule.lookup(f).complex and rrule.lookup(f).complex for f in (np.swapaxes, np.diagonal)):
        with pytest.raises(ComplexRuleError):  # conjugate transposes in the pullbacks
            ad.jvp(lambda a: ad.gradient(loss, a)[0], (a,), (v,))
        return
    _, hv = ad.jvp(lambda a: ad.gradient(loss, a)[0], (a,), (v,))
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-6)


# ---- scipy.linalg ----------------------------------------------------------------------------
def _triangular(lower):
    a = C(3, 3) + 3 * np.eye(3)
    return np.tril(a) if lower else np.triu(a)


@pytest.mark.parametrize("trans", [0, 1, 2])
@pytest.mark.parametrize("lower", [True, False])
def test_scipy_solve_triangular(trans, lower):
    sl = pytest.importorskip("scipy.linalg")
    a = _triangular(lower) + np.triu(C(3, 3), 1) if lower else _triangular(lower)  # the other triangle unread
    check(lambda a, b: sl.solve_triangular(a, b, trans=trans, lower=lower), a, C(3))
    check(lambda a, b: sl.solve_triangular(a, b, trans=trans, lower=lower, unit_diagonal=True), a, C(3, 2))
    check(lambda a, b: sl.solve_triangular(a, b, trans=trans, lower=lower), R(3, 3) + 3 * np.eye(3), C(3))


def test_scipy_solves_and_matrix_functions():
    sl = pytest.importorskip("scipy.linalg")
    a = C(3, 3) + 3 * np.eye(3)
    check(lambda b: sl.solve_banded((1, 1), np.array([[0, 1 + 1j, 2], [4, 5j, 6], [1, 2 - 1j, 0]]), b), C(3))
    check(lambda ab, b: sl.solve_banded((1, 0), ab, b), np.array([[4 + 1j, 5, 6], [1j, 2, 0]]), C(3, 2))
    check(sl.solve_sylvester, a, C(3, 3) + 3 * np.eye(3), C(3, 3))
    check(sl.sqrtm, hermitian(3) + 0.3 * C(3, 3))
    check(sl.expm, 0.5 * C(3, 3))
    check(sl.expm, 0.5 * C(2, 3, 3))


def test_scipy_cholesky_family():
    sl = pytest.importorskip("scipy.linalg")
    a = np.conj(_hermitian_in(hermitian(3)).T)  # SciPy reads the upper triangle by default
    by_triangle = [np.tril, np.triu, np.swapaxes]
    check_through(by_triangle, sl.cholesky, a)
    check_through(by_triangle, lambda a: sl.cholesky(a, lower=True), np.conj(a.T))
    check_through(by_triangle, lambda a: sl.cho_factor(a)[0], a)
    check_through(by_triangle, lambda a, b: sl.cho_solve(sl.cho_factor(a, lower=True), b), np.conj(a.T), C(3))
    factor = sl.cholesky(hermitian(3))
    check(lambda c, b: sl.cho_solve((c, False), b), factor, C(3))
    check(lambda c, b: sl.cho_solve((c, True), b), np.conj(factor.T), C(3, 2))
