"""The coverage table: which public NumPy and SciPy functions have derivative rules.

``python -m adrules.coverage`` walks ``numpy``, ``numpy.linalg``, ``numpy.fft``, every ufunc
(and its ``reduce``/``accumulate``/``outer``) and, when SciPy is installed, ``scipy.special``,
``scipy.linalg``, ``scipy.signal``, ``scipy.integrate``, ``scipy.fft`` and the ``scipy.stats``
distributions that have rules, looks each function up in the rule registries and writes
``docs/coverage.md``: for each function rrule + frule, non-differentiable, or not
supported with the reason, and whether its rules take complex values (each rule entry's
``complex`` flag). It also checks the target: every function HIPS autograd
differentiates has both rules here or a reason in ``LEFT_OUT``. ``tests/test_coverage.py``
fails when the committed table is stale.

>>> import numpy as np
>>> status(np.sin), status(np.argmax)
('rrule, frule', 'non-differentiable')
>>> complex_status(np.exp)
'yes'
"""

from __future__ import annotations

import argparse
import pathlib
import sys
from typing import Any

import numpy as np

from .unsupported import ASARRAY, LEFT_OUT, reason
from .registry import frule, is_primitive, rrule
from .tracer import COMPOSED

# Names autograd 1.7 registers a VJP for (numpy_vjps.py, linalg.py, scipy/special.py),
# without its internal helpers (array_from_args, concatenate_args, make_diagonal, ...)
# and with its wrappers' public names (mean, var, std, where, norm). NumPy 2 spellings
# (acos, permute_dims, pow...) are aliases of the same objects.
AUTOGRAD = {
    "numpy": (
        "abs absolute acos acosh add amax amin angle arccos arccosh arcsin arcsinh arctan arctan2 "
        "arctanh array_split asin asinh astype atan atan2 atanh atleast_1d atleast_2d atleast_3d "
        "broadcast_to clip conj conjugate cos cosh cross cumsum deg2rad degrees diag diagonal diff "
        "divide dot dsplit einsum exp exp2 expand_dims expm1 fabs fliplr flipud fmax fmin full "
        "gradient hsplit hypot imag inner kron linspace log log10 log1p log2 logaddexp logaddexp2 "
        "matmul max maximum mean min minimum mod moveaxis multiply nan_to_num negative outer pad "
        "partition permute_dims pow power prod rad2deg radians ravel real real_if_close reciprocal "
        "remainder repeat reshape roll rollaxis rot90 sin sinc sinh sort split sqrt square squeeze "
        "std subtract sum swapaxes tan tanh tensordot tile trace transpose tril triu true_divide var "
        "vsplit where").split(),
    "numpy.linalg": "cholesky det eig eigh inv norm pinv slogdet solve svd".split(),
    "numpy.fft": ("fft fft2 fftn fftshift ifft ifft2 ifftn ifftshift irfft irfft2 irfftn rfft rfft2 "
                  "rfftn").split(),
    "scipy.special": (
        "beta betainc betaln digamma erf erfc erfcinv erfinv expit gamma gammainc gammaincc gammaln "
        "gammasgn i0 i1 iv ive j0 j1 jn logit logsumexp multigammaln polygamma psi rgamma y0 y1 "
        "yn").split(),
    # autograd.scipy.stats, .integrate, .linalg (the functions with VJPs) and .signal
    "scipy.stats": (
        "beta.cdf beta.logpdf beta.pdf chi2.cdf chi2.logpdf chi2.pdf dirichlet.logpdf dirichlet.pdf "
        "gamma.cdf gamma.logpdf gamma.pdf multivariate_normal.entropy multivariate_normal.logpdf "
        "multivariate_normal.pdf norm.cdf norm.isf norm.logcdf norm.logpdf norm.logsf norm.pdf norm.ppf "
        "norm.sf poisson.cdf poisson.logpmf poisson.pmf t.cdf t.logcdf t.logpdf t.pdf").split(),
    "scipy.integrate": ["odeint"],
    "scipy.linalg": "solve_banded solve_sylvester solve_triangular sqrtm".split(),
    "scipy.signal": ["convolve"],
}

