"""Random NumPy programs: compositions of registered functions on random shapes, with
options passed positionally or by keyword at random, of an array ``x`` and a parameter ``w``. The gradient and the jvp are
compared with finite differences and with each other (<∇f, v> = jvp(f, v)).

Hypothesis draws the program once (ops, axes, how each option is passed) and the test
runs it many times; the search is derandomized so CI sees the same programs each run.
"""

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adrules as ad
from adrules.testing import check_grads

# ---- elementwise steps (smooth on the values these programs produce) ----------------------------
ELEMENTWISE = {
    "sin": np.sin, "tanh": np.tanh, "arctan": np.arctan, "square": lambda x: x * x,
    "gauss": lambda x: np.exp(-x * x), "softplus": lambda x: np.logaddexp(x, 0.0),
    "hypot": lambda x: np.hypot(x, 1.0), "sinc": np.sinc, "log1p_sq": lambda x: np.log1p(x * x),
    "degrees": lambda x: np.radians(np.degrees(x) * 0.5), "sqrt": lambda x: np.sqrt(x * x + 1.0),
    "expit_like": lambda x: 1.0 / (1.0 + np.exp(-x)), "cbrt": lambda x: np.cbrt(x + 3.0),
}


def _axis(data, ndim):
    return data.draw(st.integers(-ndim, ndim - 1), label="axis")


def _by_keyword(data):
    return data.draw(st.booleans(), label="keyword")


def _call(f, x, positional, keywords, data):
    """``f(x, *options)`` with the options given positionally or by keyword (at random)."""
    if _by_keyword(data):
        return lambda v: f(v, **keywords)
    return lambda v: f(v, *positional)


def _step(data, shape):
    """One program step for an input of ``shape``: (label, function, output shape)."""
    ndim = len(shape)
    choices = ["elementwise", "scale"]
    if ndim >= 1:
        choices += ["sum", "mean", "cumsum", "diff", "flip", "roll", "sort", "quantile", "max", "var",
                    "gradient", "trapezoid", "pad", "take"]
    if ndim >= 2:
        choices += ["transpose", "rot90", "matmul_t", "einsum_diag_free"]
    kind = data.draw(st.sampled_from(choices), label="op")
    if kind == "elementwise":
        name = data.draw(st.sampled_from(sorted(ELEMENTWISE)), label="fn")
        return name, ELEMENTWISE[name], shape
    if kind == "scale":
        w = np.linspace(0.5, 1.5, int(np.prod(shape[-1:]) if shape else 1)).reshape(shape[-1:])
        return "scale", lambda v: v * w + 0.1, shape
    axis = _axis(data, ndim)
    out = shape[:axis % ndim] + shape[axis % ndim + 1:]
    if kind in ("sum", "mean", "max", "var"):
        keepdims = data.draw(st.booleans(), label="keepdims")
        f = {"sum": np.sum, "mean": np.mean, "max": np.max, "var": np.var}[kind]
        kept = shape[:axis % ndim] + (1,) + shape[axis % ndim + 1:] if keepdims else out
        if _by_keyword(data):
            return f"{kind}(axis={axis}, keepdims={keepdims})", lambda v: f(v, axis=axis, keepdims=keepdims), kept
        return f"{kind}({axis}, keepdims={keepdims})", lambda v: f(v, axis, keepdims=keepdims), kept
    if kind == "cumsum":
        return f"cumsum({axis})", _call(np.cumsum, None, (axis,), {"axis": axis}, data), shape
    if kind == "diff" and shape[axis % ndim] >= 2:
        grown = shape[:axis % ndim] + (shape[axis % ndim] - 1,) + shape[axis % ndim + 1:]
        return f"diff(axis={axis})", _call(np.diff, None, (1, axis), {"axis": axis}, data), grown
    if kind == "flip":
        return f"flip({axis})", _call(np.flip, None, (axis,), {"axis": axis}, data), shape
    if kind == "roll":
        return f"roll(1, {axis})", _call(np.roll, None, (1, axis), {"shift": 1, "axis": axis}, data), shape
    if kind == "sort":
        return f"sort({axis})", _call(np.sort, None, (axis,), {"axis": axis}, data), shape
    if kind == "quantile":
        return f"quantile(0.37, {axis})", _call(np.quantile, None, (0.37, axis), {"q": 0.37, "axis": axis}, data), out
    if kind == "gradient" and shape[axis % ndim] >= 2:
        return f"gradient(axis={axis})", lambda v: np.gradient(v, axis=axis), shape
    if kind == "trapezoid":
        trapezoid = np.trapezoid if hasattr(np, "trapezoid") else np.trapz
        return f"trapezoid({axis})", _call(trapezoid, None, (None, 0.5, axis), {"dx": 0.5, "axis": axis}, data), out
    if kind == "pad":
        mode = data.draw(st.sampled_from(["constant", "edge", "wrap", "reflect", "symmetric"]), label="mode")
        grown = tuple(n + 2 for n in shape)
        return f"pad(1, {mode})", _call(np.pad, None, (1, mode), {"pad_width": 1, "mode": mode}, data), grown
    if kind == "take":
        idx = np.array([0, shape[axis % ndim] - 1, 0])
        grown = shape[:axis % ndim] + (3,) + shape[axis % ndim + 1:]
        return f"take({idx.tolist()}, {axis})", lambda v: np.take(v, idx, axis), grown
    if kind == "transpose":
        return "transpose", np.transpose, shape[::-1]
    if kind == "rot90":
        return "rot90", np.rot90, (shape[1], shape[0]) + shape[2:]
    if kind == "matmul_t":
        return "v @ v^T", lambda v: v @ np.swapaxes(v, -1, -2), shape[:-1] + (shape[-2],)
    if kind == "einsum_diag_free":
        return "einsum(...ij->...j)", lambda v: np.einsum("...ij->...j", v), shape[:-2] + shape[-1:]
    return "identity", lambda v: v, shape


