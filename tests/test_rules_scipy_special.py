"""rules/scipy_special.py against finite differences (rrule, frule, second order) over
scalar, vector, matrix and broadcast shapes in float64 and float32, the holomorphic functions
at complex points (and the refusal of the others), and the lazy loading of the rules
(``import adrules`` never imports SciPy)."""

import importlib.util
import pathlib
import subprocess
import sys

import numpy as np
import pytest

sp = pytest.importorskip("scipy.special", reason="SciPy is an optional extra: pip install adrules[scipy]")

import adrules as ad  # noqa: E402
from adrules.testing import check_frule, check_grads, check_rrule  # noqa: E402


def _u(lo, hi):
    return lambda rng, shape: rng.uniform(lo, hi, size=shape)


UNARY = [
    (sp.expit, _u(-3, 3)), (sp.logit, _u(0.1, 0.9)), (sp.log_expit, _u(-3, 3)),
    (sp.erf, _u(-2, 2)), (sp.erfc, _u(-2, 2)), (sp.erfinv, _u(-0.9, 0.9)), (sp.erfcinv, _u(0.1, 1.9)),
    (sp.erfcx, _u(-1, 3)), (sp.erfi, _u(-1, 1)), (sp.dawsn, _u(-2, 2)),
    (sp.ndtr, _u(-3, 3)), (sp.log_ndtr, _u(-5, 3)), (sp.ndtri, _u(0.05, 0.95)),
    (sp.gamma, _u(0.5, 3)), (sp.rgamma, _u(0.5, 3)), (sp.gammaln, _u(0.5, 3)), (sp.digamma, _u(0.5, 3)),
    (sp.entr, _u(0.2, 2)), (sp.expi, _u(0.3, 2)), (sp.exp1, _u(0.3, 2)),
    (sp.j0, _u(0.2, 4)), (sp.j1, _u(0.2, 4)), (sp.y0, _u(0.5, 4)), (sp.y1, _u(0.5, 4)),
    (sp.i0, _u(-2, 2)), (sp.i1, _u(-2, 2)), (sp.i0e, _u(0.2, 2)), (sp.i1e, _u(0.2, 2)),
    (sp.k0, _u(0.5, 3)), (sp.k1, _u(0.5, 3)), (sp.k0e, _u(0.5, 3)), (sp.k1e, _u(0.5, 3)),
    (sp.exp2, _u(-2, 2)), (sp.exp10, _u(-1, 1)), (sp.expm1, _u(-2, 2)), (sp.log1p, _u(-0.5, 2)),
    (sp.cbrt, _u(0.5, 3)), (sp.cosm1, _u(-2, 2)), (sp.sindg, _u(-80, 80)), (sp.cosdg, _u(-80, 80)),
    (sp.tandg, _u(-60, 60)), (sp.cotdg, _u(20, 160)), (sp.loggamma, _u(0.5, 3)), (sp.spence, _u(0.3, 2)),
    (sp.ndtri_exp, _u(-3, -0.2)), (sp.exprel, _u(-2, 3)), (sp.wrightomega, _u(-2, 3)),
]

BINARY = [
    (sp.xlogy, _u(-2, 2), _u(0.3, 2)), (sp.xlog1py, _u(-2, 2), _u(-0.5, 2)),
    (sp.rel_entr, _u(0.2, 2), _u(0.2, 2)), (sp.kl_div, _u(0.2, 2), _u(0.2, 2)),
    (sp.beta, _u(0.5, 3), _u(0.5, 3)), (sp.betaln, _u(0.5, 3), _u(0.5, 3)),
    (sp.powm1, _u(0.5, 2), _u(-1, 2)), (sp.poch, _u(0.5, 3), _u(0.2, 2)),
    (sp.huber, _u(0.5, 1.5), _u(-3, 3)), (sp.pseudo_huber, _u(0.5, 1.5), _u(-3, 3)),
    (sp.binom, _u(4, 8), _u(0.5, 3)), (sp.owens_t, _u(-2, 2), _u(-2, 2)),
]

