"""Rules of rules/indexing.py: x[index], the scatter, take, take_along_axis, sort,
diagonal, choose and select, against finite differences (adrules.testing)."""

import numpy as np
import pytest

import adrules as ad
from adrules import ops
from adrules.rules import indexing
from adrules.rules.indexing import scatter_add, window_sum
from adrules.testing import check_frule, check_grads, check_rrule

rng = np.random.default_rng(7)


def R(*shape, dtype=np.float64):
    return rng.standard_normal(shape).astype(dtype)


def case(f, *args, **fkwargs):
    """One row of the rule table: ``f(*args, **fkwargs)``."""
    name = getattr(f, "__name__", "f")
    shapes = ",".join(str(np.shape(a)) if isinstance(a, np.ndarray) else type(a).__name__ for a in args)
    return pytest.param(f, args, fkwargs, id=f"{name}[{shapes}]")


def since_numpy_2_3(param, what):
    """A case that calls a NumPy 2.3 API (Python 3.10 gets NumPy 2.2 at most)."""
    too_old = np.lib.NumpyVersion(np.__version__) < "2.3.0"
    return pytest.param(*param.values, id=param.id,
                        marks=pytest.mark.skipif(too_old, reason=f"{what} is new in NumPy 2.3"))


REPEATED = np.array([0, 2, 0, 4, 4])

RULES = [
    # x[index]: basic, fancy with repeats, masks, None/Ellipsis, mixed
    case(ops.getitem, R(5), 3),
    case(ops.getitem, R(5), slice(1, None, 2)),
    case(ops.getitem, R(5), REPEATED),
    case(ops.getitem, R(5), [1, 1, 1]),
    case(ops.getitem, R(3, 4), (slice(None), -1)),
    case(ops.getitem, R(3, 4), (Ellipsis, None, slice(1, 3))),
    case(ops.getitem, R(3, 4), R(3, 4) > 0),
    case(ops.getitem, R(3, 4), np.array([True, False, True])),
    case(ops.getitem, R(3, 4), (np.array([0, 0, 2]), np.array([1, 1, 3]))),
    case(ops.getitem, R(2, 3, 4), (np.array([[1, 1], [0, 1]]), slice(None), np.array([3, 3]))),
    case(ops.getitem, R(3, 4, dtype=np.float32), (REPEATED[:3] % 3, 0)),
    # the scatter itself (its pullback is the gather)
    case(scatter_add, (6,), REPEATED, R(5)),
    case(scatter_add, (3, 4), (slice(None), np.array([1, 1])), R(3, 2)),
    case(scatter_add, (3, 4), (slice(None), np.array([1, 1])), R(2)),  # broadcast values
    case(window_sum, (7,), 3, None, R(5, 3)),
    case(window_sum, (4, 5), (2, 2), (1, 0), R(3, 4, 2, 2)),
    # gathers along an axis
    case(np.take, R(5), REPEATED),
    case(np.take, R(3, 4), np.array([0, 3, 3, -1]), 1),
    case(np.take, R(3, 4), np.array([[0, 5], [11, 5]])),
    case(np.take, R(3, 4), np.array([5, -1]), 0, mode="clip"),
    case(np.take, R(3, 4), np.array([5, -1]), axis=1, mode="wrap"),
    case(np.take_along_axis, R(3, 4), np.array([[0, 0], [3, 1], [2, 2]]), 1),
    case(np.take_along_axis, R(3, 4), np.array([[0, 0, 1, 2]]), axis=0),
    since_numpy_2_3(case(np.take_along_axis, R(2, 3, 4), np.argsort(R(2, 3, 4), axis=-1)),
                    "take_along_axis without axis (default -1)"),
    case(np.take_along_axis, R(3, 4), np.array([11, 0, 0]), None),
    case(np.sort, R(6)),
    case(np.sort, R(3, 4), 0),
    case(np.sort, R(2, 3, 4), axis=None),
    case(np.sort, R(3, 4, dtype=np.float32)),
    case(np.diagonal, R(3, 4)),
    case(np.diagonal, R(4, 3), -1),
    case(np.diagonal, R(3, 4, 5), 1, 0, 2),
    case(np.diagonal, R(3, 4, 5), offset=-1, axis1=2, axis2=1),
    case(np.diagonal, R(2, 3, 3), 0, -2, -1),
    # picks among arrays: a list of choices (list cotangent) or one stacked array
    case(np.choose, np.array([0, 1, 2, 1]), [R(4), R(4), R(4)]),
    case(np.choose, np.array([0, 1, 2, 1]), R(3, 4)),
    case(np.choose, np.array([[0, 1], [1, 1]]), [R(2), R(2, 2)]),  # broadcast choices
    case(np.choose, np.array([3, -1, 1]), [R(3), R(3)], mode="wrap"),
    case(np.choose, np.array([3, -1, 1]), [R(3), R(3)], mode="clip"),
    case(np.select, [np.array([True, False, False]), np.array([True, True, False])], [R(3), R(3)], R(3)),
    case(np.select, [np.array([True, False, False]), np.array([False, True, True])], [R(3), R(1)]),
    case(np.select, [np.array([[True], [False]])], [R(2, 3)], 2.5),
    # overlapping windows: each element gathers the cotangents of every window it is in
    case(np.lib.stride_tricks.sliding_window_view, R(7), 3),
    case(np.lib.stride_tricks.sliding_window_view, R(5, 6), (2, 3)),
    case(np.lib.stride_tricks.sliding_window_view, R(5, 6), 4, 1),
    case(np.lib.stride_tricks.sliding_window_view, R(3, 4, 5), (2, 2), axis=(2, 0)),
    case(np.lib.stride_tricks.sliding_window_view, R(8, 2), (2, 3), (0, 0)),  # one axis twice
    case(np.lib.stride_tricks.sliding_window_view, R(6, dtype=np.float32), 6),
]


