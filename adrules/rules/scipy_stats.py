"""Rules: scipy.stats univariate distributions, as autograd's and JAX's ``scipy.stats``
cover them: ``logpdf``, ``pdf``, ``cdf``, ``logcdf``, ``sf``, ``logsf``, ``ppf`` and
``isf`` of ``norm``, ``t``, ``beta``, ``gamma``, ``chi2``, ``expon``, ``laplace``,
``logistic``, ``cauchy`` and ``uniform``; ``logpmf``, ``pmf``, ``cdf``, ``logcdf``,
``sf`` and ``logsf`` of ``poisson`` (w.r.t. the rate ``mu``).

How a call reaches these rules: ``st.norm.logpdf(x, 0.0, 1.0)`` is a Python method of
``rv_continuous`` that converts its arguments with ``np.asarray``, so the tracer never sees
it. Rules keyed on the bound method ``st.norm.logpdf`` would never be looked up, and
replacing the object's attribute would miss frozen distributions (``st.norm(mu, s)``
makes a new object of the class). So each covered distribution's class gets the covered
methods as its own (``_scipy_entry.route_method``): with a traced value among the
arguments they bind them to SciPy's signature (``x, *shapes, loc, scale``, positional or
keywords) and call an ``@adrules.primitive`` registered below; otherwise SciPy's method
runs, unchanged. Frozen distributions call the same methods. Classes deriving from a
covered one (``erlang_gen`` from ``gamma_gen``) keep SciPy's.

Each primitive computes its value with SciPy's own method, so values and their edge
cases (nan for a bad scale, -inf outside the support) are SciPy's, at SciPy's cost, as in
autograd. Its derivatives, one ``scalar_rule`` per method, come from a table of
standardized families: for z = (x - loc) / scale, the log density L(z), its derivative
in z (the score) and in each shape parameter. Everything else follows from the location
and scale: the cdf's derivative in x is the density exp(L(z)) / scale, the quantile's in
q is scale / exp(L(z)), and so on. Partials are NumPy and scipy.special calls that have
rules, so derivatives of derivatives work. Shape parameters are differentiable in the
log density and density (t's ``df``, beta's ``a`` and ``b``, gamma's ``a``, chi2's
``df``), not in the distribution functions and quantiles (no closed form; autograd and
JAX stop there too): a traced shape there raises ``NotImplementedError``. Outside the
support the derivatives are 0; at its edges and kinks (laplace at loc, uniform's ends)
they are one-sided values.
"""

import inspect

import numpy as np
import scipy.special as sp
import scipy.stats as st

from ..registry import scalar_rule
from ._scipy_entry import route_method, scipy_primitive
from ._utils import no_derivative

_LOG_SQRT_2PI = 0.5 * np.log(2.0 * np.pi)
_LOG2 = np.log(2.0)


class _Family:
    """A location-scale family's standard form: ``log_density(z, *shapes)`` (-inf outside
    the support), ``score(z, *shapes)`` (its derivative in z, inside), one derivative of
    the log density per shape parameter (``shape_scores``), and ``inside(z, *shapes)``
    (None for support on the whole line) with a point ``safe`` inside the support, put
    in place of z outside it so that no partial divides by zero or takes a log there."""

    def __init__(self, name, log_density, score, shape_scores=(), inside=None, safe=0.5):
        self.name, self.dist = name, getattr(st, name)
        self.shapes = tuple(s.strip() for s in (self.dist.shapes or "").split(",") if s.strip())
        self.standard_log_density, self.score, self.shape_scores = log_density, score, shape_scores
        self.inside, self.safe = inside, safe

    def z(self, x, shapes):
        """``(z, mask)``: z inside the support (``safe`` outside), and where it is inside
        (None for the whole line)."""
        if self.inside is None:
            return x, None
        mask = self.inside(x, *shapes)
        return np.where(mask, x, self.safe), mask

    def log_density(self, z, shapes):
        zs, mask = self.z(z, shapes)
        value = self.standard_log_density(zs, *shapes)
        return value if mask is None else np.where(mask, value, -np.inf)

    def masked(self, value, mask):
        return value if mask is None else np.where(mask, value, 0.0)


def _positive(z, *shapes):
    return z > 0.0


def _unit(z, *shapes):
    return (z > 0.0) & (z < 1.0)


def _t_log_density(z, df):
    return (sp.gammaln(0.5 * (df + 1.0)) - sp.gammaln(0.5 * df) - 0.5 * np.log(df * np.pi)
            - 0.5 * (df + 1.0) * np.log1p(z * z / df))


def _t_df_score(z, df):
    z2 = z * z
    return 0.5 * (sp.digamma(0.5 * (df + 1.0)) - sp.digamma(0.5 * df) - 1.0 / df - np.log1p(z2 / df)
                  + (df + 1.0) * z2 / (df * (df + z2)))


