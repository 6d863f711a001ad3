"""adrules.testing: the checks pass on correct rules and fail, naming the argument, on
deliberately wrong ones."""

import numpy as np
import pytest

import adrules as ad
from adrules.testing import check_frule, check_grads, check_rrule

X = np.array([0.3, -0.7, 1.2])
Y = np.array([1.5, 0.4, -0.9])


# ---- correct rules pass --------------------------------------------------------------------

@pytest.mark.parametrize("f, args", [
    (np.sin, (X,)),
    (np.exp, (0.4,)),
    (np.multiply, (X, Y)),
    (np.multiply, (X, 2.5)),
    (np.true_divide, (X, Y)),
    (np.power, (np.abs(X) + 0.5, Y)),
    (np.add, (np.ones((2, 3)), X)),            # broadcasting
    (np.sin, (X.astype(np.float32),)),
], ids=["sin", "exp-scalar", "mul", "mul-scalar", "div", "pow", "add-broadcast", "sin-f32"])
def test_builtin_rules_pass_both_checks(f, args):
    check_rrule(f, *args)
    check_frule(f, *args)


def test_integer_argument_is_held_fixed():
    check_rrule(np.multiply, X, 3)
    check_frule(np.multiply, X, 3)


@ad.primitive
def cube(x):
    return x * x * x


@ad.rrule.register(cube)
def cube_rrule(x):
    return cube(x), lambda g: (ad.NoTangent(), 3.0 * x * x * g)


@ad.frule.register(cube)
def cube_frule(tangents, x):
    return cube(x), 3.0 * x * x * tangents[1]


def test_user_rules_pass():
    check_rrule(cube, X)
    check_frule(cube, X)
    check_rrule(cube, 0.7)
    check_frule(cube, 0.7)


def test_check_grads_passes_on_correct_code():
    check_grads(lambda x, y: np.sin(x) * cube(y) + x / (1.0 + y * y), X, Y, order=2)
    check_grads(lambda x: np.tanh(x) * x, 0.4, order=3)


def test_check_grads_with_reductions_and_containers():
    check_grads(lambda p: np.sum(p["w"] * X) ** 2 + p["b"] * np.mean(p["w"]),
                {"w": Y, "b": 0.5}, order=2)


def test_check_rrule_thunked_pullback_passes():
    @ad.primitive
    def lazy_mul(a, b):
        return a * b

    @ad.rrule.register(lazy_mul)
    def lazy_mul_rrule(a, b):
        return a * b, lambda g: (ad.NoTangent(), ad.Thunk(lambda: g * b), ad.Thunk(lambda: g * a))

    check_rrule(lazy_mul, X, Y)


# ---- wrong rules fail ------------------------------------------------------------------------

@ad.primitive
def mul_wrong_factor(x, y):
    return x * y


@ad.rrule.register(mul_wrong_factor)
def mul_wrong_factor_rrule(x, y):
    return x * y, lambda g: (ad.NoTangent(), g * y, 2.0 * g * x)  # y's cotangent doubled


@ad.frule.register(mul_wrong_factor)
def mul_wrong_factor_frule(tangents, x, y):
    _, dx, dy = tangents
    return x * y, dx * y + 2.0 * dy * x


def test_check_rrule_catches_wrong_factor_and_names_argument():
    with pytest.raises(AssertionError, match=r"mul_wrong_factor.*argument 1") as info:
        check_rrule(mul_wrong_factor, X, Y)
    assert "argument 0" not in str(info.value)


def test_check_frule_catches_wrong_factor():
    with pytest.raises(AssertionError, match=r"check_frule\(.*mul_wrong_factor\)"):
        check_frule(mul_wrong_factor, X, Y)


def test_check_grads_catches_wrong_rule_in_reverse_mode():
    with pytest.raises(AssertionError, match=r"reverse mode.*argument 1"):
        check_grads(lambda x, y: mul_wrong_factor(x, y) * 1.0, X, Y, modes=("rev",), order=1)


def test_check_grads_catches_wrong_rule_in_forward_mode():
    with pytest.raises(AssertionError, match=r"forward mode"):
        check_grads(lambda x, y: mul_wrong_factor(x, y) * 1.0, X, Y, modes=("fwd",), order=1)


def test_check_grads_reverse_passes_when_wrong_argument_is_constant():
    # only argument 1's cotangent is wrong; with argument 1 a closure constant all is well
    check_grads(lambda x: mul_wrong_factor(x, Y), X, modes=("rev",), order=1)


