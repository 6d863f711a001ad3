"""Every registered NumPy function called with its arguments passed by keyword.

For each case and each position k whose parameter may be given by keyword, the call
passes ``args[:k]`` positionally and ``args[k:]`` by keyword; the gradient and the jvp
with respect to every float argument are compared with finite differences
(``check_grads``, both modes). A registered function whose parameters can be keywords
must have a case here (``test_every_registered_function_has_a_case``).
"""

import inspect

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_grads


def R(*shape, seed=0):
    return np.random.default_rng(seed).uniform(0.5, 1.5, size=shape)


def SPD(n=3):
    a = R(n, n, seed=7)
    return a @ a.T + np.diag(np.arange(n) * 3.0 + n)  # eigenvalues apart


def DISTINCT(*shape):
    return np.random.default_rng(3).permutation(int(np.prod(shape))).reshape(shape) * 0.1 + 0.05


CASES = [
    (np.sum, (R(2, 3), 1, None, None, True)), (np.mean, (R(2, 3), 0, None, None, True)),
    (np.prod, (R(2, 3), 1)), (np.max, (DISTINCT(2, 3), 1)), (np.min, (DISTINCT(2, 3), 0)),
    (np.amax, (DISTINCT(2, 3), 1)), (np.amin, (DISTINCT(2, 3), 1)),
    (np.var, (R(2, 3), 1, None, None, 1)), (np.std, (R(2, 3), 0, None, None, 0, True)),
    (np.nansum, (R(2, 3), 1)), (np.nanmean, (R(2, 3), 1)), (np.nanmax, (DISTINCT(2, 3), 1)),
    (np.nanmin, (DISTINCT(2, 3), 1)), (np.nanprod, (R(2, 3), 1)), (np.nanvar, (R(2, 3), 1, None, None, 1)),
    (np.nanstd, (R(2, 3), 1)), (np.nancumsum, (R(2, 3), 1)), (np.nancumprod, (R(2, 3), 1)),
    (np.nanmedian, (DISTINCT(2, 3), 1)), (np.nanquantile, (DISTINCT(2, 5), 0.31, 1)),
    (np.nanpercentile, (DISTINCT(2, 5), 31.0, 1)), (np.median, (DISTINCT(2, 3), 1)),
    (np.quantile, (DISTINCT(2, 5), 0.31, 1)), (np.percentile, (DISTINCT(2, 5), 31.0, 1)),
    (np.ptp, (DISTINCT(2, 3), 1)), (np.average, (R(2, 3), 1, R(3, seed=1))),
    (np.cumsum, (R(2, 3), 1)), (np.cumprod, (R(2, 3), 1)), (np.trace, (R(3, 3), 1, 0, 1)),
    (np.diff, (R(2, 4), 1, 0)), (np.ediff1d, (R(4), R(1, seed=1), R(2, seed=2))),
    (np.gradient, (R(5),)), (np.trapezoid if hasattr(np, "trapezoid") else np.trapz, (R(2, 4), R(4, seed=1), 1.0, 1)),
    (np.interp, (np.array([0.2, 1.3]), np.array([0.0, 1.0, 2.0]), R(3, seed=1))),
    (np.convolve, (R(4), R(2, seed=1), "same")), (np.correlate, (R(4), R(2, seed=1), "full")),
    (np.cross, (R(2, 3), R(3, seed=1))), (np.clip, (R(2, 3), 0.7, 1.2)),
    (np.where, (R(2, 3) > 1.0, R(2, 3, seed=1), R(3, seed=2))),
    (np.bincount, (np.array([0, 2, 2, 1]), R(4), 5)),
    (np.histogram, (R(8), np.array([0.5, 0.8, 1.1, 1.5]), None, True, R(8, seed=1))),
    (np.histogram_bin_edges, (R(8), 4, None, R(8, seed=1))),
    (np.histogramdd, (R(8, 2), [np.array([0.5, 1.0, 1.5]), 2], None, True, R(8, seed=2))),
    (np.take, (R(2, 3), np.array([0, 2, 0]), 1)), (np.take_along_axis, (R(2, 3), np.array([[0, 2], [1, 1]]), 1)),
    (np.choose, (np.array([0, 1, 0]), [R(3), R(3, seed=1)])),
    (np.select, ([R(3) > 1.0], [R(3, seed=1)], 0.5)),
    (np.dot, (R(2, 3), R(3, seed=1))), (np.vdot, (R(3), R(3, seed=1))), (np.inner, (R(2, 3), R(3, seed=1))),
    (np.outer, (R(2), R(3, seed=1))), (np.tensordot, (R(2, 3), R(3, 2, seed=1), 1)), (np.kron, (R(2), R(2, 2, seed=1))),
    (np.einsum, ("ij,j->i", R(2, 3), R(3, seed=1))),
    (np.linalg.solve, (SPD(), R(3, seed=1))), (np.linalg.inv, (SPD(),)), (np.linalg.det, (SPD(),)),
    (np.linalg.slogdet, (SPD(),)), (np.linalg.cholesky, (SPD(),)), (np.linalg.eigh, (SPD(), "U")),
    (np.linalg.eigvalsh, (SPD(), "L")), (np.linalg.norm, (R(2, 3), None, 1)), (np.linalg.qr, (R(3, 2),)),
    (np.linalg.svd, (R(3, 2), False)),
    # real eigenvalues apart (NumPy returns real arrays): the eigenvectors' sign is their only gauge
    (np.linalg.eig, (np.diag([1.0, 2.0, 3.5]) + 0.2 * R(3, 3, seed=2),)),
    (np.linalg.eigvals, (np.diag([1.0, 2.0, 3.5]) + 0.2 * R(3, 3, seed=2),)),
    (np.linalg.pinv, (R(3, 2),)), (np.linalg.lstsq, (R(3, 2), R(3, seed=1))),
    (np.linalg.matrix_power, (SPD(), 2)), (np.linalg.multi_dot, ([R(2, 3), R(3, 2, seed=1)],)),
    (np.linalg.cond, (SPD(), "fro")), (np.linalg.tensorinv, (np.reshape(SPD(4), (2, 2, 4)), 2)),
    (np.linalg.tensorsolve, (np.reshape(SPD(4), (2, 2, 2, 2)), R(2, 2, seed=1))),
    (np.reshape, (R(2, 3), (3, 2))), (np.ravel, (R(2, 3), "F")), (np.transpose, (R(2, 3, 4), (2, 0, 1))),
    (np.swapaxes, (R(2, 3), 0, 1)), (np.moveaxis, (R(2, 3, 4), 0, 2)), (np.rollaxis, (R(2, 3, 4), 2, 0)),
    (np.expand_dims, (R(2, 3), 1)), (np.squeeze, (R(2, 1, 3), 1)), (np.broadcast_to, (R(3), (2, 3))),
    (np.concatenate, ([R(2, 3), R(1, 3, seed=1)], 0)), (np.stack, ([R(3), R(3, seed=1)], 1)),
    (np.split, (R(4, 2), 2, 0)), (np.array_split, (R(5), 2)), (np.hsplit, (R(2, 4), 2)), (np.vsplit, (R(4, 2), 2)),
    (np.dsplit, (R(1, 2, 4), 2)), (np.tile, (R(2), (2, 2))), (np.repeat, (R(3), 2, 0)), (np.flip, (R(2, 3), 1)),
    (np.fliplr, (R(2, 3),)), (np.flipud, (R(2, 3),)), (np.roll, (R(2, 3), 1, 1)), (np.rot90, (R(2, 3), 1, (0, 1))),
    (np.insert, (R(2, 3), 1, R(3), 0)), (np.resize, (R(2, 3), (3, 3))),
    (np.lib.stride_tricks.sliding_window_view, (R(3, 4), (2, 2), (0, 1))),
    (np.pad, (R(2, 3), 1, "wrap")), (np.diag, (R(3), 1)), (np.diagonal, (R(3, 3), 1, 0, 1)),
    (np.tril, (R(3, 3), -1)), (np.triu, (R(3, 3), 1)), (np.append, (R(2, 3), R(1, 3, seed=1), 0)),
    (np.sort, (DISTINCT(2, 3), 1)), (np.partition, (DISTINCT(2, 4), 1, 1)), (np.copy, (R(2, 3),)),
    (np.real, (R(3),)), (np.imag, (R(3),)), (np.angle, (R(3), True)), (np.real_if_close, (R(3),)),
    (np.nan_to_num, (R(3), True, 0.0)), (np.sinc, (R(3),)),
    (np.linspace, (R(2), R(2, seed=1) + 2.0, 4, True, False, None, 1)),
    (np.meshgrid, (R(2), R(3, seed=1))), (np.cov, (R(2, 4), R(4, seed=1), True, False, 1)),
    (np.corrcoef, (R(2, 4), R(4, seed=1), True)), (np.polyval, (R(3), R(2, seed=1))),
    (np.vander, (R(3), 4, True)), (np.diagflat, (R(2), 1)), (np.full_like, (R(2, 3), 1.5)),
    (np.logspace, (0.5, 1.5, 4, True, 2.0)), (np.compress, (np.array([True, False, True]), R(2, 3), 1)),
    (np.extract, (np.array([True, False, True]), R(3))), (np.delete, (R(2, 3), 1, 1)),
    (np.polyadd, (R(3), R(2, seed=1))), (np.polysub, (R(3), R(2, seed=1))), (np.polymul, (R(3), R(2, seed=1))),
    (np.polyder, (R(4), 2)), (np.polyint, (R(3), 2, R(2, seed=1))), (np.geomspace, (R(2), R(2, seed=1) + 2.0, 4)),
    (np.unwrap, (np.array([0.1, 3.0, 6.5, -3.0]), 2.0, 0)), (np.i0, (R(3),)), (np.poly, (R(3),)),
    (np.polyfit, (np.linspace(0.0, 1.0, 5), R(5), 2, None, False, R(5, seed=1))),
    (np.trim_zeros, (R(2, 3), "fb", 1)),  # no zeros: finite differences would move the edges
    (np.fft.fft, (R(4), 6, 0, "ortho")), (np.fft.ifft, (R(4), 3, -1, "forward")),
    (np.fft.rfft, (R(5), 6, 0, "ortho")), (np.fft.irfft, (R(4), 5, 0, "forward")),
    (np.fft.hfft, (R(3), 4, -1, "ortho")), (np.fft.ihfft, (R(5), None, 0, "backward")),
    (np.fft.fftn, (R(2, 3), (3, 2), (0, 1), "ortho")), (np.fft.ifftn, (R(2, 3), None, (1,), "forward")),
    (np.fft.rfftn, (R(2, 4), (2, 5), (0, 1), "ortho")), (np.fft.irfftn, (R(2, 3), (2, 4), (0, 1), "ortho")),
    (np.fft.fft2, (R(2, 3), (3, 3), (0, 1), "forward")), (np.fft.ifft2, (R(2, 3), None, (0, 1), "ortho")),
    (np.fft.rfft2, (R(2, 4), None, (0, 1), "ortho")), (np.fft.irfft2, (R(2, 3), (2, 4), (0, 1), "forward")),
    (np.fft.fftshift, (R(2, 3), 1)), (np.fft.ifftshift, (R(2, 3), (0, 1))),
]

