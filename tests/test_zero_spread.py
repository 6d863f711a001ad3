"""np.std where the spread is zero (0-d input, constant lanes): derivative 0 in both modes
(the minimum-norm subgradient), never NaN; np.var there has derivative 0 by calculus."""

import warnings

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_grads


@pytest.mark.parametrize("f", [np.std, np.var], ids=["std", "var"])
@pytest.mark.parametrize("x", [np.float64(2.0), np.ones(3), np.full((2, 2), 3.0)], ids=["0-d", "1-d", "2-d"])
def test_zero_spread_has_zero_derivative_in_both_modes(f, x):
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no divide-by-zero on the way
        g = ad.gradient(f, x)[0]
        _, dy = ad.jvp(f, (x,), (np.linspace(-1.0, 1.0, np.size(x)).reshape(np.shape(x)),))
    assert np.all(g == 0.0) and dy == 0.0


def test_constant_lane_next_to_a_spread_lane():
    x = np.array([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]])
    g = ad.gradient(lambda v: np.sum(np.std(v, 1)), x)[0]
    assert np.all(g[0] == 0.0)
    check_grads(lambda v: np.std(v, 1), x[1:], order=2)  # the spread lane: finite differences
    _, dy = ad.jvp(lambda v: np.std(v, 1), (x,), (np.ones_like(x) * [[1.0], [0.5]],))
    np.testing.assert_allclose(dy, [0.0, 0.0], atol=1e-15)  # a shift changes no spread