# Functions that have both rules with a restriction worth knowing.
NOTES = {
    "numpy.block": "traced as the np.reshape and np.concatenate calls that build it",
    "numpy.interp": "w.r.t. x, xp and fp; period= raises",
    "numpy.quantile": "methods linear, lower, higher, midpoint, nearest; differentiable in q",
    "numpy.percentile": "methods linear, lower, higher, midpoint, nearest; differentiable in q",
    "numpy.pad": "modes constant, wrap, edge, reflect, symmetric",
    "numpy.einsum": "string and interleaved forms, repeated indices, ellipsis",
    "numpy.linalg.pinv": "at constant rank",
    "numpy.linalg.lstsq": "through pinv: at constant rank",
    "numpy.linalg.cholesky": "gradient in the triangle read (lower; upper with upper=True)",
    "numpy.linalg.eigh": "gradient in the UPLO triangle; losses blind to each eigenvector's phase (sign if real)",
    "numpy.linalg.eig": "losses blind to each eigenvector's phase (sign if real), eigenvalues apart",
    "numpy.linalg.svd": "losses blind to the phase u[..., k] and vh[..., k, :] share (sign if real)",
    "numpy.linalg.eigvalsh": "gradient in the UPLO triangle",
    "numpy.std": "zero spread: derivative 0",
    "numpy.nanstd": "zero spread: derivative 0",
    "numpy.full_like": "w.r.t. fill_value when a is traced too (NumPy dispatches on a alone)",
    "numpy.nan_to_num": "w.r.t. nan=, posinf=, neginf= when x is traced too (NumPy dispatches on x alone)",
    "numpy.select": "w.r.t. default when a choice is traced too (NumPy dispatches on the lists alone)",
    "numpy.cov": "without fweights/aweights",
    "numpy.polyint": "w.r.t. k when p is traced too (NumPy dispatches on p alone)",
    "numpy.frexp": "w.r.t. the mantissa; the exponent is an integer",
    "numpy.bincount": "w.r.t. weights: a sum by index, for what np.add.at would write in place",
    "scipy.special.gammainc": "w.r.t. x (not a)",
    "scipy.special.gammaincc": "w.r.t. x (not a)",
    "scipy.special.betainc": "w.r.t. x (not a, b)",
}
for _bessel in ("iv", "ive", "jv", "jn", "yv", "yn", "kv", "kve"):
    NOTES[f"scipy.special.{_bessel}"] = "w.r.t. the argument (not the order)"