# Registered functions without a case here: all their parameters are positional-only or
# variadic (nothing to pass by keyword), or their only keyword-able parameters are
# options the cases above already cover through a sibling.
NO_KEYWORDS = {
    "numpy.atleast_1d", "numpy.atleast_2d", "numpy.atleast_3d", "numpy.column_stack", "numpy.hstack",
    "numpy.vstack", "numpy.dstack", "numpy.astype", "numpy.cumulative_sum", "numpy.cumulative_prod",
}


# Arguments NumPy's dispatcher does not look at: traced alone, they never reach the tracer
# (NumPy runs its own code on them), whatever the calling convention.
NOT_DISPATCHED = {(np.nan_to_num, 2), (np.select, 2), (np.full_like, 1), (np.polyint, 2), (np.unwrap, 1)}


def _keywordable(f):
    try:
        params = list(inspect.signature(f).parameters.values())
    except (TypeError, ValueError):
        return []
    return [p.name if p.kind is p.POSITIONAL_OR_KEYWORD else None for p in params
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]


def _is_float(a):
    if isinstance(a, (list, tuple)):
        return any(_is_float(x) for x in a)
    return isinstance(a, float) or isinstance(a, np.ndarray) and a.dtype.kind == "f"


def _splits():
    """(f, args, k, traced): keywords from position k; ``traced`` the float arguments that
    are differentiated (all of them, then each alone so the others are constants)."""
    for f, args in CASES:
        names = _keywordable(f)
        floats = [i for i, a in enumerate(args) if _is_float(a)]
        subsets = [tuple(floats)] + ([(i,) for i in floats if (f, i) not in NOT_DISPATCHED]
                                     if len(floats) > 1 else [])
        for k in range(len(args)):
            if k < len(names) and names[k] is not None:
                for traced in subsets:
                    label = "all" if len(subsets) == 1 or len(traced) > 1 else f"only-{names[traced[0]] or traced[0]}"
                    yield pytest.param(f, args, k, traced,
                                       id=f"{ad.registry.function_name(f)}-from-{names[k]}-{label}")


