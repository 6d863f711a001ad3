"""What a rule author sees for bad input: each error names the function the user called,
the argument at fault and the fix (an audit of the rule author's experience)."""

import numpy as np
import pytest

import adrules as ad
from adrules.tracer import TracerError

X = np.array([0.5, 2.0])


def _primitive(name):
    @ad.primitive
    def f(x):
        return 2 * x

    f.__name__ = f.__qualname__ = name
    return f


# ---- each derivative names itself, not the one it is built on ----

@pytest.mark.parametrize("call, name", [
    (lambda: ad.value_and_gradient(lambda x: x * 2, X), "value_and_gradient(<lambda>): f returned an array"),
    (lambda: ad.rrule_via_ad(lambda x: None, X), "rrule_via_ad(<lambda>): f returned None"),
    (lambda: ad.rrule_via_ad(lambda x: x, "a"), "rrule_via_ad(<lambda>): f returned a string"),
    (lambda: ad.frule_via_ad((ad.NoTangent(), np.ones(3)), lambda x: x * x, X),
     "frule_via_ad(<lambda>): the tangent of argument 1 has shape (3,)"),
])
def test_errors_name_the_derivative_the_user_called(call, name):
    with pytest.raises(TypeError, match=name.replace("(", r"\(").replace(")", r"\)")):
        call()


@pytest.mark.parametrize("call, form", [
    (lambda: ad.gradient(X, lambda x: x), "gradient(f, x)"),
    (lambda: ad.value_and_gradient(3.0, X), "value_and_gradient(f, x)"),
    (lambda: ad.pullback(X, X), "pullback(f, x)"),
    (lambda: ad.jvp(X, (X,), (X,)), "jvp(f, (x,), (dx,))"),
    (lambda: ad.jacobian(X, X), "jacobian(f, x)"),
    (lambda: ad.hessian(X, X), "hessian(f, x)"),
    (lambda: ad.hvp(X, X, X), "hvp(f, x, v)"),
    (lambda: ad.rrule_via_ad(X, X), "rrule_via_ad(f, x)"),
    (lambda: ad.frule_via_ad((ad.NoTangent(), X), X, X), "frule_via_ad((NoTangent(), dx), f, x)"),
])
def test_a_function_that_is_not_callable_is_named_with_the_call_to_write(call, form):
    with pytest.raises(TypeError, match="f must be the function to differentiate") as e:
        call()
    assert f"write {form}" in str(e.value)


def test_jvp_and_frule_via_ad_refuse_an_f_returning_none_as_pullback_does():
    with pytest.raises(TypeError, match=r"jvp\(<lambda>\): f returned None"):
        ad.jvp(lambda x: None, (X,), (X,))
    with pytest.raises(TypeError, match=r"frule_via_ad\(<lambda>\): f returned None"):
        ad.frule_via_ad((ad.NoTangent(), 1.0), lambda x: None, 3.0)


@pytest.mark.parametrize("tangents, what", [
    (np.ones(2), "tangents must be a tuple, got ndarray"),
    ((np.ones(2),), "1 tangents for 1 argument"),
])
def test_frule_via_ad_names_tangents_given_without_the_self_slot(tangents, what):
    with pytest.raises(TypeError, match=what) as e:
        ad.frule_via_ad(tangents, lambda x: x * x, X)
    assert str(e.value).startswith("frule_via_ad(tangents, ") and "(NoTangent(), ẋ)" in str(e.value)


# ---- a rule returning the wrong thing, called directly ----

