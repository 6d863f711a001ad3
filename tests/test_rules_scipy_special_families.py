"""scipy.special's function families against finite differences (reverse and forward mode)
and SciPy's own values: the sine, cosine and Fresnel integrals (two outputs),
hypergeometric functions, orthogonal polynomials, distribution functions, Box-Cox and
Kolmogorov-Smirnov, and the error for a parameter without a derivative."""

import warnings

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule

try:
    import scipy.special as sp
except ImportError:  # the NumPy tests run without SciPy
    sp = None

needs_scipy = pytest.mark.skipif(sp is None, reason="SciPy is an optional extra: pip install adrules[scipy]")


def _x(*shape, low=-1.0, high=1.0, seed=0):
    return np.random.default_rng(seed).uniform(low, high, size=shape)


def _jvp_matches_gradient(f, x):
    """The jvp along a random direction equals the gradient's inner product with it."""
    dx = _x(*np.shape(x), seed=5)
    _, dy = ad.jvp(lambda v: np.sum(f(v)), (x,), (dx,))
    (g,) = ad.gradient(lambda v: np.sum(f(v)), x)
    np.testing.assert_allclose(dy, np.sum(g * dx), rtol=1e-10, atol=1e-12)


# ---- scipy.special: two outputs ------------------------------------------------------------------
TWO_OUTPUTS = ["sici", "shichi", "fresnel"]


@needs_scipy
@pytest.mark.parametrize("name", TWO_OUTPUTS)
def test_two_outputs(name):
    f = getattr(sp, name)
    x = np.array([-2.0, -0.5, 0.3, 0.5, 3.0])
    check_rrule(f, x)
    check_frule(f, x)
    check_grads(lambda v: 1.3 * f(v)[0] + f(v)[1], x, order=2)
    check_grads(lambda v: f(v)[1], np.float32(0.7) * np.ones(2, np.float32), order=1)


@needs_scipy
@pytest.mark.parametrize("name", TWO_OUTPUTS)
# forward mode computes the tangent of Ci (Chi) too, which is infinite at 0 like Ci itself
@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning", "ignore:invalid value:RuntimeWarning")
def test_two_outputs_near_zero(name):
    # Si, Shi, S and C are smooth through 0 (Ci and Chi have a log singularity there)
    f = getattr(sp, name)
    x = np.array([0.0, 1e-8, -1e-3, 0.0099, 0.0101, -0.05])
    check_grads(lambda v: f(v)[0], x, order=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the unused output's infinite derivative is not computed
        (g,) = ad.gradient(lambda v: np.sum(f(v)[0]), np.array([0.0, 1e-8]))
    np.testing.assert_allclose(g, [1.0, 1.0] if name != "fresnel" else [0.0, 0.0], atol=1e-15)


@needs_scipy
def test_two_outputs_cotangent_traced_at_zero():
    # the pullback differentiated w.r.t. its cotangent, at zero: not an unused output's
    x = np.array([0.5, 2.0])
    (g,) = ad.gradient(lambda c: np.sum(ad.pullback(lambda v: sp.sici(v)[0], x)[1](c)[0]), np.zeros(2))
    np.testing.assert_allclose(g, np.sin(x) / x, rtol=1e-14)


# ---- scipy.special: hypergeometric functions ------------------------------------------------------------
HYPERGEOMETRIC = [  # name, parameters, z
    ("hyp0f1", [(0.5,), (2.5,), (-0.5,)], np.array([-3.0, -0.5, 0.0, 0.4, 2.0])),
    ("hyp1f1", [(0.5, 1.5), (-2.0, 1.5), (2.5, 0.7), (0.0, 1.0)], np.array([-3.0, -0.5, 0.0, 0.4, 2.0])),
    ("hyp2f1", [(0.5, 1.5, 2.0), (-2.0, 1.5, 0.5), (2.5, 0.7, 1.3)], np.array([-3.0, -0.5, 0.0, 0.4, 0.8])),
]


@needs_scipy
@pytest.mark.parametrize("name, parameters, z", HYPERGEOMETRIC, ids=[c[0] for c in HYPERGEOMETRIC])
def test_hypergeometric(name, parameters, z):
    f = getattr(sp, name)
    for p in parameters:
        check_grads(lambda v: f(*p, v), z, order=2)
    _jvp_matches_gradient(lambda v: f(*parameters[0], v), z)


# ---- scipy.special: orthogonal polynomials ----------------------------------------------------------------
X_POLY = np.array([-1.0, -0.7, 0.0, 0.3, 0.9, 1.0, 1.5, -2.0])  # the interval's ends too
N = np.array([0, 1, 2, 5])

POLYNOMIALS = [  # name, fixed parameters between n and x
    ("eval_chebyt", ()), ("eval_chebyu", ()), ("eval_chebyc", ()), ("eval_chebys", ()),
    ("eval_sh_chebyt", ()), ("eval_sh_chebyu", ()), ("eval_legendre", ()), ("eval_sh_legendre", ()),
    ("eval_hermite", ()), ("eval_hermitenorm", ()), ("eval_laguerre", ()),
    ("eval_genlaguerre", (0.5,)), ("eval_genlaguerre", (-0.5,)),
    ("eval_gegenbauer", (0.5,)), ("eval_gegenbauer", (2.0,)), ("eval_gegenbauer", (-0.3,)),
    ("eval_jacobi", (0.5, 1.5)), ("eval_jacobi", (-0.3, 0.0)),
]


@needs_scipy
@pytest.mark.parametrize("name, parameters", POLYNOMIALS, ids=[f"{c[0]}{c[1]}" for c in POLYNOMIALS])
def test_orthogonal_polynomials(name, parameters):
    f = getattr(sp, name)
    for n in N:  # n = 0 (derivative 0) and n = 1 included
        x = X_POLY[:, None] * np.ones(2)
        check_grads(lambda v: f(n, *parameters, v), x, order=2)
    if not parameters:  # integer n is held fixed: the registered rules themselves
        check_rrule(f, N, X_POLY[:4])
        check_frule(f, N, X_POLY[4:])


@needs_scipy
def test_orthogonal_polynomials_known_derivatives():
    # T_n'(1) = n^2, P_n'(1) = n(n+1)/2, U_n'(1) = n(n+1)(n+2)/3, H_n'(0) = 2n H_{n-1}(0)
    n = np.array([0, 1, 2, 3, 4])
    ones = np.ones(5)
    for f, expected in ((sp.eval_chebyt, n ** 2), (sp.eval_legendre, n * (n + 1) / 2),
                        (sp.eval_chebyu, n * (n + 1) * (n + 2) / 3)):
        np.testing.assert_allclose(ad.gradient(lambda v: np.sum(f(n, v)), ones)[0], expected, rtol=1e-13)
        np.testing.assert_allclose(ad.gradient(lambda v: np.sum(f(n, v)), -ones)[0], expected * (-1.0) ** (n + 1),
                                   rtol=1e-13)
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(sp.eval_hermite(n, v)), np.zeros(5))[0],
                               [0.0, 2.0, 0.0, -12.0, 0.0], atol=1e-13)