@ad.primitive
def wrong_shape(x):
    return x * 2.0


@ad.rrule.register(wrong_shape)
def wrong_shape_rrule(x):
    return x * 2.0, lambda g: (ad.NoTangent(), np.full(5, 2.0))


def test_check_rrule_catches_wrong_shape():
    with pytest.raises(AssertionError, match=r"wrong_shape.*argument 0.*(wrong shape|shape)"):
        check_rrule(wrong_shape, X)


@ad.primitive
def scalar_for_vector(x):
    return x * 2.0


@ad.rrule.register(scalar_for_vector)
def scalar_for_vector_rrule(x):
    # returns a scalar where a vector is needed: broadcasts, so only the values are wrong
    return x * 2.0, lambda g: (ad.NoTangent(), np.float64(2.0))


def test_check_rrule_catches_scalar_cotangent_for_vector_argument():
    with pytest.raises(AssertionError, match=r"scalar_for_vector.*argument 0"):
        check_rrule(scalar_for_vector, X)


@ad.primitive
def mutating(x):
    return x * 2.0


@ad.rrule.register(mutating)
def mutating_rrule(x):
    y = x * 2.0
    x[0] = 100.0  # corrupts the caller's array
    return y, lambda g: (ad.NoTangent(), 2.0 * g)


def test_check_rrule_catches_mutated_input():
    with pytest.raises(AssertionError, match=r"mutating.*mutated its input"):
        check_rrule(mutating, X.copy())


@ad.primitive
def mutating_in_pullback(x):
    return x * 2.0


@ad.rrule.register(mutating_in_pullback)
def mutating_in_pullback_rrule(x):
    def mutating_in_pullback_pullback(g):
        x[...] = -1.0  # corrupts the caller's array during the backward pass
        return ad.NoTangent(), 2.0 * g

    return x * 2.0, mutating_in_pullback_pullback


def test_check_rrule_catches_input_mutated_by_pullback():
    with pytest.raises(AssertionError, match=r"mutating_in_pullback.*mutated its input"):
        check_rrule(mutating_in_pullback, X.copy())


@ad.primitive
def mutating_frule_fn(x):
    return x * 2.0


@ad.frule.register(mutating_frule_fn)
def mutating_frule(tangents, x):
    x += 1.0
    return (x - 1.0) * 2.0, 2.0 * tangents[1]


def test_check_frule_catches_mutated_input():
    with pytest.raises(AssertionError, match=r"mutating_frule_fn.*mutated its input"):
        check_frule(mutating_frule_fn, X.copy())


@ad.primitive
def missing_self_slot(x, y):
    return x * y


@ad.rrule.register(missing_self_slot)
def missing_self_slot_rrule(x, y):
    return x * y, lambda g: (g * y, g * x)


def test_check_rrule_catches_wrong_slot_count():
    with pytest.raises(AssertionError, match=r"missing_self_slot.*2 slots.*3"):
        check_rrule(missing_self_slot, X, Y)


@ad.primitive
def bad_self_slot(x):
    return x * 2.0


@ad.rrule.register(bad_self_slot)
def bad_self_slot_rrule(x):
    return x * 2.0, lambda g: (2.0 * g, 2.0 * g)


def test_check_rrule_catches_non_zero_self_slot_of_plain_function():
    with pytest.raises(AssertionError, match=r"bad_self_slot.*self slot"):
        check_rrule(bad_self_slot, X)


@ad.primitive
def wrong_primal(x):
    return x * 2.0


@ad.rrule.register(wrong_primal)
def wrong_primal_rrule(x):
    return x * 3.0, lambda g: (ad.NoTangent(), 2.0 * g)


def test_check_rrule_catches_wrong_primal():
    with pytest.raises(AssertionError, match=r"wrong_primal.*primal"):
        check_rrule(wrong_primal, X)


@ad.primitive
def int_gets_cotangent(x, n):
    return x * n


@ad.rrule.register(int_gets_cotangent)
def int_gets_cotangent_rrule(x, n):
    return x * n, lambda g: (ad.NoTangent(), g * n, np.sum(g * x))


def test_check_rrule_catches_cotangent_for_integer_argument():
    with pytest.raises(AssertionError, match=r"int_gets_cotangent.*argument 1.*not differentiable"):
        check_rrule(int_gets_cotangent, X, 3)


