"""rules/scipy_stats.py and scipy_stats_multivariate.py: every covered method of every
covered distribution against finite differences, in both modes, to second order, over
scalar, vector and broadcast inputs, called the ways SciPy allows (positional, keywords,
frozen); gradients against closed forms; values SciPy's own; the classes SciPy's other
distributions share left alone."""

import subprocess
import sys

import numpy as np
import pytest

st = pytest.importorskip("scipy.stats", reason="SciPy is an optional extra: pip install adrules[scipy]")

import adrules as ad  # noqa: E402
from adrules.rules import scipy_stats, scipy_stats_multivariate  # noqa: E402
from adrules.testing import check_grads  # noqa: E402

RNG = np.random.default_rng(0)
SHAPES = {"norm": (), "t": (3.5,), "beta": (2.0, 3.0), "gamma": (2.5,), "chi2": (3.0,), "expon": (),
          "laplace": (), "logistic": (), "cauchy": (), "uniform": ()}
BOUNDED_BELOW = {"beta", "gamma", "chi2", "expon", "uniform"}
LOC, SCALE = 0.3, 1.7


def _points(name, shape):
    """Points inside the support of ``name`` at loc LOC and scale SCALE (for beta and
    uniform, inside (0, 1) once standardized; away from laplace's kink at loc)."""
    z = RNG.uniform(0.1, 0.9, size=shape) if name in BOUNDED_BELOW else RNG.uniform(-2.0, 2.0, size=shape)
    if name == "laplace":
        z = np.where(np.abs(z) < 0.1, 0.5, z)
    return LOC + SCALE * z


def _moving(name, method):
    """Which arguments of ``method(x, *shapes, loc, scale)`` are differentiated."""
    k = len(SHAPES[name])
    shapes = list(range(1, 1 + k)) if method in ("logpdf", "pdf") else []
    return [0, *shapes, k + 1, k + 2]


CASES = [(name, method) for name in SHAPES for method in scipy_stats.CONTINUOUS]


@pytest.mark.parametrize("shape", [(), (4,), "broadcast"])
@pytest.mark.parametrize("name, method", CASES, ids=[f"{n}.{m}" for n, m in CASES])
def test_continuous_methods(name, method, shape):
    f = getattr(getattr(st, name), method)
    first = RNG.uniform(0.1, 0.9, size=(3, 1) if shape == "broadcast" else shape) \
        if method in ("ppf", "isf") else _points(name, (3, 1) if shape == "broadcast" else shape)
    loc = np.array([LOC, LOC + 0.1]) if shape == "broadcast" else LOC  # (3, 1) against (2,)
    if shape == "broadcast" and name in BOUNDED_BELOW and method not in ("ppf", "isf"):
        first = first + 0.05  # inside the support at loc + 0.1 too
    args = [first, *SHAPES[name], loc, SCALE]
    moving = _moving(name, method)

    def fn(*values):
        full = list(args)
        for i, v in zip(moving, values):
            full[i] = v
        return f(*full)

    check_grads(fn, *(np.asarray(args[i], dtype=float) if np.ndim(args[i]) else float(args[i]) for i in moving),
                order=2)


def test_norm_gradients_by_hand():
    x, mu, s = np.array([0.2, -1.0, 2.5]), 0.4, 1.3
    z = (x - mu) / s
    gx, gmu, gs = ad.gradient(lambda x, mu, s: np.sum(st.norm.logpdf(x, mu, s)), x, mu, s)
    np.testing.assert_allclose(gx, -z / s, rtol=1e-13)
    assert gmu == pytest.approx(np.sum(z / s), rel=1e-13)
    assert gs == pytest.approx(np.sum((z ** 2 - 1.0) / s), rel=1e-13)
    (gx,) = ad.gradient(lambda x: np.sum(st.norm.cdf(x, mu, s)), x)
    np.testing.assert_allclose(gx, np.exp(-0.5 * z ** 2) / (s * np.sqrt(2 * np.pi)), rtol=1e-13)
    (gq,) = ad.gradient(lambda q: st.norm.ppf(q, mu, s), 0.8)
    assert gq == pytest.approx(1.0 / st.norm.pdf(st.norm.ppf(0.8, mu, s), mu, s), rel=1e-12)