NOTES.update({
    "numpy.piecewise": "traced as each function's calls on x[cond], placed with np.where",
    "numpy.apply_along_axis": "traced as func1d's calls on each slice, joined with np.stack",
    "numpy.apply_over_axes": "traced as func's calls",
    "numpy.polyfit": "w.r.t. x, y and w, at constant rank; full= and cov= raise",
    "numpy.poly": "from real roots (not a matrix)",
    "numpy.i0": "with SciPy installed (the derivative is scipy.special.i1)",
    "scipy.special.hyp0f1": "w.r.t. z (not b)",
    "scipy.special.hyp1f1": "w.r.t. z (not a, b)",
    "scipy.special.hyp2f1": "w.r.t. z (not a, b, c)",
    "scipy.special.chdtr": "w.r.t. x (not v)",
    "scipy.special.chdtrc": "w.r.t. x (not v)",
    "scipy.special.gdtr": "w.r.t. a and x (not b)",
    "scipy.special.gdtrc": "w.r.t. a and x (not b)",
    "scipy.special.fdtr": "w.r.t. x (not dfn, dfd)",
    "scipy.special.fdtrc": "w.r.t. x (not dfn, dfd)",
    "scipy.special.kolmogorov": "first derivatives only",
    "scipy.special.logsumexp": "w.r.t. a and b; axis, keepdims, return_sign (the sign: no derivative)",
    "scipy.special.polygamma": "w.r.t. x (not n)",
    "scipy.special.multigammaln": "w.r.t. a (not d)",
    "scipy.special.zeta": "w.r.t. q (not x)",
    "scipy.special.factorial": "exact=False: w.r.t. n",
    "scipy.integrate.odeint": "w.r.t. y0, t, args and the state func carries; adjoint (reverse), sensitivities (forward)",
    "scipy.linalg.solve_triangular": "w.r.t. a (the triangle read) and b",
    "scipy.linalg.solve_banded": "w.r.t. ab (its band) and b",
    "scipy.linalg.cholesky": "gradient in the triangle read (upper; lower with lower=True)",
    "scipy.linalg.cho_factor": "gradient in the triangle read; the other triangle is a's (zeros from SciPy 1.18)",
    "scipy.linalg.cho_solve": "w.r.t. the factor's triangle and b",
    "scipy.linalg.sqrtm": "real matrices",
    "scipy.linalg.expm": "real matrices, stacks of them",
    "scipy.signal.convolve": "SciPy's convolve: modes full, valid, same; any method (autograd's "
                             "own convolve(A, B, axes, dot_axes) has no SciPy counterpart)",
    "scipy.signal.correlate": "modes full, valid, same; any method",
    "scipy.signal.fftconvolve": "axes=None",
    "scipy.signal.convolve2d": "boundary='fill', fillvalue=0",
    "scipy.signal.correlate2d": "boundary='fill', fillvalue=0",
    "scipy.special.smirnov": "w.r.t. d (not n); first derivatives only",
})
for _polynomial, _parameters in (("chebyt", "n"), ("chebyu", "n"), ("chebyc", "n"), ("chebys", "n"),
                                 ("sh_chebyt", "n"), ("sh_chebyu", "n"), ("legendre", "n"),
                                 ("sh_legendre", "n"), ("hermite", "n"), ("hermitenorm", "n"),
                                 ("laguerre", "n"), ("genlaguerre", "n, alpha"),
                                 ("gegenbauer", "n, alpha"), ("jacobi", "n, alpha, beta")):
    NOTES[f"scipy.special.eval_{_polynomial}"] = f"w.r.t. x (not {_parameters})"


def _rules_of(f: Any) -> tuple[Any, Any, Any]:
    """``(f, rrule entry, frule entry)``, ``f`` a SciPy distribution's method replaced by the
    primitive it is routed to."""
    f = getattr(getattr(f, "__func__", f), "__adrules_routed__", None) or f
    return f, rrule.lookup(f), frule.lookup(f)


def status(f: Any) -> str:
    """``'rrule, frule'``, ``'rrule only'``, ``'frule only'``, ``'non-differentiable'`` or
    ``'not supported'`` for callable ``f`` (a SciPy distribution's method: that of the
    primitive it is routed to)."""
    f, r, fw = _rules_of(f)
    if r is None and fw is None:
        return "rrule, frule" if f in COMPOSED else "not supported"
    if getattr(r, "kind", None) == "nondiff":
        return "non-differentiable"
    return "rrule, frule" if r is not None and fw is not None else ("rrule only" if r is not None else "frule only")


def complex_status(f: Any) -> str:
    """``'yes'`` when ``f``'s rules are registered as right for complex values
    (``complex=True``), ``'no'`` when a complex value reaching them raises an error,
    ``'rrule only'``/``'frule only'`` when one of the two is, ``'through its calls'`` for
    a function traced as other calls, and ``''`` where there is no rule or no derivative."""
    f, r, fw = _rules_of(f)
    if r is None and fw is None:
        return "through its calls" if f in COMPOSED else ""
    if getattr(r, "kind", None) == "nondiff":
        return "" if r.complex else "no"  # np.sign: constant on the real line only
    flags = {kind: e.complex for kind, e in (("rrule", r), ("frule", fw)) if e is not None}
    if all(flags.values()):
        return "yes"
    if not any(flags.values()):
        return "no"
    return "rrule only" if flags["rrule"] else "frule only"


def _float_loops(ufunc):
    return any(c in "efdg" for t in ufunc.types for c in t.split("->")[0])