def test_check_rrule_without_rule():
    @ad.primitive
    def unruled(x):
        return x

    with pytest.raises(AssertionError, match=r"no rrule registered.*@adrules\.rrule\.register"):
        check_rrule(unruled, X)
    with pytest.raises(AssertionError, match=r"no frule registered"):
        check_frule(unruled, X)


# ---- second order -------------------------------------------------------------------------------

@ad.primitive
def frozen_cube(x):
    return x * x * x


@ad.rrule.register(frozen_cube)
def frozen_cube_rrule(x):
    # correct first derivative, but computed on the unwrapped value: it is a constant to any
    # outer differentiation, so second derivatives come out wrong
    x0 = x
    while hasattr(x0, "value") and not isinstance(x0, np.ndarray):
        x0 = x0.value
    return frozen_cube(x), lambda g: (ad.NoTangent(), 3.0 * x0 * x0 * g)


def test_check_grads_order_1_passes_order_2_catches_broken_second_derivative():
    check_grads(frozen_cube, X, modes=("rev",), order=1)
    # named as the user's function at order 2 (it was check_grads(<lambda>), the pullback)
    with pytest.raises(AssertionError, match=r"^check_grads\(frozen_cube\) \(reverse mode, order 2: "
                                             r"derivatives of the order-1 pullback\): .*argument 0"):
        check_grads(frozen_cube, X, modes=("rev",), order=2)


@pytest.mark.parametrize("f, x", [
    (np.log, np.array([0.01, 3.0, 200.0])),   # a fixed step of 1e-3: off by 1e-4 relative at 0.01
    (np.sqrt, np.array([1e-3, 4.0])),          # the stencil reached below 0: expected nan
    (lambda x: np.sum(x ** 2), np.array([1e8, -3e8])),  # rounding at 1e17
    (np.arctan, np.array([-1e4, 0.0, 1e4])),
    (lambda x: 1e5 + np.sum(np.sin(x)), np.array([0.0, 0.0])),   # a step fitted to 0 alone: rounding
    (lambda x: np.sum(np.sin(x)), np.array([1e4, 2e4])),         # one fitted to 1e4 alone: truncation
    (lambda x: np.sum(np.sqrt(x)), np.array([1e-4, 5e-4], np.float32)),
], ids=["log-near-0", "sqrt-near-0", "square-at-1e8", "arctan-wide", "offset-at-0", "sin-of-1e4",
        "sqrt-float32"])
def test_finite_differences_step_with_the_argument_s_magnitude(f, x):
    """Correct rules pass at small and big arguments alike."""
    check_grads(f, x, order=1 if x.dtype == np.float32 else 2)
    if f is not np.arctan and getattr(f, "__name__", "") != "<lambda>":
        check_rrule(f, x)
        check_frule(f, x)


def test_check_grads_failure_message_names_function():
    def my_loss(x, y):
        return mul_wrong_factor(x, y) * 1.0

    with pytest.raises(AssertionError, match=r"check_grads\(my_loss\)"):
        check_grads(my_loss, X, Y, modes=("rev",), order=1)


# ---- a primitive taking a struct, with a structural cotangent (ChainRules' Tangent{T}) ----

import dataclasses  # noqa: E402


@dataclasses.dataclass
class _Affine:
    a: np.ndarray
    c: float


def _affine_primitive(wrong=False):
    seen = []

    @ad.primitive
    def apply_affine(m, x):
        return np.sum(m.a * x) + m.c

    @ad.rrule.register(apply_affine)
    def apply_affine_rrule(m, x):
        seen.append(type(m.a))
        k = 2.0 if wrong else 1.0
        return apply_affine(m, x), lambda g: (ad.NoTangent(), ad.Tangent(_Affine, a=k * g * x, c=g), g * m.a)

    @ad.frule.register(apply_affine)
    def apply_affine_frule(tangents, m, x):
        seen.append(type(m.a))
        dm, dx = tangents[1], tangents[2]
        dy = 0.0 if ad.tangents.is_zero(dm) else np.sum(dm.a * x) + dm.c
        return apply_affine(m, x), dy if ad.tangents.is_zero(dx) else dy + np.sum(m.a * dx)

    return apply_affine, seen