@pytest.mark.parametrize("f, args, fkwargs", RULES)
def test_rrule(f, args, fkwargs):
    check_rrule(f, *args, fkwargs=fkwargs)


@pytest.mark.parametrize("f, args, fkwargs", RULES)
def test_frule(f, args, fkwargs):
    check_frule(f, *args, fkwargs=fkwargs)


# ---- through the tracer, second order ----------------------------------------------

TRACED = [
    pytest.param(lambda x: x[REPEATED] ** 3, (R(5),), id="repeated"),
    pytest.param(lambda x: np.sin(x[1:, [0, 0, 2]]) * x[0, 1], (R(3, 4),), id="slice+fancy"),
    pytest.param(lambda x: x[x > 0] ** 2, (R(6),), id="mask"),
    pytest.param(lambda x: x[..., None, ::2] ** 2, (R(2, 3),), id="ellipsis-none"),
    pytest.param(lambda x: np.take(x, REPEATED % 3, axis=1) ** 3, (R(2, 3),), id="take"),
    pytest.param(lambda x: np.sort(x, axis=0) ** 3, (R(3, 2),), id="sort"),
    pytest.param(lambda x: x.diagonal(1) ** 3, (R(3, 4),), id="diagonal-method"),
    pytest.param(lambda a, b: np.choose([1, 0, 1], [a, b]) ** 3, (R(3), R(3)), id="choose"),
    pytest.param(lambda x, k: (np.lib.stride_tricks.sliding_window_view(x, 3) @ k) ** 2, (R(6), R(3)),
                 id="windows"),
]


@pytest.mark.parametrize("f, args", TRACED)
def test_traced_second_order(f, args):
    check_grads(f, *args, order=2)


def test_bincount_sums_weights_by_index_in_both_modes_and_second_order():
    idx, w = np.array([0, 2, 2, 1, 4]), np.array([0.5, -1.0, 2.0, 0.3, 1.5])
    check_rrule(np.bincount, idx, w)
    check_frule(np.bincount, idx, w)
    check_rrule(np.bincount, idx, w, 7)
    check_grads(lambda w: np.sum(np.bincount(idx, weights=w, minlength=6) ** 2), w, order=2)
    (g,) = ad.gradient(lambda w: np.sum(np.bincount(idx, weights=w) ** 2), w)
    np.testing.assert_allclose(g, 2 * np.bincount(idx, weights=w)[idx])


