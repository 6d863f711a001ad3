"""The rule registries: rrule, frule, register, config rules, primitive, scalar_rule,
non_differentiable, and how the tracer uses them (thunks, pruning)."""

import warnings

import numpy as np
import pytest

import adrules as ad
from adrules.registry import USER_REGISTRATIONS
from adrules import _state


def central_diff(f, x, h=1e-6):
    return (f(x + h) - f(x - h)) / (2 * h)


# ---- direct calls of the registries -----------------------------------------------------

def test_rrule_of_ufunc_returns_value_and_pullback():
    x = np.array([0.1, 0.7, -1.2])
    y, back = ad.rrule(np.sin, x)
    np.testing.assert_allclose(y, np.sin(x))
    slots = back(np.array([1.0, 2.0, 3.0]))
    assert isinstance(slots, tuple) and len(slots) == 2
    assert ad.unthunk(slots[0]) is ad.NoTangent()
    np.testing.assert_allclose(ad.unthunk(slots[1]), np.cos(x) * [1.0, 2.0, 3.0])


def test_rrule_of_binary_ufunc_has_self_slot_first():
    a, b = np.array([2.0, 3.0]), np.array([5.0, 7.0])
    y, back = ad.rrule(np.multiply, a, b)
    np.testing.assert_array_equal(y, [10.0, 21.0])
    fbar, abar, bbar = (ad.unthunk(s) for s in back(np.array([1.0, 10.0])))
    assert fbar is ad.NoTangent()
    np.testing.assert_array_equal(abar, [5.0, 70.0])
    np.testing.assert_array_equal(bbar, [2.0, 30.0])


def test_rrule_returns_none_without_rule():
    def no_rule_here(x):
        return x

    assert ad.rrule(no_rule_here, 1.0) is None
    assert ad.rrule(print, "x") is None


def test_frule_of_ufunc():
    y, dy = ad.frule((ad.NoTangent(), np.array([1.0, 2.0])), np.exp, np.array([0.0, 1.0]))
    np.testing.assert_allclose(y, [1.0, np.e])
    np.testing.assert_allclose(ad.unthunk(dy), [1.0, 2 * np.e])


def test_frule_returns_none_without_rule():
    def no_rule_here(x):
        return x

    assert ad.frule((ad.NoTangent(), 1.0), no_rule_here, 1.0) is None


def test_integer_argument_gets_no_tangent_from_scalar_rule():
    y, back = ad.rrule(np.multiply, np.array([1.5, 2.0]), 3)
    slots = [ad.unthunk(s) for s in back(np.ones(2))]
    assert slots[2] is ad.NoTangent()
    np.testing.assert_array_equal(slots[1], [3.0, 3.0])


# ---- user rules ------------------------------------------------------------------------

@ad.primitive
def cube(x):
    return x * x * x


@ad.rrule.register(cube)
def cube_rrule(x):
    y = cube(x)

    def cube_pullback(g):
        return ad.NoTangent(), 3 * x * x * g

    return y, cube_pullback


@ad.frule.register(cube)
def cube_frule(tangents, x):
    _, dx = tangents
    return cube(x), 3 * x * x * dx


def test_user_rrule_registered_and_called_directly():
    y, back = ad.rrule(cube, 2.0)
    assert y == 8.0
    assert back(1.0) == (ad.NoTangent(), 12.0)


def test_user_frule_registered_and_called_directly():
    assert ad.frule((ad.NoTangent(), 0.5), cube, 2.0) == (8.0, 6.0)


def test_user_rule_used_by_gradient_and_jvp():
    x = 1.3
    (g,) = ad.gradient(lambda x: np.sin(cube(x)), x)
    expected = np.cos(x ** 3) * 3 * x ** 2
    assert g == pytest.approx(expected, rel=1e-12)
    _, dy = ad.jvp(lambda x: np.sin(cube(x)), (x,), (2.0,))
    assert dy == pytest.approx(2 * expected, rel=1e-12)


def test_user_rule_second_derivative_is_right():
    # the pullback is written in traced numpy, so it differentiates again: d2/dx2 x^3 = 6x
    d2 = ad.gradient(lambda x: ad.gradient(cube, x)[0], 1.7)[0]
    assert d2 == pytest.approx(6 * 1.7, rel=1e-12)