def test_a_struct_argument_reaches_its_rules_opened_and_takes_a_structural_cotangent():
    """The rule gets the dataclass with plain arrays in it, and its Tangent(T, a=..., c=...)
    reaches the fields' gradients; before, the rule got the boxes, traced itself, and the
    struct's gradient came back zero beside a leaked box for x."""
    apply_affine, seen = _affine_primitive()
    m, x = _Affine(np.array([1.0, 2.0]), 0.5), np.array([3.0, -1.0])
    gm, gx = ad.gradient(apply_affine, m, x)
    np.testing.assert_array_equal(gm.a, x)
    assert gm.c == 1.0 and type(gx) is np.ndarray
    np.testing.assert_array_equal(gx, m.a)
    (gm_only,) = ad.gradient(lambda m: 3.0 * apply_affine(m, x), m)  # boxes only inside the struct
    np.testing.assert_array_equal(gm_only.a, 3.0 * x)
    _, dy = ad.jvp(lambda m: apply_affine(m, x), (m,), (_Affine(np.array([1.0, 0.0]), 2.0),))
    assert dy == 3.0 + 2.0
    assert seen and all(t is np.ndarray for t in seen), seen
    check_rrule(apply_affine, m, x)
    check_frule(apply_affine, m, x)
    check_grads(apply_affine, m, x, order=1)


def test_check_rrule_catches_a_wrong_structural_cotangent():
    apply_affine, _ = _affine_primitive(wrong=True)
    with pytest.raises(AssertionError, match="argument 0"):
        check_rrule(apply_affine, _Affine(np.array([1.0, 2.0]), 0.5), np.array([3.0, -1.0]))


def test_a_cotangent_that_does_not_fit_the_struct_is_named():
    @ad.primitive
    def first(m):
        return np.sum(m.a)

    @ad.rrule.register(first)
    def first_rrule(m):
        return first(m), lambda g: (ad.NoTangent(), (g, g, g))  # three parts for two fields

    with pytest.raises(ad.tracer.TracerError, match="argument 0 that does not match its structure"):
        ad.gradient(first, _Affine(np.ones(2), 0.5))


def _product_with_wrong_frule(wrong_in):
    @ad.primitive
    def product(a, b):
        return a * b

    @ad.rrule.register(product)
    def product_rrule(a, b):
        return product(a, b), lambda g: (ad.NoTangent(), g * b, g * a)

    @ad.frule.register(product)
    def product_frule(tangents, a, b):
        da, db = tangents[1], tangents[2]
        ka, kb = (2.0, 1.0) if wrong_in == 0 else (1.0, 2.0)
        dy = ad.ZeroTangent()
        if not ad.tangents.is_zero(da):
            dy = dy + ka * da * b
        if not ad.tangents.is_zero(db):
            dy = dy + kb * db * a
        return product(a, b), dy

    return product


@pytest.mark.parametrize("wrong_in", [0, 1])
def test_forward_checks_name_the_argument_whose_tangent_is_wrong(wrong_in):
    """The README's promise for every check: the output tangent along all arguments is
    wrong, and the checks then find which argument's part it is."""
    product = _product_with_wrong_frule(wrong_in)
    a, b = np.array([1.0, 2.0]), np.array([0.5, -1.0])
    match = rf"along argument {wrong_in} \(the others held fixed\)"
    with pytest.raises(AssertionError, match=match):
        check_frule(product, a, b)
    with pytest.raises(AssertionError, match=r"forward mode\): the output tangent " + match):
        check_grads(product, a, b, modes=("fwd",), order=1)


# ---- third round: outputs that are containers, callable structs, keyword arguments ----


def test_a_primitive_returning_a_dict_or_nested_tuples_gets_its_gradient_in_both_modes():
    """A dict or nested-tuple output was returned unboxed: the pullback never ran and the
    gradient was a silent zero. Against hand derivatives."""
    @ad.primitive
    def parts(x):
        return {"a": x ** 2, "b": 3.0 * x}

    @ad.rrule.register(parts)
    def parts_rrule(x):
        return parts(x), lambda g: (ad.NoTangent(), 2 * x * ad.unthunk(g["a"]) + 3.0 * ad.unthunk(g["b"]))

    @ad.frule.register(parts)
    def parts_frule(tangents, x):
        return parts(x), {"a": 2 * x * tangents[1], "b": 3.0 * tangents[1]}

    @ad.primitive
    def nested(x):
        return x ** 2, (3.0 * x, np.sin(x))

    @ad.rrule.register(nested)
    def nested_rrule(x):
        def back(g):
            a, (b, c) = g
            return ad.NoTangent(), 2 * x * a + 3.0 * b + np.cos(x) * c
        return nested(x), back

    x = np.array([1.0, 2.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(parts(x)["b"]), x)[0], [3.0, 3.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(parts(x)["a"]), x)[0], 2 * x)
    np.testing.assert_array_equal(ad.jvp(lambda x: parts(x)["b"], (x,), (np.ones(2),))[1], [3.0, 3.0])
    np.testing.assert_allclose(ad.gradient(lambda x: np.sum(nested(x)[1][1]), x)[0], np.cos(x))
    check_grads(lambda x: parts(x)["a"] + parts(x)["b"], x, order=1)


