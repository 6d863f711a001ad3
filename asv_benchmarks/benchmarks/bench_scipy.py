"""Gradients through SciPy's functions, against HIPS autograd's rules for the same calls.

Target: the new rules cost no more than autograd's on the same calls
(``ScipyGradientRatio.track_adrules_over_autograd`` <= 1.0, the median of per-round
ratios, the two timed in alternation). Each workload is one loss written twice, with
plain NumPy and SciPy (adrules) and with ``autograd.numpy`` and ``autograd.scipy``,
differentiated with respect to the same arguments. autograd is installed with the bench
extra; without it these benchmarks are skipped. (autograd's primitives wrap the names
SciPy has once adrules is imported, which, with no adrules differentiation open, cost it
one attribute check each: SciPy's own function then runs.)
"""

import numpy as np
import scipy.integrate
import scipy.linalg
import scipy.signal
import scipy.special
import scipy.stats

import adrules as ad

from . import common

# Imported with the module (as SciPy's are), not in each benchmark's setup: a quick pass
# (run_quick.sh) forks every benchmark from one process that imported the suite, and these
# imports took ~10 s a benchmark on the busy machine when each benchmark's setup paid them.
try:
    import autograd
    import autograd.numpy as anp
    import autograd.scipy.integrate
    import autograd.scipy.linalg
    import autograd.scipy.signal
    import autograd.scipy.special
    import autograd.scipy.stats
    import autograd.scipy.stats.multivariate_normal  # noqa: F401  (a module in autograd)
except ImportError:  # the benchmarks are skipped (not failed) without the bench extra
    autograd = None


def _data(seed=0):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=(10, 10))
    return {
        "x": rng.normal(size=1000), "positive": rng.uniform(0.5, 3.0, size=1000),
        "unit": rng.uniform(0.05, 0.95, size=1000), "counts": rng.poisson(3.0, size=1000).astype(float),
        "points": rng.normal(size=(100, 10)), "mean": rng.normal(size=10), "cov": a @ a.T + 10 * np.eye(10),
        "scores": rng.normal(size=(100, 50)), "alpha": rng.uniform(1.0, 3.0, size=5),
        "simplex": rng.dirichlet(np.ones(5)), "tri": np.tril(a) + 5 * np.eye(10), "rhs": rng.normal(size=(10, 3)),
        "signal": rng.normal(size=1000), "kernel": rng.normal(size=11), "small": a[:5, :5] @ a[:5, :5].T + np.eye(5),
        "state": rng.normal(size=5),
    }


def _workloads(np_, stats, special, linalg, signal, integrate):
    """{name: (loss, argument names)}: the same losses over either library's namespaces."""
    def dynamics(y, t, w):
        return np_.tanh(np_.dot(w, y))

    return {
        "norm.logpdf": (lambda x, m, s: np_.sum(stats.norm.logpdf(x, m, s)), ("x", 0.3, 1.5)),
        "norm.cdf": (lambda x, m, s: np_.sum(stats.norm.cdf(x, m, s)), ("x", 0.3, 1.5)),
        "t.logpdf": (lambda x, df, m, s: np_.sum(stats.t.logpdf(x, df, m, s)), ("x", 4.0, 0.3, 1.5)),
        "gamma.logpdf": (lambda x, a: np_.sum(stats.gamma.logpdf(x, a)), ("positive", 2.5)),
        "beta.logpdf": (lambda x, a, b: np_.sum(stats.beta.logpdf(x, a, b)), ("unit", 2.0, 3.0)),
        "poisson.logpmf": (lambda mu: np_.sum(stats.poisson.logpmf(DATA["counts"], mu)), ("positive",)),
        "multivariate_normal.logpdf": (lambda x, m, c: np_.sum(stats.multivariate_normal.logpdf(x, m, c)),
                                       ("points", "mean", "cov")),
        "dirichlet.logpdf": (lambda a: stats.dirichlet.logpdf(DATA["simplex"], a), ("alpha",)),
        "logsumexp(axis=1)": (lambda a: np_.sum(special.logsumexp(a, axis=1)), ("scores",)),
        "solve_triangular": (lambda a, b: np_.sum(linalg.solve_triangular(a, b, lower=True)), ("tri", "rhs")),
        "sqrtm": (lambda a: np_.sum(linalg.sqrtm(a)), ("small",)),
        "solve_sylvester": (lambda a, q: np_.sum(linalg.solve_sylvester(a, a, q)), ("small", "small")),
        "convolve": (lambda s, k: np_.sum(signal.convolve(s, k, mode="same") ** 2), ("signal", "kernel")),
        # args as the differentiated tuple: autograd differentiates a tuple it was given
        "odeint": (lambda y0, args: np_.sum(integrate.odeint(dynamics, y0, np_.linspace(0.0, 1.0, 5), args,
                                                             rtol=1e-6, atol=1e-6)),
                   ("state", ("small",))),
    }


DATA = _data()
NAMES = list(_workloads(np, *(None,) * 5))


def _arguments(spec):
    return tuple(DATA[s] if isinstance(s, str) else _arguments(s) if isinstance(s, tuple) else s for s in spec)


def _callables(name):
    """``{"adrules": fn, "autograd": fn}``: each library's gradient of workload ``name``."""
    if autograd is None:
        raise NotImplementedError("autograd is not installed: pip install -e '.[bench]'")
    ours, spec = _workloads(np, scipy.stats, scipy.special, scipy.linalg, scipy.signal, scipy.integrate)[name]
    theirs, _ = _workloads(anp, autograd.scipy.stats, autograd.scipy.special, autograd.scipy.linalg,
                           autograd.scipy.signal, autograd.scipy.integrate)[name]
    args = _arguments(spec)
    nums = tuple(range(len(args)))
    ours_grad, theirs_grad = ad.grad(ours, argnums=nums), autograd.grad(theirs, argnum=nums)
    return {"adrules": lambda: ours_grad(*args), "autograd": lambda: theirs_grad(*args)}


class ScipyGradients:
    """Seconds per gradient of each workload, with each library."""

    params = [NAMES, ["adrules", "autograd"]]
    param_names = ["call", "library"]

    def setup(self, call, library):
        common.pin_blas()
        self.fn = _callables(call)[library]
        self.fn()

    def time_gradient(self, call, library):
        self.fn()


class ScipyGradientRatio:
    """adrules' gradient time over autograd's on the same call: the median of per-round
    ratios, the two timed in alternation (target <= 1.0)."""

    params = [NAMES]
    param_names = ["call"]
    unit = "ratio"

    def setup(self, call):
        common.pin_blas()
        self.fns = _callables(call)

    def track_adrules_over_autograd(self, call):
        return common.interleaved_speedups(self.fns, over="adrules", repeat=9, budget=0.05)["autograd"]