def test_t_df_and_gamma_shape_gradients_by_hand():
    from scipy.special import digamma
    x, df = 0.7, 4.5
    (gdf,) = ad.gradient(lambda df: st.t.logpdf(x, df), df)
    expected = 0.5 * (digamma((df + 1) / 2) - digamma(df / 2) - 1 / df - np.log1p(x * x / df)
                      + (df + 1) * x * x / (df * (df + x * x)))
    assert gdf == pytest.approx(expected, rel=1e-12)
    (ga,) = ad.gradient(lambda a: st.gamma.logpdf(2.0, a, scale=0.5), 3.0)
    assert ga == pytest.approx(np.log(4.0) - digamma(3.0), rel=1e-12)


def test_called_the_ways_scipy_allows():
    x = np.array([0.1, 0.5, 0.9])
    check_grads(lambda x, s: st.norm.logpdf(x=x, scale=s), x, 2.0, order=2)
    check_grads(lambda x, df: st.t.logpdf(x, df=df, loc=0.5), x, 4.0, order=2)
    check_grads(lambda x, a: st.gamma.logpdf(x, a=a, scale=2.0), x, 2.0, order=2)
    check_grads(lambda mu, s: st.norm(mu, s).logpdf(x), 0.3, 1.2, order=2)  # frozen
    check_grads(lambda mu, s: st.norm(loc=mu, scale=s).logcdf(x), 0.3, 1.2, order=2)
    check_grads(lambda df: st.t(df).logpdf(x), 3.0, order=2)
    check_grads(lambda a, b: st.beta(a, b).logpdf(x), 2.0, 3.0, order=2)
    check_grads(lambda x: st.expon(scale=2.0).sf(x), x, order=2)
    check_grads(lambda mu: st.poisson(mu).logpmf(np.array([0, 2, 5])), 2.0, order=2)


def test_values_are_scipys_and_untraced_calls_run_scipys_method():
    x = np.array([0.2, 1.4])
    y, _ = ad.pullback(lambda x: st.gamma.logpdf(x, 2.5, 0.1, 1.3), x)
    np.testing.assert_array_equal(y, st.gamma.logpdf(x, 2.5, 0.1, 1.3))
    assert st.norm.logpdf(0.0) == pytest.approx(-0.5 * np.log(2 * np.pi))
    with pytest.raises(TypeError):  # SciPy's own error for a call it refuses
        st.norm.logpdf(0.0, 0.0, 1.0, 2.0, 3.0)


@pytest.mark.parametrize("method", scipy_stats.DISCRETE)
@pytest.mark.parametrize("k, mu", [(3, 2.5), (np.array([0, 1, 3, 7]), np.array([0.5, 1.5, 2.5, 4.0])),
                                   (np.array([[0], [2], [5]]), np.array([0.7, 3.0]))],
                         ids=["scalar", "vector", "broadcast"])
def test_poisson_in_the_rate(method, k, mu):
    f = getattr(st.poisson, method)
    check_grads(lambda mu: f(k, mu), mu, order=2)
    check_grads(lambda mu: f(k, mu=mu, loc=0), mu, modes=("rev",), order=1)


def test_poisson_rate_gradients_by_hand():
    k, mu = np.array([0, 2, 5]), 1.7
    (g,) = ad.gradient(lambda mu: np.sum(st.poisson.logpmf(k, mu)), mu)
    assert g == pytest.approx(np.sum(k / mu - 1.0), rel=1e-13)
    (g,) = ad.gradient(lambda mu: np.sum(st.poisson.cdf(k, mu)), mu)
    assert g == pytest.approx(-np.sum(st.poisson.pmf(k, mu)), rel=1e-12)


def test_outside_the_support_derivatives_are_zero():
    (g,) = ad.gradient(lambda x: np.sum(st.expon.cdf(x)), np.array([-1.0, 0.5]))
    np.testing.assert_allclose(g, [0.0, np.exp(-0.5)])
    (g,) = ad.gradient(lambda x: np.sum(st.gamma.pdf(x, 2.0)), np.array([-1.0, 0.5]))
    np.testing.assert_allclose(g, [0.0, (1.0 - 0.5) * np.exp(-0.5)])
    (g,) = ad.gradient(lambda x: np.sum(st.uniform.cdf(x, 0.0, 2.0)), np.array([-1.0, 0.5, 3.0]))
    np.testing.assert_allclose(g, [0.0, 0.5, 0.0])