def test_a_callable_struct_reaches_an_ordinary_rule_opened():
    """A dataclass with __call__ was skipped when opening struct arguments (only
    config=True rules lifted callables): the rule got boxes and the gradient failed."""
    @dataclasses.dataclass
    class Poly:
        c: np.ndarray

        def __call__(self, x):
            return np.polyval(self.c, x)

    @ad.primitive
    def evaluate(p, x):
        return p(x)

    @ad.rrule.register(evaluate)
    def evaluate_rrule(p, x):
        n = len(p.c)

        def back(g):
            dc = np.array([np.sum(g * x ** (n - 1 - k)) for k in range(n)])
            return ad.NoTangent(), ad.Tangent(Poly, c=dc), g * np.polyval(np.polyder(p.c), x)
        return evaluate(p, x), back

    p, x = Poly(np.array([1.0, 2.0, 3.0])), np.array([0.5, 2.0])
    gp, gx = ad.gradient(lambda p, x: np.sum(evaluate(p, x)), p, x)
    np.testing.assert_allclose(gp.c, [np.sum(x ** 2), np.sum(x), 2.0])
    np.testing.assert_allclose(gx, 2 * x + 2.0)


def test_a_pullback_with_slots_for_positional_arguments_only():
    """scale passed by keyword: the tracer binds it at its position, yet a pullback gives
    slots for what was passed by position (ChainRules' convention), as check_rrule with
    fkwargs accepts. A traced keyword argument still needs its slot."""
    @ad.primitive
    def scaled(x, scale=1.0):
        return x * scale

    @ad.rrule.register(scaled)
    def scaled_rrule(x, scale=1.0):
        return scaled(x, scale), lambda g: (ad.NoTangent(), g * scale)

    x = np.array([1.0, 2.0])
    check_rrule(scaled, x, fkwargs={"scale": 2.0})
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(scaled(x, scale=2.0)), x)[0], [2.0, 2.0])
    with pytest.raises(ad.tracer.TracerError, match="returned 2 slots; it must return a tuple of 3"):
        ad.gradient(lambda x, s: np.sum(scaled(x, scale=s)), x, 2.0)


def test_np_where_with_a_float_condition():
    """NumPy takes any truthy condition; the partials got the float condition itself (a
    gradient scaled by it) and the condition's None partial was called when it was traced."""
    x, m = np.array([0.0, 1.0, 2.0]), np.array([0.0, 0.5, 2.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(np.where(m, x ** 2, 5.0 * x)), x)[0],
                                  [5.0, 2.0, 4.0])
    np.testing.assert_array_equal(ad.gradient(lambda x: np.sum(np.where(x, x ** 2, 1.0)), x)[0],
                                  [0.0, 2.0, 4.0])
    np.testing.assert_array_equal(ad.jvp(lambda x: np.where(x, x ** 2, 1.0), (x,), (np.ones(3),))[1],
                                  [0.0, 2.0, 4.0])


def test_check_rrule_names_a_pullback_that_writes_into_its_cotangent():
    """g *= 2 in a pullback corrupts the cotangents of its neighbours on the tape; the
    check said only 'differs from finite differences'."""
    @ad.primitive
    def doubled(x):
        return 2.0 * x

    @ad.rrule.register(doubled)
    def doubled_rrule(x):
        def back(g):
            g *= 2.0
            return ad.NoTangent(), g
        return doubled(x), back

    with pytest.raises(AssertionError, match="wrote into its cotangent"):
        check_rrule(doubled, np.array([1.0, 2.0]))


def test_tuple_tangents_of_different_lengths_do_not_add():
    with pytest.raises(ValueError, match="2 and 1 positional fields"):
        ad.Tangent(tuple, 1.0, 2.0) + ad.Tangent(tuple, 1.0)


