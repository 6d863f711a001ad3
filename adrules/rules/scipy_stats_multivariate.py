"""Rules: scipy.stats ``multivariate_normal`` (``logpdf``, ``pdf``; w.r.t. ``x``, ``mean``
and ``cov``; ``entropy`` w.r.t. ``cov``) and ``dirichlet`` (``logpdf``, ``pdf``; w.r.t.
``x`` and ``alpha``).

They reach their rules as the univariate distributions do (``scipy_stats``): the classes
``multivariate_normal_gen`` and ``dirichlet_gen`` get methods that call a primitive when a
traced value is among the arguments, and so do the frozen ``multivariate_normal(mean,
cov)`` (for a traced ``x``: its ``mean`` and ``cov`` are held as SciPy factorized them) and
``dirichlet(alpha)``. Values are SciPy's.

``multivariate_normal`` takes SciPy's forms: ``x`` of shape (..., d) (one point of shape
(d,), or n points of dimension 1 of shape (n,)), ``mean`` None, a number or (d,), ``cov``
a number (times the identity), a vector (the diagonal) or a matrix. SciPy reads a matrix's
lower triangle only (its eigendecomposition does): the gradient is in that triangle, as
``numpy.linalg.cholesky``'s is, and a perturbation of a symmetric ``cov`` gets the right
first-order change from it. The derivatives are those of the density of a nonsingular
``cov`` (at ``allow_singular=True`` too). ``dirichlet`` takes ``x`` of shape (K, ...) or
(K - 1, ...) (the last component then 1 - the sum), components along the first axis.
"""

import numpy as np
import scipy.special as sp
import scipy.stats as st
from scipy.stats import _multivariate

from ..callables import has_traced
from ..registry import ComplexRuleError, frule, rrule
from .._state import STATE
from ..tangents import NoTangent, Thunk, ZeroTangent, is_zero
from ._compose import composite_rule
from ._scipy_entry import route_method, scipy_primitive

_mvn = st.multivariate_normal
_dirichlet = st.dirichlet
# SciPy's methods, before the classes get routed ones (which would route these calls again)
_SCIPY = {(name, method): getattr(type(dist), method) for name, dist in
          (("mvn", _mvn), ("dirichlet", _dirichlet)) for method in ("logpdf", "pdf", "entropy")}


def _mvn_logpdf_scipy(x, mean=None, cov=1, allow_singular=False):
    return _SCIPY["mvn", "logpdf"](_mvn, x, mean, cov, allow_singular)


def _mvn_pdf_scipy(x, mean=None, cov=1, allow_singular=False):
    return _SCIPY["mvn", "pdf"](_mvn, x, mean, cov, allow_singular)


def _dirichlet_logpdf_scipy(x, alpha):
    return _SCIPY["dirichlet", "logpdf"](_dirichlet, x, alpha)


def _dirichlet_pdf_scipy(x, alpha):
    return _SCIPY["dirichlet", "pdf"](_dirichlet, x, alpha)


def _mvn_entropy_scipy(mean=None, cov=1):
    return _SCIPY["mvn", "entropy"](_mvn, mean, cov)


mvn_entropy = scipy_primitive(_mvn_entropy_scipy, "scipy.stats.multivariate_normal.entropy")
mvn_logpdf = scipy_primitive(_mvn_logpdf_scipy, "scipy.stats.multivariate_normal.logpdf")
mvn_pdf = scipy_primitive(_mvn_pdf_scipy, "scipy.stats.multivariate_normal.pdf")
dirichlet_logpdf = scipy_primitive(_dirichlet_logpdf_scipy, "scipy.stats.dirichlet.logpdf")
dirichlet_pdf = scipy_primitive(_dirichlet_pdf_scipy, "scipy.stats.dirichlet.pdf")


# ---- multivariate normal ---------------------------------------------------------------------------
def _dimension(mean, cov):
    """SciPy's dimension: the mean's size, else the covariance matrix's order, else 1."""
    if mean is not None:
        return int(np.size(mean))
    return np.shape(cov)[0] if np.ndim(cov) == 2 else 1


