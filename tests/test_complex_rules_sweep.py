"""Every registered rule, reverse and forward, at complex arguments: each either agrees with
finite differences along real and imaginary directions or raises ``ComplexRuleError``, never
a silently wrong number.

The arguments are the real-valued cases the other sweeps already hold (``test_keywords.py``,
``test_rules_sweep.py``), their float arrays made complex (all at once, then each alone, so a
function that takes complex values in one argument only is reached too), plus ufuncs and
their methods built from their arity, and a few internal primitives given here. A complex
case NumPy/SciPy itself refuses is skipped (there is nothing to differentiate). A rule that
promises complex values (``entry.complex``) and has no case fails the test: add one.
"""

import importlib.util
import pathlib
import sys
import warnings
import zlib

import numpy as np
import pytest
import scipy.fft
import scipy.integrate  # noqa: F401  (loads the SciPy rule families)
import scipy.linalg
import scipy.signal
import scipy.special  # noqa: F401
import scipy.stats  # noqa: F401

import adrules as ad
from adrules import ops, registry
from adrules.registry import NONDIFF, ComplexRuleError, function_name
from adrules.rules import fft, indexing, shape, signal


def _load(name):
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, pathlib.Path(__file__).with_name(name + ".py"))
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    return sys.modules[name]


import _complex_checks as checks  # noqa: E402  (tests/_complex_checks.py, which conftest.py loads)


def R(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, size=shape)


def Z(*shape, seed=0):
    return checks.complexify(R(*shape, seed=seed), np.random.default_rng(seed + 100))


def HPD(n=3):
    """A Hermitian positive definite matrix, eigenvalues apart."""
    a = Z(n, n, seed=7)
    return a @ a.conj().T + np.diag(np.arange(n) * 3.0 + n)


# Cases given here: internal primitives, and functions whose complex case needs care.
EXPLICIT = [
    (ops.getitem, (Z(2, 3), (slice(None), np.array([0, 2, 2]))), {}),
    (ops.astype, (Z(3), np.complex64), {}),
    (ops.astype, (R(3), np.complex128), {}),  # a real input, a complex output
    (ops.astype, (Z(3), np.float64), {}),  # the imaginary part dropped, as NumPy does
    (indexing.scatter_add, ((4,), np.array([0, 2, 0]), Z(3)), {}),
    (indexing.window_sum, ((4,), 2, None, Z(3, 2)), {}),
    (shape._sum_runs, (Z(6), np.array([2, 0, 3, 1]), 0), {}),
    (np.linalg.cholesky, (HPD(),), {}), (np.linalg.eigh, (HPD(),), {}), (np.linalg.eigvalsh, (HPD(),), {}),
    (scipy.linalg.cholesky, (HPD(),), {}), (scipy.linalg.cho_factor, (HPD(),), {}),
    (scipy.linalg.cho_solve, ((np.linalg.cholesky(HPD()), True), Z(3, seed=1)), {}),
    (scipy.signal.convolve, (Z(5), Z(3, seed=1)), {}), (scipy.signal.fftconvolve, (Z(5), Z(3, seed=1)), {}),
    (scipy.signal.correlate, (Z(5), Z(3, seed=1)), {}),
    (scipy.signal.convolve2d, (Z(3, 3), Z(2, 2, seed=1)), {}),
    (scipy.signal.correlate2d, (Z(3, 3), Z(2, 2, seed=1)), {}),
]
EXPLICIT += [
    (fft.resize, (Z(2, 3), 1, 5), {}), (fft.resize, (Z(2, 3), 0, 1), {}),
    (signal.embed, (Z(2, 2), (3, 4), (1, 2)), {}),
    (scipy.linalg.solve_triangular, (np.tril(Z(3, 3)) + 3 * np.eye(3), Z(3, seed=1)), {"lower": True}),
    (scipy.linalg.solve_triangular, (np.triu(Z(3, 3)) + 3 * np.eye(3), Z(3, 2, seed=1)), {"trans": 2}),
    (scipy.linalg.solve_banded, ((1, 1), Z(3, 3) + np.array([[0], [3], [0]]), Z(3, seed=1)), {}),
    (scipy.linalg.solve_sylvester, (Z(3, 3) + 3 * np.eye(3), Z(2, 2, seed=1) + 3 * np.eye(2), Z(3, 2, seed=2)), {}),
    (scipy.linalg.sqrtm, (HPD() + 0.3 * Z(3, 3, seed=1),), {}),
    (scipy.linalg.expm, (0.5 * Z(3, 3),), {}), (scipy.linalg.expm, (0.5 * Z(2, 3, 3),), {}),
    # scipy.fft: numpy.fft's cases (test_keywords.py) by the same positions, and the Hermitian n-d ones
    (scipy.fft.hfftn, (Z(2, 3), (2, 4), (0, 1), "ortho"), {}), (scipy.fft.hfft2, (Z(2, 3), None, (0, 1)), {}),
    (scipy.fft.ihfftn, (R(2, 4), (2, 5), (0, 1), "forward"), {}), (scipy.fft.ihfft2, (R(3, 4), None), {}),
]
# The real-input transforms refuse complex x: a real x, complex outputs (their cases from
# test_keywords.py are kept too)
_REAL_ONLY = [case for m in (np.fft, scipy.fft)
              for case in ((m.rfft, (R(5), 6, 0, "ortho")), (m.ihfft, (R(5), None, 0, "backward")),
                           (m.rfftn, (R(2, 4), (2, 5), (0, 1), "ortho")), (m.rfft2, (R(2, 4), None, (0, 1))))]
