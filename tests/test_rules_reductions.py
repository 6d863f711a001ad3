"""Reduction rules: every rule against finite differences (adrules.testing) over scalar,
vector, matrix and 3-D inputs, axis/keepdims/where variants, float32, second order,
and hand-worked values where finite differences cannot decide (ties, zeros)."""

import warnings

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule

RNG = np.random.default_rng(0)
S = 0.7
V = RNG.uniform(0.5, 1.5, 4)
M = RNG.uniform(0.5, 1.5, (3, 4))
T = RNG.uniform(0.5, 1.5, (2, 3, 4))
MASK = np.array([[True, False, True, True], [False, True, True, False], [True, True, False, True]])
W4 = RNG.uniform(0.5, 1.5, 4)
W42 = RNG.uniform(0.5, 1.5, (4, 2))
WITH_NAN = np.where(MASK, M, np.nan)
WITH_ZEROS = np.array([[0.0, 1.3, 0.7, 1.1], [0.9, 0.0, 1.2, 0.0], [1.4, 0.8, 0.6, 1.5]])


def case(f, *args, **kwargs):
    """One rule check of ``f(*args, **kwargs)``, with a readable test id."""
    def show(a):
        return "x".join(map(str, np.shape(a))) or "scalar" if isinstance(a, (float, np.ndarray)) else repr(a)

    owner = getattr(f, "__self__", None)  # np.add.reduce and friends
    name = f"{owner.__name__}.{f.__name__}" if owner is not None else f.__name__
    extra = "".join(f",{k}={'mask' if np.ndim(v) else v}" for k, v in kwargs.items())
    return pytest.param(f, args, kwargs, id=f"{name}({','.join(map(show, args))}{extra})")


CASES = [
    # sums and means
    case(np.sum, S), case(np.sum, V), case(np.sum, M, 0), case(np.sum, M, -1, keepdims=True),
    case(np.sum, T, (0, 2)), case(np.sum, T, axis=(-1, 0), keepdims=True), case(np.sum, M, where=MASK),
    case(np.sum, M, None, np.float64), case(np.add.reduce, M), case(np.add.reduce, T, axis=(0, 2)),
    case(np.add.reduce, M, axis=None, keepdims=True),
    case(np.nansum, WITH_NAN), case(np.nansum, WITH_NAN, 1, keepdims=True),
    case(np.mean, S), case(np.mean, V), case(np.mean, M, 1), case(np.mean, T, (0, 1), keepdims=True),
    case(np.mean, M, 0, where=MASK), case(np.nanmean, WITH_NAN), case(np.nanmean, WITH_NAN, -1),
    case(np.average, M), case(np.average, M, 1, W4), case(np.average, M, (0, 1), M + 1),
    case(np.average, T, (2, 0), W42), case(np.average, M, 1, W4, True), case(np.average, M, 0, None, True),
    case(np.average, M, 1, W4, keepdims=True),
    # products (zeros included)
    case(np.prod, S), case(np.prod, V), case(np.prod, M, 0), case(np.prod, T, (0, 2), keepdims=True),
    case(np.prod, M, 1, where=MASK), case(np.prod, V, initial=2.0), case(np.multiply.reduce, M),
    case(np.prod, WITH_ZEROS), case(np.prod, WITH_ZEROS, 1), case(np.prod, WITH_ZEROS, 0, keepdims=True),
    # extrema
    case(np.max, S), case(np.max, V), case(np.max, M, 0), case(np.amax, T, (1, 2), keepdims=True),
    case(np.min, M, -1), case(np.amin, T), case(np.maximum.reduce, M), case(np.minimum.reduce, M, axis=1),
    case(np.max, M, 1, initial=-1.0, where=MASK),
    # moments
    case(np.var, V), case(np.var, M, 0), case(np.var, M, 1, ddof=1), case(np.var, T, (0, 2), keepdims=True),
    case(np.var, M, 1, where=MASK), case(np.std, V), case(np.std, M, -1, ddof=1, keepdims=True),
    case(np.std, T, (1, 2)),
    # cumulative
    case(np.cumsum, S), case(np.cumsum, V), case(np.cumsum, M), case(np.cumsum, M, -1),
    case(np.add.accumulate, M), case(np.cumprod, V), case(np.cumprod, M, 0), case(np.cumprod, T, 1),
    case(np.cumprod, WITH_ZEROS, 1), case(np.cumprod, WITH_ZEROS), case(np.multiply.accumulate, M, axis=1),
    # traces
    case(np.trace, M), case(np.trace, M, 1), case(np.trace, M, -2), case(np.trace, T, 0, -1, 0),
    case(np.trace, T, 1, 2, 1),
    # ufunc methods: log-sum-exp reductions, running extrema, segment sums
    case(np.logaddexp.reduce, V), case(np.logaddexp.reduce, M, 1), case(np.logaddexp.reduce, M, axis=None),
    case(np.logaddexp.reduce, T, -1, keepdims=True), case(np.logaddexp2.reduce, M, 0),
    case(np.logaddexp.reduce, M, 1, initial=0.5), case(np.logaddexp.reduce, M, 1, where=MASK, initial=-1.0),
    case(np.maximum.accumulate, V), case(np.maximum.accumulate, M, 1), case(np.minimum.accumulate, T, axis=-1),
    case(np.add.reduceat, V, [0, 2, 3]), case(np.add.reduceat, M, [0, 3, 1], 1),
    case(np.add.reduceat, T, [2, 2, 0], axis=-1), case(np.add.reduceat, T, indices=[1, 0]),
]


