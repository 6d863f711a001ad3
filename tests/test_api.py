"""gradient, value_and_gradient, pullback, rrule_via_ad, frule_via_ad, jvp (and the
jacobian / hessian / hvp of the public contract)."""

from typing import NamedTuple

import numpy as np
import pytest

import adrules as ad
from adrules.tracer import Traced


def num_grad(f, x, h=1e-6):
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def rosenbrock(x):
    return np.sum(100.0 * (x[1:] - x[:-1] ** 2) ** 2 + (1.0 - x[:-1]) ** 2)


def rosenbrock_grad(x):
    g = np.zeros_like(x)
    g[:-1] = -400.0 * x[:-1] * (x[1:] - x[:-1] ** 2) - 2.0 * (1.0 - x[:-1])
    g[1:] += 200.0 * (x[1:] - x[:-1] ** 2)
    return g


# ---- gradient and value_and_gradient ---------------------------------------------------

def test_gradient_returns_one_gradient_per_argument():
    grads = ad.gradient(lambda a, b, c: a * b * c, 2.0, 3.0, 5.0)
    assert isinstance(grads, tuple) and len(grads) == 3
    assert grads == (15.0, 10.0, 6.0)


def test_gradient_of_rosenbrock_against_hand_derivation():
    x = np.array([-1.2, 1.0, 0.7, 2.0])
    (g,) = ad.gradient(rosenbrock, x)
    np.testing.assert_allclose(g, rosenbrock_grad(x), rtol=1e-12)


def test_gradient_elementwise_against_finite_differences():
    f = lambda x, y: np.sum(np.sin(x) * np.exp(y / (1.0 + x * x)))  # noqa: E731
    x = np.array([0.3, -1.1, 2.0])
    y = np.array([1.5, 0.2, -0.4])
    gx, gy = ad.gradient(f, x, y)
    np.testing.assert_allclose(gx, num_grad(lambda x: f(x, y), x), rtol=1e-7)
    np.testing.assert_allclose(gy, num_grad(lambda y: f(x, y), y), rtol=1e-7)


def test_value_and_gradient():
    x = np.array([-1.2, 1.0, 0.7])
    value, (g,) = ad.value_and_gradient(rosenbrock, x)
    assert type(value) is not Traced
    assert value == pytest.approx(rosenbrock(x), rel=1e-14)
    np.testing.assert_allclose(g, rosenbrock_grad(x), rtol=1e-12)


def test_value_and_gradient_of_python_floats():
    value, grads = ad.value_and_gradient(lambda a, b: a ** 2 * b, 3.0, 2.0)
    assert value == 18.0
    assert grads == (12.0, 9.0)


def test_gradient_of_function_not_depending_on_input_is_zero():
    value, (g,) = ad.value_and_gradient(lambda x: 4.0, np.ones(3))
    assert value == 4.0
    np.testing.assert_array_equal(g, np.zeros(3))


def test_gradient_does_not_mutate_inputs():
    x = np.array([1.0, 2.0, 3.0])
    before = x.copy()
    ad.gradient(lambda x: np.sum(x * x), x)
    np.testing.assert_array_equal(x, before)


def test_gradient_arrays_are_not_aliased_to_inputs():
    x = np.array([1.0, 2.0])
    (g,) = ad.gradient(lambda x: np.sum(x), x)
    assert not np.shares_memory(g, x)


def test_gradient_of_function_with_numpy_scalar_output_of_0d_array():
    (g,) = ad.gradient(lambda x: np.sum(x * x, keepdims=False), np.array(3.0))
    assert np.shape(g) == ()
    assert float(g) == 6.0


# ---- pullback ----------------------------------------------------------------------------

def test_pullback_of_array_output():
    x = np.array([0.5, 1.0, 2.0])
    y, back = ad.pullback(lambda x: np.exp(x) * x, x)
    assert type(y) is np.ndarray
    np.testing.assert_allclose(y, np.exp(x) * x)
    ybar = np.array([1.0, -2.0, 0.5])
    (g,) = back(ybar)
    np.testing.assert_allclose(g, ybar * np.exp(x) * (1 + x))


def test_pullback_can_be_called_twice():
    x = np.array([0.5, 1.0, 2.0])
    y, back = ad.pullback(lambda x: np.sin(x) * x, x)
    first = back(np.array([1.0, 2.0, 3.0]))[0].copy()
    second = back(np.array([1.0, 2.0, 3.0]))[0]
    np.testing.assert_array_equal(first, second)
    third = back(np.array([2.0, 4.0, 6.0]))[0]
    np.testing.assert_allclose(third, 2 * first)
    np.testing.assert_allclose(first, [1.0, 2.0, 3.0] * (np.cos(x) * x + np.sin(x)))