def test_rule_is_used_instead_of_the_body():
    @ad.primitive
    def wrong_body(x):
        return x * 100.0  # the rule below says the derivative is 2

    @ad.rrule.register(wrong_body)
    def wrong_body_rrule(x):
        return x * 100.0, lambda g: (ad.NoTangent(), 2.0 * g)

    assert ad.gradient(wrong_body, 3.0)[0] == 2.0


def test_registering_a_plain_function_raises_and_names_the_decorator():
    def plain(x):
        return x

    for register in (ad.rrule.register, ad.frule.register):
        with pytest.raises(TypeError, match=r"@adrules\.primitive") as info:
            register(plain)
        assert "plain" in str(info.value)


def test_registering_a_lambda_raises():
    with pytest.raises(TypeError, match=r"@adrules\.primitive"):
        ad.rrule.register(lambda x: x)


def test_scalar_rule_for_plain_function_raises():
    def plain(x):
        return x

    with pytest.raises(TypeError, match=r"@adrules\.primitive"):
        ad.scalar_rule(plain, lambda x, y: 1.0)


# ---- primitive ---------------------------------------------------------------------------

def test_primitive_keeps_name_and_doc():
    @ad.primitive
    def documented(x):
        """Some doc."""
        return x

    assert documented.__name__ == "documented"
    assert documented.__doc__ == "Some doc."


def test_primitive_outside_trace_calls_function_directly(monkeypatch):
    calls = []

    @ad.primitive
    def plus_one(x):
        calls.append(x)
        return x + 1.0

    def exploding_dispatch(*args):
        raise AssertionError("dispatch must not be reached outside any trace")

    monkeypatch.setattr(_state.STATE, "dispatch", exploding_dispatch)
    assert _state.STATE.active == 0
    assert plus_one(2.0) == 3.0
    np.testing.assert_array_equal(plus_one(np.array([1.0, 2.0])), [2.0, 3.0])
    assert calls[0] == 2.0


def test_primitive_with_constant_args_inside_trace_is_not_recorded():
    calls = []

    @ad.primitive
    def shift(x):
        calls.append(type(x))
        return x + 1.0

    # no rule registered: if shift were recorded on the tape the tracer would raise NoRuleError
    def f(x):
        c = shift(np.array([1.0, 2.0]))  # no traced argument
        assert type(c) is np.ndarray
        return x * (c[0] + c[1])

    (g,) = ad.gradient(f, 2.0)
    assert g == 5.0
    assert calls == [np.ndarray]


def test_primitive_without_rule_raises_when_traced():
    @ad.primitive
    def unruled(x):
        return x * 2.0

    with pytest.raises(TypeError, match="unruled"):
        ad.gradient(unruled, 1.0)


def test_trace_count_returns_to_zero_after_error():
    @ad.primitive
    def unruled2(x):
        return x * 2.0

    with pytest.raises(TypeError):
        ad.gradient(unruled2, 1.0)
    assert _state.STATE.active == 0


# ---- scalar_rule --------------------------------------------------------------------------

@ad.primitive
def weighted(a, b):
    return a * a * b


SEEN_PARTIAL_ARGS = []


def _da(a, b, y):
    SEEN_PARTIAL_ARGS.append(("a", a, b, y))
    return 2 * a * b


def _db(a, b, y):
    SEEN_PARTIAL_ARGS.append(("b", a, b, y))
    return a * a


ad.scalar_rule(weighted, _da, _db)


def test_scalar_rule_gives_rrule_with_partials_called_with_output_last():
    SEEN_PARTIAL_ARGS.clear()
    y, back = ad.rrule(weighted, 3.0, 5.0)
    assert y == 45.0
    slots = [ad.unthunk(s) for s in back(2.0)]
    assert slots[0] is ad.NoTangent()
    assert slots[1] == 2 * (2 * 3.0 * 5.0)
    assert slots[2] == 2 * 9.0
    assert ("a", 3.0, 5.0, 45.0) in SEEN_PARTIAL_ARGS
    assert ("b", 3.0, 5.0, 45.0) in SEEN_PARTIAL_ARGS