def test_no_derivative_in_a_shape_of_a_distribution_function():
    with pytest.raises(NotImplementedError, match=r"scipy\.stats\.gamma\.cdf: no derivative with respect to a"):
        ad.gradient(lambda a: st.gamma.cdf(1.0, a), 2.0)
    with pytest.raises(NotImplementedError, match=r"t\.ppf: no derivative with respect to df"):
        ad.gradient(lambda df: st.t.ppf(0.3, df), 4.0)


def test_other_distributions_and_subclasses_keep_scipys_methods():
    # erlang_gen derives from gamma_gen: it inherits the routed method, which runs SciPy's
    # for it, and SciPy's meets the traced value
    with pytest.raises(TypeError, match="np.asarray"):
        ad.gradient(lambda x: np.sum(st.erlang.logpdf(x, 2)), np.array([0.5]))
    assert not hasattr(type(st.lognorm).__dict__.get("logpdf"), "__adrules_routed__")


# ---- multivariate normal and Dirichlet ---------------------------------------------------------

def _spd(d, seed):
    a = np.random.default_rng(seed).normal(size=(d, d))
    return a @ a.T + d * np.eye(d)


@pytest.mark.parametrize("method", ["logpdf", "pdf"])
@pytest.mark.parametrize("x", [RNG.normal(size=3), RNG.normal(size=(4, 3)), RNG.normal(size=(2, 2, 3))],
                         ids=["one", "rows", "batch"])
def test_multivariate_normal(method, x):
    f = getattr(st.multivariate_normal, method)
    m, c = RNG.normal(size=3), _spd(3, 1)
    check_grads(lambda x, m, c: f(x, m, c), x, m, c, order=2)
    check_grads(lambda x, m, c: f(x, mean=m, cov=c), x, m, c, modes=("rev",), order=1)
    check_grads(lambda x, c: f(x, None, c), x, c, order=2)
    check_grads(lambda x, v: f(x, m, v), x, np.array([1.0, 2.0, 0.5]), order=2)  # a diagonal
    check_grads(lambda x, s: f(x, m, s), x, 1.7, order=2)  # a multiple of the identity


def test_multivariate_normal_of_dimension_one_and_frozen():
    f = st.multivariate_normal.logpdf
    check_grads(lambda x, mu, c: f(x, mu, c), np.array([0.1, 0.4, -0.3]), 0.2, 1.5, order=2)
    check_grads(lambda x: f(x), 0.3, order=2)
    frozen = st.multivariate_normal(np.zeros(3), _spd(3, 2))
    check_grads(lambda x: frozen.logpdf(x), RNG.normal(size=(4, 3)), order=2)
    check_grads(lambda x: frozen.pdf(x), RNG.normal(size=3), order=2)


def test_multivariate_normal_entropy():
    c = _spd(3, 5)
    check_grads(lambda c: st.multivariate_normal.entropy(None, c), c, order=2)
    check_grads(lambda c: st.multivariate_normal.entropy(np.zeros(3), cov=c), np.array([1.0, 2.0, 0.5]), order=2)
    (g,) = ad.gradient(lambda c: st.multivariate_normal.entropy(np.zeros(3), c), c)
    inv = np.linalg.inv(c)
    np.testing.assert_allclose(g, np.tril(inv) - 0.5 * np.diag(np.diag(inv)), rtol=1e-12, atol=1e-15)