@pytest.mark.parametrize("f, args, kwargs", CASES)
def test_rules_match_finite_differences(f, args, kwargs):
    check_rrule(f, *args, fkwargs=kwargs)
    check_frule(f, *args, fkwargs=kwargs)


SECOND_ORDER = [
    case(np.sum, M, 0), case(np.mean, T, (0, 1), keepdims=True), case(np.nanmean, WITH_NAN, 0),
    case(np.prod, M, 1), case(np.prod, WITH_ZEROS), case(np.prod, WITH_ZEROS, 1),
    case(np.max, M, 0), case(np.min, T, (0, 2)), case(np.var, M, 1, ddof=1), case(np.std, M),
    case(np.cumsum, M, 0), case(np.cumprod, V), case(np.cumprod, WITH_ZEROS), case(np.cumprod, WITH_ZEROS, 1),
    case(np.average, M, 1, W4), case(np.average, M, 0, M + 1, True), case(np.trace, T, 1, 0, 2),
    case(np.logaddexp.reduce, M, 1), case(np.logaddexp2.reduce, T, 0, keepdims=True),
    case(np.maximum.accumulate, M, 1), case(np.minimum.accumulate, V), case(np.add.reduceat, M, [0, 3, 1], 1),
]


@pytest.mark.parametrize("f, args, kwargs", SECOND_ORDER)
def test_second_order(f, args, kwargs):
    check_grads(lambda *a: f(*a, **kwargs), *args, order=2)


def _float32(args):
    return tuple(a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args)


FLOAT32 = [case(np.sum, M, 1), case(np.mean, M, keepdims=True), case(np.prod, WITH_ZEROS, 1),
           case(np.max, M, 0), case(np.var, M, 0), case(np.std, M, 1), case(np.cumsum, M, 1),
           case(np.cumprod, WITH_ZEROS, 0), case(np.average, M, 1, W4), case(np.trace, M),
           case(np.nansum, WITH_NAN), case(np.nanmean, WITH_NAN, 1), case(np.logaddexp.reduce, M, 1),
           case(np.maximum.accumulate, M, 0), case(np.add.reduceat, M, [0, 2], 1)]


@pytest.mark.parametrize("f, args, kwargs", FLOAT32)
def test_float32_stays_float32(f, args, kwargs):
    args = _float32(args)
    check_rrule(f, *args, fkwargs=kwargs)
    check_frule(f, *args, fkwargs=kwargs)
    x, rest = args[0], args[1:]
    g = ad.gradient(lambda x: np.sum(f(x, *rest, **kwargs) ** 2), x)[0]
    gg = ad.gradient(lambda x: np.sum(ad.gradient(lambda z: np.sum(f(z, *rest, **kwargs) ** 2), x)[0]), x)[0]
    dy = ad.jvp(lambda x: f(x, *rest, **kwargs), (x,), (np.ones_like(x),))[1]
    assert (g.dtype, gg.dtype, np.asarray(dy).dtype) == (np.float32,) * 3


def test_broadcast_inputs_through_reductions():
    check_grads(lambda m, v: np.sum(m * v, axis=0), M, V, order=2)
    check_grads(lambda m, v: np.max(m - v, axis=1, keepdims=True) * np.var(v), M, V, order=2)
    check_grads(lambda t, s: np.prod(t * s, axis=(0, 2)), T, S, order=2)