@pytest.mark.parametrize("result, got", [
    (lambda y, back: [y, back], "returned a list"),
    (lambda y, back: y, "returned a ndarray"),
    (lambda y, back: None, "returned a NoneType"),
    (lambda y, back: (y, back, 1), "returned a tuple of 3"),
])
def test_an_rrule_returning_other_than_y_and_pullback_is_named_when_called_directly(result, got):
    f = _primitive("twice_r")
    ad.rrule.register(f)(lambda x: result(f(x), lambda g: (ad.NoTangent(), 2 * g)))
    # before: ad.rrule returned it as it was (None: as if no rule existed), check_rrule
    # passed a list, and rrule_via_ad returned y alone
    with pytest.raises(TypeError, match=rf"^rrule\(.*twice_r, \*args\): the rrule of .*twice_r {got}"):
        ad.rrule(f, X)
    with pytest.raises(TypeError, match=rf"^rrule_via_ad\(.*twice_r, \*args\): .*{got}"):
        ad.rrule_via_ad(f, X)
    with pytest.raises(AssertionError, match=rf"check_rrule\(.*twice_r\): the rrule of .*{got}"):
        ad.testing.check_rrule(f, X)


@pytest.mark.parametrize("result, got", [
    (lambda y, dy: [y, dy], "returned a list"),
    (lambda y, dy: y, "returned a ndarray"),
    (lambda y, dy: None, "returned a NoneType"),
    (lambda y, dy: (y, dy, 0), "returned 3 values"),
])
def test_an_frule_returning_other_than_a_pair_is_named_when_called_directly(result, got):
    f = _primitive("twice_f")
    ad.frule.register(f)(lambda t, x: result(f(x), 2 * t[1]))
    with pytest.raises(TypeError, match=rf"^frule\(tangents, .*twice_f, \*args\): the frule of .*{got}"):
        ad.frule((ad.NoTangent(), X), f, X)
    with pytest.raises(TypeError, match=rf"^frule_via_ad\(tangents, .*twice_f, \*args\): .*{got}"):
        ad.frule_via_ad((ad.NoTangent(), X), f, X)
    with pytest.raises(AssertionError, match=rf"check_frule\(.*twice_f\): the frule {got}"):
        ad.testing.check_frule(f, X)


def test_frule_called_with_an_array_for_its_tangents_is_refused():
    # before: np.ones(2) has len 2 == 1 argument + self slot, and went to the rule
    with pytest.raises(TypeError, match=r"frule\(tangents, numpy.sin, \*args\): tangents must be a tuple"):
        ad.frule(np.ones(2), np.sin, X)


def test_check_rrule_of_a_plain_function_says_it_is_not_a_primitive():
    # before: "register one with @adrules.rrule.register(f)", which refuses a plain function
    with pytest.raises(AssertionError, match=r"not a primitive.*check_grads\(square, \*args\)"):
        ad.testing.check_rrule(square, X)


def square(x):
    return x * x


# ---- registering a rule ----

def test_register_without_the_function_says_which_function_is_missing():
    with pytest.raises(TypeError, match=r"^rrule.register\(\): give the function the rule is for"):
        @ad.rrule.register()
        def cube_rrule(x):
            return x ** 3, lambda g: (ad.NoTangent(), 3 * x ** 2 * g)
    # bare @rrule.register received the rule itself, and was told to make it a primitive
    with pytest.raises(TypeError, match=r"If cube_frule is the rule, the decorator lacks the function it "
                                        r"is for: write @adrules.frule.register\(f\) above def cube_frule"):
        @ad.frule.register
        def cube_frule(tangents, x):
            return x ** 3, 3 * x ** 2 * tangents[1]


@pytest.mark.parametrize("kind", ["rrule", "frule"])
def test_a_rule_that_is_not_a_function_is_refused_when_registered(kind):
    f = _primitive("not_decorated")
    registry = getattr(ad, kind)
    with pytest.raises(TypeError, match=rf"{kind}.register\(.*not_decorated\) decorated a NoneType"):
        registry.register(f)(None)
    assert f not in registry  # before: None was registered, and failed when f was differentiated


def test_an_frule_without_its_tangents_parameter_is_refused_when_registered():
    f = _primitive("no_tangents")
    with pytest.raises(TypeError, match=r"frule.register\(.*no_tangents\): the rule takes 1 positional "
                                        r"argument, but an frule receives tangents then the arguments"):
        @ad.frule.register(f)
        def no_tangents_frule(x):
            return f(x), 2.0