def _full_cov(cov, d):
    """The covariance matrix SciPy uses for ``cov`` (linear in it: also for tangents)."""
    if np.ndim(cov) == 0:
        return cov * np.eye(d)
    if np.ndim(cov) == 1:
        return cov * np.eye(d)  # a diagonal
    return np.tril(cov) + np.swapaxes(np.tril(cov, -1), -1, -2)  # the lower triangle, mirrored


def _cov_cotangent(sbar, cov):
    """The cotangent of ``cov`` for ``sbar``, the symmetric cotangent of the matrix used."""
    if np.ndim(cov) == 0:
        return np.trace(sbar)
    if np.ndim(cov) == 1:
        return np.diagonal(sbar)
    return np.tril(sbar + np.swapaxes(sbar, -1, -2)) - sbar * np.eye(np.shape(sbar)[0])


def _mvn_solved(x, mean, cov):
    """``(d, points, sigma, alpha)``: the points as rows (n, d), the covariance matrix and
    alpha = (points - mean) sigma^-1, row by row."""
    d = _dimension(mean, cov)
    points = np.reshape(x, (-1, d))
    sigma = _full_cov(cov, d)
    centred = points if mean is None else points - np.reshape(mean, (d,))
    alpha = np.swapaxes(np.linalg.solve(sigma, np.swapaxes(centred, -1, -2)), -1, -2)
    return d, points, sigma, alpha


def _mvn_rule(primal, density):
    """The rrule of the log density (``density`` False) or the density."""
    def mvn_rrule(x, mean=None, cov=1, allow_singular=False):
        y = primal(x, mean, cov, allow_singular)

        def mvn_pullback(g):
            d, points, sigma, alpha = _mvn_solved(x, mean, cov)
            gb = np.reshape(g * y if density else g, (-1,))
            x_bar = np.reshape(-gb[:, None] * alpha, np.shape(x))
            mean_bar = NoTangent() if mean is None else Thunk(lambda: np.reshape(gb @ alpha, np.shape(mean)))

            def cov_bar():
                sbar = 0.5 * (np.swapaxes(alpha * gb[:, None], -1, -2) @ alpha - np.sum(gb) * np.linalg.inv(sigma))
                return _cov_cotangent(sbar, cov)

            return NoTangent(), x_bar, mean_bar, Thunk(cov_bar), NoTangent()

        return y, mvn_pullback

    def mvn_frule(tangents, x, mean=None, cov=1, allow_singular=False):
        y = primal(x, mean, cov, allow_singular)
        dx, dmean, dcov = (tangents[i] if i < len(tangents) else ZeroTangent() for i in (1, 2, 3))
        if is_zero(dx) and is_zero(dmean) and is_zero(dcov):
            return y, ZeroTangent()
        d, points, sigma, alpha = _mvn_solved(x, mean, cov)
        dy = 0.0
        if not is_zero(dx):
            dy = dy - np.sum(alpha * np.reshape(dx, (-1, d)), axis=-1)
        if not is_zero(dmean):
            dy = dy + alpha @ np.reshape(dmean, (d,))
        if not is_zero(dcov):
            dsigma = _full_cov(dcov, d)
            dy = dy + 0.5 * (np.sum((alpha @ dsigma) * alpha, axis=-1) - np.sum(np.linalg.inv(sigma) * dsigma))
        dy = np.reshape(dy, np.shape(y))
        return y, (y * dy if density else dy)

    return mvn_rrule, mvn_frule


# ---- Dirichlet ------------------------------------------------------------------------------------------
def _simplex(x, k):
    """``x`` with its last component (1 - the sum of the others) appended when SciPy does."""
    if np.shape(x)[0] == k:
        return x
    return np.concatenate([x, 1.0 - np.sum(x, axis=0, keepdims=True)], axis=0)


