"""Rules of rules/linalg.py: products, einsum and numpy.linalg, against finite
differences (adrules.testing). Factorizations with a gauge (eigh, svd) are checked
through losses that do not see it (eigenvalues, squared vector entries)."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule

rng = np.random.default_rng(11)


def R(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def well_conditioned(n, *batch, dtype=np.float64):
    return (R(*batch, n, n) + 3.0 * np.eye(n)).astype(dtype)


def spread_singular_values(m, n, *batch):
    """A random m x n matrix with singular values 1, 2, 3..., far apart and from zero."""
    k = min(m, n)
    u, v = np.linalg.qr(R(*batch, m, k))[0], np.linalg.qr(R(*batch, n, k))[0]
    return (u * np.arange(k, 0, -1.0)) @ np.swapaxes(v, -1, -2)


def case(f, *args, **fkwargs):
    """One row of the rule table: ``f(*args, **fkwargs)``."""
    name = getattr(f, "__name__", "f")
    shapes = ",".join(str(np.shape(a)) if isinstance(a, np.ndarray) else repr(a) for a in args)
    return pytest.param(f, args, fkwargs, id=f"{name}[{shapes}]")


F32 = np.float32

RULES = [
    # products, every ndim case
    case(np.dot, R(3), R(3)),
    case(np.dot, R(2, 3), R(3, 4)),
    case(np.dot, R(2, 3), R(3)),
    case(np.dot, R(3), R(3, 4)),
    case(np.dot, 2.0, R(3, 4)),
    case(np.dot, R(2, 3), np.float64(-1.5)),
    case(np.dot, R(2, 2, 3), R(3)),
    case(np.dot, R(2, 2, 3), R(4, 3, 2)),
    case(np.dot, R(3), R(4, 3, 2)),
    case(np.dot, R(2, 3, dtype=F32), R(3, 2, dtype=F32)),
    case(np.matmul, R(3), R(3)),
    case(np.matmul, R(2, 3), R(3, 4)),
    case(np.matmul, R(2, 1, 2, 3), R(4, 3, 5)),  # broadcast batches
    case(np.matmul, R(3), R(2, 3, 4)),
    case(np.matmul, R(2, 4, 3), R(3)),
    case(np.matmul, R(2, 2, 3, dtype=F32), R(3, 2, dtype=F32)),
    case(np.vdot, R(2, 3), R(3, 2)),
    case(np.inner, R(3), R(3)),
    case(np.inner, R(2, 3), R(4, 3)),
    case(np.inner, R(3), 2.0),
    case(np.outer, R(2, 3), R(4)),
    case(np.tensordot, R(2, 3, 4), R(3, 4, 5)),
    case(np.tensordot, R(2, 3, 4), R(4, 3), ([1, 2], [1, 0])),
    case(np.tensordot, R(2, 3), R(4, 2), axes=([0], [1])),
    case(np.tensordot, R(2, 3), R(4), 0),
    case(np.kron, R(2, 3), R(3, 2)),
    case(np.kron, R(3), R(2, 2)),
    # einsum: explicit, implicit, ellipsis with broadcasting, labels summed in one operand
    case(np.einsum, "ij,jk->ik", R(2, 3), R(3, 4)),
    case(np.einsum, "ij,jk", R(2, 3), R(3, 4)),
    case(np.einsum, "...ij,...jk", R(2, 1, 2, 3), R(4, 3, 5)),
    case(np.einsum, "...ij,jk->...ik", R(2, 2, 3), R(3, 4)),
    case(np.einsum, "ij->i", R(2, 3)),
    case(np.einsum, "ij->", R(2, 3)),
    case(np.einsum, "i,j,k", R(2), R(3), R(2)),
    case(np.einsum, "bij,bjk,bkl->bil", R(2, 2, 3), R(2, 3, 2), R(2, 2, 2)),
    case(np.einsum, "i, ...i -> ...", R(3), R(4, 2, 3)),
    case(np.einsum, "ij,j->i", R(2, 3, dtype=F32), R(3, dtype=F32)),
    # an ellipsis at the tail or in the center, standing for more axes, or axes of size 1,
    # in one operand than in the other (the cotangent had the broadcast's shape)
    case(np.einsum, "ij...,jk...->ik...", R(3, 2, 5), R(2, 4)),
    case(np.einsum, "ij...,jk...->ik...", R(3, 2), R(2, 4, 2, 5)),
    case(np.einsum, "i...j,j...k->i...k", R(2, 5, 3), R(3, 2, 1, 4)),
    case(np.einsum, "i...j,jk", R(2, 5, 1, 3), R(3, 4)),
    case(np.einsum, "i...,i...", R(2, 5, 1), R(2, 3)),
    case(np.einsum, "i...,i...->...", R(2, 1, 5), R(2, 4, 1)),
    case(np.einsum, "...ij,...jk->...ik", R(3, 2), R(5, 2, 4)),
    case(np.einsum, "...ii->...i", R(2, 3, 3)),
    # inverses, solves, determinants
    case(np.linalg.inv, well_conditioned(3)),
    case(np.linalg.inv, well_conditioned(3, 2)),
    case(np.linalg.inv, well_conditioned(3, dtype=F32)),
    case(np.linalg.solve, well_conditioned(3), R(3)),
    case(np.linalg.solve, well_conditioned(3, 2), R(3)),  # a batch of systems, one b
    case(np.linalg.solve, well_conditioned(3), R(3, 2)),
    case(np.linalg.solve, well_conditioned(3, 2), R(2, 3, 2)),
    case(np.linalg.solve, well_conditioned(3), R(2, 3, 1)),  # broadcast a
    case(np.linalg.solve, well_conditioned(3, dtype=F32), R(3, dtype=F32)),
    case(np.linalg.det, well_conditioned(3)),
    case(np.linalg.det, well_conditioned(3, 2)),
    case(np.linalg.slogdet, well_conditioned(3)),
    case(np.linalg.slogdet, -well_conditioned(3, 2)),
    # eig of real matrices with real, distinct eigenvalues: unit eigenvectors, their sign the
    # only gauge, so none left locally (complex ones: tests/test_complex_linalg.py)
    case(np.linalg.eig, np.diag([1.0, 2.5, 4.0]) + 0.3 * R(3, 3)),
    case(np.linalg.eigvals, np.diag([1.0, 2.5, 4.0]) + 0.3 * R(2, 3, 3)),
    # qr and svd (no gauge left in numpy's outputs locally)
    case(np.linalg.qr, R(3, 3)),
    case(np.linalg.qr, R(4, 3)),
    case(np.linalg.qr, R(2, 4, 2)),
    case(np.linalg.svd, R(3, 4), compute_uv=False),
    case(np.linalg.svd, spread_singular_values(3, 3)),  # square: full_matrices=True is fine
    case(np.linalg.svd, spread_singular_values(4, 2), full_matrices=False),
    case(np.linalg.svd, R(2, 4, 3), False, False),
    case(np.linalg.svd, R(3, 3, dtype=F32), compute_uv=False),
    # norms: vector ords, matrix ords, axes, keepdims
    case(np.linalg.norm, R(5)),
    case(np.linalg.norm, R(5), 1),
    case(np.linalg.norm, R(5), np.inf),
    case(np.linalg.norm, R(5), -np.inf),
    case(np.linalg.norm, R(5), 3),
    case(np.linalg.norm, R(5), 0),
    case(np.linalg.norm, R(2, 3, 4)),
    case(np.linalg.norm, R(3, 4), "fro"),
    case(np.linalg.norm, R(3, 4), "nuc"),
    case(np.linalg.norm, R(3, 4), 2),
    case(np.linalg.norm, R(4, 3), -2),
    case(np.linalg.norm, R(3, 4), 1),
    case(np.linalg.norm, R(3, 4), -1),
    case(np.linalg.norm, R(3, 4), np.inf),
    case(np.linalg.norm, R(3, 4), -np.inf),
    case(np.linalg.norm, R(2, 3, 4), None, 1),
    case(np.linalg.norm, R(2, 3, 4), 2, (0, 2)),
    case(np.linalg.norm, R(2, 3, 4), "nuc", (2, 1), True),
    case(np.linalg.norm, R(2, 3, 4), ord=1, axis=-1, keepdims=True),
    case(np.linalg.norm, R(2, 3, 4), ord=np.inf, axis=(1, 2)),
    case(np.linalg.norm, R(3, 4, dtype=F32), axis=0),
]


@pytest.mark.parametrize("f, args, fkwargs", RULES)
def test_rrule(f, args, fkwargs):
    check_rrule(f, *args, fkwargs=fkwargs)


@pytest.mark.parametrize("f, args, fkwargs", RULES)
def test_frule(f, args, fkwargs):
    check_frule(f, *args, fkwargs=fkwargs)


# ---- symmetric-input and gauge-carrying factorizations, through the tracer -----------

def sym(a):
    return 0.5 * (a + np.einsum("...ij->...ji", a))


def spd(a):
    """A symmetric positive definite matrix that is a smooth function of any square ``a``."""
    return np.einsum("...ij,...kj->...ik", a, a) + 3.0 * np.eye(np.shape(a)[-1])


def eigh_loss(a):
    w, v = np.linalg.eigh(sym(a) + np.diag([0.0, 3.0, 6.0]))  # eigenvalues kept apart
    return [w, v ** 2]


def eigh_upper_loss(a):
    w, v = np.linalg.eigh(sym(a) + np.diag([0.0, 3.0, 6.0]), "U")
    return [w * w, v ** 2]


def svd_loss(a):
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    return [s, u ** 2, vh ** 2]


FACTORIZATIONS = [
    pytest.param(lambda a: np.linalg.cholesky(spd(a)), (R(3, 3),), id="cholesky"),
    pytest.param(lambda a: np.linalg.cholesky(spd(a)), (R(2, 3, 3),), id="cholesky-batched"),
    pytest.param(lambda a: np.linalg.cholesky(spd(a), upper=True), (R(3, 3),), id="cholesky-upper"),
    pytest.param(eigh_loss, (R(3, 3),), id="eigh"),
    pytest.param(eigh_loss, (R(2, 3, 3),), id="eigh-batched"),
    pytest.param(eigh_upper_loss, (R(3, 3),), id="eigh-UPLO"),
    pytest.param(lambda a: np.linalg.eigvalsh(sym(a)) ** 2, (R(2, 3, 3),), id="eigvalsh"),
    pytest.param(svd_loss, (spread_singular_values(4, 3),), id="svd-tall"),
    pytest.param(svd_loss, (spread_singular_values(3, 4),), id="svd-wide"),
    pytest.param(svd_loss, (spread_singular_values(3, 3, 2),), id="svd-batched"),
    pytest.param(lambda a: np.linalg.svd(a, full_matrices=False)[0] ** 2, (R(3, 3),), id="svd-square-u"),
    pytest.param(lambda a: list(np.linalg.qr(a)), (R(4, 3),), id="qr-r-and-q"),
]


@pytest.mark.parametrize("f, args", FACTORIZATIONS)
def test_factorizations(f, args):
    check_grads(f, *args, order=1)


@pytest.mark.parametrize("f, args", [
    pytest.param(lambda a: np.linalg.cholesky(spd(a)) ** 2, (R(3, 3),), id="cholesky"),
    pytest.param(lambda a: eigh_loss(a)[0] ** 2, (R(3, 3),), id="eigh"),
    pytest.param(lambda a: svd_loss(a)[0] ** 2, (R(3, 2),), id="svd"),
])
def test_factorizations_second_order(f, args):
    check_grads(f, *args, order=2)


def test_cholesky_float32():
    a = R(3, 3, dtype=F32)
    check_grads(lambda x: np.linalg.cholesky(spd(x)), a, order=1)
    assert ad.gradient(lambda x: np.linalg.cholesky(spd(x))[2, 1], a)[0].dtype == F32


# ---- second order for the common products and solves ---------------------------------

SECOND_ORDER = [
    pytest.param(lambda a, b: np.dot(a, b) ** 2, (R(2, 3), R(3, 2)), id="dot"),
    pytest.param(lambda a, b: a.dot(b) ** 2, (R(2, 2, 3), R(2, 3, 2)), id="dot-ND"),
    pytest.param(lambda a, b: (a @ b) ** 2, (R(2, 3), R(3, 2)), id="matmul"),
    pytest.param(lambda a, b: (a @ b) ** 2, (R(2, 1, 2, 3), R(2, 3, 2)), id="matmul-broadcast"),
    pytest.param(lambda a, b: (a @ b) ** 3, (R(3), R(3, 2)), id="matmul-vector"),
    pytest.param(lambda a, b: np.einsum("ij,jk->ik", a, b) ** 2, (R(2, 3), R(3, 2)), id="einsum"),
    pytest.param(lambda a: np.linalg.inv(a) ** 2, (well_conditioned(3),), id="inv"),
    pytest.param(lambda a: np.linalg.inv(a) ** 2, (well_conditioned(2, 2),), id="inv-batched"),
    pytest.param(lambda a, b: np.linalg.solve(a, b) ** 2, (well_conditioned(3), R(3, 2)), id="solve"),
    pytest.param(lambda a, b: np.linalg.solve(a, b) ** 2, (well_conditioned(3, 2), R(3)), id="solve-vector"),
    pytest.param(lambda a: np.linalg.slogdet(a)[1] ** 2, (well_conditioned(3),), id="slogdet"),
    pytest.param(lambda a: np.linalg.det(a) ** 2, (well_conditioned(3),), id="det"),
    pytest.param(lambda a: np.linalg.norm(a, axis=-1) ** 3, (R(2, 3),), id="norm"),
]


@pytest.mark.parametrize("f, args", SECOND_ORDER)
def test_second_order(f, args):
    check_grads(f, *args, order=2)


# ---- values that could be wrong, computed by hand -----------------------------------

def test_matmul_gradient_by_hand():
    a, b = np.array([[1.0, 2.0]]), np.array([[3.0], [4.0]])
    ga, gb = ad.gradient(lambda a, b: (a @ b)[0, 0], a, b)
    np.testing.assert_array_equal(ga, b.T)
    np.testing.assert_array_equal(gb, a.T)


def test_vector_dotted_with_itself_by_hand():
    # x @ x hands one product to both operands; their sum must still be 2x g, bit for bit,
    # and an operand that is only the same array, not traced, must get nothing of it
    x = np.array([0.5, -1.5, 3.0])
    (g,) = ad.gradient(lambda x: np.sin(x @ x), x)
    np.testing.assert_array_equal(g, np.cos(x @ x) * x + np.cos(x @ x) * x)
    (g,) = ad.gradient(lambda x: x @ x + np.sum(x), x)
    np.testing.assert_array_equal(g, 2 * x + 1.0)
    ga, gb = ad.gradient(lambda a, b: a @ b, x, x.copy())  # equal, not the same: two products
    np.testing.assert_array_equal(ga, x)
    np.testing.assert_array_equal(gb, x)
    c = x * 2.0
    (g,) = ad.gradient(lambda x: c @ x + x.value @ x, x)  # x.value: a constant, the same array
    np.testing.assert_array_equal(g, c + x)


def test_logdet_gradient_is_inverse_transpose():
    a = well_conditioned(3)
    g = ad.gradient(lambda a: np.linalg.slogdet(a)[1], a)[0]
    np.testing.assert_allclose(g, np.linalg.inv(a).T)


def _central_differences(f, a, h=1e-6):
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        e = np.zeros_like(a)
        e[i] = h
        g[i] = (f(a + e) - f(a - e)) / (2 * h)
    return g


@pytest.mark.parametrize("a", [np.eye(3), np.diag([3.0, 1.0, 1.0]), np.zeros((2, 2))],
                         ids=["identity", "one-pair", "zero"])
def test_values_of_repeated_eigen_and_singular_values_have_a_gradient(a):
    """Only the values used: the vectors' term is skipped, not inf · 0 (it was NaN). The
    second derivative goes through the vectors' derivatives, which do not exist there:
    NaN, as in JAX."""
    traces = lambda a: np.sum(np.linalg.eigh(a)[0])
    squares = lambda a: np.sum(np.linalg.svd(a)[1] ** 2)
    for f in (traces, squares):
        (g,) = ad.gradient(f, a)
        np.testing.assert_allclose(g, _central_differences(f, a), atol=1e-8)


@pytest.mark.parametrize("a", [np.array([[1.0, 2.0], [2.0, 4.0]]), np.zeros((3, 3)),
                               np.diag([0.0, 2.0, 3.0]), np.stack([np.eye(2), [[1.0, 2.0], [2.0, 4.0]]])],
                         ids=["rank-1", "zero", "diagonal", "batch"])
def test_det_of_a_singular_matrix_has_its_cofactors_as_gradient(a):
    """det(a) exactly 0: no inverse, yet a gradient (the cofactors, as JAX and PyTorch
    give); it raised LinAlgError, also for the regular matrices of a batch."""
    total = lambda a: np.sum(np.linalg.det(a))
    (g,) = ad.gradient(total, a)
    np.testing.assert_allclose(g, _central_differences(total, a), atol=1e-8)
    direction = np.random.default_rng(3).normal(size=a.shape)
    np.testing.assert_allclose(ad.jvp(total, (a,), (direction,))[1], np.sum(g * direction), atol=1e-8)
    # the second derivative too: of a 2x2 (det = a00 a11 - a01 a10) and, in a batch, of the
    # regular matrix beside a singular one (the batch's SVD path made both NaN)
    want = np.zeros((2, 2, 2, 2))
    want[0, 0, 1, 1] = want[1, 1, 0, 0] = 1.0
    want[0, 1, 1, 0] = want[1, 0, 0, 1] = -1.0
    h = ad.hessian(total, a)
    if a.shape == (2, 2):
        np.testing.assert_allclose(h, want, atol=1e-12)
    elif a.ndim == 3:
        np.testing.assert_allclose(h[0, :, :, 0], want, atol=1e-12)
        np.testing.assert_allclose(h[1, :, :, 1], want, atol=1e-12)
    else:  # 3x3: central differences of the gradient, exact for det's quadratic cofactors
        step = np.eye(9).reshape(9, 3, 3) * 1e-3
        fd = [(ad.gradient(total, a + e)[0] - ad.gradient(total, a - e)[0]) / 2e-3 for e in step]
        np.testing.assert_allclose(h.reshape(9, 9), np.reshape(fd, (9, 9)).T, atol=1e-9)


def test_norm_gradient_at_zero_is_zero():
    np.testing.assert_array_equal(ad.gradient(np.linalg.norm, np.zeros(3))[0], np.zeros(3))


def test_norm_ties_share_the_subgradient():
    g = ad.gradient(lambda x: np.linalg.norm(x, np.inf), np.array([2.0, -2.0, 1.0]))[0]
    np.testing.assert_array_equal(g, [0.5, -0.5, 0.0])


def test_scalar_cotangent_as_python_float():
    _, back = ad.pullback(lambda a, b: a @ b, np.array([1.0, 2.0]), np.array([3.0, 4.0]))
    ga, gb = back(2.0)
    np.testing.assert_array_equal(ga, [6.0, 8.0])
    np.testing.assert_array_equal(gb, [2.0, 4.0])


# ---- clear errors for what has no rule -------------------------------------------------

@pytest.mark.parametrize("call, error, message", [
    (lambda a: np.linalg.qr(a.T)[1], NotImplementedError, "square or tall"),
    (lambda a: np.linalg.qr(a, mode="r"), NotImplementedError, "mode='r'"),
    (lambda a: np.linalg.svd(a)[1], NotImplementedError, "full_matrices=False"),
])
def test_unsupported_calls_raise_clearly(call, error, message):
    with pytest.raises(error, match=message):
        ad.pullback(call, R(3, 2))


def test_constant_operand_by_keyword():
    """``np.dot(v, b=...)``: a constant passed by keyword gets no cotangent slot."""
    x = np.arange(1.0, 7.0).reshape(2, 3)
    b = np.array([1.0, 2.0, 3.0])
    (g,) = ad.gradient(lambda v: np.sum(np.dot(v, b=b)), x)
    np.testing.assert_array_equal(g, [b, b])
    _, dy = ad.jvp(lambda v: np.sum(np.dot(v, b=b)), (x,), (np.ones_like(x),))
    assert dy == 2 * b.sum()
    (g,) = ad.gradient(lambda v: np.linalg.norm(v, axis=1, ord=2)[1], x)
    np.testing.assert_allclose(g, [[0, 0, 0], x[1] / np.linalg.norm(x[1])])


@pytest.mark.parametrize("subscripts, shapes", [
    ("ij...,jk...->ik...", [(3, 2, 5), (2, 4)]),
    ("i...j,j...k->i...k", [(2, 5, 3), (3, 2, 1, 4)]),
    ("i...,i...->...", [(2, 1, 5), (2, 4, 1)]),
    ("...ij,jk", [(5, 1, 3, 2), (2, 4)]),
])
def test_einsum_ellipsis_second_order_in_both_modes(subscripts, shapes):
    ops = [R(*shape) for shape in shapes]
    check_grads(lambda *a: np.einsum(subscripts, *a), *ops, order=2)
