"""Rules: scipy.special ufuncs (they dispatch through ``__array_ufunc__`` like NumPy's).

Loaded by ``rules/__init__.py`` once ``scipy.special`` is imported (at once if it
already is), so ``import adrules`` never imports SciPy. One ``scalar_rule`` line per
function; partials call ufuncs that have rules too, so higher derivatives work. The
order of a Bessel function, the parameters of the incomplete gamma and beta functions,
of their inverses and of the hypergeometric functions, the degrees of freedom and shapes
of distributions, and the degree and parameters of the orthogonal polynomials have no
closed-form derivative: their partials raise ``NotImplementedError`` if a traced value
reaches them. ``sici``, ``shichi`` and ``fresnel`` have two outputs: their rrule and
frule are written out. ``kolmogorov`` and ``smirnov`` use SciPy's own derivative, which
has no rule: first derivatives only.

Complex arguments: the functions SciPy computes for complex values that are holomorphic and
whose partials are right for them (checked against finite differences along real and
imaginary directions) are flagged ``complex=True``: the error functions, ``ndtr`` and
``log_ndtr``, ``gamma``, ``rgamma``, ``loggamma``, ``exp1``, ``expi``, ``expm1``, ``log1p``,
``spence``, ``wrightomega``, ``xlogy``, ``xlog1py``, ``jv``, ``yv``, ``iv``, ``kv``, ``kve``, the
hypergeometric functions, the orthogonal polynomials SciPy evaluates at complex x, ``sici``,
``shichi`` and ``fresnel``. The others refuse a complex value: ``ive``, ``jve`` and ``yve``
scale by ``exp(-|Re z|)`` or ``exp(-|Im z|)`` (not holomorphic), and ``psi``'s partial has no
complex version (so the second derivatives of ``gamma``, ``rgamma`` and ``loggamma`` refuse
one too).

``logsumexp``, ``softmax``, ``log_softmax``, ``polygamma``, ``multigammaln``, ``zeta``
and ``factorial`` are Python functions that call ``np.asarray`` on their input: their
rules are in ``scipy_special_python``, which puts primitives in their place.
"""

import numpy as np
import scipy.special as sp
from scipy.special import _ufuncs

from ..registry import frule, non_differentiable, rrule, scalar_rule
from ..tangents import NoTangent, ZeroTangent, is_zero
from . import _utils

_SQRT_PI = np.sqrt(np.pi)
_SQRT_2PI = np.sqrt(2.0 * np.pi)
hurwitz_zeta = _ufuncs._zeta  # the ufunc behind sp.zeta(s, q) (a Python function)
_kolmogorov_partial = _ufuncs._kolmogp  # SciPy's derivatives of kolmogorov and smirnov
_smirnov_partial = _ufuncs._smirnovp


def no_derivative(function, parameter):
    """A partial that refuses a derivative ``scipy.special.<function>`` has none of (in ``parameter``)."""
    return _utils.no_derivative(f"scipy.special.{function}", parameter)


def _polygamma(n, x):
    """polygamma(n >= 1, x) from the Hurwitz zeta ufunc (sp.polygamma is not traceable)."""
    return (-1.0) ** (n + 1) * np.prod(np.arange(1.0, n + 1.0)) * hurwitz_zeta(n + 1.0, x)


# ---- logistic ------------------------------------------------------------------------------
scalar_rule(sp.expit, lambda x, y: y * (1.0 - y))
scalar_rule(sp.logit, lambda x, y: 1.0 / (x * (1.0 - x)))
scalar_rule(sp.log_expit, lambda x, y: sp.expit(-x))