def _reason(qualified, f):
    known = reason(qualified)
    if known is not None:
        return known
    if isinstance(f, np.ufunc) and not _float_loops(f):
        return "integer or boolean inputs only"
    if not is_primitive(f):
        if qualified.startswith("scipy."):
            return ASARRAY + ": no rule yet"
        return "does not dispatch traced arguments (no __array_function__): array creation, " \
               "dtype and I/O helpers"
    return "no rule yet"


def _public(module):
    """Public callables of ``module`` (no classes, no submodules), by name."""
    out = {}
    for name in sorted(getattr(module, "__all__", None) or dir(module)):
        if name.startswith("_"):
            continue
        f = getattr(module, name, None)
        if f is None or isinstance(f, type) or type(f).__name__ == "module" or not callable(f):
            continue
        out[name] = f
    return out


def _namespaces():
    import numpy.fft
    import numpy.linalg

    spaces = [("numpy", np), ("numpy.linalg", numpy.linalg), ("numpy.fft", numpy.fft)]
    try:
        import scipy.fft
        import scipy.integrate
        import scipy.linalg
        import scipy.signal
        import scipy.special
        import scipy.stats  # noqa: F401  (its rules: target_rows and _stats_rows read them)
    except ImportError:
        return spaces
    return spaces + [("scipy.special", scipy.special), ("scipy.linalg", scipy.linalg),
                     ("scipy.signal", scipy.signal), ("scipy.integrate", scipy.integrate),
                     ("scipy.fft", scipy.fft)]


def _stats_note(name, method, shapes):
    """What a scipy.stats method's rules differentiate."""
    if name == "multivariate_normal":
        return "w.r.t. cov" if method == "entropy" else "w.r.t. x, mean, cov (its lower triangle, which SciPy reads)"
    if name == "dirichlet":
        return "w.r.t. x, alpha"
    if name == "poisson":
        return "w.r.t. mu"
    first = "q" if method in ("ppf", "isf") else "x"
    if method in ("logpdf", "pdf"):
        return ", ".join(["w.r.t. " + first, *shapes, "loc", "scale"])
    return f"w.r.t. {first}, loc, scale" + (f" (not {', '.join(shapes)})" if shapes else "")


def _stats_rows():
    """``(name.method, status, complex, note)`` for the scipy.stats methods with rules."""
    try:
        from .rules import scipy_stats, scipy_stats_multivariate
    except ImportError:
        return []
    shapes = {fam.name: fam.shapes for fam in scipy_stats.FAMILIES}
    primitives = {**scipy_stats.PRIMITIVES, **scipy_stats_multivariate.PRIMITIVES}
    return [(f"{name}.{method}", status(prim), complex_status(prim), _stats_note(name, method, shapes.get(name, ())))
            for (name, method), prim in sorted(primitives.items())]


def rows():
    """``(namespace, name, status, complex, note)`` for every public function, sorted.

    >>> ("numpy", "exp", "rrule, frule", "yes", "") in rows()
    True
    """
    out = []
    for space, module in _namespaces():
        for name, f in _public(module).items():
            qualified = f"{space}.{name}"
            st = status(f)
            note = NOTES.get(qualified, "") if st != "not supported" else _reason(qualified, f)
            if isinstance(f, np.ufunc) and st != "not supported":
                methods = [m for m in ("reduce", "accumulate", "outer") if status(getattr(f, m)) != "not supported"]
                note = "; ".join(filter(None, [note, "also ." + ", .".join(methods) if methods else ""]))
            out.append((space, name, st, complex_status(f), note))
    return out


def target_rows():
    """``(qualified name, status, complex, note)`` for autograd's differentiable functions.

    >>> target_rows()[0]
    ('numpy.abs', 'rrule, frule', 'yes', '')
    """
    spaces = dict(_namespaces())
    spaces["scipy.stats"] = sys.modules.get("scipy.stats")
    out = []
    for space, names in AUTOGRAD.items():
        for name in names:
            qualified = f"{space}.{name}"
            module = spaces.get(space)
            f = module
            for part in name.split("."):  # norm.logpdf: a distribution's method
                f = getattr(f, part, None) if f is not None else None
            if f is None:
                out.append((qualified, "absent here", "",
                            "not in the installed version" if module else "not installed"))
                continue
            st = status(f)
            note = LEFT_OUT.get(qualified, NOTES.get(qualified, ""))
            if space == "scipy.stats" and st != "not supported":
                name_, _, method = name.partition(".")
                note = _stats_note(name_, method, tuple(s.strip() for s in (getattr(getattr(module, name_), "shapes", "") or "")
                                                        .split(",") if s.strip()))
            out.append((qualified, st, complex_status(f), note))
    return out