def _dirichlet_rule(primal, density):
    def dirichlet_rrule(x, alpha):
        y = primal(x, alpha)

        def dirichlet_pullback(g):
            k = np.shape(alpha)[0]
            full = _simplex(x, k)
            column = np.reshape(alpha, (k,) + (1,) * (np.ndim(full) - 1))
            gb = np.reshape(g * y if density else g, (1,) + np.shape(full)[1:])

            def x_bar():
                bar = gb * (column - 1.0) / full
                return bar if np.shape(x)[0] == k else bar[:-1] - bar[-1:]

            def alpha_bar():
                terms = gb * (sp.digamma(np.sum(alpha)) - sp.digamma(column) + np.log(full))
                return np.reshape(np.sum(np.reshape(terms, (k, -1)), axis=1), np.shape(alpha))

            return NoTangent(), Thunk(x_bar), Thunk(alpha_bar)

        return y, dirichlet_pullback

    def dirichlet_frule(tangents, x, alpha):
        y = primal(x, alpha)
        dx, dalpha = tangents[1], tangents[2]
        if is_zero(dx) and is_zero(dalpha):
            return y, ZeroTangent()
        k = np.shape(alpha)[0]
        full = _simplex(x, k)
        column = np.reshape(alpha, (k,) + (1,) * (np.ndim(full) - 1))
        dy = 0.0
        if not is_zero(dx):
            dfull = dx if np.shape(x)[0] == k else np.concatenate([dx, -np.sum(dx, axis=0, keepdims=True)], axis=0)
            dy = dy + np.sum((column - 1.0) / full * dfull, axis=0)
        if not is_zero(dalpha):
            dcolumn = np.reshape(dalpha, np.shape(column))
            dy = dy + np.sum((sp.digamma(np.sum(alpha)) - sp.digamma(column) + np.log(full)) * dcolumn, axis=0)
        dy = np.reshape(dy, np.shape(y))
        return y, (y * dy if density else dy)

    return dirichlet_rrule, dirichlet_frule


# ---- the table ----------------------------------------------------------------------------------------
for _prim, _make, _primal, _density in [
    (mvn_logpdf, _mvn_rule, mvn_logpdf, False), (mvn_pdf, _mvn_rule, mvn_pdf, True),
    (dirichlet_logpdf, _dirichlet_rule, dirichlet_logpdf, False),
    (dirichlet_pdf, _dirichlet_rule, dirichlet_pdf, True),
]:
    _reverse, _forward = _make(_primal, _density)
    rrule.register(_prim)(_reverse)
    frule.register(_prim)(_forward)

def _mvn_entropy(mean=None, cov=1):
    """Half the log determinant of 2 pi e cov, for the matrix SciPy reads."""
    if np.iscomplexobj(cov):
        raise ComplexRuleError(
            "scipy.stats.multivariate_normal.entropy: a complex cov reached its rule; SciPy reads "
            "only its real part (a real distribution): pass np.real(cov).")
    d = _dimension(mean, cov)
    return 0.5 * (d * np.log(2.0 * np.pi * np.e) + np.linalg.slogdet(_full_cov(cov, d))[1])


composite_rule(mvn_entropy, _mvn_entropy)
route_method(type(_mvn), "entropy", mvn_entropy)
route_method(type(_mvn), "logpdf", mvn_logpdf)
route_method(type(_mvn), "pdf", mvn_pdf)
route_method(type(_dirichlet), "logpdf", dirichlet_logpdf)
route_method(type(_dirichlet), "pdf", dirichlet_pdf)

#: {(distribution, method): primitive}, for the coverage table and the tests
PRIMITIVES = {("multivariate_normal", "logpdf"): mvn_logpdf, ("multivariate_normal", "pdf"): mvn_pdf,
              ("multivariate_normal", "entropy"): mvn_entropy,
              ("dirichlet", "logpdf"): dirichlet_logpdf, ("dirichlet", "pdf"): dirichlet_pdf}


def _route_frozen_mvn(name, prim):
    """A frozen multivariate normal's method for a traced ``x``: the primitive at the
    distribution's mean and covariance (constants: SciPy factorized them when it was made)."""
    frozen = _multivariate.multivariate_normal_frozen
    original = getattr(frozen, name)

    def routed(self, x):
        if STATE.active and has_traced(x):
            return prim(x, self.mean, self.cov, self.allow_singular)
        return original(self, x)

    routed.__name__, routed.__doc__, routed.__adrules_routed__ = name, original.__doc__, prim
    setattr(frozen, name, routed)


if not hasattr(_multivariate.multivariate_normal_frozen.logpdf, "__adrules_routed__"):
    _route_frozen_mvn("logpdf", mvn_logpdf)
    _route_frozen_mvn("pdf", mvn_pdf)