def test_pullback_twice_with_user_rule():
    y, back = ad.pullback(lambda x: np.tanh(x) * 2.0, 0.5)
    assert back(1.0) == back(1.0)
    assert back(1.0)[0] == pytest.approx(2 * (1 - np.tanh(0.5) ** 2))


def test_pullback_of_several_arguments():
    y, back = ad.pullback(lambda a, b: a * b + b, np.array([1.0, 2.0]), 3.0)
    ga, gb = back(np.array([1.0, 10.0]))
    np.testing.assert_array_equal(ga, [3.0, 30.0])
    assert gb == pytest.approx(1.0 * 1.0 + 10.0 * 2.0 + 11.0)


def test_pullback_with_zero_cotangent():
    y, back = ad.pullback(lambda x: x * 2.0, np.array([1.0, 2.0]))
    (g,) = back(ad.ZeroTangent())
    assert ad.unthunk(g) is ad.ZeroTangent() or not np.any(g)


def test_pullback_with_thunked_cotangent():
    y, back = ad.pullback(lambda x: x * 2.0, np.array([1.0, 2.0]))
    np.testing.assert_array_equal(back(ad.Thunk(lambda: np.ones(2)))[0], [2.0, 2.0])


def test_pullback_of_output_not_depending_on_input():
    y, back = ad.pullback(lambda x: np.array([1.0, 2.0]), np.ones(2))
    np.testing.assert_array_equal(y, [1.0, 2.0])
    np.testing.assert_array_equal(back(np.ones(2))[0], [0.0, 0.0])


# ---- rrule_via_ad / frule_via_ad ------------------------------------------------------------

def test_rrule_via_ad_uses_registered_rule():
    calls = []

    @ad.primitive
    def softplus(x):
        return np.log1p(np.exp(x))

    @ad.rrule.register(softplus)
    def softplus_rrule(x):
        calls.append(x)
        y = softplus(x)
        return y, lambda g: (ad.NoTangent(), g / (1.0 + np.exp(-x)))

    y, back = ad.rrule_via_ad(softplus, 0.3)
    assert calls == [0.3]
    assert y == pytest.approx(np.log1p(np.exp(0.3)))
    fbar, xbar = back(2.0)
    assert ad.unthunk(fbar) is ad.NoTangent()
    assert ad.unthunk(xbar) == pytest.approx(2.0 / (1.0 + np.exp(-0.3)))


def test_rrule_via_ad_traces_when_no_rule():
    f = lambda x, y: np.sum(np.sin(x) * y)  # noqa: E731
    x, y = np.array([0.1, 0.2]), np.array([3.0, 4.0])
    out, back = ad.rrule_via_ad(f, x, y)
    assert out == pytest.approx(f(x, y))
    fbar, xbar, ybar = back(1.0)
    assert fbar is ad.NoTangent()
    np.testing.assert_allclose(xbar, np.cos(x) * y)
    np.testing.assert_allclose(ybar, np.sin(x))


def test_rrule_via_ad_with_builtin_numpy_rule():
    y, back = ad.rrule_via_ad(np.exp, np.array([0.0, 1.0]))
    np.testing.assert_allclose(y, [1.0, np.e])
    np.testing.assert_allclose(ad.unthunk(back(np.ones(2))[1]), [1.0, np.e])


def test_rrule_via_ad_with_keyword_arguments():
    def f(x, *, scale):
        return x * x * scale

    y, back = ad.rrule_via_ad(f, 3.0, scale=2.0)
    assert y == 18.0
    assert back(1.0)[-1] == 12.0


def test_frule_via_ad_traces_when_no_rule():
    y, dy = ad.frule_via_ad((ad.NoTangent(), 0.5), lambda x: np.sin(x) * x, 1.2)
    assert y == pytest.approx(np.sin(1.2) * 1.2)
    assert dy == pytest.approx(0.5 * (np.cos(1.2) * 1.2 + np.sin(1.2)))


# ---- jvp -------------------------------------------------------------------------------------

def test_jvp_of_array_function():
    x = np.array([0.5, 1.0, 2.0])
    v = np.array([1.0, -1.0, 0.5])
    y, dy = ad.jvp(lambda x: np.exp(x) * x, (x,), (v,))
    np.testing.assert_allclose(y, np.exp(x) * x)
    np.testing.assert_allclose(dy, v * np.exp(x) * (1 + x))


def test_jvp_of_several_arguments():
    y, dy = ad.jvp(lambda a, b: a * b, (2.0, 3.0), (1.0, 10.0))
    assert y == 6.0
    assert dy == 3.0 * 1.0 + 2.0 * 10.0


def test_jvp_with_zero_tangent_for_one_argument():
    y, dy = ad.jvp(lambda a, b: np.sin(a) * b, (0.4, 3.0), (ad.ZeroTangent(), 1.0))
    assert dy == pytest.approx(np.sin(0.4))