ORDER_THEN_ARGUMENT = [  # the first parameter is held constant (no derivative exists)
    (sp.jv, 1.5, _u(0.5, 4)), (sp.yv, 0.5, _u(0.5, 4)), (sp.yn, 2, _u(0.5, 4)),
    (sp.iv, 1.5, _u(0.2, 2)), (sp.ive, 0.5, _u(0.2, 2)), (sp.kv, 1.5, _u(0.5, 3)),
    (sp.kve, 0.5, _u(0.5, 3)), (sp.gammainc, 1.7, _u(0.3, 3)), (sp.gammaincc, 1.7, _u(0.3, 3)),
    (sp.kn, 2, _u(0.5, 3)), (sp.jve, 1.5, _u(0.5, 4)), (sp.yve, 0.5, _u(0.5, 4)), (sp.expn, 2, _u(0.3, 2)),
    (sp.gammaincinv, 2.5, _u(0.1, 0.9)), (sp.gammainccinv, 0.7, _u(0.1, 0.9)),
    (sp.stdtr, 3.5, _u(-3, 3)), (sp.stdtrit, 4.0, _u(0.05, 0.95)),
]


def test_radian_and_boxcox():
    d, m, s = np.array([10.0, 45.0]), np.array([30.0, 5.0]), np.array([15.0, 59.0])
    check_rrule(sp.radian, d, m, s)
    check_frule(sp.radian, d, m, s)
    x = np.array([0.5, 1.5, 2.5])
    check_grads(lambda v: sp.boxcox(v, 0.3), x, order=2)
    check_grads(lambda v: sp.boxcox1p(v, -0.4), x, order=2)


def _ids(cases):
    return [c[0].__name__ for c in cases]


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
@pytest.mark.parametrize("f, sample", UNARY, ids=_ids(UNARY))
def test_unary(f, sample, shape):
    x = sample(np.random.default_rng(0), shape)
    check_rrule(f, x)
    check_frule(f, x)
    check_grads(f, x, order=2)


@pytest.mark.parametrize("f, sample", UNARY[:12], ids=_ids(UNARY[:12]))
def test_unary_float32(f, sample):
    x = sample(np.random.default_rng(0), (3,)).astype(np.float32)
    check_rrule(f, x)
    check_frule(f, x)


@pytest.mark.parametrize("shapes", [((), ()), ((2, 3), (2, 3)), ((2, 3), (3,)), ((3, 1), (1, 2))])
@pytest.mark.parametrize("f, sa, sb", BINARY, ids=_ids(BINARY))
def test_binary(f, sa, sb, shapes):
    rng = np.random.default_rng(1)
    a, b = sa(rng, shapes[0]), sb(rng, shapes[1])
    check_rrule(f, a, b)
    check_frule(f, a, b)
    check_grads(f, a, b, order=2)


@pytest.mark.parametrize("f, order, sample", ORDER_THEN_ARGUMENT, ids=_ids(ORDER_THEN_ARGUMENT))
def test_derivative_in_the_argument(f, order, sample):
    z = sample(np.random.default_rng(2), (2, 3))
    check_grads(lambda x: f(order, x), z, order=2)  # through the tracer: rrule and frule


def test_betainc_in_x():
    x = np.array([0.2, 0.5, 0.7])
    check_grads(lambda v: sp.betainc(2.0, 3.0, v), x, order=2)


def test_betaincinv_in_the_probability():
    check_grads(lambda p: sp.betaincinv(2.0, 3.5, p), np.array([0.1, 0.5, 0.9]), order=2)


def test_elliptic_integrals_across_zero():
    """K(m) and E(m) for m < 1, through m = 0, where their derivatives' formulas are 0/0."""
    m = np.array([-0.5, -3e-5, 0.0, 5e-5, 2e-4, 0.3, 0.9])
    for f in (sp.ellipk, sp.ellipe):
        check_rrule(f, m)
        check_frule(f, m)
        check_grads(f, m, order=2)
    np.testing.assert_allclose(ad.gradient(sp.ellipk, 0.0)[0], np.pi / 8)
    np.testing.assert_allclose(ad.gradient(sp.ellipe, 0.0)[0], -np.pi / 8)