def _chi2_log_density(z, df):
    return sp.xlogy(0.5 * df - 1.0, z) - 0.5 * z - 0.5 * df * _LOG2 - sp.gammaln(0.5 * df)


def _logistic_log_density(z):
    a = np.abs(z)  # -z - 2 log(1 + e^-z), symmetric: no overflow for either sign
    return -a - 2.0 * np.log1p(np.exp(-a))


FAMILIES = [
    _Family("norm", lambda z: -0.5 * z * z - _LOG_SQRT_2PI, lambda z: -z),
    _Family("t", _t_log_density, lambda z, df: -(df + 1.0) * z / (df + z * z), (_t_df_score,)),
    _Family("beta", lambda z, a, b: sp.xlogy(a - 1.0, z) + sp.xlog1py(b - 1.0, -z) - sp.betaln(a, b),
            lambda z, a, b: (a - 1.0) / z - (b - 1.0) / (1.0 - z),
            (lambda z, a, b: np.log(z) - sp.digamma(a) + sp.digamma(a + b),
             lambda z, a, b: np.log1p(-z) - sp.digamma(b) + sp.digamma(a + b)), _unit),
    _Family("gamma", lambda z, a: sp.xlogy(a - 1.0, z) - z - sp.gammaln(a), lambda z, a: (a - 1.0) / z - 1.0,
            (lambda z, a: np.log(z) - sp.digamma(a),), _positive, 1.0),
    _Family("chi2", _chi2_log_density, lambda z, df: (0.5 * df - 1.0) / z - 0.5,
            (lambda z, df: 0.5 * (np.log(z) - _LOG2 - sp.digamma(0.5 * df)),), _positive, 1.0),
    _Family("expon", lambda z: -z, lambda z: 0.0 * z - 1.0, (), _positive, 1.0),
    _Family("laplace", lambda z: -np.abs(z) - _LOG2, lambda z: -np.sign(z)),
    _Family("logistic", _logistic_log_density, lambda z: -np.tanh(0.5 * z)),
    _Family("cauchy", lambda z: -np.log(np.pi) - np.log1p(z * z), lambda z: -2.0 * z / (1.0 + z * z)),
    _Family("uniform", lambda z: 0.0 * z, lambda z: 0.0 * z, (), _unit),
]


# ---- partials ------------------------------------------------------------------------------
# Every partial is called as d(x, *shapes, loc, scale, y) (q for x in ppf and isf).
def _split(fam, args):
    """``(x, shapes, loc, scale, y)`` from a partial's arguments."""
    k = len(fam.shapes)
    return args[0], args[1:1 + k], args[1 + k], args[2 + k], args[3 + k]


def _log_density_partials(fam, times_y):
    """The partials of logpdf (``times_y``: of pdf, each times the output)."""
    def scaled(d):
        return (lambda *args: args[-1] * d(*args)) if times_y else d

    def in_z(sign):
        def partial(*args):
            x, shapes, loc, scale, y = _split(fam, args)
            z, mask = fam.z((x - loc) / scale, shapes)
            return fam.masked(sign * fam.score(z, *shapes) / scale, mask)
        return partial

    def in_scale(*args):
        x, shapes, loc, scale, y = _split(fam, args)
        z, mask = fam.z((x - loc) / scale, shapes)
        return fam.masked(-(z * fam.score(z, *shapes) + 1.0) / scale, mask)

    def in_shape(i):
        def partial(*args):
            x, shapes, loc, scale, y = _split(fam, args)
            z, mask = fam.z((x - loc) / scale, shapes)
            return fam.masked(fam.shape_scores[i](z, *shapes), mask)
        return partial

    return [scaled(in_z(1.0)), *(scaled(in_shape(i)) for i in range(len(fam.shapes))),
            scaled(in_z(-1.0)), scaled(in_scale)]


def _distribution_partials(fam, method, sign):
    """The partials of cdf and sf (``sign`` -1 for sf), of logcdf and logsf (``method``
    "log": the density over the output's exp), each a multiple of the density at z."""
    def density(args):
        x, shapes, loc, scale, y = _split(fam, args)
        z = (x - loc) / scale
        log_p = fam.log_density(z, shapes)
        return z, scale, sign * np.exp(log_p - y if method == "log" else log_p)

    def in_x(*args):
        z, scale, p = density(args)
        return p / scale

    def in_loc(*args):
        z, scale, p = density(args)
        return -p / scale

    def in_scale(*args):
        z, scale, p = density(args)
        return -np.where(np.isinf(z), 0.0, z) * p / scale  # x = +-inf: z p is inf * 0

    shapes = [no_derivative(f"scipy.stats.{fam.name}.cdf", name, "no closed form") for name in fam.shapes]
    return [in_x, *shapes, in_loc, in_scale]