@needs_scipy
def test_non_integer_degree():
    x = np.array([-0.6, 0.2, 0.8])
    for f in (sp.eval_chebyt, sp.eval_legendre, sp.eval_laguerre):
        check_grads(lambda v: f(2.5, v), x, order=2)
    check_grads(lambda v: sp.eval_jacobi(1.7, 0.5, 0.2, v), x, order=2)


# ---- scipy.special: distribution functions ------------------------------------------------------------------
@needs_scipy
def test_distribution_functions():
    x = np.array([0.2, 1.0, 3.5, 8.0])
    for v in (1.0, 2.0, 3.5):
        check_grads(lambda t: sp.chdtr(v, t), x, order=2)
        check_grads(lambda t: sp.chdtrc(v, t), x, order=1)
    for a, b in ((0.5, 1.0), (2.0, 2.0), (1.3, 3.5)):
        check_grads(lambda rate, t: sp.gdtr(rate, b, t), a, x, order=2)
        check_grads(lambda rate, t: sp.gdtrc(rate, b, t), a, x, order=1)
    for dfn, dfd in ((1.0, 3.0), (2.0, 5.0), (10.0, 2.5)):
        check_grads(lambda t: sp.fdtr(dfn, dfd, t), x, order=2)
        check_grads(lambda t: sp.fdtrc(dfn, dfd, t), x, order=1)


@needs_scipy
def test_densities_at_zero():
    # the chi-square density with 2 degrees of freedom, the exponential's and F(2, 3)'s at 0
    assert ad.gradient(lambda t: sp.chdtr(2.0, t), 0.0)[0] == pytest.approx(0.5, rel=1e-14)
    assert ad.gradient(lambda t: sp.gdtr(1.5, 1.0, t), 0.0)[0] == pytest.approx(1.5, rel=1e-14)
    assert ad.gradient(lambda t: sp.fdtr(2.0, 3.0, t), 0.0)[0] == pytest.approx(1.0, rel=1e-14)
    assert ad.gradient(lambda t: sp.chdtrc(4.0, t), 0.0)[0] == 0.0


@needs_scipy
def test_inverse_box_cox():
    y = np.array([-0.3, 0.0, 0.5, 2.0])
    for lmbda in (0.0, 0.5, -0.4, 2.0):
        check_grads(lambda v: sp.inv_boxcox(v, lmbda), y, order=2)
        check_grads(lambda v: sp.inv_boxcox1p(v, lmbda), y, order=2)
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(sp.inv_boxcox(v, 0.0)), y)[0], np.exp(y), rtol=1e-15)


@needs_scipy
@pytest.mark.parametrize("name", ["boxcox", "boxcox1p", "inv_boxcox", "inv_boxcox1p"])
def test_box_cox_lmbda_derivatives_up_to_second_order(name):
    """With respect to lmbda, and to both arguments at once: at lmbda = 0, within the
    series' reach (1e-5, -2e-4) and beyond it, against finite differences."""
    f = getattr(sp, name)
    x = np.array([0.3, 0.9, 1.0, 1.7, 3.0]) if name.startswith("boxcox") else np.array([-0.6, -0.1, 0.0, 0.4, 1.2])
    for lmbda in (0.0, 1e-5, -2e-4, 0.3, -0.7, 1.6):
        check_grads(lambda t: f(x, t), lmbda, order=2)
        check_grads(f, x, lmbda, order=2)