@pytest.mark.parametrize("write, reason", [
    (lambda out, x: np.add.at(out, np.array([0, 1, 1]), x), r"numpy.add.at: it writes into its first "
                                                            r"argument in place.*np.bincount\(idx, weights=x"),
    (lambda out, x: np.put(out, [0, 1, 1], x), r"numpy.put: it writes into an existing array in place"),
    (lambda out, x: np.putmask(out, out == 0, x), r"numpy.putmask: it writes into an existing array"),
])
def test_a_function_that_writes_in_place_says_so_not_to_mark_it_non_differentiable(write, reason):
    # the generic advice (non_differentiable) would have made the gradient silently zero
    def f(x):
        out = np.zeros(3)
        write(out, x)
        return np.sum(out ** 2)

    with pytest.raises(ad.tracer.NoRuleError, match=reason) as info:
        ad.gradient(f, np.array([1.0, 2.0, 3.0]))
    assert "non_differentiable" not in str(info.value)


def test_sliding_windows_convolution_has_np_convolve_s_gradient():
    """y = windows(x, 3) @ r is np.convolve(x, r[::-1], 'valid'): its pullback sends ȳ to
    x̄ = np.convolve(ȳ, r, 'full') and r̄ = windows(x, 3).T @ ȳ, worked out by hand."""
    windows = np.lib.stride_tricks.sliding_window_view
    x, r, gy = R(9), R(3), R(7)
    y, back = ad.pullback(lambda x, r: windows(x, 3) @ r, x, r)
    np.testing.assert_allclose(y, np.convolve(x, r[::-1], mode="valid"))
    gx, gr = back(gy)
    np.testing.assert_allclose(gx, np.convolve(gy, r, mode="full"))
    np.testing.assert_allclose(gr, windows(x, 3).T @ gy)
    image, filters = R(6, 5), R(2, 3, 3)  # a 2-D filter bank over 3x3 patches
    check_grads(lambda f, im: np.einsum("hwij,cij->chw", windows(im, (3, 3)), f) ** 2, filters, image)


@pytest.mark.parametrize("shape, window, axis", [((50,), 4, None), ((9, 8), (2, 3), None), ((6, 7, 5), (3, 2), (2, 0)),
                                                  ((8, 2), (2, 3), (0, 0)), ((5,), 5, None)])
def test_window_sum_adds_each_window_where_it_read_in_blocks_of_any_size(shape, window, axis, monkeypatch):
    """Against a loop over every window and every position in it; blocks of one row of
    the windows up to all of them give the same numbers."""
    x = R(*shape)
    g = R(*np.lib.stride_tricks.sliding_window_view(x, window, axis).shape)
    expected = np.zeros(shape)
    reads = np.lib.stride_tricks.sliding_window_view(np.arange(x.size).reshape(shape), window, axis)
    np.add.at(expected.reshape(-1), reads.reshape(-1), g.reshape(-1))
    for block_bytes in (1, 100, 2**18):
        monkeypatch.setattr(indexing, "_WINDOW_BLOCK_BYTES", block_bytes)
        np.testing.assert_allclose(window_sum(shape, window, axis, g), expected, rtol=1e-13, atol=1e-13)


def test_repeated_indices_accumulate():
    """The hand-computed pullback of x[[0, 0, 1]] sends ȳ = (1, 10, 100) to (11, 100, 0)."""
    _, back = ad.pullback(lambda x: x[[0, 0, 1]], np.zeros(3))
    np.testing.assert_array_equal(back(np.array([1.0, 10.0, 100.0]))[0], [11.0, 100.0, 0.0])


def test_second_derivative_through_repeated_indices():
    """d²/dx² of sum(x[[0, 0]]**3) = 2·6·x0 at x0 (the scatter is traced again)."""
    def grad0(x):
        return ad.gradient(lambda z: z[[0, 0]] ** 3 @ np.ones(2), x)[0][0]

    np.testing.assert_allclose(ad.gradient(grad0, np.array([2.0, 5.0]))[0], [24.0, 0.0])