def _quantile_partials(fam, sign):
    """The partials of ppf (``sign`` 1) and isf (-1): y = loc + scale * z(q)."""
    def in_q(*args):
        q, shapes, loc, scale, y = _split(fam, args)
        return sign * scale * np.exp(-fam.log_density((y - loc) / scale, shapes))

    def in_loc(*args):
        return 1.0

    def in_scale(*args):
        q, shapes, loc, scale, y = _split(fam, args)
        return (y - loc) / scale

    shapes = [no_derivative(f"scipy.stats.{fam.name}.ppf", name, "no closed form") for name in fam.shapes]
    return [in_q, *shapes, in_loc, in_scale]


def _partials(fam, method):
    return {
        "logpdf": lambda: _log_density_partials(fam, False),
        "pdf": lambda: _log_density_partials(fam, True),
        "cdf": lambda: _distribution_partials(fam, "", 1.0),
        "sf": lambda: _distribution_partials(fam, "", -1.0),
        "logcdf": lambda: _distribution_partials(fam, "log", 1.0),
        "logsf": lambda: _distribution_partials(fam, "log", -1.0),
        "ppf": lambda: _quantile_partials(fam, 1.0),
        "isf": lambda: _quantile_partials(fam, -1.0),
    }[method]()


# ---- the primitives ------------------------------------------------------------------------------
def _signature(first, shapes, loc_scale=True):
    """SciPy's signature of a distribution's method: ``(x, *shapes, loc=0.0, scale=1.0)``."""
    P = inspect.Parameter
    names = [(first, P.empty), *((name, P.empty) for name in shapes), ("loc", 0.0)]
    names += [("scale", 1.0)] if loc_scale else []
    return inspect.Signature([P(name, P.POSITIONAL_OR_KEYWORD, default=d) for name, d in names])


def _method_primitive(dist, name, method, first, shapes, loc_scale=True):
    """An ``@adrules.primitive`` of ``dist.method`` with SciPy's positional signature."""
    bound = getattr(dist, method)

    def scipy_method(*args):
        return bound(*args)

    scipy_method.__name__ = f"{name}_{method}"
    return scipy_primitive(scipy_method, f"scipy.stats.{name}.{method}", _signature(first, shapes, loc_scale))


CONTINUOUS = ("logpdf", "pdf", "cdf", "logcdf", "sf", "logsf", "ppf", "isf")
DISCRETE = ("logpmf", "pmf", "cdf", "logcdf", "sf", "logsf")

#: {(distribution, method): primitive}, for the coverage table and the tests
PRIMITIVES = {}

for _fam in FAMILIES:
    for _method in CONTINUOUS:
        _first = "q" if _method in ("ppf", "isf") else "x"
        _prim = _method_primitive(_fam.dist, _fam.name, _method, _first, _fam.shapes)
        scalar_rule(_prim, *_partials(_fam, _method))
        route_method(type(_fam.dist), _method, _prim)
        PRIMITIVES[_fam.name, _method] = _prim


# ---- poisson (w.r.t. the rate) -------------------------------------------------------------------
def _poisson_log_pmf(n, mu):
    """log P(K = n) for integers n >= 0 (n a float array), -inf elsewhere."""
    valid = (n >= 0) & (n == np.floor(n))
    ns = np.where(valid, n, 0.0)
    return np.where(valid, sp.xlogy(ns, mu) - mu - sp.gammaln(ns + 1.0), -np.inf)


def _poisson_mass_partial(times_y):
    def in_mu(k, mu, loc, y):
        n = k - loc
        valid = (n >= 0) & (n == np.floor(n))
        d = np.where(valid, np.where(valid, n, 0.0) / mu - 1.0, 0.0)
        return y * d if times_y else d

    return in_mu


def _poisson_distribution_partial(sign, log):
    """d/dmu of P(K <= k) is -P(K = floor(k)); of the sf, +; over the output for the logs."""
    def in_mu(k, mu, loc, y):
        log_p = _poisson_log_pmf(np.floor(k - loc), mu)
        return sign * np.exp(log_p - y if log else log_p)

    return in_mu


_POISSON = {
    "logpmf": _poisson_mass_partial(False), "pmf": _poisson_mass_partial(True),
    "cdf": _poisson_distribution_partial(-1.0, False), "sf": _poisson_distribution_partial(1.0, False),
    "logcdf": _poisson_distribution_partial(-1.0, True), "logsf": _poisson_distribution_partial(1.0, True),
}
for _method, _d_mu in _POISSON.items():
    _prim = _method_primitive(st.poisson, "poisson", _method, "k", ("mu",), loc_scale=False)
    scalar_rule(_prim, None, _d_mu, None)  # k and loc: integers, no derivative
    route_method(type(st.poisson), _method, _prim)
    PRIMITIVES["poisson", _method] = _prim