EXPLICIT += [(f, args, {}) for f, args in _REAL_ONLY]
if hasattr(np, "astype"):
    EXPLICIT.append((np.astype, (Z(3), np.complex64), {}))
# Keys not reachable by name from here (SciPy methods routed to primitives), by their names.
EXPLICIT_BY_NAME = {
    "scipy.stats.multivariate_normal.entropy": [((None, HPD()), {})],
    "adrules.rules._compose.pad_previous_rules": [((Z(2, 3), 1), {})],  # its modes: constant only
}

# Rules that promise complex values and compute something else than NumPy does; each a bug to
# fix in its rule file (the test fails here once it is fixed: then take it off this list).
KNOWN_WRONG: dict = {}


def _hermitian_part(a):
    return (a + np.conj(np.swapaxes(a, -1, -2))) / 2


# Outputs with a gauge (each eigen- or singular vector's phase): the cotangents are drawn and
# the tangents compared without their gauge components, as a loss blind to the phases sees
# them (|v|², v diag(f(w)) v⁻¹...). Rules written for Hermitian matrices (before extend_rule
# mirrors the triangle NumPy reads) are checked along Hermitian directions, as rules of
# f((a + a^H)/2).
GAUGE = {"numpy.linalg.eig": checks.eig_gauge, "numpy.linalg.eigh": checks.eig_gauge,
         "adrules.rules._compose.eigh_previous_rules": checks.eig_gauge, "numpy.linalg.svd": checks.svd_gauge}
THROUGH = {"adrules.rules._compose.eigh_previous_rules": _hermitian_part,
           "adrules.rules._compose.eigvalsh_previous_rules": _hermitian_part,
           "adrules.rules._compose.cholesky_previous_rules": _hermitian_part}


def _scipy_fft(cases):
    """numpy.fft's cases as scipy.fft's (the same leading positions), for the names both have."""
    return [(getattr(scipy.fft, f.__name__), args) for f, args in cases
            if getattr(f, "__module__", "").startswith("numpy.fft") and hasattr(scipy.fft, f.__name__)]


def _real_cases():
    keywords, sweep = _load("test_keywords"), _load("test_rules_sweep")
    cases = [(f, args, {}) for f, args in keywords.CASES + sweep.CASES + _scipy_fft(keywords.CASES)]
    return cases + [(f, args, kw) for f, args, kw in sweep.FLOAT32]