def test_a_rule_called_with_arguments_it_does_not_take_names_the_rule():
    @ad.primitive
    def mul(a, b):
        return a * b

    @ad.rrule.register(mul)
    def mul_rrule(a):  # forgot b
        return mul(a, a), lambda g: (ad.NoTangent(), g * a)

    with pytest.raises(TypeError, match=r"the rrule of .*mul cannot be called as rule\(x1, x2\)"):
        ad.gradient(lambda a: np.sum(mul(a, a)), X)


def test_a_type_error_raised_inside_a_rule_is_not_renamed():
    f = _primitive("body_error")

    @ad.rrule.register(f)
    def body_error_rrule(x):
        raise TypeError("my own message")

    with pytest.raises(TypeError, match="^my own message$") as info:
        ad.gradient(lambda x: np.sum(f(x)), X)
    assert info.value.__cause__ is None  # raised as it was, not "from" itself


@pytest.mark.parametrize("call, message", [
    (lambda: ad.primitive(), r"write @adrules.primitive, without parentheses"),
    (lambda: ad.primitive(3), r"primitive\(3\): a int is not a function"),
    (lambda: ad.non_differentiable(), r"non_differentiable\(\) was given no functions"),
    (lambda: ad.non_differentiable([np.argmax]), r"got a list, not a function.*non_differentiable\(\*functions\)"),
])
def test_primitive_and_non_differentiable_given_no_function(call, message):
    with pytest.raises(TypeError, match=message):
        call()


# ---- scalar_rule ----

@pytest.mark.parametrize("partials, message", [
    ((), r"was given no partials: give one per positional input"),
    ((2.0,), r"partial 0 is a float, not a function; None for an input with no derivative"),
    (((lambda x, y: y,),), r"partial 0 is a tuple.*not in a tuple: scalar_rule\(f, d1, d2\)"),
    ((lambda x: np.exp(x),), r"partial 0 takes 1 positional argument, but each partial is called as d\(x, y\)"),
    ((lambda *, x, y: y,), r"partial 0 has keyword-only parameters x, y"),
])
def test_scalar_rule_partials_that_could_never_be_called_are_refused_when_registered(partials, message):
    f = _primitive("exp_like")
    with pytest.raises(TypeError, match=rf"^scalar_rule\(.*exp_like\):? .*{message}"):
        ad.scalar_rule(f, *partials)
    assert f not in ad.rrule  # before: registered, and failed when f was differentiated


def test_scalar_rule_with_partials_taking_every_input_and_the_output_still_registers():
    @ad.primitive
    def hypot(a, b):
        return np.sqrt(a * a + b * b)

    ad.scalar_rule(hypot, lambda a, b, y: a / y, lambda a, b, y: b / y)
    ad.testing.check_rrule(hypot, np.array([3.0]), np.array([4.0]))


def test_a_scalar_rule_partial_failing_in_a_direct_call_is_named_as_in_the_tracer():
    f = _primitive("three_params")
    ad.scalar_rule(f, lambda x, y, z: 2.0)
    y, back = ad.rrule(f, X)
    with pytest.raises(TypeError, match=r"a partial of scalar_rule\(.*three_params\) failed when called as d\(x, y\)"):
        ad.unthunk(back(np.ones(2))[1])
    with pytest.raises(TypeError, match=r"a partial of scalar_rule\(.*three_params\) failed"):
        ad.frule((ad.NoTangent(), np.ones(2)), f, X)


# ---- Thunk and InplaceableThunk ----

@pytest.mark.parametrize("thunk, what", [
    (lambda: ad.Thunk(3), "fn is a int"),
    (lambda: ad.Thunk(lambda g: 2 * g), "fn is a function that needs arguments"),
])
def test_a_thunk_of_something_other_than_a_function_of_no_arguments_is_named(thunk, what):
    with pytest.raises(TypeError, match=rf"^Thunk\(fn\): {what}.*Thunk\(lambda: 2 \* x \* g\)"):
        ad.unthunk(thunk())


def test_a_thunk_whose_body_raises_a_type_error_keeps_it():
    with pytest.raises(TypeError, match="^inside$"):
        ad.unthunk(ad.Thunk(lambda: (_ for _ in ()).throw(TypeError("inside"))))