def test_multivariate_normal_gradient_by_hand_in_the_lower_triangle():
    x, m, c = RNG.normal(size=3), RNG.normal(size=3), _spd(3, 3)
    gx, gm, gc = ad.gradient(lambda x, m, c: st.multivariate_normal.logpdf(x, m, c), x, m, c)
    inv = np.linalg.inv(c)
    a = inv @ (x - m)
    np.testing.assert_allclose(gx, -a, rtol=1e-12)
    np.testing.assert_allclose(gm, a, rtol=1e-12)
    sym = 0.5 * (np.outer(a, a) - inv)  # the gradient on symmetric matrices (autograd's, JAX's)
    np.testing.assert_allclose(gc, np.tril(2 * sym) - np.diag(np.diag(sym)), rtol=1e-12, atol=1e-15)
    # along a symmetric direction, the triangle's gradient gives the symmetric one's change
    e = RNG.normal(size=(3, 3))
    e = e + e.T
    assert np.sum(gc * e) == pytest.approx(np.sum(sym * e), rel=1e-12)


def test_dirichlet():
    alpha = np.array([1.5, 2.0, 3.0])
    x = np.array([0.2, 0.3, 0.5])
    xs = np.random.default_rng(4).dirichlet(alpha, size=4).T  # (K, n): components first, as SciPy
    for f in (st.dirichlet.logpdf, st.dirichlet.pdf):
        check_grads(lambda a: f(x, a), alpha, order=2)
        check_grads(lambda a: f(xs, a), alpha, order=2)
        check_grads(lambda x, a: f(x, a), x[:2], alpha, order=2)  # the last component 1 - sum
        check_grads(lambda x, a: f(x, a), xs[:2], alpha, order=2)
    check_grads(lambda x: st.dirichlet(alpha).logpdf(x), x[:2], order=2)  # frozen
    # the full x lies on the simplex, where finite differences cannot move it: by hand
    (gx,) = ad.gradient(lambda x: st.dirichlet.logpdf(x, alpha), x)
    np.testing.assert_allclose(gx, (alpha - 1) / x, rtol=1e-13)


def test_frozen_multivariate_distributions_with_traced_parameters_say_what_to_write():
    with pytest.raises(TypeError, match=r"pass traced parameters to the method, "
                                        r"scipy\.stats\.multivariate_normal\.logpdf\(x, mean, cov\)"):
        ad.gradient(lambda m: st.multivariate_normal(m, np.eye(2)).logpdf(np.zeros(2)), np.ones(2))


def test_tables_list_what_is_routed():
    for (name, method), prim in {**scipy_stats.PRIMITIVES, **scipy_stats_multivariate.PRIMITIVES}.items():
        assert getattr(type(getattr(st, name)), method).__adrules_routed__ is prim
        assert prim in ad.rrule and prim in ad.frule


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_rules_arrive_with_scipy_stats_and_not_before():
    out = _run("import sys, adrules, numpy as np\nprint('scipy.stats' in sys.modules)\n"
               "import scipy.stats as st\nprint(adrules.gradient(lambda x: st.norm.logpdf(x, 0.0, 1.0), 2.0)[0])")
    assert out.split() == ["False", "-2.0"]
    out = _run("import scipy.stats as st, adrules\nprint(adrules.gradient(lambda x: st.norm.logpdf(x), 2.0)[0])")
    assert out.strip() == "-2.0"


def test_multivariate_normal_entropy_refuses_a_complex_cov():
    # SciPy reads only the real part of a complex cov: a rule through slogdet would not agree
    cov = np.array([[2.0, 0.5j], [-0.5j, 1.0]])
    with pytest.raises(TypeError, match=r"multivariate_normal\.entropy.*np\.real\(cov\)"):
        ad.gradient(lambda c: st.multivariate_normal.entropy(cov=c), cov)


def test_a_list_of_traced_values_is_taken_as_the_array_scipy_would_make_of_it():
    """It failed in the backward pass ("'>=' not supported between 'list' and 'int'") and
    in jvp blamed scalar_rule."""
    f = lambda x: np.sum(st.norm.logpdf([x[0], x[1]], loc=[0.0, x[0]], scale=(1.0, 2.0)))  # noqa: E731
    ad.testing.check_grads(f, np.array([0.5, -1.0]), modes=("fwd", "rev"), order=1)
    expected = st.norm.logpdf([0.5, -1.0], loc=[0.0, 0.5], scale=[1.0, 2.0]).sum()
    assert ad.value_and_gradient(f, np.array([0.5, -1.0]))[0] == expected