def _float_positions(args):
    return [i for i, a in enumerate(args) if any(True for _ in checks.paths([a]))
            and not isinstance(a, (float, np.floating))]


def _variants(f, args, kwargs):
    """The real case with all its float arrays made complex, then each alone."""
    rng = np.random.default_rng(zlib.crc32(function_name(f).encode()))  # the same draw every run
    positions = _float_positions(args)
    out = [(f, tuple(checks.complexify(a, rng) if i in positions else a for i, a in enumerate(args)), kwargs)]
    if len(positions) > 1:
        for p in positions:
            out.append((f, tuple(checks.complexify(a, rng) if i == p else a for i, a in enumerate(args)), kwargs))
    return out


def _ufunc_case(f, entry):
    """A ufunc (NumPy's or SciPy's) at complex arrays, or one of its methods."""
    owner = getattr(f, "__self__", None)
    if isinstance(f, np.ufunc):
        partials = entry.partials or (0,) * f.nin
        return (f, tuple(R(3, seed=i) if d is None else Z(3, seed=i) for i, d in enumerate(partials[:f.nin])), {})
    if isinstance(owner, np.ufunc):
        return {"reduce": (f, (Z(2, 3), 1), {}), "accumulate": (f, (Z(2, 3), 1), {}),
                "outer": (f, (Z(2), Z(3, seed=1)), {}),
                "reduceat": (f, (Z(5), np.array([0, 2, 3])), {})}.get(f.__name__)
    return None


def _cases():
    """{f: [(f, args, kwargs), ...]} for every registered rule (nondifferentiable ones aside)."""
    table = {}
    for f, args, kwargs in EXPLICIT:
        table.setdefault(f, []).append((f, args, kwargs))
    explicit = set(table)
    for f, args, kwargs in _real_cases():
        if f not in explicit or f in {g for g, _ in _REAL_ONLY}:
            table.setdefault(f, []).extend(v for v in _variants(f, args, kwargs))
    by_name = {function_name(f).rpartition(".")[2]: f for f in table if function_name(f).startswith("numpy")}
    out = {}
    for reg in (registry.rrule.rules, registry.frule.rules):
        for f, entry in reg.items():
            name = function_name(f)
            if entry.kind is NONDIFF or f in out or name.startswith(("tests.", "test_", "__main__")):
                continue  # (rules other test modules registered for their own functions)
            if f in table:
                out[f] = table[f]
            elif name in EXPLICIT_BY_NAME:
                out[f] = [(f, args, kw) for args, kw in EXPLICIT_BY_NAME[name]]
            elif name.endswith("_previous_rules"):  # extend_rule's earlier rule: the function's case
                stem = name.rpartition(".")[2][:-len("_previous_rules")]
                out[f] = [(f, args, kw) for _, args, kw in table.get(by_name.get(stem), [])]
            elif _ufunc_case(f, entry) is not None:
                out[f] = [_ufunc_case(f, entry)]
            else:
                out[f] = []
    return out


CASES = _cases()
PSUM = {sys.modules["adrules._psum.parallel"]._map_chunks}  # the parallel sum's primitive: test_psum_of_complex_elements


def _accepted(f, args, kwargs):
    """Whether NumPy/SciPy itself computes ``f`` at these complex arguments."""
    try:
        f(*args, **kwargs)
        return True
    except Exception:  # noqa: BLE001 (any refusal: TypeError, ValueError, LinAlgError...)
        return False


def _outcome(check, f, args, kwargs):
    name = function_name(f)
    try:
        check(f, *args, fkwargs=kwargs, gauge=GAUGE.get(name), through=THROUGH.get(name))
        return "checked"
    except ComplexRuleError:
        return "refused"