def test_positional_and_keyword_axis_agree_and_traced_methods_work():
    def f(x):
        return x.sum(0) + x.mean(axis=0) * x.max(0) + x.prod(axis=0) - x.var(0) + x.std(axis=0, ddof=1)

    check_grads(lambda x: f(x) + x.cumsum(1)[1] + x.cumprod(axis=0)[-1] + x.min(0) + x.trace(), M, order=1)
    check_grads(lambda x: np.add.reduce(x, 1) * np.maximum.reduce(x.T) + np.multiply.accumulate(x, 1)[:, -1],
                M, order=2)
    g_pos = ad.gradient(lambda x: np.sum(np.sum(x, 1, None, None, True) ** 2), M)[0]
    g_kw = ad.gradient(lambda x: np.sum(np.sum(x, axis=1, keepdims=True) ** 2), M)[0]
    np.testing.assert_allclose(g_pos, 2 * M.sum(1, keepdims=True) * np.ones_like(M))
    np.testing.assert_allclose(g_kw, g_pos)


def test_ties_share_the_cotangent_equally():
    x = np.array([1.0, 3.0, 3.0, 2.0])
    np.testing.assert_allclose(ad.gradient(np.max, x)[0], [0.0, 0.5, 0.5, 0.0])
    np.testing.assert_allclose(ad.gradient(np.amin, np.array([2.0, 2.0, 2.0]))[0], [1 / 3] * 3)
    m = np.array([[1.0, 1.0, 0.0], [5.0, 2.0, 5.0]])
    np.testing.assert_allclose(ad.gradient(lambda m: np.sum(np.max(m, 1) * [1.0, 10.0]), m)[0],
                               [[0.5, 0.5, 0.0], [5.0, 0.0, 5.0]])
    np.testing.assert_allclose(ad.jvp(lambda m: np.min(m, axis=0), (m,), (np.ones_like(m),))[1], [1, 1, 1])


def test_prod_with_zeros_by_hand():
    np.testing.assert_allclose(ad.gradient(np.prod, np.array([0.0, 2.0, 3.0]))[0], [6.0, 0.0, 0.0])
    np.testing.assert_allclose(ad.gradient(np.prod, np.array([0.0, 2.0, 0.0]))[0], [0.0, 0.0, 0.0])
    # Hessian of x0 x1 x2 at (0, 2, 0) is [[0, 0, 2], [0, 0, 0], [2, 0, 0]]
    x, v = np.array([0.0, 2.0, 0.0]), np.array([1.0, 10.0, 100.0])
    hv = ad.gradient(lambda x: np.sum(ad.gradient(np.prod, x)[0] * v), x)[0]
    np.testing.assert_allclose(hv, [200.0, 0.0, 2.0])
    assert np.all(np.isfinite(ad.gradient(lambda x: np.prod(x, 0)[1], WITH_ZEROS)[0]))


def test_cumprod_with_zeros_by_hand():
    # sum(cumprod(x)) = x0 + x0 x1 + x0 x1 x2 at (2, 0, 3): gradient (1 + x1 + x1 x2, x0 + x0 x2, x0 x1)
    np.testing.assert_allclose(ad.gradient(lambda x: np.sum(np.cumprod(x)), np.array([2.0, 0.0, 3.0]))[0],
                               [1.0, 8.0, 0.0])
    # its tangent along (1, 1, 1): (1, x1 + x0, x1 x2 + x0 x2 + x0 x1)
    dy = ad.jvp(np.cumprod, (np.array([2.0, 0.0, 3.0]),), (np.ones(3),))[1]
    np.testing.assert_allclose(dy, [1.0, 2.0, 6.0])


def test_weighted_average_by_hand():
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.2, 0.3, 0.5])
    gx, gw = ad.gradient(lambda x, w: np.average(x, 0, w), x, w)
    np.testing.assert_allclose(gx, w / w.sum())
    np.testing.assert_allclose(gw, (x - np.average(x, weights=w)) / w.sum())


def test_gradients_are_fresh_writeable_arrays():
    g = ad.gradient(np.sum, M)[0]
    assert g.flags.writeable and not np.shares_memory(g, M)


def test_weighted_average_with_keyword_weights():
    x, w = np.array([1.0, 2.0, 3.0]), np.array([0.2, 0.3, 0.5])
    gx, gw = ad.gradient(lambda x, w: np.average(x, weights=w), x, w)
    np.testing.assert_allclose(gw, (x - np.average(x, weights=w)) / w.sum())