def test_inplaceable_thunk_with_its_functions_swapped_or_missing_is_named():
    with pytest.raises(TypeError, match=r"InplaceableThunk\(add_into, thunk\): add_into is a int"):
        ad.InplaceableThunk(3, lambda: np.ones(2))
    swapped = ad.InplaceableThunk(lambda: np.ones(2), lambda b: b + 1)
    with pytest.raises(TypeError, match=r"its thunk is a function that needs arguments.*comes first"):
        ad.unthunk(swapped)


# ---- adrules.testing given bad input ----

@pytest.mark.parametrize("call, message", [
    (lambda: ad.testing.check_rrule(X, X), r"check_rrule\(f, \*args\): f must be the function whose rule to check"),
    (lambda: ad.testing.check_frule(X, X), r"check_frule\(f, \*args\): f must be the function whose rule to check"),
    (lambda: ad.testing.check_rules(X, X), r"check_rules\(f, \*args\): f must be the function whose rule to check"),
    (lambda: ad.testing.check_grads(X, np.sin), r"check_grads\(f, \*args\): f must be the function to check"),
    (lambda: ad.testing.check_rrule(np.sin), r"check_rrule\(numpy.sin\): give the arguments to check the rule at"),
    (lambda: ad.testing.check_frule(np.sin), r"check_frule\(numpy.sin\): give the arguments"),
    (lambda: ad.testing.check_rrule(np.sin, X, fkwargs=["axis"]), r"fkwargs must be a dict of keyword arguments"),
])
def test_the_rule_checks_name_a_bad_function_or_missing_arguments(call, message):
    with pytest.raises(TypeError, match=message):
        call()


def test_check_rrule_of_a_numpy_function_at_a_list_of_numbers_asks_for_an_array():
    # before: the correct rule of np.sin failed, "differs from finite differences by 0.273"
    with pytest.raises(TypeError, match=r"argument 0 is a list of numbers.*pass np.array\(\[0.1, 0.2\]\)"):
        ad.testing.check_rrule(np.sin, [0.1, 0.2])
    ad.testing.check_rrule(np.stack, [np.array([0.1]), np.array([0.2])])  # a list of arrays is one


@pytest.mark.parametrize("f, message", [
    (lambda x: None, r"check_grads\(<lambda>\): f returned None"),
    (lambda x: "loss", r"check_grads\(<lambda>\): f returned a string"),
])
def test_check_grads_names_itself_not_the_pullback_it_calls(f, message):
    with pytest.raises(TypeError, match=message):
        ad.testing.check_grads(f, X)


@pytest.mark.parametrize("rule, message", [
    (lambda f: lambda t, x: (2 * t[1], f(x)), r"returned \(ẏ, y\), the pair the other way round"),
    (lambda f: lambda x, t: (f(x), 2 * t[1]), r"output holding NoTangents: an frule takes the tuple of tangents first"),
    (lambda f: lambda t, x: (f(x), "two"), r"the output tangent is a str, not a number"),
])
def test_check_frule_names_a_pair_swapped_or_a_tangent_that_is_not_a_number(rule, message):
    # before: "the primal output differs", NumPy's "ufunc 'isnan' not supported", "could not convert"
    f = _primitive("frule_slip")
    ad.frule.register(f)(rule(f))
    with pytest.raises(AssertionError, match=rf"check_frule\(.*frule_slip\): .*{message}"):
        ad.testing.check_frule(f, X)


# ---- a cotangent or tangent that is not numbers ----

@pytest.mark.parametrize("bad, what", [("two", "a str"), ([2.0, 2.0], "a list")])
def test_a_pullback_returning_a_list_or_a_string_is_named_not_called_too_small(bad, what):
    # before: "cotangent of shape () is smaller than its primal's (2,)" for a list of the right length
    f = _primitive("not_numbers")
    ad.rrule.register(f)(lambda x: (f(x), lambda g: (ad.NoTangent(), bad)))
    with pytest.raises(TypeError, match=rf"the pullback of .*not_numbers returned .* for argument 0 .*"
                                        rf"the rule returned {what} where a number or an array of numbers"):
        ad.gradient(lambda x: np.sum(f(x)), X)


