"""rules/statistics.py against finite differences (rrule, frule, second order) and NumPy's
values: median, quantile, percentile and their nan versions, ptp, the nan reductions."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule, check_rules


def _distinct(shape, dtype=np.float64, seed=0):
    """Values with gaps much wider than the finite-difference step (no rank swaps)."""
    rng = np.random.default_rng(seed)
    return (rng.permutation(int(np.prod(shape))).reshape(shape) * 0.1 - 1.0).astype(dtype)


def _with_nans(shape, seed=0):
    x = _distinct(shape, seed=seed)
    x.flat[[1, 5]] = np.nan
    return x


_check_all = check_rules


AXES = [None, 0, -1, (0, 2)]


@pytest.mark.parametrize("keepdims", [False, True])
@pytest.mark.parametrize("axis", AXES)
def test_median(axis, keepdims):
    _check_all(np.median, _distinct((2, 3, 4)), axis, fkwargs={"keepdims": keepdims})


@pytest.mark.parametrize("method", ["linear", "lower", "higher", "midpoint", "nearest"])
@pytest.mark.parametrize("axis", AXES)
def test_quantile_and_percentile(axis, method):
    x = _distinct((2, 3, 4))
    q = np.array([0.31, 0.58, 0.83])  # ranks q * (n - 1) away from the jumps of every method
    order = 2 if method == "linear" else 1  # the other methods pick the same elements, unblended
    _check_all(np.quantile, x, q, axis, fkwargs={"method": method}, order=order)
    check_rrule(np.percentile, x, 37.0, fkwargs={"axis": axis, "method": method})
    check_frule(np.percentile, x, 37.0, fkwargs={"axis": axis, "method": method})


def test_quantile_is_differentiable_in_q():
    x = _distinct((7,))
    _check_all(np.quantile, x, np.array([0.31, 0.58]))  # q moves between order statistics
    check_grads(lambda q: np.percentile(x, q), np.array([31.0, 58.0]))


def test_quantile_float32():
    _check_all(np.quantile, _distinct((3, 5), np.float32), 0.3, 1)


def test_quantile_methods_without_a_rule_say_so():
    with pytest.raises(NotImplementedError, match="weibull"):
        ad.gradient(lambda v: np.quantile(v, 0.3, method="weibull"), _distinct((5,)))


@pytest.mark.parametrize("axis", [None, 0, 1])
def test_nan_order_statistics(axis):
    x = _with_nans((4, 5))
    _check_all(np.nanmedian, x, axis)
    _check_all(np.nanquantile, x, np.array([0.31, 0.58]), axis)
    _check_all(np.nanpercentile, x, 40.0, axis)


def test_nan_order_statistics_pass_nothing_to_nans():
    x = _with_nans((6,))
    g = ad.gradient(lambda v: np.nanmedian(v), x)[0]
    assert np.all(g[np.isnan(x)] == 0.0) and np.isclose(np.sum(g), 1.0)


@pytest.mark.parametrize("axis, keepdims", [(None, False), (1, True), ((0, 1), False)])
def test_ptp(axis, keepdims):
    _check_all(np.ptp, _distinct((3, 4)), axis, fkwargs={"keepdims": keepdims})
    _check_all(np.ptp, _distinct((3, 4), np.float32), axis)


@pytest.mark.parametrize("f", [np.nanmax, np.nanmin, np.nanprod, np.nancumsum, np.nancumprod,
                               np.nanvar, np.nanstd, np.nansum, np.nanmean])
@pytest.mark.parametrize("axis", [None, 0, 1])
def test_nan_reductions(f, axis):
    x = _with_nans((3, 4))
    _check_all(f, x, axis)
    if f in (np.nanmax, np.nanmin, np.nanprod, np.nanvar, np.nanstd):
        _check_all(f, x, fkwargs={"axis": axis, "keepdims": True})


def test_nanvar_ddof_and_float32():
    _check_all(np.nanvar, _with_nans((3, 4)), 1, fkwargs={"ddof": 1})
    _check_all(np.nanstd, _with_nans((3, 4)).astype(np.float32), 0)


def test_nanstd_of_a_constant_lane_has_zero_derivative_in_both_modes():
    x = np.array([[2.0, np.nan, 2.0], [1.0, 3.0, np.nan]])
    g = ad.gradient(lambda v: np.sum(np.nanstd(v, 1)), x)[0]
    np.testing.assert_allclose(g, [[0.0, 0.0, 0.0], [-0.5, 0.5, 0.0]])
    _, dy = ad.jvp(lambda v: np.nanstd(v, 1), (x,), (np.ones_like(x) * [[1.0], [0.0]],))
    np.testing.assert_array_equal(dy, [0.0, 0.0])


def test_nanmax_ties_share_and_all_nan_lanes_are_nan():
    x = np.array([[1.0, 3.0, 3.0], [np.nan, np.nan, np.nan]])
    y, back = ad.pullback(lambda v: np.nanmax(v, 1), x)
    assert np.isnan(y[1])
    np.testing.assert_array_equal(back(np.array([1.0, 0.0]))[0], [[0.0, 0.5, 0.5], [0.0, 0.0, 0.0]])


@pytest.mark.parametrize("kwargs", [{}, {"rowvar": False}, {"bias": True}, {"ddof": 2}])
def test_cov(kwargs):
    _check_all(np.cov, _distinct((3, 5)), fkwargs=kwargs)
    _check_all(np.cov, _distinct((5,)), _distinct((5,), seed=1), fkwargs=kwargs)


def test_corrcoef():
    _check_all(np.corrcoef, _distinct((3, 5)))
    _check_all(np.corrcoef, _distinct((5, 2)), _distinct((5, 2), seed=1), fkwargs={"rowvar": False})


# ---- complex values -------------------------------------------------------------------------------
def _complex_checks():
    import _complex_checks  # tests/_complex_checks.py, which conftest.py loads

    return _complex_checks


@pytest.mark.parametrize("f", [np.nansum, np.nanmean, np.nanvar, np.nanstd, np.nanprod, np.nancumsum,
                               np.nancumprod], ids=lambda f: f.__name__)
@pytest.mark.parametrize("axis", [None, 1])
def test_nan_reductions_of_complex_values(f, axis):
    """NaNs (complex ones) are left out; nanvar and nanstd of complex values are real, as
    NumPy's; both modes against finite differences along real and imaginary parts."""
    checks = _complex_checks()
    z = checks.complex_args((_with_nans((3, 4)),))[0]
    assert np.isnan(z.flat[1]) and not np.isnan(z.flat[0])
    checks.check_both(f, z, axis)