def test_scalar_rule_gives_frule():
    y, dy = ad.frule((ad.NoTangent(), 1.0, 10.0), weighted, 3.0, 5.0)
    assert y == 45.0
    assert ad.unthunk(dy) == 1.0 * 30.0 + 10.0 * 9.0


def test_scalar_rule_elementwise_on_arrays_with_broadcasting():
    a = np.array([1.0, 2.0, 3.0])
    b = 2.0
    ga, gb = ad.gradient(lambda a, b: _sum3(weighted(a, b)), a, b)
    np.testing.assert_allclose(ga, 2 * a * b)
    assert gb == pytest.approx(np.sum(a * a))
    _, dy = ad.jvp(lambda a, b: weighted(a, b), (a, b), (np.ones(3), 0.5))
    np.testing.assert_allclose(dy, 2 * a * b + 0.5 * a * a)


def _sum3(v):
    return v[0] + v[1] + v[2]


def test_scalar_rule_second_order():
    # d2/da2 (a^2 b) = 2b ; partials are traced numpy, so they differentiate again
    d2 = ad.gradient(lambda a: ad.gradient(lambda a: weighted(a, 4.0), a)[0], 1.5)[0]
    assert d2 == pytest.approx(8.0)


# ---- non_differentiable -------------------------------------------------------------------

@ad.primitive
def bucket(x):
    return np.floor(np.asarray(x) * 2.0)


ad.non_differentiable(bucket)


def test_non_differentiable_outputs_are_plain_and_carry_no_gradient():
    seen = []

    def f(x):
        b = bucket(x)
        seen.append(type(b))
        return x * 3.0 + b

    (g,) = ad.gradient(f, 1.3)
    assert g == 3.0
    assert seen == [np.ndarray] or seen == [np.float64]


def test_non_differentiable_rrule_returns_no_tangents():
    y, back = ad.rrule(bucket, np.array([0.3, 0.7]))
    np.testing.assert_array_equal(y, [0.0, 1.0])
    assert all(ad.unthunk(s) is ad.NoTangent() for s in back(np.ones(2)))


def test_builtin_non_differentiable_functions_stop_gradients():
    x = np.array([0.5, 2.5, 1.5])
    y, back = ad.pullback(lambda x: x * np.argmax(x) + np.floor(x), x)
    np.testing.assert_array_equal(back(np.ones(3))[0], [1.0, 1.0, 1.0])


# ---- config rules and rrule_via_ad in higher-order primitives -------------------------

@ad.primitive
def apply_twice(g, x):
    return g(g(x))


@ad.rrule.register(apply_twice, config=True)
def apply_twice_rrule(config, g, x):
    assert isinstance(config, ad.RuleConfig)
    y1, back1 = config.rrule_via_ad(g, x)
    y2, back2 = config.rrule_via_ad(g, y1)

    def apply_twice_pullback(ybar):
        gbar2, y1bar = back2(ybar)
        gbar1, xbar = back1(y1bar)
        return ad.NoTangent(), gbar1 + gbar2, xbar

    return y2, apply_twice_pullback


@ad.frule.register(apply_twice, config=True)
def apply_twice_frule(config, tangents, g, x):
    _, gdot, xdot = tangents
    y1, y1dot = config.frule_via_ad((gdot, xdot), g, x)
    return config.frule_via_ad((gdot, y1dot), g, y1)


@ad.primitive
def my_map(g, xs):
    return [g(x) for x in xs]


@ad.rrule.register(my_map, config=True)
def my_map_rrule(config, g, xs):
    pairs = [config.rrule_via_ad(g, x) for x in xs]

    def my_map_pullback(ybars):
        outs = [back(yb) for (_, back), yb in zip(pairs, ybars)]
        gbar = ad.ZeroTangent()
        for o in outs:
            gbar = gbar + o[0]
        return ad.NoTangent(), gbar, [o[1] for o in outs]

    return [y for y, _ in pairs], my_map_pullback


@pytest.mark.parametrize("g, x", [(np.sin, 0.5), (np.tanh, -0.8), (lambda z: z * z * z + np.exp(z), 0.3)])
def test_apply_twice_matches_finite_differences(g, x):
    (grad,) = ad.gradient(lambda x: apply_twice(g, x), x)
    assert grad == pytest.approx(central_diff(lambda x: g(g(x)), x), rel=1e-7)