# ---- error functions and the normal distribution ----------------------------------------------
scalar_rule(sp.erf, lambda x, y: (2.0 / _SQRT_PI) * np.exp(-x * x), complex=True)
scalar_rule(sp.erfc, lambda x, y: (-2.0 / _SQRT_PI) * np.exp(-x * x), complex=True)
scalar_rule(sp.erfinv, lambda x, y: (_SQRT_PI / 2.0) * np.exp(y * y))
scalar_rule(sp.erfcinv, lambda x, y: (-_SQRT_PI / 2.0) * np.exp(y * y))
scalar_rule(sp.erfcx, lambda x, y: 2.0 * x * y - 2.0 / _SQRT_PI, complex=True)
scalar_rule(sp.erfi, lambda x, y: (2.0 / _SQRT_PI) * np.exp(x * x), complex=True)
scalar_rule(sp.dawsn, lambda x, y: 1.0 - 2.0 * x * y, complex=True)
scalar_rule(sp.ndtr, lambda x, y: np.exp(-0.5 * x * x) / _SQRT_2PI, complex=True)
scalar_rule(sp.log_ndtr, lambda x, y: np.exp(-0.5 * x * x - y) / _SQRT_2PI, complex=True)
scalar_rule(sp.ndtri, lambda x, y: _SQRT_2PI * np.exp(0.5 * y * y))

# ---- gamma family --------------------------------------------------------------------------------
scalar_rule(sp.gamma, lambda x, y: y * sp.digamma(x), complex=True)
scalar_rule(sp.rgamma, lambda x, y: -y * sp.digamma(x), complex=True)
scalar_rule(sp.gammaln, lambda x, y: sp.digamma(x))
scalar_rule(sp.digamma, lambda x, y: _polygamma(1, x))  # sp.psi is the same ufunc
scalar_rule(hurwitz_zeta, no_derivative("zeta", "s"), lambda s, q, y: -s * hurwitz_zeta(s + 1.0, q))
scalar_rule(sp.beta,
            lambda a, b, y: y * (sp.digamma(a) - sp.digamma(a + b)),
            lambda a, b, y: y * (sp.digamma(b) - sp.digamma(a + b)))
scalar_rule(sp.betaln,
            lambda a, b, y: sp.digamma(a) - sp.digamma(a + b),
            lambda a, b, y: sp.digamma(b) - sp.digamma(a + b))
scalar_rule(sp.gammainc, no_derivative("gammainc", "a"),
            lambda a, x, y: np.exp((a - 1.0) * np.log(x) - x - sp.gammaln(a)))
scalar_rule(sp.gammaincc, no_derivative("gammaincc", "a"),
            lambda a, x, y: -np.exp((a - 1.0) * np.log(x) - x - sp.gammaln(a)))
scalar_rule(sp.betainc, no_derivative("betainc", "a"), no_derivative("betainc", "b"),
            lambda a, b, x, y: np.exp((a - 1.0) * np.log(x) + (b - 1.0) * np.log1p(-x) - sp.betaln(a, b)))
scalar_rule(sp.binom,
            lambda n, k, y: y * (sp.digamma(n + 1.0) - sp.digamma(n - k + 1.0)),
            lambda n, k, y: y * (sp.digamma(n - k + 1.0) - sp.digamma(k + 1.0)))
non_differentiable(sp.gammasgn)

# ---- inverses of the incomplete gamma and beta functions (w.r.t. the probability) --------------------
scalar_rule(sp.gammaincinv, no_derivative("gammaincinv", "a"),
            lambda a, p, y: np.exp(y - (a - 1.0) * np.log(y) + sp.gammaln(a)))
scalar_rule(sp.gammainccinv, no_derivative("gammainccinv", "a"),
            lambda a, p, y: -np.exp(y - (a - 1.0) * np.log(y) + sp.gammaln(a)))
scalar_rule(sp.betaincinv, no_derivative("betaincinv", "a"), no_derivative("betaincinv", "b"),
            lambda a, b, p, y: np.exp(sp.betaln(a, b) - (a - 1.0) * np.log(y) - (b - 1.0) * np.log1p(-y)))

# ---- Student's t distribution (w.r.t. t) -----------------------------------------------------------------
def _t_density(df, t):
    return np.exp(sp.gammaln(0.5 * (df + 1.0)) - sp.gammaln(0.5 * df) - 0.5 * np.log(df * np.pi)
                  - 0.5 * (df + 1.0) * np.log1p(t * t / df))


scalar_rule(sp.stdtr, no_derivative("stdtr", "df"), lambda df, t, y: _t_density(df, t))
scalar_rule(sp.stdtrit, no_derivative("stdtrit", "df"), lambda df, p, y: 1.0 / _t_density(df, y))


