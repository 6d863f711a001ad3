"""rules/linalg_composed.py against finite differences (rrule, frule, second order): pinv,
matrix_power, multi_dot, lstsq, eigh/eigvalsh with UPLO on non-symmetric input, the
einsum call forms, and the NumPy 2 names in numpy.linalg."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule, check_rules


def R(*shape, seed=0, dtype=np.float64):
    return np.random.default_rng(seed).uniform(-1.0, 1.0, size=shape).astype(dtype)


_check_all = check_rules


@pytest.mark.parametrize("shape", [(3, 3), (4, 2), (2, 4), (2, 3, 2)])
def test_pinv(shape):
    _check_all(np.linalg.pinv, R(*shape) + np.eye(*shape[-2:]))


def test_pinv_float32_and_hermitian():
    check_rrule(np.linalg.pinv, R(3, 2, dtype=np.float32))
    a = R(3, 3)
    check_grads(lambda m: np.linalg.pinv(m + m.T + 3 * np.eye(3), hermitian=True), a)


@pytest.mark.parametrize("n", [0, 1, 2, 3, 5, -2])
def test_matrix_power(n):
    _check_all(np.linalg.matrix_power, R(3, 3) + 2 * np.eye(3), n)
    _check_all(np.linalg.matrix_power, R(2, 2, 2) + 2 * np.eye(2), n)


@pytest.mark.parametrize("shapes", [[(2, 3), (3, 4), (4, 2)], [(3,), (3, 4), (4, 2), (2,)], [(3,), (3,)]])
def test_multi_dot(shapes):
    arrays = [R(*s, seed=i) for i, s in enumerate(shapes)]
    check_grads(lambda *a: np.linalg.multi_dot(list(a)), *arrays)
    check_rrule(np.linalg.multi_dot, arrays)
    check_frule(np.linalg.multi_dot, arrays)


@pytest.mark.parametrize("shape_a, shape_b", [((5, 3), (5,)), ((5, 3), (5, 2)), ((3, 3), (3,)), ((2, 4), (2,))])
def test_lstsq(shape_a, shape_b):
    a, b = R(*shape_a) + np.eye(*shape_a), R(*shape_b, seed=1)
    check_rrule(np.linalg.lstsq, a, b)
    check_frule(np.linalg.lstsq, a, b)
    check_grads(lambda a, b: np.linalg.lstsq(a, b)[0], a, b)
    check_grads(lambda a, b: np.sum(np.linalg.lstsq(a, b)[1]), a, b)
    x, res, rank, s = np.linalg.lstsq(a, b)
    y, _ = ad.jvp(lambda a: np.linalg.lstsq(a, b), (a,), (np.ones_like(a),))
    np.testing.assert_allclose(y[0], x)
    assert y[2] == rank


@pytest.mark.parametrize("uplo", ["L", "U"])
def test_eigh_and_eigvalsh_read_one_triangle(uplo):
    a = R(3, 3) + np.diag([0.0, 3.0, 6.0])  # not symmetric; eigenvalues apart
    _check_all(np.linalg.eigvalsh, a, uplo)
    _check_all(np.linalg.eigvalsh, R(2, 3, 3) + np.diag([0.0, 3.0, 6.0]), fkwargs={"UPLO": uplo})
    check_grads(lambda m: np.linalg.eigh(m, uplo)[0] ** 2, a)
    other = np.triu(np.ones((3, 3)), 1) if uplo == "L" else np.tril(np.ones((3, 3)), -1)
    g = ad.gradient(lambda m: np.sum(np.linalg.eigvalsh(m, UPLO=uplo) ** 2), a)[0]
    assert np.all(g[other == 1] == 0.0)


@pytest.mark.parametrize("upper", [False, True])
def test_cholesky_reads_one_triangle_and_its_gradient_is_that_of_finite_differences(upper):
    # the gradient was the symmetric one, which check_grads (finite differences of NumPy's
    # cholesky, which reads one triangle) rejected by 0.56; eigh already read one triangle
    spd = np.array([[4.0, 1.0, 0.5], [1.0, 3.0, 0.2], [0.5, 0.2, 2.0]])
    a = spd + (np.triu(R(3, 3), 1) if not upper else np.tril(R(3, 3), -1))  # the unread triangle off
    weights = R(3, 3)
    check_grads(lambda m: np.linalg.cholesky(m, upper=upper) * weights, a, order=2)
    check_grads(lambda m: np.linalg.cholesky(m, upper=upper) ** 3, np.stack([spd, spd + np.eye(3)]))
    g = ad.gradient(lambda m: np.sum(np.linalg.cholesky(m, upper=upper) * weights), a)[0]
    unread = np.triu(np.ones((3, 3)), 1) if not upper else np.tril(np.ones((3, 3)), -1)
    assert np.all(g[unread == 1] == 0.0)


def test_eigh_eigenvectors_with_uplo():
    def loss(m, uplo):
        w, v = np.linalg.eigh(m, uplo)
        return w[0] + np.sum((v * v[0:1, :]) ** 2)  # sign gauge cancels
    a = R(3, 3) + np.diag([0.0, 3.0, 6.0])
    check_grads(loss, a, "U")
    check_grads(loss, a, "L")


EINSUM = [
    ("ii->i", [(3, 3)]), ("ii", [(3, 3)]), ("iij->j", [(2, 2, 3)]), ("i...i->...", [(3, 2, 3)]),
    ("iii->i", [(2, 2, 2)]), ("ij,jj->i", [(2, 3), (3, 3)]), ("...ii->...i", [(2, 3, 3)]),
]


@pytest.mark.parametrize("subscripts, shapes", EINSUM, ids=[e[0] for e in EINSUM])
def test_einsum_repeated_index(subscripts, shapes):
    ops = [R(*s, seed=i) for i, s in enumerate(shapes)]
    _check_all(np.einsum, subscripts, *ops)


@pytest.mark.parametrize("args", [
    lambda a, b: (a, [0, 1], b, [1, 2]), lambda a, b: (a, [0, 1], b, [1, 2], [2, 0]),
    lambda a, b: (a, [Ellipsis, 1], b, [1, 2], [Ellipsis, 2]), lambda a, b: (a, [0, 0], [0]),
])
def test_einsum_interleaved(args):
    a, b = R(3, 3), R(3, 2, seed=1)
    call = args(a, b)
    _check_all(np.einsum, *call)


def test_einsum_string_form_keeps_its_rule_and_float32():
    _check_all(np.einsum, "ij,jk->ik", R(2, 3), R(3, 2, seed=1))
    check_rrule(np.einsum, "ii->i", R(3, 3, dtype=np.float32))


ALIASES = [
    ("matmul", (R(2, 3), R(3, 2, seed=1)), {}), ("outer", (R(3), R(2, seed=1)), {}),
    ("tensordot", (R(2, 3), R(3, 2, seed=1)), {"axes": 1}), ("vecdot", (R(2, 3), R(3, seed=1)), {}),
    ("matrix_transpose", (R(2, 3, 4),), {}), ("trace", (R(2, 3, 3),), {"offset": 1}),
    ("diagonal", (R(2, 3, 3),), {}), ("cross", (R(2, 3), R(3, seed=1)), {}),
    ("svdvals", (R(3, 2),), {}), ("vector_norm", (R(2, 3),), {"axis": 1, "ord": 3}),
    ("vector_norm", (R(2, 3),), {"keepdims": True}), ("matrix_norm", (R(2, 3, 3),), {}),
]


@pytest.mark.parametrize("name, args, kwargs", ALIASES, ids=[a[0] for a in ALIASES])
def test_linalg_namespace_aliases(name, args, kwargs):
    f = getattr(np.linalg, name, None)
    if f is None:
        pytest.skip(f"numpy.linalg.{name} is NumPy 2 only")
    _check_all(f, *args, fkwargs=kwargs)


@pytest.mark.skipif(not hasattr(np, "matvec"), reason="np.matvec / np.vecmat are NumPy >= 2.2")
def test_matvec_vecmat_vecdot_gufuncs():
    _check_all(np.matvec, R(2, 3, 4), R(4, seed=1))
    _check_all(np.vecmat, R(3, seed=1), R(2, 3, 4))
    _check_all(np.vecdot, R(2, 3), R(3, seed=1))


@pytest.mark.parametrize("p", [None, 2, -2, 1, "fro", np.inf])
def test_cond(p):
    _check_all(np.linalg.cond, R(3, 3) + 2 * np.eye(3), fkwargs={"p": p})  # p is an option
    check_grads(lambda a: np.linalg.cond(a, p), R(2, 3, 3) + 2 * np.eye(3))


def test_tensorinv_and_tensorsolve():
    a = np.reshape(R(6, 6) + 3 * np.eye(6), (2, 3, 6))
    _check_all(np.linalg.tensorinv, a, 2)
    _check_all(np.linalg.tensorinv, np.reshape(a, (6, 2, 3)), 1)
    b = R(2, 3, seed=1)
    _check_all(np.linalg.tensorsolve, np.reshape(a, (2, 3, 2, 3)), b)
    moved = np.moveaxis(np.reshape(a, (2, 3, 2, 3)), 2, 0)
    _check_all(np.linalg.tensorsolve, moved, b, fkwargs={"axes": (0,)})