def test_apply_twice_rule_is_used():
    calls = []

    def g(z):
        calls.append(1)
        return np.sin(z)

    ad.gradient(lambda x: apply_twice(g, x), 0.5)
    assert len(calls) == 2  # the rule traced g twice; the body was never run on traced values


def test_apply_twice_on_arrays_with_check_grads():
    ad.testing.check_grads(lambda x: apply_twice(np.sin, x) * x, np.array([0.3, -0.4, 1.1]),
                           modes=("rev",), order=1)


def test_apply_twice_second_order():
    f = lambda x: apply_twice(np.sin, x)  # noqa: E731
    d2 = ad.gradient(lambda x: ad.gradient(f, x)[0], 0.5)[0]
    fd = central_diff(lambda x: central_diff(lambda z: np.sin(np.sin(z)), x, 1e-4), 0.5, 1e-4)
    assert d2 == pytest.approx(fd, rel=1e-5)


def test_apply_twice_forward_mode_config_rule():
    x = 0.5
    _, dy = ad.jvp(lambda x: apply_twice(np.tanh, x), (x,), (2.0,))
    assert dy == pytest.approx(2.0 * central_diff(lambda x: np.tanh(np.tanh(x)), x), rel=1e-7)


def test_apply_twice_forward_over_reverse():
    # second derivative of sin(sin(x)) by jvp of the gradient, through both config rules
    d2 = ad.jvp(lambda x: ad.gradient(lambda z: apply_twice(np.sin, z), x)[0], (0.5,), (1.0,))[1]
    s, c = np.sin(0.5), np.cos(0.5)
    expected = -np.sin(s) * c * c - np.cos(s) * s  # d/dx [cos(sin x) cos x]
    assert d2 == pytest.approx(expected, rel=1e-12)


def test_apply_twice_closure_over_differentiated_variable():
    # g captures w, which is being differentiated: its gradient flows through the self slot
    def f(w, x):
        return apply_twice(lambda z: np.sin(w * z), x)

    w, x = 0.7, 1.3
    gw, gx = ad.gradient(f, w, x)
    ref = lambda w, x: np.sin(w * np.sin(w * x))  # noqa: E731
    assert gw == pytest.approx(central_diff(lambda w: ref(w, x), w), rel=1e-7)
    assert gx == pytest.approx(central_diff(lambda x: ref(w, x), x), rel=1e-7)


def test_apply_twice_closure_over_differentiated_variable_only():
    def f(w):
        return apply_twice(lambda z: z * w, 2.0)  # 2 w^2

    (gw,) = ad.gradient(f, 3.0)
    assert gw == pytest.approx(4 * 3.0)


def test_my_map_matches_finite_differences():
    def f(a, b):
        ys = my_map(np.sin, [a, b])
        return ys[0] * ys[1]

    a, b = 0.3, 1.2
    ga, gb = ad.gradient(f, a, b)
    assert ga == pytest.approx(np.cos(a) * np.sin(b), rel=1e-12)
    assert gb == pytest.approx(np.sin(a) * np.cos(b), rel=1e-12)


def test_my_map_over_list_argument():
    def f(xs):
        ys = my_map(lambda z: z * np.exp(z), xs)
        return ys[0] + 2.0 * ys[1] + 3.0 * ys[2]

    xs = [0.1, -0.5, 0.9]
    (g,) = ad.gradient(f, xs)
    assert isinstance(g, list)
    expected = [k * (1 + x) * np.exp(x) for k, x in zip((1.0, 2.0, 3.0), xs)]
    np.testing.assert_allclose(g, expected, rtol=1e-12)


def test_rrule_via_ad_directly_uses_registered_rule():
    calls = []

    @ad.primitive
    def double(x):
        return 2.0 * x

    @ad.rrule.register(double)
    def double_rrule(x):
        calls.append(x)
        return 2.0 * x, lambda g: (ad.NoTangent(), 2.0 * g)

    y, back = ad.rrule_via_ad(double, 3.0)
    assert y == 6.0 and calls == [3.0]
    assert back(1.0)[1] == 2.0