def test_a_pullback_returning_a_string_for_a_float_is_named():
    # before: the string reached float() when the gradient was read: "could not convert"
    f = _primitive("string_cotangent")
    ad.rrule.register(f)(lambda x: (f(x), lambda g: (ad.NoTangent(), "two")))
    with pytest.raises(TypeError, match=r"string_cotangent returned .* for argument 0 .*the rule returned a str"):
        ad.gradient(f, 1.5)


def test_an_frule_returning_a_string_tangent_is_named():
    f = _primitive("string_tangent")
    ad.frule.register(f)(lambda t, x: (f(x), "two"))
    with pytest.raises(ValueError, match=r"the rule returned an array of dtype <U3 where a number"):
        ad.jvp(f, (X,), (X,))


def test_a_pullback_with_the_argument_s_cotangent_in_the_self_slot_is_named_not_a_zero_gradient():
    f = _primitive("self_slot_first")

    @ad.rrule.register(f)
    def self_slot_first_rrule(x):
        return f(x), lambda g: (2 * g * x, ad.NoTangent())  # swapped: the gradient was zero

    with pytest.raises(TracerError, match=r"returned numbers in slot 0.*Return \(NoTangent\(\), x̄1\)"):
        ad.gradient(lambda x: np.sum(f(x)), X)


def test_a_zero_in_the_self_slot_is_accepted():
    f = _primitive("zero_self")

    @ad.rrule.register(f)
    def zero_self_rrule(x):
        return f(x), lambda g: (0.0, 2 * g * x)

    (g,) = ad.gradient(lambda x: np.sum(f(x)), X)
    np.testing.assert_allclose(g, 2 * X)


def test_a_scalar_rule_for_a_function_of_two_outputs_is_named_not_a_zero_gradient():
    @ad.primitive
    def sincos(x):
        return np.sin(x), np.cos(x)

    ad.scalar_rule(sincos, lambda x, y: np.cos(x))
    with pytest.raises(TracerError, match=r"returned a tuple of 2 outputs, but it has a scalar_rule"):
        ad.gradient(lambda x: np.sum(sincos(x)[0]), X)  # was [0., 0.]


@pytest.mark.parametrize("where", ["partial", "frule", "thunk"])
def test_a_type_error_from_the_user_s_own_code_is_raised_as_it_was(where):
    """Each was raised 'from' itself (its own __cause__): Dask's serializer then recursed
    until it gave up, and the user got a bare Exception."""
    def own_bug(*args):
        raise TypeError("my own bug")

    f = _primitive(f"own_bug_{where}")
    if where == "partial":
        ad.scalar_rule(f, lambda x, y: own_bug())
        call = lambda: ad.unthunk(ad.rrule(f, X)[1](np.ones(2))[1])  # noqa: E731
    elif where == "frule":
        ad.frule.register(f)(lambda tangents, x: own_bug())
        call = lambda: ad.frule((ad.NoTangent(), X), f, X)  # noqa: E731
    else:
        call = lambda: ad.Thunk(own_bug)()  # noqa: E731
    with pytest.raises(TypeError, match="^my own bug$") as info:
        call()
    assert info.value.__cause__ is None


def test_scalar_rule_refuses_more_partials_than_the_function_has_inputs():
    """Two partials for a one-argument function were accepted (the second never called)."""
    @ad.primitive
    def double(x):
        return 2 * x

    with pytest.raises(TypeError, match=r"scalar_rule\(.*double\) was given 2 partials, but .*double takes "
                                        r"1 positional argument: give one partial per input"):
        ad.scalar_rule(double, lambda x, y: 2.0, lambda x, y: 0.0)
    with pytest.raises(TypeError, match=r"scalar_rule\(numpy.exp\) was given 2 partials, but numpy.exp takes 1"):
        ad.scalar_rule(np.exp, lambda x, y: y, lambda x, y: y)