# ---- more distribution functions (w.r.t. the variable: the density) -----------------------------------------
def _chi2_density(v, x):
    return np.exp(sp.xlogy(0.5 * v - 1.0, x) - 0.5 * x - 0.5 * v * np.log(2.0) - sp.gammaln(0.5 * v))


def _gamma_density(b, t):
    """The derivative of gammainc(b, t) in t (xlogy: finite at t = 0 for b = 1)."""
    return np.exp(sp.xlogy(b - 1.0, t) - t - sp.gammaln(b))


def _f_density(dfn, dfd, x):
    return np.exp(0.5 * dfn * np.log(dfn / dfd) + sp.xlogy(0.5 * dfn - 1.0, x)
                  - 0.5 * (dfn + dfd) * np.log1p(dfn * x / dfd) - sp.betaln(0.5 * dfn, 0.5 * dfd))


def _first_order_only(function):
    def first_order_only(*args):
        raise NotImplementedError(
            f"scipy.special.{function}: first derivatives only (the rule uses SciPy's own "
            f"derivative, which has none).")

    return first_order_only


scalar_rule(sp.chdtr, no_derivative("chdtr", "v"), lambda v, x, y: _chi2_density(v, x))
scalar_rule(sp.chdtrc, no_derivative("chdtrc", "v"), lambda v, x, y: -_chi2_density(v, x))
# gdtr(a, b, x) = gammainc(b, a x): the rate a enters through a x
scalar_rule(sp.gdtr, lambda a, b, x, y: x * _gamma_density(b, a * x), no_derivative("gdtr", "b"),
            lambda a, b, x, y: a * _gamma_density(b, a * x))
scalar_rule(sp.gdtrc, lambda a, b, x, y: -x * _gamma_density(b, a * x), no_derivative("gdtrc", "b"),
            lambda a, b, x, y: -a * _gamma_density(b, a * x))
scalar_rule(sp.fdtr, no_derivative("fdtr", "dfn"), no_derivative("fdtr", "dfd"),
            lambda dfn, dfd, x, y: _f_density(dfn, dfd, x))
scalar_rule(sp.fdtrc, no_derivative("fdtrc", "dfn"), no_derivative("fdtrc", "dfd"),
            lambda dfn, dfd, x, y: -_f_density(dfn, dfd, x))
scalar_rule(sp.kolmogorov, lambda x, y: _kolmogorov_partial(x))
scalar_rule(sp.smirnov, no_derivative("smirnov", "n"), lambda n, d, y: _smirnov_partial(n, d))
scalar_rule(_kolmogorov_partial, _first_order_only("kolmogorov"))
scalar_rule(_smirnov_partial, _first_order_only("smirnov"), _first_order_only("smirnov"))

# ---- x log y and entropies ---------------------------------------------------------------------------
scalar_rule(sp.xlogy, lambda x, y, out: np.log(y), lambda x, y, out: x / y, complex=True)
scalar_rule(sp.xlog1py, lambda x, y, out: np.log1p(y), lambda x, y, out: x / (1.0 + y), complex=True)
scalar_rule(sp.entr, lambda x, y: -(np.log(x) + 1.0))
scalar_rule(sp.rel_entr, lambda x, y, out: np.log(x / y) + 1.0, lambda x, y, out: -x / y)
scalar_rule(sp.kl_div, lambda x, y, out: np.log(x / y), lambda x, y, out: 1.0 - x / y)

# ---- robust losses (delta > 0) ----------------------------------------------------------------------
def _pseudo_huber_scale(delta, r):
    return np.sqrt(1.0 + (r / delta) ** 2)


scalar_rule(sp.huber,
            lambda delta, r, y: np.where(np.abs(r) <= delta, 0.0, np.abs(r) - delta),
            lambda delta, r, y: np.clip(r, -delta, delta))
scalar_rule(sp.pseudo_huber,
            lambda delta, r, y: 2.0 * y / delta - r * r / (delta * _pseudo_huber_scale(delta, r)),
            lambda delta, r, y: r / _pseudo_huber_scale(delta, r))

# ---- Owen's T (skew-normal distributions) ---------------------------------------------------------------
scalar_rule(sp.owens_t,
            lambda h, a, y: (-0.5 / _SQRT_2PI) * np.exp(-0.5 * h * h) * sp.erf(a * h / np.sqrt(2.0)),
            lambda h, a, y: np.exp(-0.5 * h * h * (1.0 + a * a)) / (2.0 * np.pi * (1.0 + a * a)))