def test_jvp_of_constant_output_is_zero():
    y, dy = ad.jvp(lambda a: np.ones(2), (np.array([1.0, 2.0]),), (np.ones(2),))
    np.testing.assert_array_equal(y, [1.0, 1.0])
    assert ad.unthunk(dy) is ad.ZeroTangent() or not np.any(dy)


def test_jvp_with_container_inputs_and_outputs():
    params = {"w": np.array([1.0, 2.0]), "b": 0.5}
    tangent = {"w": np.array([0.1, -0.2]), "b": 1.0}
    x = np.array([3.0, 4.0])

    def f(p):
        return {"y": p["w"] * x + p["b"], "pair": (np.sum(p["w"] * p["w"]), p["b"] * 2.0)}

    y, dy = ad.jvp(f, (params,), (tangent,))
    assert set(dy) == {"y", "pair"} and isinstance(dy["pair"], tuple)
    np.testing.assert_allclose(y["y"], [3.5, 8.5])
    np.testing.assert_allclose(dy["y"], tangent["w"] * x + tangent["b"])
    assert dy["pair"][0] == pytest.approx(2 * np.sum(params["w"] * tangent["w"]))
    assert dy["pair"][1] == pytest.approx(2.0)


def test_jvp_with_list_and_tuple_inputs():
    def f(xs, t):
        return xs[0] * t[0] + xs[1] * t[1]

    y, dy = ad.jvp(f, ([1.0, 2.0], (3.0, 4.0)), ([1.0, 0.0], (0.0, 1.0)))
    assert y == 11.0
    assert dy == 3.0 + 2.0


def test_jvp_agrees_with_gradient():
    x = np.array([-1.2, 1.0, 0.7, 2.0])
    v = np.array([0.3, -0.1, 0.5, 1.0])
    _, dy = ad.jvp(rosenbrock, (x,), (v,))
    assert dy == pytest.approx(rosenbrock_grad(x) @ v, rel=1e-12)


# ---- jacobian, hessian, hvp (public contract) -----------------------------------------------

def test_jacobian_shape_and_values():
    x = np.array([0.5, 1.0, 2.0])
    (J,) = ad.jacobian(lambda x: np.sin(x) * x[0], x)
    assert J.shape == (3, 3)
    expected = np.diag(np.cos(x) * x[0])
    expected[:, 0] += np.sin(x)
    np.testing.assert_allclose(J, expected, rtol=1e-12)


def test_hessian_of_rosenbrock_against_finite_differences():
    x = np.array([-1.2, 1.0, 0.7])
    H = ad.hessian(rosenbrock, x)
    H = H[0] if isinstance(H, tuple) else H
    fd = np.stack([num_grad(lambda x: rosenbrock_grad(x)[i], x) for i in range(3)])
    np.testing.assert_allclose(H, fd, rtol=1e-5, atol=1e-5)


def test_hvp():
    x = np.array([-1.2, 1.0, 0.7])
    v = np.array([1.0, 2.0, -1.0])
    hv = ad.hvp(rosenbrock, x, v)
    hv = hv[0] if isinstance(hv, tuple) else hv
    fd = num_grad(lambda x: rosenbrock_grad(x) @ v, x)
    np.testing.assert_allclose(hv, fd, rtol=1e-5, atol=1e-5)


def test_a_0d_array_gets_a_0d_array_gradient():
    """NumPy's operations on a 0-d array give NumPy scalars; the gradient of a 0-d array
    argument is still an array of its shape and dtype, as every array argument's is."""
    for x in (np.array(2.0), np.array(2.0, dtype=np.float32)):
        (g,) = ad.gradient(lambda x: x ** 3, x)
        assert type(g) is np.ndarray and g.shape == () and g.dtype == x.dtype
        assert g == 12.0


def test_a_list_cotangent_for_an_array_output():
    """back([1.0, 3.0]) for an array output: taken as the array it spells (a rule's
    partial once got the list and failed inside NumPy's multiply)."""
    y, back = ad.pullback(lambda x: x * 2.0, np.array([1.0, 2.0]))
    (g,) = back([1.0, 3.0])
    np.testing.assert_array_equal(g, [2.0, 6.0])


# ---- dict tangents and cotangents are read by key ----------------------------------------------

def test_a_dict_tangent_is_read_by_key_whatever_its_order():
    # it was read by position: {'b': 1.0, 'a': 0.0} was taken as the tangent of 'a'
    f = lambda d: 10.0 * d["a"] + d["b"] ** 2  # noqa: E731
    p = {"a": 2.0, "b": 3.0}
    assert ad.jvp(f, (p,), ({"b": 1.0, "a": 0.0},))[1] == 6.0
    assert ad.jvp(f, (p,), ({"a": 1.0, "b": 0.0},))[1] == 10.0
    with pytest.raises(TypeError, match=r"tangent 0 has structure dict\(a=\*, zzz=\*\)"):
        ad.jvp(f, (p,), ({"a": 1.0, "zzz": 0.0},))