def test_inverse_cdfs_invert_their_cdfs_derivatives():
    """d/dp gammaincinv(a, p) = 1 / d/dx gammainc(a, x) at x = gammaincinv(a, p), and the same
    for Student's t: the chain rule through cdf(inverse(p)) = p gives exactly 1."""
    p = np.array([0.2, 0.6, 0.95])
    (g,) = ad.gradient(lambda p: np.sum(sp.gammainc(1.5, sp.gammaincinv(1.5, p))), p)
    np.testing.assert_allclose(g, np.ones(3), rtol=1e-10)
    (g,) = ad.gradient(lambda p: np.sum(sp.stdtr(2.5, sp.stdtrit(2.5, p))), p)
    np.testing.assert_allclose(g, np.ones(3), rtol=1e-10)


def test_huber_losses_by_hand():
    """huber(1, r): r inside [-1, 1], +-1 outside; its derivative in delta is |r| - delta
    outside. exprel's derivative at 0 is 1/2 (its series), not 0/0."""
    r = np.array([-3.0, -0.5, 0.25, 2.0])
    gd, gr = ad.gradient(lambda d, r: np.sum(sp.huber(d, r)), np.ones(4), r)
    np.testing.assert_array_equal(gr, [-1.0, -0.5, 0.25, 1.0])
    np.testing.assert_array_equal(gd, [2.0, 0.0, 0.0, 1.0])
    (g,) = ad.gradient(lambda r: np.sum(sp.pseudo_huber(2.0, r)), r)
    np.testing.assert_allclose(g, r / np.sqrt(1.0 + (r / 2.0) ** 2))
    assert ad.gradient(sp.exprel, 0.0)[0] == 0.5


def test_a_traced_order_says_there_is_no_derivative():
    with pytest.raises(NotImplementedError, match="the order v"):
        ad.gradient(lambda v: sp.jv(v, 1.0), 1.5)
    with pytest.raises(NotImplementedError, match="gammainc: no derivative with respect to a"):
        ad.gradient(lambda a: sp.gammainc(a, 1.0), 1.5)


def test_third_derivative_of_gammaln_is_polygamma_2():
    x = 1.7
    d3 = ad.gradient(lambda v: ad.gradient(lambda w: ad.gradient(sp.gammaln, w)[0], v)[0], x)[0]
    assert np.isclose(d3, sp.polygamma(2, x))


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_import_adrules_does_not_import_scipy_and_rules_arrive_with_it():
    out = _run("import sys, adrules, numpy as np\n"
               "print('scipy.special' in sys.modules)\n"
               "import scipy.special as sp\n"
               "print(float(adrules.gradient(sp.expit, 0.0)[0]))")
    assert out.split() == ["False", "0.25"]


def test_rules_load_when_scipy_came_first_and_nothing_breaks_without_scipy():
    assert _run("import scipy.special as sp, adrules\nprint(sp.ndtr in adrules.rrule)").strip() == "True"
    assert _run("import sys\nsys.modules['scipy'] = None\nimport adrules\nprint('ok')").strip() == "ok"


# ---- complex arguments: the holomorphic functions, central differences along real and imaginary
_spec = importlib.util.spec_from_file_location("_complex_fd", pathlib.Path(__file__).with_name("_complex_fd.py"))
fd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fd)


