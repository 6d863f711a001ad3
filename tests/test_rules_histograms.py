"""np.histogram and np.histogram_bin_edges: derivatives with respect to the weights and,
where NumPy places the edges from the data, to the samples at the extremes; against
finite differences (adrules.testing) and against hand-derived values."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule

rng = np.random.default_rng(11)
# away from every edge by more than the finite-difference step, the extremes unique
A = np.array([0.13, 0.91, 0.47, 0.52, 0.08, 0.66, 0.35, 0.99, 0.27, 0.74])
W = rng.uniform(0.5, 2.0, size=A.shape)


@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("bins, range_", [(4, None), (np.array([0.0, 0.2, 0.5, 0.6, 1.0]), None),
                                          (3, np.array([0.1, 0.8])), ("sturges", None)])
def test_rules_against_finite_differences(bins, range_, density):
    """With respect to the samples, explicit edges, the range and the weights at once."""
    if not isinstance(bins, str):  # NumPy estimates a number of bins from unweighted data only
        check_rrule(np.histogram, A, bins, range_, density, W)
        check_frule(np.histogram, A, bins, range_, density, W)
    check_rrule(np.histogram, A, bins, range_, density)  # no weights: through the edges only
    check_frule(np.histogram, A, bins, range_, density)


@pytest.mark.parametrize("density", [False, True])
def test_second_order_through_a_loss(density):
    def loss(w, a):
        hist, edges = np.histogram(a, bins=4, density=density, weights=w)
        return np.sum(hist ** 2 * edges[1:]) + np.sum(np.sin(edges))

    check_grads(loss, W, A, order=2)


def test_weights_gradient_is_the_bins_cotangent_and_zero_outside_the_range():
    """hist = Σ_j w_j [a_j in bin i]: ∂(Σ_i c_i hist_i)/∂w_j = c_(bin of j), 0 for samples
    outside ``range``."""
    c = np.array([1.0, 10.0, 100.0])
    (g,) = ad.gradient(lambda w: np.sum(c * np.histogram(A, bins=3, range=(0.1, 0.8), weights=w)[0]), W)
    bin_of = np.floor((A - 0.1) / (0.7 / 3)).astype(int)
    inside = (A >= 0.1) & (A <= 0.8)
    np.testing.assert_array_equal(g, np.where(inside, c[np.clip(bin_of, 0, 2)], 0.0))


def test_edges_move_with_the_smallest_and_largest_sample_only():
    """edges = linspace(min a, max a, n + 1): d edges_k / d a_min = 1 - k / n, / d a_max = k / n."""
    (g,) = ad.gradient(lambda a: np.sum(np.histogram(a, bins=4)[1] * np.arange(5.0)), A)
    k = np.arange(5.0) / 4
    expected = np.zeros_like(A)
    expected[np.argmin(A)], expected[np.argmax(A)] = np.sum(np.arange(5.0) * (1 - k)), np.sum(np.arange(5.0) * k)
    np.testing.assert_allclose(g, expected, rtol=1e-14)
    (g,) = ad.gradient(lambda a: np.sum(np.histogram(a, bins=[0.0, 0.5, 1.0])[1]), A)  # edges given: constant
    np.testing.assert_array_equal(g, 0.0)


def test_counts_have_zero_derivative_in_the_samples():
    (g,) = ad.gradient(lambda a: np.sum(np.histogram(a, bins=[0.0, 0.5, 1.0])[0] ** 2), A)
    np.testing.assert_array_equal(g, 0.0)


def test_the_value_is_numpys_own():
    y, _ = ad.pullback(lambda w: np.histogram(A, bins=5, density=True, weights=w)[0], W)
    np.testing.assert_array_equal(y, np.histogram(A, bins=5, density=True, weights=W)[0])


def test_bin_edges_against_finite_differences():
    check_rrule(np.histogram_bin_edges, A, 5)
    check_frule(np.histogram_bin_edges, A, 5)
    check_grads(lambda a: np.sum(np.histogram_bin_edges(a, 3) ** 3), A.reshape(2, 5), order=2)


# ---- D dimensions ------------------------------------------------------------------------------
P = np.random.default_rng(5).uniform(0.0, 1.0, size=(12, 3))
WP = np.random.default_rng(6).uniform(0.5, 2.0, size=12)


@pytest.mark.parametrize("density", [False, True])
@pytest.mark.parametrize("bins, range_", [
    (3, None), ([np.array([0.0, 0.3, 0.7, 1.0]), 2, np.array([0.0, 0.5, 1.0])], None),
    ([2, 3, 2], np.array([[0.1, 0.9], [0.0, 1.0], [0.2, 0.95]])),
])
def test_histogramdd_rules_against_finite_differences(bins, range_, density):
    """Points, explicit edges (some axes), ranges and weights at once, then without weights."""
    check_rrule(np.histogramdd, P, bins, range_, density, WP)
    check_frule(np.histogramdd, P, bins, range_, density, WP)
    check_rrule(np.histogramdd, P, bins, range_, density)
    check_frule(np.histogramdd, P, bins, range_, density)


@pytest.mark.parametrize("density", [False, True])
def test_histogram2d_and_a_list_of_coordinates_to_second_order(density):
    x, y = P[:, 0], P[:, 1]

    def loss2d(w, x, y):
        hist, xe, ye = np.histogram2d(x, y, bins=[3, 2], density=density, weights=w)
        return np.sum(hist ** 2 * np.add.outer(xe[1:], ye[1:])) + np.sum(np.cos(xe)) * np.sum(ye)

    def loss_dd(w, x, y):
        hist, (xe, ye) = np.histogramdd([x, y], bins=[3, 2], density=density, weights=w)
        return np.sum(hist ** 2 * np.add.outer(xe[1:], ye[1:])) + np.sum(np.cos(xe)) * np.sum(ye)

    check_grads(loss2d, WP, x, y, order=2)
    check_grads(loss_dd, WP, x, y, order=2)
    g2 = ad.gradient(loss2d, WP, x, y)
    gdd = ad.gradient(loss_dd, WP, x, y)
    for a, b in zip(g2, gdd):
        np.testing.assert_array_equal(a, b)


def test_histogram2d_value_is_numpys_own():
    x, y = P[:, 0], P[:, 1]
    (hist, xe, ye), _ = ad.pullback(lambda w: np.histogram2d(x, y, bins=np.array([0.0, 0.4, 1.0]), weights=w), WP)
    want = np.histogram2d(x, y, bins=np.array([0.0, 0.4, 1.0]), weights=WP)
    for got, expected in zip((hist, xe, ye), want):
        np.testing.assert_array_equal(got, expected)


def test_histogramdd_weights_gradient_is_the_cells_cotangent():
    c = np.arange(8.0).reshape(2, 2, 2)
    (g,) = ad.gradient(lambda w: np.sum(c * np.histogramdd(P, bins=2, range=[(0, 1)] * 3, weights=w)[0]), WP)
    cell = np.minimum((P * 2).astype(int), 1)
    np.testing.assert_array_equal(g, c[cell[:, 0], cell[:, 1], cell[:, 2]])
