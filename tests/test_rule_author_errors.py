"""What a rule author sees for bad input: each error names the function the user called,
the argument at fault and the fix (an audit of the rule author's experience)."""

import numpy as np
import pytest

import adrules as ad

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
    (lambda: ad.rrule_via_ad(lambda x: x, 1j), "rrule_via_ad(<lambda>): argument 1 is complex"),
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