@pytest.mark.parametrize("f, args, k, traced", list(_splits()))
def test_arguments_by_keyword(f, args, k, traced):
    names = _keywordable(f)

    def call(*floats):
        full = list(args)
        for i, v in zip(traced, floats):
            full[i] = v
        return f(*full[:k], **{names[j]: full[j] for j in range(k, len(full))})

    check_grads(call, *(args[i] for i in traced), order=1)


def test_every_registered_function_has_a_case():
    covered = {f for f, _ in CASES}
    missing = []
    for f, entry in ad.rrule.rules.items():
        if entry.name.startswith("numpy") and getattr(entry, "kind", None) != "nondiff" \
                and not isinstance(f, np.ufunc) and not isinstance(getattr(f, "__self__", None), np.ufunc) \
                and f not in covered and entry.name not in NO_KEYWORDS and any(_keywordable(f)):
            missing.append(entry.name)
    assert not missing, f"add keyword cases for {sorted(missing)}"


# ---- binding: keywords out of order, gaps, aliases, direct rule calls ----------------------------

X = np.arange(1.0, 7.0).reshape(2, 3)


def test_clip_min_max_aliases_in_both_modes():
    """``np.clip(v, min=, max=)`` (NumPy 2's aliases of a_min/a_max): d/dv sum(clip(v)²) is
    2v strictly inside the bounds, 0 outside."""
    f = lambda v: np.sum(np.clip(v, min=2.5, max=4.5) ** 2)  # noqa: E731
    inside = (X > 2.5) & (X < 4.5)
    np.testing.assert_allclose(ad.gradient(f, X)[0], np.where(inside, 2 * X, 0.0))
    _, dy = ad.jvp(f, (X,), (np.ones_like(X),))
    assert dy == pytest.approx(np.sum(2 * X[inside]))
    g = lambda v: np.sum(np.clip(v, min=2.5))  # noqa: E731  (max alone defaults to None)
    np.testing.assert_allclose(ad.gradient(g, X)[0], (X > 2.5).astype(float))


