"""Shape rules: every rule against finite differences (adrules.testing) over scalar,
vector, matrix and 3-D inputs, axis variants, lists with constants, multi-output splits,
float32, second order, and hand-worked values."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule

RNG = np.random.default_rng(1)
S = 0.7
V = RNG.uniform(0.5, 1.5, 4)
M = RNG.uniform(0.5, 1.5, (3, 4))
T = RNG.uniform(0.5, 1.5, (2, 3, 4))
ONES = np.ones((2, 4))
INTS = np.arange(4).reshape(1, 4)


def since_numpy_2_3(param, what):
    """A case that calls a NumPy 2.3 API (Python 3.10 gets NumPy 2.2 at most)."""
    too_old = np.lib.NumpyVersion(np.__version__) < "2.3.0"
    return pytest.param(*param.values, id=param.id,
                        marks=pytest.mark.skipif(too_old, reason=f"{what} is new in NumPy 2.3"))


def case(f, *args, **kwargs):
    """One rule check of ``f(*args, **kwargs)``, with a readable test id."""
    def show(a):
        if isinstance(a, (float, np.ndarray)):
            return "x".join(map(str, np.shape(a))) or "scalar"
        if isinstance(a, list):
            return "[" + ",".join(map(show, a)) + "]"
        return repr(a)

    extra = "".join(f",{k}={v!r}" for k, v in kwargs.items())
    return pytest.param(f, args, kwargs, id=f"{f.__name__}({','.join(map(show, args))}{extra})")


CASES = [
    # views
    case(np.reshape, M, (4, 3)), case(np.reshape, M, -1, order="F"), case(np.reshape, S, (1, 1)),
    case(np.ravel, T), case(np.ravel, M, "F"), case(np.transpose, T), case(np.transpose, T, (2, 0, -2)),
    case(np.swapaxes, T, 0, -1), case(np.moveaxis, T, 0, -1), case(np.moveaxis, T, (0, 1), (2, 0)),
    case(np.expand_dims, M, (0, -1)), case(np.expand_dims, S, 0), case(np.squeeze, M.reshape(3, 1, 4, 1)),
    case(np.squeeze, M.reshape(3, 1, 4, 1), 1), case(np.broadcast_to, V, (3, 4)),
    case(np.broadcast_to, M[:, :1], (2, 3, 4)), case(np.broadcast_to, S, (2,)),
    case(np.atleast_1d, S), case(np.atleast_2d, V), case(np.atleast_3d, M), case(np.atleast_2d, V, M),
    # joins (lists may hold constants)
    case(np.concatenate, [M, ONES, M]), case(np.concatenate, [M, M[:, :2]], -1),
    case(np.concatenate, [M, V, S], None), case(np.concatenate, [INTS, M]), case(np.concatenate, T, 1),
    case(np.stack, [V, V, np.zeros(4)]), case(np.stack, [M, M], -1), case(np.stack, M, 1),
    case(np.hstack, [V, V[:2], S]), case(np.hstack, [M, M[:, :1]]), case(np.vstack, [V, M]),
    case(np.dstack, [M, M]), case(np.dstack, [V, V]), case(np.column_stack, [V[:3], M]),
    # splits (several outputs)
    case(np.split, M, 2, 1), case(np.split, T, [1, 2], -1), case(np.array_split, V, 3),
    case(np.hsplit, M, [1]), case(np.vsplit, M, 3), case(np.dsplit, T, 2),
    # copies
    case(np.tile, V, 2), case(np.tile, M, (2, 1, 3)), case(np.tile, T, (2, 1)), case(np.tile, S, 3),
    case(np.repeat, V, 2), case(np.repeat, M, [1, 0, 3], 0), case(np.repeat, M, [2, 0, 1, 0], -1),
    case(np.repeat, M, 2, axis=1), case(np.repeat, S, 3), case(np.repeat, M, [0, 0, 0], 0),
    # reordering
    case(np.flip, M), case(np.flip, T, (0, 2)), case(np.flip, V, -1), case(np.fliplr, M), case(np.flipud, V),
    case(np.roll, V, 1), case(np.roll, M, (1, -2), (0, 1)), case(np.roll, M, 5), case(np.roll, T, -1, axis=1),
    # padding
    case(np.pad, M, 1), case(np.pad, M, ((0, 2), (1, 0)), constant_values=3.0), case(np.pad, V, (2, 3)),
    since_numpy_2_3(case(np.pad, T, {1: 2, 2: (0, 1)}), "a dict pad_width"),
    # diagonals and triangles
    case(np.diag, V), case(np.diag, V, -2), case(np.diag, M), case(np.diag, M, 1), case(np.diag, M, k=-1),
    case(np.diag, M.T, 2), case(np.triu, M), case(np.tril, M, -1), case(np.triu, T, 1), case(np.tril, V),
    case(np.tril, M, k=2),
]


@pytest.mark.parametrize("f, args, kwargs", CASES)
def test_rules_match_finite_differences(f, args, kwargs):
    check_rrule(f, *args, fkwargs=kwargs)
    check_frule(f, *args, fkwargs=kwargs)


SECOND_ORDER = [
    case(np.reshape, M, (2, 6)), case(np.transpose, T, (1, 2, 0)), case(np.broadcast_to, V, (3, 4)),
    case(np.concatenate, [M, ONES, M]), case(np.stack, [M, M], 1), case(np.vstack, [V, M]),
    case(np.tile, M, (2, 1, 3)), case(np.repeat, M, [1, 0, 3], 0), case(np.flip, T, (0, 2)),
    case(np.roll, M, (1, -2), (0, 1)), case(np.pad, M, ((0, 2), (1, 0))), case(np.diag, M, 1),
    case(np.diag, V, -1), case(np.triu, M, 1), case(np.atleast_2d, V, M),
]


@pytest.mark.parametrize("f, args, kwargs", SECOND_ORDER)
def test_second_order(f, args, kwargs):
    check_grads(lambda *a: np.sin(f(*a, **kwargs)) if not isinstance(f(*a, **kwargs), tuple)
                else [np.sin(y) for y in f(*a, **kwargs)], *args, order=2)


@pytest.mark.parametrize("split", [lambda x: np.split(x, [1, 3], 1)[1],
                                   lambda x: np.array_split(x, 2)[0] * np.array_split(x, 2)[1][:1],
                                   lambda x: np.hsplit(x, 2)[-1] ** 2])
def test_split_outputs_used_partly(split):
    check_grads(lambda x: np.sin(split(x)), M, order=2)


def _float32(args):
    def cast(a):
        return a.astype(np.float32) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a

    return tuple([cast(b) for b in a] if isinstance(a, list) else cast(a) for a in args)


FLOAT32 = [case(np.reshape, M, -1), case(np.transpose, M), case(np.broadcast_to, V, (2, 4)),
           case(np.concatenate, [M, M]), case(np.stack, [M, M]), case(np.tile, M, 2),
           case(np.repeat, M, [1, 0, 2], 0), case(np.roll, M, 1), case(np.pad, M, 1),
           case(np.diag, M), case(np.diag, V), case(np.tril, M)]


@pytest.mark.parametrize("f, args, kwargs", FLOAT32)
def test_float32_stays_float32(f, args, kwargs):
    args = _float32(args)
    check_rrule(f, *args, fkwargs=kwargs)
    check_frule(f, *args, fkwargs=kwargs)
    first = args[0][0] if isinstance(args[0], list) else args[0]
    call = (lambda x: f([x, *args[0][1:]], *args[1:], **kwargs)) if isinstance(args[0], list) else \
        (lambda x: f(x, *args[1:], **kwargs))
    g = ad.gradient(lambda x: np.sum(call(x) ** 2), first)[0]
    gg = ad.gradient(lambda x: np.sum(ad.gradient(lambda z: np.sum(call(z) ** 3), x)[0]), first)[0]
    dy = ad.jvp(call, (first,), (np.ones_like(first),))[1]
    assert (g.dtype, gg.dtype, np.asarray(dy).dtype) == (np.float32,) * 3


def test_traced_methods_and_broadcast_inputs():
    def f(x, v):
        y = x.reshape(2, 6).T.ravel() + x.flatten() * x.transpose(1, 0).T.ravel()
        z = x[None].squeeze() * v + x.swapaxes(0, 1).T.repeat(2, axis=0)[::2]
        return np.sum(y ** 2) + np.sum(np.concatenate([z, v[None] * x]) ** 2)

    check_grads(f, M, V, order=2)


def test_concatenate_of_constants_and_traced_values():
    g = ad.gradient(lambda a: np.sum(np.concatenate([ONES, a, INTS]) * np.arange(24.0).reshape(6, 4)), M)[0]
    np.testing.assert_allclose(g, np.arange(8.0, 20.0).reshape(3, 4))


def test_repeat_with_counts_by_hand():
    g = ad.gradient(lambda x: np.sum(np.repeat(x, [2, 0, 1]) * np.array([1.0, 10.0, 100.0])), np.ones(3))[0]
    np.testing.assert_allclose(g, [11.0, 0.0, 100.0])


def test_diag_of_non_square_matrix_by_hand():
    g = ad.gradient(lambda m: np.sum(np.diag(m, -1) * np.array([1.0, 2.0])), np.ones((3, 2)))[0]
    np.testing.assert_allclose(g, [[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])


def test_unsupported_modes_raise_clear_errors():
    with pytest.raises(NotImplementedError, match="mode='mean'"):  # edge/wrap/...: shape_composed.py
        ad.gradient(lambda x: np.sum(np.pad(x, 1, mode="mean")), V)
    with pytest.raises(NotImplementedError, match="order='A'"):
        ad.gradient(lambda x: np.sum(np.reshape(x, -1, order="A")), M)


# ---- complex values -------------------------------------------------------------------------------
def _complex_checks():
    import _complex_checks  # tests/_complex_checks.py, which conftest.py loads

    return _complex_checks


@pytest.mark.parametrize("f, args, kwargs", CASES)
def test_complex_values_both_modes(f, args, kwargs):
    """Every case above at complex values (real and complex arrays mixed in lists too):
    finite differences along the real and the imaginary part of each element, both modes."""
    checks = _complex_checks()
    checks.check_both(f, *checks.complex_args(args), fkwargs=kwargs)
    if args and isinstance(args[0], list) and len(args[0]) > 1:  # one complex piece among real ones
        checks.check_both(f, [checks.complex_args(args)[0][0], *args[0][1:]], *args[1:], fkwargs=kwargs)


@pytest.mark.parametrize("f, args, kwargs", SECOND_ORDER)
def test_complex_second_order(f, args, kwargs):
    """Gradient of a real loss of complex inputs, and forward over reverse along a complex
    direction, against finite differences."""
    checks = _complex_checks()
    zargs = checks.complex_args(args)
    if isinstance(zargs[0], list):
        loss = checks.real_loss(lambda z: f([np.sin(z), *zargs[0][1:]], *zargs[1:], **kwargs))
        z = zargs[0][0]
    else:
        def sin_of(y):
            return [np.sin(v) for v in y] if isinstance(y, (list, tuple)) else np.sin(y)

        loss = checks.real_loss(lambda z: sin_of(f(z, *zargs[1:], **kwargs)))
        z = zargs[0]
    checks.check_gradient(loss, z)
    checks.check_hvp(loss, z)
