"""The tracer's short path for operators and ufunc calls is ``apply`` specialised.

``x * y``, ``np.sin(x)``, ``2.0 - x`` go through ``tracer._binary`` / ``tracer._ufunc_call``,
which open the boxes of a scalar rule's call without ``apply``'s general search. Random
programs of such operations are differentiated twice, once as users run them and once
with those two functions replaced by plain calls of ``apply`` (the reference path every
other operation takes): values, gradients and jvps must agree, and the gradient must
match central finite differences, so that both paths are checked against something
neither computed.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adrules as ad
from adrules import tracer

# (name, how many traced operands, the operation): operands are the running value v, the
# second input w, and constants (a float, a list, an array)
OPERATIONS = {
    "v * w": lambda v, w: v * w, "w * v": lambda v, w: w * v, "v * v": lambda v, w: v * v,
    "v + 0.5": lambda v, w: v + 0.5, "0.5 - v": lambda v, w: 0.5 - v, "v - w": lambda v, w: v - w,
    "v / (1 + w * w)": lambda v, w: v / (1.0 + w * w), "2 / (1 + v * v)": lambda v, w: 2.0 / (1.0 + v * v),
    "v ** 2": lambda v, w: v ** 2, "v ** 3": lambda v, w: v ** 3, "-v": lambda v, w: -v,
    "sin(v)": lambda v, w: np.sin(v), "tanh(v)": lambda v, w: np.tanh(v), "exp(-v*v)": lambda v, w: np.exp(-v * v),
    "np.add(v, w)": lambda v, w: np.add(v, w), "np.multiply(v, 0.3)": lambda v, w: np.multiply(v, 0.3),
    "hypot(v, w)": lambda v, w: np.hypot(v, w), "maximum(v, w)": lambda v, w: np.maximum(v, w),
    "v * list": lambda v, w: v * np.full(np.shape(v), 1.5).tolist(),
    "v * ones": lambda v, w: v * np.full(np.shape(v), 1.5),
    "abs(v)": lambda v, w: abs(v), "+v": lambda v, w: +v,
}


@st.composite
def programs(draw):
    names = draw(st.lists(st.sampled_from(sorted(OPERATIONS)), min_size=1, max_size=8), label="ops")
    shape = draw(st.sampled_from([(), (1,), (3,), (2, 2)]), label="shape")
    scalar_w = draw(st.booleans(), label="w is a float")
    seed = draw(st.integers(0, 2 ** 16), label="seed")
    return names, shape, scalar_w, seed


def _program(names):
    def f(x, w):
        v = x
        for name in names:
            v = OPERATIONS[name](v, w)
        return np.sum(v * 0.7 + np.sin(v))

    return f


def _through_apply(monkeypatch):
    """The reference path: every operator and ufunc call through ``apply``."""
    monkeypatch.setattr(tracer, "_binary", lambda f, a, b: tracer.apply(f, (a, b), {}))
    monkeypatch.setattr(tracer, "_ufunc_call", lambda f, args: tracer.apply(f, args, {}))


def _finite_difference(f, x, w, dx, dw, h=1e-6):
    return (f(x + h * dx, w + h * dw) - f(x - h * dx, w - h * dw)) / (2 * h)


@settings(max_examples=60, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
@given(programs())
def test_short_path_gives_the_reference_paths_values_and_derivatives(monkeypatch, program):
    names, shape, scalar_w, seed = program
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.3, 0.9, size=shape) if shape else float(rng.uniform(0.3, 0.9))
    w = float(rng.uniform(0.4, 1.2)) if scalar_w else rng.uniform(0.4, 1.2, size=shape)
    dx, dw = np.ones_like(x) * 0.7, np.ones_like(w) * -0.4
    f = _program(names)

    value, (gx, gw) = ad.value_and_gradient(f, x, w)
    _, dy = ad.jvp(f, (x, w), (dx, dw))
    with monkeypatch.context() as m:
        _through_apply(m)
        ref_value, (ref_gx, ref_gw) = ad.value_and_gradient(f, x, w)
        _, ref_dy = ad.jvp(f, (x, w), (dx, dw))

    label = " -> ".join(names)
    np.testing.assert_allclose(value, ref_value, rtol=1e-14, err_msg=label)
    np.testing.assert_allclose(gx, ref_gx, rtol=1e-12, atol=1e-14, err_msg=label)
    np.testing.assert_allclose(gw, ref_gw, rtol=1e-12, atol=1e-14, err_msg=label)
    np.testing.assert_allclose(dy, ref_dy, rtol=1e-12, atol=1e-14, err_msg=label)
    expected = _finite_difference(f, x, w, dx, dw)
    np.testing.assert_allclose(np.sum(gx * dx) + np.sum(gw * dw), expected, rtol=1e-5, atol=1e-7, err_msg=label)
    np.testing.assert_allclose(dy, expected, rtol=1e-5, atol=1e-7, err_msg=label)


def test_the_reference_path_is_taken_when_patched(monkeypatch):
    """The comparison above means something only if the patch reroutes operators."""
    seen = []
    real_apply = tracer.apply

    def counting_apply(f, args, kwargs, **options):
        seen.append(f)
        return real_apply(f, args, kwargs, **options)

    _through_apply(monkeypatch)
    monkeypatch.setattr(tracer, "apply", counting_apply)
    ad.gradient(lambda x: np.sin(x * 2.0), 0.5)
    assert seen[:2] == [np.multiply, np.sin]


@pytest.mark.parametrize("op", [lambda x: x * x, lambda x: x ** 2, lambda x: np.square(x)])
def test_squares_agree_with_the_derivative_2x(op):
    x = np.array([0.3, -1.2, 2.5])
    (g,) = ad.gradient(lambda v: np.sum(op(v)), x)
    np.testing.assert_allclose(g, 2 * x, rtol=1e-15)