def test_logsumexp_by_logaddexp_reduce_is_the_softmax():
    """d/dx log(sum(exp(x))) = softmax(x), also where exp(x) overflows float64."""
    x = np.array([1000.0, 999.0, 990.0])
    (g,) = ad.gradient(np.logaddexp.reduce, x)
    np.testing.assert_allclose(g, np.exp(x - 1000.0) / np.sum(np.exp(x - 1000.0)))
    m = np.array([[0.0, np.log2(3.0)], [1.0, 1.0]])
    (g,) = ad.gradient(lambda m: np.sum(np.logaddexp2.reduce(m, axis=1) * [1.0, 10.0]), m)
    np.testing.assert_allclose(g, [[0.25, 0.75], [5.0, 5.0]])  # 2**m / sum(2**m) per row


def test_running_maximum_by_hand():
    """A drawdown, sum(cummax(x) - x): each running maximum's cotangent goes to the element
    it reads; on a tie, to the latest one that equals it."""
    x = np.array([1.0, 3.0, 2.0, 3.0, 0.5, 4.0])
    (g,) = ad.gradient(lambda x: np.sum(np.maximum.accumulate(x) - x), x)
    np.testing.assert_array_equal(g, np.array([1.0, 2.0, 0.0, 2.0, 0.0, 1.0]) - 1.0)
    (g,) = ad.gradient(lambda x: np.sum(np.minimum.accumulate(x) * np.arange(6.0)), -x)
    np.testing.assert_array_equal(g, [0.0, 1.0 + 2.0, 0.0, 3.0 + 4.0, 0.0, 5.0])
    dy = ad.jvp(np.maximum.accumulate, (x,), (np.arange(6.0),))[1]
    np.testing.assert_array_equal(dy, [0.0, 1.0, 1.0, 3.0, 3.0, 5.0])


def test_segment_sums_by_hand():
    """np.add.reduceat sums x[i_k:i_k+1] per segment, x[i_k] alone where the next index is not
    larger: each element's gradient counts the segments it is in."""
    x = np.arange(1.0, 7.0)
    (g,) = ad.gradient(lambda x: np.sum(np.add.reduceat(x, [0, 3, 1, 5]) * [1.0, 10.0, 100.0, 1000.0]), x)
    np.testing.assert_array_equal(g, [1.0, 101.0, 101.0, 110.0, 100.0, 1000.0])


def test_logaddexp_accumulate_says_how_to_write_it():
    # the generic advice (non_differentiable) would have made the gradient silently zero
    with pytest.raises(ad.tracer.NoRuleError, match=r"logaddexp.accumulate: no rule.*np.logaddexp in a loop") as info:
        ad.gradient(lambda x: np.sum(np.logaddexp.accumulate(x)), V)
    assert "non_differentiable" not in str(info.value)


# ---- complex values -------------------------------------------------------------------------------
def _complex_checks():
    import _complex_checks  # tests/_complex_checks.py, which conftest.py loads

    return _complex_checks


def _complex(a, seed=0):
    """Float array ``a`` made complex; its zeros stay exact zeros, its NaNs NaNs."""
    if not isinstance(a, np.ndarray) or a.dtype.kind != "f":
        return a
    z = _complex_checks().complexify(a, np.random.default_rng(seed))
    return np.where(a == 0, 0.0, z)


# NumPy orders complex numbers lexicographically: the extrema select elements (checked like
# the others), the running extrema's rules are written for real values and refuse them.
# NumPy has no complex logaddexp: its reductions' rules refuse before NumPy is called.
REFUSES_COMPLEX = {np.maximum.accumulate, np.minimum.accumulate, np.logaddexp.reduce, np.logaddexp2.reduce}


@pytest.mark.parametrize("f, args, kwargs", CASES)
def test_complex_values_both_modes(f, args, kwargs):
    """Every case above at complex values (weights too): finite differences along the real
    and the imaginary part of each element, reverse and forward; running extrema refuse."""
    zargs = tuple(_complex(a, seed=i) for i, a in enumerate(args))
    checks = _complex_checks()
    if f in REFUSES_COMPLEX and isinstance(zargs[0], np.ndarray):
        with pytest.raises(ad.registry.ComplexRuleError, match="complex"):
            ad.rrule(f, *zargs, **kwargs)
        with pytest.raises(ad.registry.ComplexRuleError, match="complex"):
            ad.frule((ad.NoTangent(), *(np.ones_like(a) if isinstance(a, np.ndarray) else ad.NoTangent()
                                        for a in zargs)), f, *zargs, **kwargs)
        return
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)  # sum(z, dtype=float)
        checks.check_both(f, *zargs, fkwargs=kwargs)
    if len(zargs) > 1 and isinstance(zargs[0], np.ndarray):  # a real array with complex weights
        checks.check_both(f, args[0], *zargs[1:], fkwargs=kwargs)