def test_frule_called_without_the_self_slot_is_refused():
    """frule((ẋ,), f, x) read ẋ as the self slot and returned a zero tangent."""
    with pytest.raises(TypeError, match=r"1 tangents for 1 argument; give the self slot first"):
        ad.frule((np.ones(3),), np.sin, np.ones(3))
    y, dy = ad.frule((ad.NoTangent(), np.ones(3)), np.sin, np.zeros(3))
    np.testing.assert_array_equal(dy, np.ones(3))


def test_jacobian_of_a_primitive_with_an_rrule_only_goes_by_rows():
    """The default mode picks forward for a square Jacobian; with no frule it now falls
    back to reverse, as hessian does. Against the softmax Jacobian."""
    @ad.primitive
    def softmax(x):
        e = np.exp(x - np.max(x))
        return e / np.sum(e)

    @ad.rrule.register(softmax)
    def softmax_rrule(x):
        y = softmax(x)
        return y, lambda g: (ad.NoTangent(), y * g - y * np.sum(g * y))

    x = np.array([0.1, 0.2, -0.3])
    y = softmax(x)
    np.testing.assert_allclose(ad.jacobian(softmax, x)[0], np.diag(y) - np.outer(y, y), rtol=1e-12)
    with pytest.raises(ad.tracer.NoRuleError, match="no frule"):
        ad.jacobian(softmax, x, mode="fwd")


def test_an_frule_returning_three_values_or_a_tangent_of_another_shape_is_named():
    # a bare "too many values to unpack", and NumPy's "input operand has more dimensions"
    @ad.primitive
    def mul(x, y):
        return x * y

    @ad.frule.register(mul)
    def _(tangents, x, y):
        _, dx, dy = tangents
        return x * y, dx * y, dy * x

    @ad.primitive
    def twice(x):
        return 2.0 * x

    @ad.frule.register(twice)
    def _(tangents, x):
        return 2.0 * x, (2.0 * tangents[1]).reshape(1, -1)

    x, y = np.array([1.0, 2.0, 3.0]), np.array([3.0, 4.0, 5.0])
    with pytest.raises(TypeError, match=r"the frule of .*mul returned 3 values; it must return the pair"):
        ad.jvp(mul, (x, y), (np.ones(3), np.ones(3)))
    with pytest.raises(AssertionError, match=r"the frule returned 3 values"):
        check_frule(mul, x, y)
    with pytest.raises(TypeError, match=r"tangent of shape \(1, 3\) for an output of shape \(3,\)"):
        ad.jvp(twice, (x,), (np.ones(3),))
    with pytest.raises(AssertionError, match=r"the output tangent has shape \(1, 3\), but the output has shape \(3,\)"):
        check_frule(twice, x)


def test_check_rrule_gives_a_namedtuple_output_a_cotangent_of_its_type():
    # it gave a plain tuple, where the tracer gives the NamedTuple: g.mean failed
    from typing import NamedTuple

    class Stats(NamedTuple):
        mean: np.ndarray
        sq: np.ndarray

    @ad.primitive
    def stats(x):
        return Stats(np.mean(x), np.mean(x ** 2))

    @ad.rrule.register(stats)
    def _(x):
        return stats(x), lambda g: (ad.NoTangent(), g.mean / x.size + 2 * x * g.sq / x.size)

    check_rrule(stats, np.array([1.0, 2.0, 4.0]))


@ad.primitive
def _exp_off_by_1e4(x):
    return np.exp(x)


@ad.frule.register(_exp_off_by_1e4)
def _exp_off_by_1e4_frule(tangents, x):
    return np.exp(x), tangents[1] * np.exp(x) * (1 + 1e-4)


@pytest.mark.parametrize("x", [np.array([0.0, 0.0]), np.array([1e-4, -2e-4]), np.array([0.5, -0.3])])
def test_a_rule_off_by_1e4_relative_is_caught_near_zero_too(x):
    # tangents scaled down to a small x's size hid it under the absolute tolerance
    with pytest.raises(AssertionError, match="differs from finite differences"):
        check_frule(_exp_off_by_1e4, x)


# ---- complex arguments: moved along their real and imaginary parts -------------------------

Z = np.array([0.6 + 0.8j, -1.1 + 0.3j])


@ad.primitive
def zcube(z):
    return z ** 3


@ad.rrule.register(zcube, complex=True)
def _zcube_rrule(z):
    def zcube_pullback(g):
        return ad.NoTangent(), np.conj(3 * z ** 2) * g  # conj(f'(z)) * ȳ
    return z ** 3, zcube_pullback