def test_keywords_out_of_order_and_skipping_positions():
    idx = np.array([0, 2, 2])
    f = lambda v: np.sum(np.take(v, mode="clip", axis=1, indices=idx) ** 2)  # noqa: E731
    expected = np.zeros_like(X)
    for j in idx:  # hand math: each pick of column j adds 2 v[:, j]
        expected[:, j] += 2 * X[:, j]
    np.testing.assert_allclose(ad.gradient(f, X)[0], expected)
    _, dy = ad.jvp(f, (X,), (np.ones_like(X),))
    assert dy == pytest.approx(np.sum(expected))
    # a traced keyword after a skipped parameter (axis) is moved too
    w = np.array([1.0, 2.0, 3.0])
    (gx, gw) = ad.gradient(lambda v, u: np.average(v[0], weights=u), X, w)
    np.testing.assert_allclose(gx[0], w / w.sum())
    np.testing.assert_allclose(gw, (X[0] - np.average(X[0], weights=w)) / w.sum())


def test_trailing_options_stay_keywords():
    mask = X > 2.0
    f = lambda v: np.sum(v * v, where=mask, keepdims=True)[0, 0]  # noqa: E731
    np.testing.assert_allclose(ad.gradient(f, X)[0], np.where(mask, 2 * X, 0.0))
    check_grads(f, X, order=2)