@pytest.mark.parametrize("f, args, kwargs", [c for c in SECOND_ORDER if c.values[0] not in REFUSES_COMPLEX])
def test_complex_second_order(f, args, kwargs):
    """The gradient of a real loss of complex inputs, and forward over reverse along a complex
    direction against differences of that gradient (the Hessian of a function of (x, y))."""
    checks = _complex_checks()
    z, rest = _complex(args[0]), tuple(_complex(a, seed=1) for a in args[1:])
    c = _complex(np.ones(np.shape(f(z, *rest, **kwargs))), seed=5)

    def loss(z):
        y = f(z, *rest, **kwargs)
        y = y[0] if isinstance(y, tuple) else y
        return np.sum(np.real(y * np.conj(y))) + np.sum(np.real(c * y))

    checks.check_gradient(loss, z)
    checks.check_hvp(loss, z)


def test_complex_var_std_are_real_and_by_hand():
    """var of complex values is mean(|z - mean z|**2), real; its cotangent 2 (z - mean z) / n."""
    z = _complex(M)
    y, back = ad.rrule(np.var, z, 1)
    np.testing.assert_allclose(y, np.mean(np.abs(z - z.mean(1, keepdims=True)) ** 2, 1))
    assert y.dtype == np.float64
    np.testing.assert_allclose(back(np.ones(3))[1], 2 * (z - z.mean(1, keepdims=True)) / 4)
    _, dy = ad.jvp(lambda v: np.std(v), (z,), (1j * np.ones_like(z),))  # a shift does not spread
    assert np.isrealobj(dy) and abs(dy) < 1e-12
    (g,) = ad.gradient(lambda v: np.var(v, ddof=1), z)
    np.testing.assert_allclose(g, 2 * (z - z.mean()) / (z.size - 1))


def test_complex_prod_and_cumprod_with_zeros_by_hand():
    """d prod(z) / dz_i is the product of the others (one zero: nonzero only at it); the
    cotangent is its conjugate times ȳ."""
    z = np.array([1 + 1j, 0j, 2 - 1j])
    _, back = ad.rrule(np.prod, z)
    np.testing.assert_allclose(back(1j)[1], 1j * np.conj([0, (1 + 1j) * (2 - 1j), 0]))
    _, back = ad.rrule(np.cumprod, z)
    ybar = np.array([1.0, 2j, -1.0])  # x̄_i = Σ_{j>=i} ȳ_j conj(∂y_j/∂z_i)
    want = [ybar[0] + 0 + 0, ybar[1] * np.conj(1 + 1j) + ybar[2] * np.conj((1 + 1j) * (2 - 1j)), 0]
    np.testing.assert_allclose(back(ybar)[1], want)


def test_real_weights_get_real_cotangents_from_a_complex_average():
    z, w = _complex(M), W4
    (gz, gw) = ad.gradient(lambda z, w: np.abs(np.sum(np.average(z, 1, w))), z, w)
    assert gz.dtype == np.complex128 and gw.dtype == np.float64
    checks = _complex_checks()
    np.testing.assert_allclose(gw, checks.grad_fd(lambda v: np.abs(np.sum(np.average(z, 1, v))), w), rtol=1e-6)


def test_complex_values_reduced_in_a_real_dtype():
    """NumPy drops the imaginary parts when complex values are summed in a real dtype: the sum
    rules follow (a real cotangent, the real part of a tangent); products and moments refuse."""
    z = _complex(M)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        for f in (np.sum, np.mean, np.nansum, np.cumsum):
            (g,) = ad.gradient(lambda v: np.sum(f(v, None, np.float64) ** 2), z)
            np.testing.assert_allclose(g, _complex_checks().grad_fd(lambda v: np.sum(f(v, None, np.float64) ** 2), z))
            _, dy = ad.jvp(lambda v: f(v, None, np.float64), (z,), (1j * np.ones_like(z),))
            assert np.isrealobj(dy) and np.all(dy == 0)
        for f in (np.prod, np.cumprod, np.var, np.std):
            with pytest.raises(ad.registry.ComplexRuleError, match=f"{f.__name__}.*np.real"):
                ad.gradient(lambda v: np.sum(f(v, None, np.float64)), z)
            with pytest.raises(ad.registry.ComplexRuleError, match=f.__name__):
                ad.jvp(lambda v: f(v, None, np.float64), (z,), (z,))