def _param(f):
    name = function_name(f)
    if name in KNOWN_WRONG:
        return pytest.param(f, id=name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[name]))
    return pytest.param(f, id=name)


@pytest.mark.parametrize("f", [_param(f) for f in CASES])
def test_rule_at_complex_arguments(f):
    if f in PSUM:
        return
    cases = CASES[f]
    flagged = registry.rrule.rules[f].complex or registry.frule.rules[f].complex
    if not cases:
        assert not flagged, f"{function_name(f)} promises complex values: add a complex case here"
        # no arguments known: any complex argument must be refused before the rule runs
        for reg in (registry.rrule, registry.frule):
            with pytest.raises(ComplexRuleError, match="complex"):
                if reg is registry.rrule:
                    ad.rrule(f, Z(3))
                else:
                    ad.frule((ad.NoTangent(), Z(3)), f, Z(3))
        return
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        for f_, args, kwargs in cases:
            if not _accepted(f_, args, kwargs):
                continue
            for check, reg in ((checks.check_rrule, registry.rrule), (checks.check_frule, registry.frule)):
                outcome = _outcome(check, f_, args, kwargs)
                if not reg.rules[f].complex:
                    assert outcome == "refused", f"{function_name(f)}: not written for complex values, yet it ran"


def test_psum_of_complex_elements():
    """The parallel sum's primitive: a gradient with respect to complex elements and a complex
    shared argument agrees with differences, or a complex value is refused."""
    zs = Z(4, 2)
    w = Z(2, seed=1)

    def loss(zs, w):
        return ad.psum(lambda z, w: np.sum(np.abs(z * w) ** 2), zs, w, executor="serial")

    try:
        gz, gw = ad.gradient(loss, zs, w)
    except ComplexRuleError:
        pass
    else:
        np.testing.assert_allclose(gz, checks.grad_fd(lambda v: loss(v, w), zs), rtol=1e-6, atol=1e-7)
        np.testing.assert_allclose(gw, checks.grad_fd(lambda v: loss(zs, v), w), rtol=1e-6, atol=1e-7)
    dz, dw = Z(4, 2, seed=2) - 1.0, Z(2, seed=3) - 1.0
    try:
        _, dy = ad.jvp(loss, (zs, w), (dz, dw))
    except ComplexRuleError:
        return
    h = 1e-6
    want = (loss(zs + h * dz, w + h * dw) - loss(zs - h * dz, w - h * dw)) / (2 * h)
    np.testing.assert_allclose(dy, want, rtol=1e-6)


def test_unflagged_rules_refuse_in_the_tracer_too():
    """A sample: functions NumPy computes at complex values whose rules are real-only raise
    ComplexRuleError from gradient and jvp, naming the function."""
    z = Z(4)
    for f in (np.maximum.accumulate, np.sort):
        for run in (lambda g: ad.gradient(lambda v: np.real(np.sum(g(v))), z),
                    lambda g: ad.jvp(lambda v: g(v), (z,), (z,))):
            with pytest.raises(ComplexRuleError, match=function_name(f).rpartition(".")[2]):
                run(f)


# ---- functions that call the user's functions (traced through, not rules) ----------------------------
HIGHER_ORDER = {
    "piecewise": lambda v: np.piecewise(v, [np.real(v) > 1.0], [lambda u: u ** 2, lambda u: np.exp(u)]),
    "piecewise-real-of-complex": lambda v: np.piecewise(np.real(v), [np.real(v) > 1.0],
                                                        [lambda u: u * (1 + 2j), 0.5]),  # NumPy drops imag
    "apply_along_axis": lambda v: np.apply_along_axis(lambda r: np.cumprod(r) * r[0], 1, v),
    "apply_over_axes": lambda v: np.apply_over_axes(np.sum, v * v, [0, 1]),
}