def test_rrule_via_ad_traces_function_without_rule():
    y, back = ad.rrule_via_ad(lambda x: np.sin(x) * x, 0.4)
    assert y == pytest.approx(np.sin(0.4) * 0.4)
    fbar, xbar = back(2.0)
    assert fbar is ad.NoTangent() or ad.unthunk(fbar) is ad.NoTangent()
    assert xbar == pytest.approx(2.0 * (np.cos(0.4) * 0.4 + np.sin(0.4)))


# ---- rules with several outputs -------------------------------------------------------------

@ad.primitive
def sincos(x):
    return np.sin(x), np.cos(x)


@ad.rrule.register(sincos)
def sincos_rrule(x):
    s, c = np.sin(x), np.cos(x)

    def sincos_pullback(gbar):
        gs, gc = gbar
        return ad.NoTangent(), gs * c - gc * s

    return (s, c), sincos_pullback


def test_rule_with_tuple_output_only_one_used():
    (g,) = ad.gradient(lambda x: sincos(x)[0] * 2.0, 0.4)
    assert g == pytest.approx(2.0 * np.cos(0.4), rel=1e-12)
    (g,) = ad.gradient(lambda x: np.sum(sincos(x)[1]), np.array([0.3, -0.7]))
    np.testing.assert_allclose(g, -np.sin([0.3, -0.7]), rtol=1e-12)


def test_rule_with_tuple_output_both_used():
    (g,) = ad.gradient(lambda x: sincos(x)[0] * sincos(x)[1], 0.4)
    assert g == pytest.approx(np.cos(0.8), rel=1e-12)  # d/dx sin(2x)/2


def test_rule_returning_inplaceable_thunk():
    @ad.primitive
    def triple(x):
        return x * 3.0

    @ad.rrule.register(triple)
    def triple_rrule(x):
        def triple_pullback(g):
            return ad.NoTangent(), ad.InplaceableThunk(lambda buf: buf.__iadd__(3.0 * g),
                                                       ad.Thunk(lambda: 3.0 * g))

        return x * 3.0, triple_pullback

    (g,) = ad.gradient(lambda x: np.sum(triple(x) * np.array([1.0, 2.0]) + triple(x)),
                       np.array([5.0, 7.0]))
    np.testing.assert_array_equal(g, [6.0, 9.0])


# ---- thunks stay internal; zero cotangents prune work ------------------------------------

COUNTS = {"a_thunk": 0, "b_thunk": 0, "pullback": 0}


@ad.primitive
def mul_lazy(a, b):
    return a * b


@ad.rrule.register(mul_lazy)
def mul_lazy_rrule(a, b):
    def mul_lazy_pullback(g):
        COUNTS["pullback"] += 1

        def a_grad():
            COUNTS["a_thunk"] += 1
            return g * b

        def b_grad():
            COUNTS["b_thunk"] += 1
            return g * a

        return ad.NoTangent(), ad.Thunk(a_grad), ad.Thunk(b_grad)

    return a * b, mul_lazy_pullback


@pytest.fixture
def counts():
    for k in COUNTS:
        COUNTS[k] = 0
    return COUNTS


def test_unneeded_thunk_is_never_evaluated(counts):
    (g,) = ad.gradient(lambda a: mul_lazy(a, 3.0), 2.0)
    assert g == 3.0
    assert counts == {"a_thunk": 1, "b_thunk": 0, "pullback": 1}


def test_unneeded_thunk_of_first_argument_is_never_evaluated(counts):
    (g,) = ad.gradient(lambda b: mul_lazy(np.array([2.0, 5.0]), b)[1], np.array([3.0, 4.0]))
    np.testing.assert_array_equal(g, [0.0, 5.0])
    assert counts["a_thunk"] == 0 and counts["b_thunk"] == 1


def test_unused_pullback_is_never_called(counts):
    def f(a):
        unused = mul_lazy(a, a)  # noqa: F841  (does not reach the loss)
        return a * 2.0

    assert ad.gradient(f, 1.5) == (2.0,)
    assert counts["pullback"] == 0