@pytest.mark.parametrize("f", [
    lambda x: x[REPEATED % 3] ** 2,
    lambda x: np.sort(x) ** 2,
    lambda x: np.take(x, [2, 2]) ** 2,
])
def test_float32_gradients_stay_float32(f):
    x = R(3, dtype=np.float32)
    y, back = ad.pullback(f, x)
    g = back(np.ones_like(y))[0]
    assert g.dtype == np.float32
    _, dy = ad.jvp(f, (x,), (np.ones_like(x),))
    assert dy.dtype == np.float32


def test_scatter_add_docstring_value():
    np.testing.assert_array_equal(scatter_add((2, 2), (np.array([1, 1]), np.array([0, 0])), 3.0),
                                  [[0.0, 0.0], [6.0, 0.0]])


def test_options_by_keyword_take_and_sort():
    """Optional arguments by keyword reach the rule by name (rules take NumPy's signature)."""
    x = np.arange(1.0, 7.0).reshape(2, 3)
    idx = np.array([0, 2, 0])
    (g,) = ad.gradient(lambda v: np.sum(np.take(v, indices=idx, axis=1) ** 2), x)
    np.testing.assert_allclose(g, [[4 * 1.0, 0.0, 2 * 3.0], [4 * 4.0, 0.0, 2 * 6.0]])  # column 0 taken twice
    y, dy = ad.jvp(lambda v: np.take(v, idx, axis=1, mode="clip"), (x,), (np.ones_like(x),))
    np.testing.assert_array_equal(dy, np.ones((2, 3)))
    (g,) = ad.gradient(lambda v: np.sum(np.sort(v, axis=0) * np.array([[1.0], [10.0]])), x[::-1])
    np.testing.assert_array_equal(g, [[10.0] * 3, [1.0] * 3])  # rows swap places when sorted


# ---- complex values -------------------------------------------------------------------------------
def _complex_checks():
    import _complex_checks  # tests/_complex_checks.py, which conftest.py loads

    return _complex_checks


@pytest.mark.parametrize("f, args, fkwargs", RULES)
def test_complex_values_both_modes(f, args, fkwargs):
    """Every case above at complex values, both modes, against finite differences along real
    and imaginary parts; sort refuses (NumPy orders complex numbers lexicographically)."""
    checks = _complex_checks()
    zargs = checks.complex_args(args)
    if f is np.sort:
        with pytest.raises(ad.registry.ComplexRuleError, match="numpy.sort"):
            ad.rrule(f, *zargs, **fkwargs)
        with pytest.raises(ad.registry.ComplexRuleError, match="numpy.sort"):
            ad.frule((ad.NoTangent(), zargs[0], *[ad.NoTangent()] * (len(zargs) - 1)), f, *zargs, **fkwargs)
        return
    checks.check_both(f, *zargs, fkwargs=fkwargs)


@pytest.mark.parametrize("f, args", [p for p in TRACED if p.id not in ("sort", "windows")] + [
    pytest.param(lambda x, k: np.sum(np.lib.stride_tricks.sliding_window_view(x, 3) * k, -1) ** 2, (R(6), R(3)),
                 id="windows")])
def test_complex_traced_second_order(f, args):
    checks = _complex_checks()
    zargs = checks.complex_args(args)
    loss = checks.real_loss(lambda z: f(z, *zargs[1:]))
    checks.check_gradient(loss, zargs[0])
    checks.check_hvp(loss, zargs[0])


def test_complex_where_and_select_mix_real_and_complex_branches():
    """np.where and np.select with one complex branch and one real: the real branch's
    cotangent is real (projection), the complex one's complex, both against differences."""
    checks = _complex_checks()
    cond = np.array([True, False, True])
    z, x = checks.complex_args((R(3),))[0], R(3) + 0.25
    for f in (lambda a, b: np.where(cond, a, b), lambda a, b: np.select([cond, ~cond], [a, b])):
        loss = checks.real_loss(f, x)
        checks.check_gradient(loss, z)
        loss_x = checks.real_loss(lambda b: f(z, b))
        g = checks.check_gradient(loss_x, x)
        assert g.dtype == np.float64