@ad.frule.register(zcube, complex=True)
def _zcube_frule(tangents, z):
    return z ** 3, 3 * z ** 2 * tangents[1]


@ad.primitive
def zcube_no_conj(z):
    return z ** 3


@ad.rrule.register(zcube_no_conj, complex=True)
def _zcube_no_conj_rrule(z):
    def zcube_no_conj_pullback(g):
        return ad.NoTangent(), 3 * z ** 2 * g  # the conjugate forgotten
    return z ** 3, zcube_no_conj_pullback


@ad.primitive
def zsquare_real_only(z):
    return z ** 2


@ad.rrule.register(zsquare_real_only)  # no complex=True
def _zsquare_real_only_rrule(z):
    return z ** 2, lambda g: (ad.NoTangent(), 2 * z * g)


@ad.frule.register(zsquare_real_only)
def _zsquare_real_only_frule(tangents, z):
    return z ** 2, 2 * z * tangents[1]


@ad.primitive
def abs_squared(z):
    return np.real(z * np.conj(z))


@ad.primitive
def abs_squared_wrong(z):
    return np.real(z * np.conj(z))


ad.scalar_rule(abs_squared, lambda z, y: 2 * np.conj(z), complex=True)  # ∂f/∂x - i ∂f/∂y = 2x - 2iy
ad.scalar_rule(abs_squared_wrong, lambda z, y: 2 * z, complex=True)  # ∂f/∂x + i ∂f/∂y: the cotangent


@pytest.mark.parametrize("f, args", [
    (zcube, (Z,)),
    (zcube, (complex(0.5, -0.2),)),
    (zcube, (Z.astype(np.complex64),)),
    (abs_squared, (Z,)),
    (np.exp, (Z,)),
    (np.multiply, (Z, X[:2])),  # a complex and a real argument
    (np.abs, (Z,)),
    (np.conjugate, (Z,)),
], ids=["holomorphic", "python-complex", "complex64", "real-valued", "exp", "mul-mixed", "abs", "conj"])
def test_correct_complex_rules_pass_both_checks(f, args):
    check_rrule(f, *args)
    check_frule(f, *args)


def test_complex_cotangent_is_chainrules_convention():
    # an independent computation: for L(z) = |z|^2 = x^2 + y^2 the cotangent is 2x + 2iy = 2z,
    # and a rule returning its conjugate (JAX's grad) fails
    z = np.array([0.6 + 0.8j])

    @ad.primitive
    def loss(z):
        return np.sum(np.real(z * np.conj(z)))

    @ad.rrule.register(loss, complex=True)
    def _loss_rrule(z):
        return loss(z), lambda g: (ad.NoTangent(), 2 * z * g)

    check_rrule(loss, z)

    with pytest.warns(UserWarning, match="registered again"):  # (on purpose: a wrong rule now)
        @ad.rrule.register(loss, complex=True)
        def _loss_rrule_jax(z):
            return loss(z), lambda g: (ad.NoTangent(), 2 * np.conj(z) * g)

    with pytest.raises(AssertionError, match="argument 0"):
        check_rrule(loss, z)


def test_check_rrule_catches_a_forgotten_conj():
    with pytest.raises(AssertionError, match="missing conjugate") as e:
        check_rrule(zcube_no_conj, Z)
    assert "conj(f'(z)) * ȳ" in str(e.value)
    check_rrule(zcube_no_conj, X)  # right for real values, where conj changes nothing


def test_check_rrule_catches_the_cotangent_given_as_a_scalar_partial():
    with pytest.raises(AssertionError, match="missing conjugate"):
        check_rrule(abs_squared_wrong, Z)
    with pytest.raises(AssertionError, match="(?s)output tangent.*conjugate too many or too few"):
        check_frule(abs_squared_wrong, Z)


def test_a_wrong_complex_rule_is_not_called_a_missing_conj():
    @ad.primitive
    def zdouble(z):
        return 2 * z

    @ad.rrule.register(zdouble, complex=True)
    def _zdouble_rrule(z):
        return 2 * z, lambda g: (ad.NoTangent(), 3 * g)

    with pytest.raises(AssertionError, match="argument 0") as e:
        check_rrule(zdouble, Z)
    assert "missing conjugate" not in str(e.value)