@pytest.mark.parametrize("name", list(HIGHER_ORDER))
def test_functions_calling_user_functions_at_complex_values(name):
    f = HIGHER_ORDER[name]
    z = Z(2, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
        loss = checks.real_loss(f)
        checks.check_gradient(loss, z)
        checks.check_hvp(loss, z)


def test_histograms_refuse_complex_values():
    """NumPy bins complex values by their real parts (with a warning); the histogram rules are
    written for real values and refuse, naming the function."""
    z = Z(6)
    with pytest.raises(ComplexRuleError, match="histogram"):
        ad.gradient(lambda v: np.sum(np.histogram(v, 3, weights=np.abs(v))[0]), z)
    with pytest.raises(ComplexRuleError, match="histogram"):
        ad.jvp(lambda v: np.histogram(R(6), 3, weights=v)[0], (z,), (z,))


def test_sign_of_complex_values_is_not_silently_constant():
    """np.sign is non-differentiable on the real line, but NumPy 2's sign of complex z is
    z/|z|, whose derivative is not zero: refused (or, some day, right)."""
    z = Z(3)
    loss = checks.real_loss(np.sign)
    try:
        (g,) = ad.gradient(loss, z)
    except ComplexRuleError:
        return
    np.testing.assert_allclose(g, checks.grad_fd(loss, z), rtol=1e-6, atol=1e-7)


def test_the_checks_catch_a_pullback_that_forgets_the_conjugate():
    """The finite-difference checks this sweep relies on fail a holomorphic rule whose
    pullback multiplies by f'(z) instead of conj(f'(z)), and pass the right one."""
    @ad.primitive
    def cube(z):
        return z ** 3

    def rules(conj):
        @ad.rrule.register(cube, complex=True)
        def cube_rrule(z):
            d = 3 * z ** 2
            return z ** 3, lambda g: (ad.NoTangent(), g * (np.conj(d) if conj else d))

        @ad.frule.register(cube, complex=True)
        def cube_frule(tangents, z):
            return z ** 3, 3 * z ** 2 * tangents[1]

    try:
        rules(conj=False)
        with pytest.raises(AssertionError, match="cotangent"):
            checks.check_rrule(cube, Z(3))
        with pytest.warns(UserWarning, match="registered again"):  # (on purpose: the right rule now)
            rules(conj=True)
        checks.check_both(cube, Z(3))
    finally:
        registry.rrule.rules.pop(cube, None)
        registry.frule.rules.pop(cube, None)


def test_the_gauge_blind_checks_still_see_the_eigenvectors():
    """The checks with an eigenvector gauge fail an eig rule that drops the eigenvectors'
    cotangent or tangent (all that the gauge leaves of them still counts), and pass eig's."""
    @ad.primitive
    def eig_of(a):
        return np.linalg.eig(a)

    def rules(drop):
        @ad.rrule.register(eig_of, complex=True)
        def eig_of_rrule(a):
            y, back = ad.rrule(np.linalg.eig, a)
            return y, lambda g: back((g[0], ad.ZeroTangent()) if drop else g)

        @ad.frule.register(eig_of, complex=True)
        def eig_of_frule(tangents, a):
            y, (dw, dv) = ad.frule((ad.NoTangent(), tangents[1]), np.linalg.eig, a)
            return y, (dw, np.zeros_like(dv) if drop else dv)

    a = Z(3, 3)
    try:
        rules(drop=True)
        with pytest.raises(AssertionError, match="cotangent"):
            checks.check_rrule(eig_of, a, gauge=checks.eig_gauge)
        with pytest.raises(AssertionError, match="tangent of output 1"):
            checks.check_frule(eig_of, a, gauge=checks.eig_gauge)
        with pytest.warns(UserWarning, match="registered again"):  # (on purpose: the right rule now)
            rules(drop=False)
        checks.check_rrule(eig_of, a, gauge=checks.eig_gauge)
        checks.check_frule(eig_of, a, gauge=checks.eig_gauge)
    finally:
        registry.rrule.rules.pop(eig_of, None)
        registry.frule.rules.pop(eig_of, None)