def test_pullback_not_called_when_its_branch_is_multiplied_by_a_constant_array_then_dropped(counts):
    def f(a):
        side = mul_lazy(a, 2.0) * np.ones(3)  # noqa: F841
        return np.sin(a)

    (g,) = ad.gradient(f, 0.2)
    assert g == pytest.approx(np.cos(0.2))
    assert counts["pullback"] == 0


def test_pullback_not_called_when_output_only_reaches_non_differentiable_code(counts):
    def f(a):
        i = np.argmax(mul_lazy(a, np.array([1.0, -1.0])))  # an index: carries no gradient
        return a[i] * 3.0

    (g,) = ad.gradient(f, np.array([2.0, 1.0]))
    np.testing.assert_array_equal(g, [3.0, 0.0])
    assert counts["pullback"] == 0


def test_zero_cotangent_from_a_rule_prunes_upstream_pullbacks(counts):
    @ad.primitive
    def blocker(x):
        return x * 1.0

    @ad.rrule.register(blocker)
    def blocker_rrule(x):
        return x * 1.0, lambda g: (ad.NoTangent(), ad.ZeroTangent())

    (g,) = ad.gradient(lambda a: blocker(mul_lazy(a, 2.0)) + a, 1.0)
    assert g == 1.0
    assert counts["pullback"] == 0


def test_pullback_receives_plain_values_not_thunks():
    seen = []

    @ad.primitive
    def thunky(x):
        return x * 2.0

    @ad.rrule.register(thunky)
    def thunky_rrule(x):
        return x * 2.0, lambda g: (ad.NoTangent(), ad.Thunk(lambda: 2.0 * g))

    @ad.primitive
    def spy(x):
        return x + 0.0

    @ad.rrule.register(spy)
    def spy_rrule(x):
        def spy_pullback(g):
            seen.append(g)
            return ad.NoTangent(), g

        return x + 0.0, spy_pullback

    (g,) = ad.gradient(lambda x: spy(thunky(spy(x))), 1.0)
    assert g == 2.0
    assert len(seen) == 2
    assert not any(isinstance(s, ad.Thunk) for s in seen)


def test_gradient_result_is_never_a_thunk():
    (g,) = ad.gradient(lambda a: mul_lazy(a, 3.0), 2.0)
    assert not isinstance(g, ad.Thunk)
    y, back = ad.pullback(lambda a: mul_lazy(a, np.array([1.0, 2.0])), np.array([3.0, 4.0]))
    assert not isinstance(back(np.ones(2))[0], ad.Thunk)


# ---- which inputs a scalar rule's partials read (what the tape must keep) ----------------------

def test_parameters_read_from_partials_code():
    from adrules.registry import ONE, _parameters_read

    scale = 2.0
    assert _parameters_read(lambda x, y: 1.0 - y * y, 2) == (False, True)
    assert _parameters_read(lambda x, y: scale * x, 2) == (True, False)
    assert _parameters_read(lambda a, b, y: b, 3) == (False, True, False)
    assert _parameters_read(lambda x, y: (lambda: y)(), 2) == (False, True)  # read by an inner function
    assert _parameters_read(ONE, 3) == (False, False, False)
    assert _parameters_read(None, 2) == (False, False)


def test_parameters_read_assumes_all_when_unsure():
    import functools

    from adrules.registry import _parameters_read

    def reads_args(*args):
        return args[-1]

    assert _parameters_read(reads_args, 2) == (True, True)
    assert _parameters_read(np.cos, 2) == (True, True)  # no Python code to read
    assert _parameters_read(functools.partial(lambda k, x, y: k * x, 2.0), 2) == (True, True)
    assert _parameters_read(lambda x, y: eval("x"), 2) == (True, True)


def test_scalar_rule_partial_reading_output_gets_it():
    # the tape drops what no partial reads; a partial that reads the output must still get it
    @ad.primitive
    def softsign(x):
        return x / (1.0 + np.abs(x))

    ad.scalar_rule(softsign, lambda x, y: (1.0 - np.abs(y)) ** 2)
    x = np.linspace(-3.0, 3.0, 5000)
    np.testing.assert_allclose(ad.gradient(lambda v: np.sum(softsign(v)), x)[0],
                               1.0 / (1.0 + np.abs(x)) ** 2, rtol=1e-12)