@needs_scipy
def test_box_cox_lmbda_derivative_at_zero_is_the_limit():
    """At lmbda = 0: d/dlmbda (x**lmbda - 1) / lmbda = log(x)**2 / 2, and
    d/dlmbda (1 + lmbda y)**(1 / lmbda) = -exp(y) y**2 / 2, worked out by hand."""
    x, y = np.array([0.5, 2.0, 7.0]), np.array([-1.0, 0.5, 2.0])
    np.testing.assert_allclose(ad.gradient(lambda t: np.sum(sp.boxcox(x, t)), 0.0)[0],
                               np.sum(np.log(x) ** 2 / 2), rtol=1e-14)
    np.testing.assert_allclose(ad.gradient(lambda t: np.sum(sp.inv_boxcox(y, t)), 0.0)[0],
                               np.sum(-np.exp(y) * y ** 2 / 2), rtol=1e-14)


@needs_scipy
def test_box_cox_lmbda_derivatives_on_both_sides_of_the_series_switch():
    """Against the closed forms in 80-bit long double, where their cancellation still
    leaves ~14 digits, for lmbda log(x) and lmbda y from 1e-5 to 0.1, both signs: the
    series (below 1e-3) and the closed form (above) each hold."""
    if np.finfo(np.longdouble).eps > 1e-18:
        pytest.skip("long double is no wider than double here")
    x, y = np.array([0.4, 2.5]), np.array([-0.8, 1.5])
    lx, yl = np.log(x.astype(np.longdouble)), y.astype(np.longdouble)
    for lmbda in np.concatenate([np.geomspace(1e-5, 0.1, 17), -np.geomspace(1e-5, 0.1, 17)]):
        lm = np.longdouble(lmbda)
        boxcox = np.expm1(lm * lx) / lm
        want = (np.exp(lm * lx) * lx - boxcox) / lm
        got = [ad.gradient(lambda t: sp.boxcox(x[i], t), lmbda)[0] for i in range(2)]
        np.testing.assert_allclose(got, want.astype(float), rtol=1e-11, err_msg=f"boxcox, lmbda={lmbda}")
        inv = np.exp(np.log1p(lm * yl) / lm)
        want = inv * (yl / (lm * (1 + lm * yl)) - np.log1p(lm * yl) / lm ** 2)
        got = [ad.gradient(lambda t: sp.inv_boxcox(y[i], t), lmbda)[0] for i in range(2)]
        np.testing.assert_allclose(got, want.astype(float), rtol=1e-10, err_msg=f"inv_boxcox, lmbda={lmbda}")


@needs_scipy
def test_kolmogorov_and_smirnov_first_order():
    x = np.array([0.3, 0.8, 1.5])
    check_rrule(sp.kolmogorov, x)
    check_frule(sp.kolmogorov, x)
    n, d = np.array([5, 5, 20]), np.array([0.1, 0.3, 0.33])  # away from the kinks at k / n
    check_rrule(sp.smirnov, n, d)
    check_frule(sp.smirnov, n, d)
    with pytest.raises(NotImplementedError, match="kolmogorov: first derivatives only"):
        ad.hessian(lambda v: sp.kolmogorov(v), 0.8)


NO_DERIVATIVE = [  # name, arguments, the traced one, the parameter the message names
    ("hyp0f1", (1.5, 0.5), 0, "b"), ("hyp1f1", (0.5, 1.5, 0.3), 1, "b"),
    ("hyp2f1", (0.5, 1.5, 2.0, 0.3), 2, "c"), ("eval_chebyt", (2.0, 0.3), 0, "the degree n"),
    ("eval_genlaguerre", (2, 0.5, 0.3), 1, "alpha"), ("eval_gegenbauer", (2, 0.5, 0.3), 1, "alpha"),
    ("eval_jacobi", (2, 0.5, 1.5, 0.3), 2, "beta"), ("chdtr", (2.0, 1.0), 0, "v"),
    ("gdtr", (1.0, 2.0, 1.0), 1, "b"), ("fdtrc", (2.0, 3.0, 1.0), 1, "dfd"),
    ("smirnov", (5.0, 0.3), 0, "n"),
]


@needs_scipy
@pytest.mark.parametrize("name, args, i, parameter", NO_DERIVATIVE, ids=[c[0] for c in NO_DERIVATIVE])
def test_parameter_without_derivative(name, args, i, parameter):
    f = getattr(sp, name)

    def of(p):
        return f(*args[:i], p, *args[i + 1:])

    message = f"scipy.special.{name}: no derivative with respect to {parameter}"
    with pytest.raises(NotImplementedError, match=message):
        ad.gradient(of, float(args[i]))
    with pytest.raises(NotImplementedError, match=message):
        ad.jvp(of, (float(args[i]),), (1.0,))