def test_a_dict_cotangent_is_read_by_key_in_pullbacks_and_in_rules():
    y, back = ad.pullback(lambda d: {"x": 10.0 * d["a"], "y": d["b"] ** 2}, {"a": 2.0, "b": 3.0})
    assert back({"y": 1.0, "x": 0.0}) == ({"a": 0.0, "b": 6.0},)
    with pytest.raises(TypeError, match="cotangent has structure"):
        back({"x": 1.0, "oops": 5.0})

    @ad.primitive
    def weighted(d):
        return 10.0 * d["a"] + d["b"]

    @ad.rrule.register(weighted)
    def _(d):
        return weighted(d), lambda g: (ad.NoTangent(), {"b": g * 1.0, "a": g * 10.0})

    assert ad.gradient(weighted, {"a": 2.0, "b": 3.0}) == ({"a": 10.0, "b": 1.0},)


class Point(NamedTuple):
    x: float
    y: float


def test_a_structural_tangent_of_a_namedtuple_in_jvp():
    p = Point(2.0, 3.0)
    assert ad.jvp(lambda p: p.x * p.y, (p,), (ad.Tangent(Point, y=1.0),))[1] == 2.0


def test_jvp_at_an_integer_with_a_tangent_is_refused_not_a_silent_no_tangent():
    with pytest.raises(TypeError, match=r"jvp\(<lambda>\): argument 0 is an integer \(2\).*Pass a float"):
        ad.jvp(lambda t: t ** 4, (2,), (1.0,))
    with pytest.raises(TypeError, match=r"an array of dtype int64"):
        ad.jvp(lambda t: t ** 4, (np.array([2]),), (np.array([1.0]),))
    # NumPy's booleans as Python's (np.bool_ is no int: its tangent 1.0 gave 0.0)
    with pytest.raises(TypeError, match=r"argument 0 is a boolean \(np.True_\), which has no tangent"):
        ad.jvp(lambda b: 2.0 * b, (np.True_,), (1.0,))
    # an integer held fixed is fine
    assert ad.jvp(lambda x, k: x * k, (2.0, 3), (1.0, None)) == (6.0, 3.0)
    assert ad.jvp(lambda x, k: x * k, (2.0, 3), (1.0, 0.0)) == (6.0, 3.0)


def test_rrule_via_ad_and_frule_via_ad_with_keywords_keep_the_model_s_gradient():
    # with keywords, f was wrapped in a lambda, whose tangent is NoTangent(): a higher-order
    # rule passing options to the user's model lost the model's gradient, silently
    from dataclasses import dataclass

    @dataclass
    class Model:
        w: np.ndarray

        def __call__(self, x, scale=1.0):
            return scale * np.sum(self.w * x)

    m, x = Model(np.array([2.0, 3.0])), np.array([1.0, 4.0])
    y, back = ad.rrule_via_ad(m, x, scale=2.0)
    dm, dx = back(1.0)
    assert y == 28.0
    np.testing.assert_array_equal(dm.w, 2.0 * x)
    np.testing.assert_array_equal(dx, 2.0 * m.w)
    y, dy = ad.frule_via_ad((Model(np.array([1.0, 0.0])), np.zeros(2)), m, x, scale=2.0)
    assert (y, dy) == (28.0, 2.0)


def test_a_dict_tangent_of_a_dataclass_or_namedtuple_is_read_by_field_name():
    # it was read by position: {'b': 1.0, 'a': 0.0} was the tangent of field a
    import dataclasses

    @dataclasses.dataclass
    class P:
        a: float
        b: float

    f = lambda p: p.a * 2.0 + p.b * 10.0  # noqa: E731
    assert ad.jvp(f, (P(1.0, 1.0),), ({"b": 1.0, "a": 0.0},))[1] == 10.0
    assert ad.jvp(lambda p: p.x * 2.0 + p.y * 10.0, (Point(1.0, 1.0),), ({"y": 1.0, "x": 0.0},))[1] == 10.0
    _, back = ad.pullback(lambda x: P(x * 2.0, x * 10.0), 1.0)
    assert back({"b": 1.0, "a": 0.0}) == (10.0,)
    with pytest.raises(TypeError, match="tangent 0 has structure"):
        ad.jvp(f, (P(1.0, 1.0),), ({"a": 1.0, "c": 0.0},))

    @ad.primitive
    def use(p):
        return p.a * 2.0 + p.b * 10.0

    @ad.rrule.register(use)
    def _(p):
        return use(p), lambda g: (ad.NoTangent(), {"b": g * 10.0, "a": g * 2.0})

    assert ad.gradient(use, P(1.0, 1.0)) == (P(2.0, 10.0),)