def test_registration_errors_name_the_call_the_user_made():
    # scalar_rule and non_differentiable were reported as "scalar_rule.register(...)", which
    # does not exist, and a partial as "functools.functools.partial(<function ...>)"
    import functools

    def plain(x):
        return x

    with pytest.raises(TypeError, match=r"^scalar_rule\(.*plain\): .* plain Python function"):
        ad.scalar_rule(plain, lambda x, y: 1.0)
    with pytest.raises(TypeError, match=r"^non_differentiable\(.*plain\): "):
        ad.non_differentiable(plain)
    with pytest.raises(TypeError, match=r"^rrule\.register\(functools\.partial\(.*plain, \.\.\.\)\): a functools\.partial"):
        ad.rrule.register(functools.partial(plain))


def test_a_scalar_rule_of_a_primitive_called_with_its_defaults():
    # the partials were called with the arguments passed only: d(x, y) for leaky(x)
    @ad.primitive
    def leaky(x, alpha=0.1):
        return np.where(x > 0, x, alpha * x)

    ad.scalar_rule(leaky, lambda x, alpha, y: np.where(x > 0, 1.0, alpha),
                   lambda x, alpha, y: np.where(x > 0, 0.0, x))
    x = np.array([-2.0, 1.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(leaky(x)), x)[0], [0.1, 1.0])
    np.testing.assert_array_equal(ad.jvp(leaky, (x,), (np.ones(2),))[1], [0.1, 1.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(leaky(x, 0.3)), x)[0], [0.3, 1.0])
    np.testing.assert_array_equal(ad.gradient(lambda a: np.sum(leaky(x, a)), 0.3)[0], -2.0)


def test_a_user_rule_gets_constant_keyword_arguments_as_keywords():
    # they were moved to their positions: an frule unpacking `_, dx = tangents` got three
    # tangents and a rule with keyword-only options got them positionally
    @ad.primitive
    def scale(x, factor=2.0):
        return factor * x

    @ad.frule.register(scale)
    def _(tangents, x, factor=2.0):
        _, dx = tangents
        return factor * x, factor * dx

    @ad.rrule.register(scale)
    def _(x, *, factor=2.0):
        return factor * x, lambda g: (ad.NoTangent(), factor * g)

    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(ad.jvp(lambda x: scale(x, factor=3.0), (x,), (np.ones(2),))[1], [3.0, 3.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(scale(x, factor=3.0)), x)[0], [3.0, 3.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(scale(x=x, factor=3.0)), x)[0], [3.0, 3.0])
    ad.testing.check_rrule(scale, x, fkwargs={"factor": 3.0})
    ad.testing.check_frule(scale, x, fkwargs={"factor": 3.0})


def test_registering_a_users_rule_again_replaces_it_and_says_so():
    """The second registration replaced the first silently (Julia warns on a method's
    redefinition); replacing one of adrules's own rules stays quiet."""
    @ad.primitive
    def cube(x):
        return x ** 3

    @ad.rrule.register(cube)
    def first(x):
        return cube(x), lambda g: (ad.NoTangent(), 0.0 * g)

    @ad.frule.register(cube)  # the other registry: not a redefinition
    def forward(tangents, x):
        return cube(x), 3 * x ** 2 * tangents[1]

    with pytest.warns(UserWarning, match=r"rrule for .*cube registered again, replacing the rule "
                                         r"registered at .*test_registry.py:\d+") as seen:
        @ad.rrule.register(cube)
        def second(x):
            return cube(x), lambda g: (ad.NoTangent(), 3 * x ** 2 * g)
    assert seen[0].filename == __file__
    assert ad.gradient(cube, 2.0) == (12.0,)  # the second one
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        saved = ad.rrule.lookup(np.cbrt), ad.frule.lookup(np.cbrt)
        try:
            ad.scalar_rule(np.cbrt, lambda x, y: 1 / (3 * y ** 2))
        finally:
            ad.rrule.rules[np.cbrt], ad.frule.rules[np.cbrt] = saved
            USER_REGISTRATIONS.keys.pop(np.cbrt)
            USER_REGISTRATIONS.sites.pop(("rrule", np.cbrt)), USER_REGISTRATIONS.sites.pop(("frule", np.cbrt))