def _complex_points(shape=(3,), re=(0.3, 1.5), im=(-1.0, 1.0), seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(*re, size=shape) + 1j * rng.uniform(*im, size=shape)


HOLOMORPHIC = {
    "erf": sp.erf, "erfc": sp.erfc, "erfcx": sp.erfcx, "erfi": sp.erfi, "dawsn": sp.dawsn, "ndtr": sp.ndtr,
    "log_ndtr": sp.log_ndtr, "gamma": sp.gamma, "rgamma": sp.rgamma, "loggamma": sp.loggamma, "exp1": sp.exp1,
    "expi": sp.expi, "expm1": sp.expm1, "log1p": sp.log1p, "spence": sp.spence, "wrightomega": sp.wrightomega,
    "xlogy-x": lambda z: sp.xlogy(z, 0.7 + 0.2j), "xlogy-y": lambda z: sp.xlogy(0.3 - 0.5j, z),
    "xlog1py-x": lambda z: sp.xlog1py(z, 0.7 + 0.2j), "xlog1py-y": lambda z: sp.xlog1py(0.3 - 0.5j, z),
    "jv": lambda z: sp.jv(1.5, z), "yv": lambda z: sp.yv(1.5, z), "iv": lambda z: sp.iv(1.5, z),
    "kv": lambda z: sp.kv(1.5, z), "kve": lambda z: sp.kve(1.5, z),
    "hyp0f1": lambda z: sp.hyp0f1(1.5, z), "hyp1f1": lambda z: sp.hyp1f1(0.5, 1.5, z),
    "hyp2f1": lambda z: sp.hyp2f1(0.5, 1.5, 2.5, 0.4 * z),
    "eval_chebyt": lambda z: sp.eval_chebyt(3.0, z), "eval_chebyu": lambda z: sp.eval_chebyu(3.0, z),
    "eval_chebyc": lambda z: sp.eval_chebyc(3.0, z), "eval_chebys": lambda z: sp.eval_chebys(3.0, z),
    "eval_sh_chebyt": lambda z: sp.eval_sh_chebyt(3.0, z), "eval_sh_chebyu": lambda z: sp.eval_sh_chebyu(3.0, z),
    "eval_legendre": lambda z: sp.eval_legendre(3.0, z), "eval_sh_legendre": lambda z: sp.eval_sh_legendre(3.0, z),
    "eval_laguerre": lambda z: sp.eval_laguerre(3.0, z),
    "eval_genlaguerre": lambda z: sp.eval_genlaguerre(3.0, 0.5, z),
    "eval_gegenbauer": lambda z: sp.eval_gegenbauer(3.0, 0.7, z),
    "eval_jacobi": lambda z: sp.eval_jacobi(3.0, 0.5, 0.3, z),
    "sici-si": lambda z: sp.sici(z)[0], "sici-ci": lambda z: sp.sici(z)[1],
    "shichi-shi": lambda z: sp.shichi(z)[0], "shichi-chi": lambda z: sp.shichi(z)[1],
    "fresnel-s": lambda z: sp.fresnel(z)[0], "fresnel-c": lambda z: sp.fresnel(z)[1],
}


@pytest.mark.parametrize("name", list(HOLOMORPHIC))
def test_holomorphic_functions_at_complex_points(name):
    fd.check_both_modes(HOLOMORPHIC[name], _complex_points(), h=1e-6, atol=1e-7)


@pytest.mark.parametrize("name", ["erf", "log_ndtr", "exp1", "spence", "jv", "kve", "hyp1f1", "eval_jacobi", "sici-ci",
                                  "fresnel-s"])
def test_holomorphic_functions_second_order(name):
    f = HOLOMORPHIC[name]
    fd.check_second_order(lambda z: np.sum(np.abs(f(z)) ** 2 + np.real(f(z)) ** 3), _complex_points(), rtol=1e-5)


def test_both_outputs_of_sici_at_once():
    z = _complex_points(seed=1)
    fd.check_both_modes(lambda z: sp.sici(z)[0] * (1 + 2j) + sp.sici(z)[1], z, h=1e-6, atol=1e-7)


@pytest.mark.parametrize("f", [sp.psi, lambda z: sp.ive(0.5, z), lambda z: sp.jve(0.5, z), lambda z: sp.yve(0.5, z)],
                         ids=["psi", "ive", "jve", "yve"])
def test_functions_not_written_for_complex_values_refuse_them(f):
    z = _complex_points()
    for derivative in (lambda: ad.gradient(lambda z: np.sum(np.abs(f(z))), z),
                       lambda: ad.jvp(f, (z,), (z,))):
        with pytest.raises(TypeError, match=r"scipy\.special\.(psi|ive|jve|yve).*complex=True"):
            derivative()


def test_second_derivative_of_gamma_at_a_complex_point_names_psi():
    z = _complex_points()
    with pytest.raises(TypeError, match=r"scipy\.special\.psi"):
        ad.hvp(lambda z: np.sum(np.abs(sp.gamma(z)) ** 2), z, z)