# ---- complete elliptic integrals of the parameter m < 1 ---------------------------------------------------
def _near_zero(m):
    """m where |m| >= 1e-4, else 1 (a divisor): below that the formulas cancel, and their series
    to m**2 are within 1e-12."""
    return np.where(np.abs(m) < 1e-4, 1.0, m)


def _ellipk_partial(m, y):
    series = (np.pi / 2.0) * (0.25 + m * (9.0 / 32.0 + (75.0 / 256.0) * m))
    safe = _near_zero(m)
    return np.where(np.abs(m) < 1e-4, series, (sp.ellipe(m) - (1.0 - m) * y) / (2.0 * safe * (1.0 - m)))


def _ellipe_partial(m, y):
    series = (np.pi / 2.0) * (-0.25 - m * (3.0 / 32.0 + (15.0 / 256.0) * m))
    return np.where(np.abs(m) < 1e-4, series, (y - sp.ellipk(m)) / (2.0 * _near_zero(m)))


scalar_rule(sp.ellipk, _ellipk_partial)
scalar_rule(sp.ellipe, _ellipe_partial)

# ---- exponential integrals ---------------------------------------------------------------------------
scalar_rule(sp.expi, lambda x, y: np.exp(x) / x, complex=True)
scalar_rule(sp.exp1, lambda x, y: -np.exp(-x) / x, complex=True)

def _exprel_partial(x, y):
    """(e^x - exprel(x)) / x, by its series near 0, where that difference cancels."""
    near = np.abs(x) < 1e-3
    safe = np.where(near, 1.0, x)
    return np.where(near, 0.5 + x / 3.0 + x * x / 8.0, (np.exp(x) - y) / safe)


# ---- scipy.special's own elementary functions ---------------------------------------------------------
_DEGREE = np.pi / 180.0
scalar_rule(sp.exp2, lambda x, y: y * np.log(2.0))
scalar_rule(sp.exp10, lambda x, y: y * np.log(10.0))
scalar_rule(sp.expm1, lambda x, y: y + 1.0, complex=True)
scalar_rule(sp.log1p, lambda x, y: 1.0 / (1.0 + x), complex=True)
scalar_rule(sp.cbrt, lambda x, y: 1.0 / (3.0 * y * y))
scalar_rule(sp.cosm1, lambda x, y: -np.sin(x))
scalar_rule(sp.powm1, lambda x, p, y: p * np.power(x, p - 1.0), lambda x, p, y: (y + 1.0) * np.log(x))
scalar_rule(sp.sindg, lambda x, y: _DEGREE * sp.cosdg(x))
scalar_rule(sp.cosdg, lambda x, y: -_DEGREE * sp.sindg(x))
scalar_rule(sp.tandg, lambda x, y: _DEGREE * (1.0 + y * y))
scalar_rule(sp.cotdg, lambda x, y: -_DEGREE * (1.0 + y * y))
scalar_rule(sp.radian, lambda d, m, s, y: _DEGREE, lambda d, m, s, y: _DEGREE / 60.0,
            lambda d, m, s, y: _DEGREE / 3600.0)


def _boxcox_lmbda(log_x, lmbda):
    """d boxcox(x, lmbda) / d lmbda = L**2 h(lmbda L), L = log x, h(u) = (u e^u - e^u + 1) / u**2;
    by h's series near u = 0 (lmbda = 0 included: L**2 / 2), where the closed form cancels.
    What fitting lmbda by maximum likelihood, as scipy.stats.boxcox does, differentiates."""
    u = lmbda * log_x
    near = np.abs(u) < 1e-3
    safe = np.where(near, 1.0, u)
    h = np.where(near, 0.5 + u / 3.0 + u * u / 8.0 + u * u * u / 30.0,
                 (safe * np.exp(safe) - np.expm1(safe)) / (safe * safe))
    return log_x * log_x * h