def test_a_real_cotangent_for_a_complex_argument_is_caught():
    @ad.primitive
    def zexp(z):
        return np.exp(z)

    @ad.rrule.register(zexp, complex=True)
    def _zexp_rrule(z):
        return np.exp(z), lambda g: (ad.NoTangent(), np.real(np.conj(np.exp(z)) * g))

    with pytest.raises(AssertionError, match="argument 0"):
        check_rrule(zexp, Z)


def test_complex_output_of_real_argument():
    @ad.primitive
    def phase(x):
        return np.exp(1j * x)

    @ad.rrule.register(phase, complex=True)
    def _phase_rrule(x):
        y = np.exp(1j * x)
        return y, lambda g: (ad.NoTangent(), np.real(np.conj(1j * y) * g))

    check_rrule(phase, X)

    with pytest.warns(UserWarning, match="registered again"):  # (on purpose: a wrong rule now)
        @ad.rrule.register(phase, complex=True)
        def _phase_rrule_no_conj(x):
            y = np.exp(1j * x)
            return y, lambda g: (ad.NoTangent(), np.real(1j * y * g))

    with pytest.raises(AssertionError, match="missing conjugate"):
        check_rrule(phase, X)


def test_rule_without_complex_flag_says_how_to_register():
    with pytest.raises(ad.registry.ComplexRuleError, match=r"rrule.register\(.*zsquare_real_only, complex=True\)"):
        check_rrule(zsquare_real_only, Z)
    with pytest.raises(ad.registry.ComplexRuleError, match=r"frule.register\(.*zsquare_real_only, complex=True\)"):
        check_frule(zsquare_real_only, Z)

    @ad.primitive
    def zsq_scalar(z):
        return z ** 2

    ad.scalar_rule(zsq_scalar, lambda z, y: 2 * z)
    with pytest.raises(ad.registry.ComplexRuleError, match=r"scalar_rule\(.*zsq_scalar, \.\.\., complex=True\)"):
        check_rrule(zsq_scalar, Z)


def test_check_frule_catches_a_conjugated_tangent():
    @ad.primitive
    def zsq(z):
        return z ** 2

    @ad.frule.register(zsq, complex=True)
    def _zsq_frule(tangents, z):
        return z ** 2, np.conj(2 * z) * tangents[1]

    with pytest.raises(AssertionError, match="(?s)output tangent.*conjugate too many or too few"):
        check_frule(zsq, Z)

    with pytest.warns(UserWarning, match="registered again"):  # (on purpose: another wrong rule)
        @ad.frule.register(zsq, complex=True)
        def _zsq_frule_wrong(tangents, z):
            return z ** 2, 3 * z * tangents[1]

    with pytest.raises(AssertionError, match="output tangent") as e:
        check_frule(zsq, Z)
    assert "too many or too few" not in str(e.value)


@pytest.mark.parametrize("f, args", [
    (lambda z: np.sum(np.abs(np.exp(z)) ** 2), (Z,)),
    (lambda z: np.exp(z) * z, (Z,)),               # complex output: complex ȳ in reverse mode
    (lambda x: np.sum(np.imag(np.exp(1j * x))), (X,)),  # real input, complex intermediates
    (lambda z, x: np.real(np.sum(z * x)), (Z, X[:2])),
    (lambda z: np.sum(np.abs(z) ** 2), (Z.astype(np.complex64),)),
    (lambda z: np.sum(np.exp(z)), (Z,)),            # a complex scalar output
    (lambda z: np.exp(z) * np.abs(z), (0.3 + 0.2j,)),  # a Python complex point
], ids=["real-of-complex", "holomorphic", "complex-intermediate", "mixed", "complex64", "complex-scalar-out",
        "python-complex"])
def test_check_grads_complex(f, args):
    check_grads(f, *args, order=2)


def test_check_grads_catches_a_forgotten_conj_through_the_tracer():
    with pytest.raises(AssertionError, match="reverse mode"):
        check_grads(lambda z: np.sum(np.abs(zcube_no_conj(z)) ** 2), Z, modes=("rev",), order=1)


def test_big_complex_arguments_are_checked_along_random_complex_directions():
    rng = np.random.default_rng(1)
    z = rng.normal(size=100) + 1j * rng.normal(size=100)  # beyond the elementwise check's size
    check_rrule(zcube, z)
    check_frule(zcube, z)
    with pytest.raises(AssertionError, match="(?s)random direction.*missing conjugate"):
        check_rrule(zcube_no_conj, z)