@st.composite
def programs(draw):
    shape = tuple(draw(st.lists(st.integers(1, 3), min_size=1, max_size=3), label="shape"))
    data = draw(st.data())
    steps, current = [], shape
    for _ in range(draw(st.integers(1, 4), label="length")):
        label, fn, current = _step(data, current)
        steps.append((label, fn))
    mixes = [draw(st.one_of(st.none(), st.sampled_from(sorted(WITH_PARAMETER))), label="mix") for _ in steps]
    seed = draw(st.integers(0, 2 ** 16), label="seed")
    return shape, steps, mixes, seed


# Steps that bring in the second argument ``w`` (a 0-d parameter).
WITH_PARAMETER = {
    "times_w": lambda v, w: v * w, "plus_w_sq": lambda v, w: v + w * w,
    "tanh_vw": lambda v, w: np.tanh(v - w), "where_w": lambda v, w: np.where(v > 0.3, v * w, v),
    "logaddexp_w": lambda v, w: np.logaddexp(v, w), "clip_w": lambda v, w: np.clip(v, w - 2.0, w + 2.0),
}


def _run(steps, mixes):
    def program(x, w):
        for (_, fn), mix in zip(steps, mixes):
            x = fn(x)
            if mix is not None:
                x = WITH_PARAMETER[mix](x, w)
        return np.sum(np.sin(x) * 0.7 + x)  # scalar, and nonlinear in the last step's output

    return program


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_random_program_gradients_and_jvps(program):
    shape, steps, mixes, seed = program
    rng = np.random.default_rng(seed)
    x = rng.permutation(int(np.prod(shape))).reshape(shape) * 0.3 / max(np.prod(shape), 1) + rng.uniform(0.2, 0.3)
    w = np.float64(rng.uniform(0.5, 1.5))
    f = _run(steps, mixes)
    check_grads(f, x, w, order=1)
    v, u = rng.uniform(-1.0, 1.0, size=shape), rng.uniform(-1.0, 1.0)
    gx, gw = ad.gradient(f, x, w)
    _, dy = ad.jvp(f, (x, w), (v, u))
    np.testing.assert_allclose(np.sum(gx * v) + gw * u, dy, rtol=1e-9, atol=1e-12,
                               err_msg=" -> ".join(label for label, _ in steps))