def test_direct_rule_calls_bind_keywords():
    """``ad.rrule``/``ad.frule`` called directly: keywords reach the rule at their
    positions, and the pullback has one slot per argument passed positionally."""
    idx = np.array([1, 1])
    y, back = ad.rrule(np.take, X[0], indices=idx)
    np.testing.assert_array_equal(y, [2.0, 2.0])
    slots = back(np.array([1.0, 10.0]))
    assert len(slots) == 2
    np.testing.assert_array_equal(ad.unthunk(slots[1]), [0.0, 11.0, 0.0])
    y, dy = ad.frule((ad.NoTangent(), np.array([1.0, 2.0, 3.0])), np.dot, X[0], b=np.ones(3))
    assert (y, dy) == (6.0, 6.0)


def test_traced_keyword_only_argument_names_function_and_fix():
    with pytest.raises(TypeError, match=r"numpy\.concatenate: keyword argument 'dtype'.*positional"):
        ad.gradient(lambda v: np.sum(np.concatenate([v], dtype=v)), X)


def _documented(name, line):
    """A stand-in for a NumPy C function with no introspectable signature."""
    class CFunction:
        __module__ = "numpy"
        __signature__ = "none to read"  # inspect.signature raises, as for a C function

        def __call__(self, *args, **kwargs):
            raise AssertionError("only its signature is read")

    f = CFunction()
    f.__name__, f.__doc__ = name, f"{line}\n\n    Some description.\n"
    return f


def test_signature_read_from_a_numpy_docstring_without_running_it():
    from adrules.keywords import documented_parameters, keywords_to_positions

    f = _documented("bincount", "bincount(x, /, weights=None, minlength=0)")
    assert keywords_to_positions(f, ("x",), {"minlength": 3}) == (("x", None, 3), {})
    g = _documented("fromstring", "fromstring(string, dtype=float, count=-1, *, sep, like=None)")
    params = documented_parameters(g)
    assert [(p.name, p.kind.name, p.default) for p in params] == [
        ("string", "POSITIONAL_OR_KEYWORD", inspect.Parameter.empty), ("dtype", "POSITIONAL_OR_KEYWORD", float),
        ("count", "POSITIONAL_OR_KEYWORD", -1), ("sep", "KEYWORD_ONLY", inspect.Parameter.empty),
        ("like", "KEYWORD_ONLY", None)]
    assert keywords_to_positions(g, ("s",), {"count": 2, "sep": ","}) == (("s", float, 2), {"sep": ","})


@pytest.mark.parametrize("line", [
    "evil(x, y=__import__('os').system('exit 1'))",  # a call: read as text, never run
    "evil(x, y=<no value>)",  # not Python at all
    "evil(x, y=somewhere.else_)",  # a name that is neither a builtin nor NumPy's
])
def test_a_docstring_signature_that_is_not_constants_is_not_used(line):
    from adrules.keywords import documented_parameters, keywords_to_positions

    f = _documented("evil", line)
    assert documented_parameters(f) is None
    assert keywords_to_positions(f, (1.0,), {"y": 2.0}) == ((1.0,), {"y": 2.0})


def test_a_scalar_rules_partials_get_the_defaults_of_positional_only_parameters():
    @ad.primitive
    def scaled_square(x, a=3.0, /):
        return a * x * x

    ad.scalar_rule(scaled_square, lambda x, a, y: 2.0 * a * x, lambda x, a, y: x * x)
    x = np.array([0.5, -2.0])
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(scaled_square(v)), x)[0], 6.0 * x)
    np.testing.assert_allclose(ad.jvp(scaled_square, (x,), (np.ones(2),))[1], 6.0 * x)