def _inv_boxcox_lmbda(y, lmbda, x):
    """d inv_boxcox(y, lmbda) / d lmbda = x y**2 k(lmbda y), k(v) = (v / (1 + v) - log1p(v)) / v**2
    (x = exp(log1p(lmbda y) / lmbda)); by k's series near v = 0 (-1/2 at lmbda = 0)."""
    v = lmbda * y
    near = np.abs(v) < 1e-3
    safe = np.where(near, 1.0, v)
    k = np.where(near, -0.5 + v * (2.0 / 3.0 + v * (-0.75 + v * (0.8 - v * (5.0 / 6.0)))),
                 (safe / (1.0 + safe) - np.log1p(safe)) / (safe * safe))
    return x * y * y * k


scalar_rule(sp.boxcox, lambda x, lmbda, y: np.power(x, lmbda - 1.0), lambda x, lmbda, y: _boxcox_lmbda(np.log(x), lmbda))
scalar_rule(sp.boxcox1p, lambda x, lmbda, y: np.power(1.0 + x, lmbda - 1.0),
            lambda x, lmbda, y: _boxcox_lmbda(np.log1p(x), lmbda))
# x = (1 + lmbda y)**(1 / lmbda): dx/dy = x**(1 - lmbda), exp(y) at lmbda = 0 too
scalar_rule(sp.inv_boxcox, lambda y, lmbda, x: np.power(x, 1.0 - lmbda), _inv_boxcox_lmbda)
scalar_rule(sp.inv_boxcox1p, lambda y, lmbda, x: np.power(1.0 + x, 1.0 - lmbda),
            lambda y, lmbda, x: _inv_boxcox_lmbda(y, lmbda, 1.0 + x))
scalar_rule(sp.loggamma, lambda x, y: sp.digamma(x), complex=True)  # real x > 0
scalar_rule(sp.poch, lambda z, m, y: y * (sp.digamma(z + m) - sp.digamma(z)), lambda z, m, y: y * sp.digamma(z + m))
scalar_rule(sp.expn, no_derivative("expn", "the order n"), lambda n, x, y: -sp.expn(n - 1, x))
scalar_rule(sp.spence, lambda z, y: np.log(z) / (1.0 - z), complex=True)
scalar_rule(sp.ndtri_exp, lambda x, y: _SQRT_2PI * np.exp(x + 0.5 * y * y))
scalar_rule(sp.exprel, lambda x, y: _exprel_partial(x, y))
scalar_rule(sp.wrightomega, lambda x, y: y / (1.0 + y), complex=True)
non_differentiable(sp.round)

# ---- Bessel functions (derivatives w.r.t. the argument) ---------------------------------------------------
scalar_rule(sp.j0, lambda x, y: -sp.j1(x))
scalar_rule(sp.j1, lambda x, y: 0.5 * (sp.j0(x) - sp.jv(2.0, x)))
scalar_rule(sp.y0, lambda x, y: -sp.y1(x))
scalar_rule(sp.y1, lambda x, y: 0.5 * (sp.y0(x) - sp.yv(2.0, x)))
scalar_rule(sp.i0, lambda x, y: sp.i1(x))
scalar_rule(sp.i1, lambda x, y: 0.5 * (sp.i0(x) + sp.iv(2.0, x)))
scalar_rule(sp.i0e, lambda x, y: sp.i1e(x) - np.sign(x) * y)
scalar_rule(sp.i1e, lambda x, y: 0.5 * (sp.i0e(x) + sp.ive(2.0, x)) - np.sign(x) * y)
scalar_rule(sp.k0, lambda x, y: -sp.k1(x))
scalar_rule(sp.k1, lambda x, y: -0.5 * (sp.k0(x) + sp.kv(2.0, x)))
scalar_rule(sp.k0e, lambda x, y: y - sp.k1e(x))
scalar_rule(sp.k1e, lambda x, y: y - 0.5 * (sp.k0e(x) + sp.kve(2.0, x)))
scalar_rule(sp.jv, no_derivative("jv", "the order v"),
            lambda v, z, y: 0.5 * (sp.jv(v - 1, z) - sp.jv(v + 1, z)), complex=True)
scalar_rule(sp.yv, no_derivative("yv", "the order v"),
            lambda v, z, y: 0.5 * (sp.yv(v - 1, z) - sp.yv(v + 1, z)), complex=True)