def test_complex_nanvar_is_numpys_and_real():
    z = _complex_checks().complex_args((_with_nans((3, 4)),))[0]
    y = ad.rrule(np.nanvar, z, 1)[0]
    np.testing.assert_allclose(y, np.nanvar(z, 1))
    assert np.isrealobj(y)


@pytest.mark.parametrize("f", [np.cov, np.corrcoef], ids=["cov", "corrcoef"])
def test_cov_and_corrcoef_of_complex_values_conjugate_or_refuse(f):
    """NumPy's cov of complex rows is X X^H / (n - 1): through matmul, which refuses complex
    values until its rule is written for them; then this checks the value and both modes."""
    checks = _complex_checks()
    z = checks.complex_args((_distinct((2, 4)),))[0]
    try:
        y = ad.rrule(f, z)[0]
    except ad.registry.ComplexRuleError as e:
        assert "matmul" in str(e)
        return
    np.testing.assert_allclose(y, f(z))
    checks.check_both(f, z)


def test_order_statistics_refuse_complex_values():
    """median sorts: complex values (ordered lexicographically by NumPy) are refused, naming
    the rule that compares. ptp, nanmax and nanmin pick elements in NumPy's order, as max
    and min do, and are checked against finite differences."""
    z = _complex_checks().complex_args((_distinct((5,)),))[0]
    for f in (np.ptp, np.nanmax, np.nanmin):
        _complex_checks().check_both(f, z)
    for f in (np.median, np.nanmedian):
        with pytest.raises(ad.registry.ComplexRuleError):
            ad.gradient(lambda v: np.real(f(v)), z)
        with pytest.raises(ad.registry.ComplexRuleError):
            ad.jvp(lambda v: f(v), (z,), (z,))