def versions():
    """The versions the table is generated from.

    >>> sorted(versions())[0]
    'numpy'
    """
    found = {"numpy": np.__version__}
    try:
        import scipy
        found["scipy"] = scipy.__version__
    except ImportError:
        pass
    return found


def _table(header, lines):
    head = "| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n"
    return head + "".join("| " + " | ".join(str(c) for c in line) + " |\n" for line in lines)


def render():
    """The text of docs/coverage.md.

    >>> render().splitlines()[0]
    '# Rule coverage'
    """
    table = rows()
    target = target_rows()
    counts = {}
    for _, _, st, _, _ in table:
        counts[st] = counts.get(st, 0) + 1
    missing = [q for q, st, _, _ in target
               if st not in ("rrule, frule", "non-differentiable", "absent here") and q not in LEFT_OUT]
    made_with = ", ".join(f"{k} {v}" for k, v in versions().items())
    parts = [
        "# Rule coverage\n\n",
        f"Generated by `python -m adrules.coverage` ({made_with}); `tests/test_coverage.py` "
        "fails when this file is stale. Statuses: *rrule, frule* (both modes, and higher "
        "derivatives), *non-differentiable* (outputs carry no tangent), *not supported* "
        "(with the reason). *complex*: *yes* where the rules are written and tested for complex "
        "values (ChainRules' convention, both modes), *no* where a complex value reaching them "
        "raises an error naming the function (differentiate the real and imaginary parts "
        "separately there).\n\n",
        "Summary: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "; complex values: "
        + ", ".join(f"{sum(c == k for *_, c, _ in table)} {k}" for k in ("yes", "no")) + ".\n\n",
        "## Target: what HIPS autograd differentiates\n\n",
        f"{len(target)} functions of autograd.numpy, autograd.numpy.linalg, autograd.numpy.fft and autograd.scipy's "
        f"special, stats, integrate, linalg and signal; {len(missing)} without both rules and without a reason "
        "(non-differentiable counts: autograd's derivative of a piecewise-constant function is zero).\n\n",
        _table(["function", "status", "complex", "note"], [(f"`{q}`", *cells) for q, *cells in target]),
    ]
    for space in dict.fromkeys(s for s, *_ in table):
        parts.append(f"\n## {space}\n\n")
        parts.append(_table(["function", "status", "complex", "note"],
                            [(f"`{name}`", *cells) for s, name, *cells in table if s == space]))
    stats = _stats_rows()
    if stats:
        parts.append("\n## scipy.stats\n\nThe distributions' methods with rules, called positionally, by keyword "
                     "or on a frozen distribution (`st.norm(loc, scale).logpdf(x)`; a frozen "
                     "`multivariate_normal` or `dirichlet` with traced parameters says to call the "
                     "method instead). Other distributions, and distributions deriving from these "
                     "(`erlang` from `gamma`), have none.\n\n")
        parts.append(_table(["method", "status", "complex", "note"], [(f"`{m}`", *cells) for m, *cells in stats]))
    return "".join(parts)


def main(argv=None):
    """Write (or with ``--check``, compare) the table; returns the exit status."""
    parser = argparse.ArgumentParser(prog="python -m adrules.coverage", description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(pathlib.Path(__file__).resolve().parent.parent / "docs" / "coverage.md"))
    parser.add_argument("--check", action="store_true", help="exit 1 if the file differs instead of writing it")
    args = parser.parse_args(argv)
    text = render()
    path = pathlib.Path(args.output)
    if args.check:
        same = path.exists() and path.read_text() == text
        print(f"{path}: {'up to date' if same else 'stale: run python -m adrules.coverage'}")
        return 0 if same else 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