scalar_rule(sp.yn, no_derivative("yn", "the order n"), lambda n, z, y: 0.5 * (sp.yv(n - 1, z) - sp.yv(n + 1, z)))
scalar_rule(sp.iv, no_derivative("iv", "the order v"),
            lambda v, z, y: 0.5 * (sp.iv(v - 1, z) + sp.iv(v + 1, z)), complex=True)
scalar_rule(sp.ive, no_derivative("ive", "the order v"),
            lambda v, z, y: 0.5 * (sp.ive(v - 1, z) + sp.ive(v + 1, z)) - np.sign(z) * y)
scalar_rule(sp.kv, no_derivative("kv", "the order v"),
            lambda v, z, y: -0.5 * (sp.kv(v - 1, z) + sp.kv(v + 1, z)), complex=True)
scalar_rule(sp.kn, no_derivative("kn", "the order n"), lambda n, z, y: -0.5 * (sp.kv(n - 1, z) + sp.kv(n + 1, z)))
scalar_rule(sp.jve, no_derivative("jve", "the order v"), lambda v, z, y: 0.5 * (sp.jve(v - 1, z) - sp.jve(v + 1, z)))
scalar_rule(sp.yve, no_derivative("yve", "the order v"), lambda v, z, y: 0.5 * (sp.yve(v - 1, z) - sp.yve(v + 1, z)))
scalar_rule(sp.kve, no_derivative("kve", "the order v"),
            lambda v, z, y: y - 0.5 * (sp.kve(v - 1, z) + sp.kve(v + 1, z)), complex=True)


# ---- sine, cosine and Fresnel integrals: two outputs ---------------------------------------------------
def _by_x(f, x, c2):
    """f(x) / x for f(0) = 0, f'(0) = 1, f''(0) = 0; near 0 its series 1 + c2 x^2 + x^4 / 120
    (the quotient's derivatives lose digits there)."""
    near = np.abs(x) < 1e-2
    safe = np.where(near, 1.0, x)
    return np.where(near, 1.0 + x * x * (c2 + x * x / 120.0), f(x) / safe)


def _two_outputs(ufunc, d0, d1):
    """The rrule and frule of ``ufunc`` of one input and two outputs, whose derivatives are
    ``d0(x)`` and ``d1(x)`` (holomorphic: the pullback multiplies by their conjugates)."""
    def pair_rrule(x, **kwargs):
        def pair_pullback(g):
            gx = ZeroTangent()
            for gi, d in zip(g, (d0, d1)):
                # an unused output's cotangent, constant zeros, is skipped: its derivative can
                # be infinite where the other's is not (Ci at 0)
                if not (is_zero(gi) or isinstance(gi, (np.ndarray, np.generic, float)) and not np.any(gi)):
                    dx = d(x)
                    gx = gx + gi * (np.conjugate(dx) if np.iscomplexobj(dx) else dx)
            return NoTangent(), gx

        return ufunc(x, **kwargs), pair_pullback

    def pair_frule(tangents, x, **kwargs):
        dx = tangents[1]
        if is_zero(dx):
            return ufunc(x, **kwargs), (ZeroTangent(), ZeroTangent())
        return ufunc(x, **kwargs), (dx * d0(x), dx * d1(x))

    rrule.register(ufunc, complex=True)(pair_rrule)
    frule.register(ufunc, complex=True)(pair_frule)


_two_outputs(sp.sici, lambda x: _by_x(np.sin, x, -1.0 / 6.0), lambda x: np.cos(x) / x)
_two_outputs(sp.shichi, lambda x: _by_x(np.sinh, x, 1.0 / 6.0), lambda x: np.cosh(x) / x)
_two_outputs(sp.fresnel, lambda x: np.sin(0.5 * np.pi * x * x), lambda x: np.cos(0.5 * np.pi * x * x))


# ---- hypergeometric functions (w.r.t. z) ------------------------------------------------------------------
scalar_rule(sp.hyp0f1, no_derivative("hyp0f1", "b"), lambda b, z, y: sp.hyp0f1(b + 1.0, z) / b, complex=True)
scalar_rule(sp.hyp1f1, no_derivative("hyp1f1", "a"), no_derivative("hyp1f1", "b"),
            lambda a, b, z, y: a / b * sp.hyp1f1(a + 1.0, b + 1.0, z), complex=True)
scalar_rule(sp.hyp2f1, no_derivative("hyp2f1", "a"), no_derivative("hyp2f1", "b"), no_derivative("hyp2f1", "c"),
            lambda a, b, c, z, y: a * b / c * sp.hyp2f1(a + 1.0, b + 1.0, c + 1.0, z), complex=True)


# ---- orthogonal polynomials (w.r.t. x) ----------------------------------------------------------------------
# Each derivative is a polynomial of the degree below, from the Gegenbauer family where
# it has no own (exact at x = +-1, where formulas dividing by x^2 - 1 are 0/0); the
# identities hold for non-integer degrees too.
def _below(n):
    """The degree n - 1, and 0 for n = 0: there the factor ``_positive(n)`` (or n) makes the
    derivative 0, and degree -1 can be undefined (nan for Hermite)."""
    return np.where(n == 0, 0, n - 1)


def _positive(n):
    return np.where(n == 0, 0.0, 1.0)


def _degree(function):
    return no_derivative(function, "the degree n")


scalar_rule(sp.eval_chebyt, _degree("eval_chebyt"), lambda n, x, y: n * sp.eval_chebyu(_below(n), x), complex=True)
scalar_rule(sp.eval_chebyu, _degree("eval_chebyu"),
            lambda n, x, y: 2.0 * _positive(n) * sp.eval_gegenbauer(_below(n), 2.0, x), complex=True)
scalar_rule(sp.eval_chebyc, _degree("eval_chebyc"), lambda n, x, y: n * sp.eval_chebys(_below(n), x), complex=True)
scalar_rule(sp.eval_chebys, _degree("eval_chebys"),
            lambda n, x, y: _positive(n) * sp.eval_gegenbauer(_below(n), 2.0, 0.5 * x), complex=True)
scalar_rule(sp.eval_sh_chebyt, _degree("eval_sh_chebyt"),
            lambda n, x, y: 2.0 * n * sp.eval_chebyu(_below(n), 2.0 * x - 1.0), complex=True)
scalar_rule(sp.eval_sh_chebyu, _degree("eval_sh_chebyu"),
            lambda n, x, y: 4.0 * _positive(n) * sp.eval_gegenbauer(_below(n), 2.0, 2.0 * x - 1.0), complex=True)
scalar_rule(sp.eval_legendre, _degree("eval_legendre"),
            lambda n, x, y: _positive(n) * sp.eval_gegenbauer(_below(n), 1.5, x), complex=True)
scalar_rule(sp.eval_sh_legendre, _degree("eval_sh_legendre"),
            lambda n, x, y: 2.0 * _positive(n) * sp.eval_gegenbauer(_below(n), 1.5, 2.0 * x - 1.0), complex=True)
scalar_rule(sp.eval_hermite, _degree("eval_hermite"), lambda n, x, y: 2.0 * n * sp.eval_hermite(_below(n), x))
scalar_rule(sp.eval_hermitenorm, _degree("eval_hermitenorm"),
            lambda n, x, y: n * sp.eval_hermitenorm(_below(n), x))
scalar_rule(sp.eval_laguerre, _degree("eval_laguerre"),
            lambda n, x, y: -_positive(n) * sp.eval_genlaguerre(_below(n), 1.0, x), complex=True)
scalar_rule(sp.eval_genlaguerre, _degree("eval_genlaguerre"), no_derivative("eval_genlaguerre", "alpha"),
            lambda n, alpha, x, y: -_positive(n) * sp.eval_genlaguerre(_below(n), alpha + 1.0, x), complex=True)
scalar_rule(sp.eval_gegenbauer, _degree("eval_gegenbauer"), no_derivative("eval_gegenbauer", "alpha"),
            lambda n, alpha, x, y: 2.0 * alpha * _positive(n) * sp.eval_gegenbauer(_below(n), alpha + 1.0, x),
            complex=True)
scalar_rule(sp.eval_jacobi, _degree("eval_jacobi"), no_derivative("eval_jacobi", "alpha"),
            no_derivative("eval_jacobi", "beta"),
            lambda n, alpha, beta, x, y: (0.5 * (n + alpha + beta + 1.0) * _positive(n)
                                          * sp.eval_jacobi(_below(n), alpha + 1.0, beta + 1.0, x)), complex=True)
