"""The tracer: NumPy protocols, operators, indexing, attributes and methods, dtypes,
tape release and nested differentiation.

Every derivative is compared with central finite differences of the same function on
plain NumPy arrays, or with derivatives worked out by hand.
"""

import gc
import sys
import tracemalloc
import weakref

import numpy as np
import pytest

import adrules as ad

RNG = np.random.default_rng(0)
X23 = RNG.uniform(0.5, 1.5, size=(2, 3))
V3 = np.array([0.3, -0.7, 1.1])


def weights(shape):
    """A fixed, non-trivial output cotangent for ``shape``."""
    n = int(np.prod(shape))
    return (np.cos(np.arange(n)) + 1.5).reshape(shape)


def num_grad(f, x, h=1e-6):
    """Central differences of scalar ``f`` at float64 array or float ``x``."""
    if isinstance(x, float):
        return (f(x + h) - f(x - h)) / (2 * h)
    x = np.asarray(x, dtype=np.float64)
    g = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[i] = h
        g[i] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def num_jvp(f, x, v, h=1e-6):
    return (np.asarray(f(x + h * v)) - np.asarray(f(x - h * v))) / (2 * h)


def check_against_fd(f, x, rtol=1e-6, atol=1e-8):
    """Reverse mode with a weighted cotangent, and forward mode along a random tangent."""
    y_plain = f(x)
    w = weights(np.shape(y_plain))
    loss = lambda x: np.sum(np.asarray(f(x)) * w)  # noqa: E731  (plain numpy)
    y, back = ad.pullback(f, x)
    np.testing.assert_allclose(y, y_plain, rtol=1e-12)
    (g,) = back(w if np.ndim(y_plain) else float(w))
    np.testing.assert_allclose(g, num_grad(loss, x), rtol=rtol, atol=atol)
    v = RNG.uniform(-1, 1, size=np.shape(x))
    _, dy = ad.jvp(f, (x,), (v,))
    dy = np.broadcast_to(ad.unthunk(dy), np.shape(y_plain)) if dy is not ad.ZeroTangent() else 0 * y_plain
    np.testing.assert_allclose(dy, num_jvp(f, x, v), rtol=rtol, atol=atol)


# ---- ufuncs, operators and reflected operators ---------------------------------------

C23 = np.array([[2.0, -1.0, 0.5], [1.5, 3.0, -2.0]])

ELEMENTWISE = {
    "np.sin": lambda x: np.sin(x),
    "np.exp*np.log": lambda x: np.exp(x) * np.log(x),
    "np.tanh(x)**2": lambda x: np.tanh(x) ** 2,
    "x + x": lambda x: x + x,
    "x * x * x": lambda x: x * x * x,
    "x - 3": lambda x: x - 3.0,
    "x / (1 + x)": lambda x: x / (1.0 + x),
    "x ** 3": lambda x: x ** 3,
    "x ** 0.5": lambda x: x ** 0.5,
    "x ** x": lambda x: x ** x,
    "2 ** x": lambda x: 2.0 ** x,
    "-x": lambda x: -x,
    "+x": lambda x: +x,
    "abs(x - 1)": lambda x: abs(x - 1.0),
    "1 / x": lambda x: 1.0 / x,
    "3 - x": lambda x: 3.0 - x,
    "ndarray + x": lambda x: C23 + x,
    "ndarray - x": lambda x: C23 - x,
    "ndarray * x": lambda x: C23 * x,
    "ndarray / x": lambda x: C23 / x,
    "ndarray ** x": lambda x: np.abs(C23) ** x,
    "np.float64 * x": lambda x: np.float64(2.5) * x,
    "np.add(ndarray, x)": lambda x: np.add(C23, x),
    "np.maximum(x, 1)": lambda x: np.maximum(x, 1.0),
    "np.where(x > 1, x, x * x)": lambda x: np.where(x > 1.0, x, x * x),
    "np.hypot(x, ndarray)": lambda x: np.hypot(x, C23),
    "broadcast row": lambda x: x * np.array([1.0, 2.0, 3.0]),
    "broadcast column": lambda x: x + np.array([[1.0], [2.0]]),
}


@pytest.mark.parametrize("name", list(ELEMENTWISE))
def test_elementwise_against_finite_differences(name):
    check_against_fd(ELEMENTWISE[name], X23.copy())


@pytest.mark.parametrize("name", ["np.sin", "x * x * x", "1 / x", "ndarray * x", "x ** x"])
def test_elementwise_on_python_float(name):
    f = ELEMENTWISE[name] if "ndarray" not in name else (lambda x: np.float64(3.0) * x)
    (g,) = ad.gradient(f, 0.8)
    assert isinstance(g, float)
    assert g == pytest.approx(num_grad(f, 0.8), rel=1e-7)


def test_python_float_inputs_give_python_float_gradients():
    ga, gb = ad.gradient(lambda a, b: a * b + np.sin(a), 2.0, 3.0)
    assert type(ga) is float and type(gb) is float
    assert ga == pytest.approx(3.0 + np.cos(2.0))
    assert gb == pytest.approx(2.0)


def test_unused_float_input_gets_zero_float():
    ga, gb = ad.gradient(lambda a, b: a * 2.0, 2.0, 3.0)
    assert ga == 2.0
    assert gb == 0.0 and isinstance(gb, float)


def test_unused_array_input_gets_dense_zeros():
    ga, gb = ad.gradient(lambda a, b: np.sin(a), 0.5, np.ones((2, 2), np.float32))
    assert isinstance(gb, np.ndarray) and gb.shape == (2, 2) and gb.dtype == np.float32
    assert not gb.any()


def test_same_input_used_many_times_accumulates():
    (g,) = ad.gradient(lambda x: x * x + x * 3.0 + np.sin(x) * x, 0.7)
    assert g == pytest.approx(2 * 0.7 + 3.0 + np.cos(0.7) * 0.7 + np.sin(0.7))


@pytest.mark.parametrize("square", [lambda x: x * x, lambda x: np.multiply(x, x)],
                         ids=["x * x", "np.multiply(x, x)"])
def test_a_value_times_itself_in_every_mode(square):
    # recorded as one np.square: the value must still be NumPy's x * x to the bit, and
    # the derivatives 2x in reverse, forward and second order
    x = np.array([0.5, -1.5, 3.0, 1e-3])
    v = np.array([1.0, 2.0, -0.5, 4.0])
    y, (g,) = ad.value_and_gradient(lambda x: np.sum(np.sin(square(x))), x)
    assert y == np.sum(np.sin(x * x))
    np.testing.assert_allclose(g, np.cos(x * x) * 2 * x, rtol=1e-14)
    _, dy = ad.jvp(square, (x,), (v,))
    np.testing.assert_array_equal(dy, 2 * x * v)
    np.testing.assert_allclose(ad.hessian(lambda x: np.sum(square(x)), x), 2 * np.eye(4), rtol=1e-14)
    c = np.array([2.0, 3.0, 4.0, 5.0])  # a constant times itself: nothing traced
    assert np.array_equal(ad.gradient(lambda x: np.sum(square(c) * x), x)[0], c * c)


def test_comparisons_return_plain_booleans_and_cut_gradients():
    x = np.array([0.5, 1.5, 2.5])
    seen = []

    def f(x):
        masks = [x > 1.0, x >= 1.5, x < 2.0, x <= 1.5, x == 1.5, x != 1.5,
                 np.array([1.0, 1.0, 3.0]) < x, 1.0 < x]
        for m in masks:
            seen.append(type(m))
        return x * masks[0] + x * masks[6]

    y, back = ad.pullback(f, x)
    np.testing.assert_array_equal(y, [0.0, 3.0, 2.5])
    np.testing.assert_array_equal(back(np.ones(3))[0], [0.0, 2.0, 1.0])
    assert all(t is np.ndarray or t is np.bool_ or t is bool for t in seen)


def test_bitwise_operators_are_bitwise_as_on_ndarray():
    """``&``, ``|``, ``^`` and ``~`` on a traced value do what they do on an ndarray:
    bitwise on integers (logical_and would give [True, True] for 6 & 3), logical on
    booleans, an error on floats. Integer and boolean values are traced only when a
    rule returns them, so the boxes are made by hand here."""
    from adrules.tracer import Trace, TraceOpen

    trace = Trace(None)
    i, b = trace.leaf(np.array([6, 5, 0])), trace.leaf(np.array([True, False, True]))
    with TraceOpen():
        results = [i & 3, 3 & i, i | 3, np.array([1, 2, 4]) | i, i ^ 5, ~i,
                   b & np.array([True, True, False]), b | False, ~b]
    expected = [[2, 1, 0], [2, 1, 0], [7, 7, 3], [7, 7, 4], [3, 0, 5], [-7, -6, -1],
                [True, False, False], [True, False, True], [False, True, False]]
    for got, want in zip(results, expected):
        assert type(got) is np.ndarray  # bitwise results carry no tangent
        np.testing.assert_array_equal(got, want)
    with pytest.raises(TypeError):
        ad.gradient(lambda x: np.sum(x & 1), np.ones(2))


def test_a_tape_node_holds_the_fields_its_constants_name():
    """The node layout that ``tracer.NODE_*`` documents is the one ``record`` writes: the
    rule's entry, the output's slot, each argument's slot (an element's for a list
    argument, ``NO_SLOT`` for a constant), the primal arguments, then the pullback."""
    from adrules import tracer

    trace = tracer.Trace(None)
    x, y = trace.leaf(np.array([1.0, 2.0])), trace.leaf(np.array([3.0, 4.0]))
    with tracer.TraceOpen():
        product = x * 3.0
        stacked = np.stack([y, np.array([5.0, 6.0])])
    first, second = trace.nodes
    assert first[tracer.NODE_ENTRY].name == "numpy.multiply"
    assert first[tracer.NODE_OUT] == product.slot == 2
    assert list(first[tracer.NODE_ARG_SLOTS]) == [x.slot, tracer.NO_SLOT] == [0, -1]
    np.testing.assert_array_equal(first[tracer.NODE_VALUES][0], [1.0, 2.0])
    assert first[tracer.NODE_VALUES][1] == 3.0
    assert second[tracer.NODE_OUT] == stacked.slot == 3
    assert [list(s) for s in second[tracer.NODE_ARG_SLOTS]] == [[y.slot, tracer.NO_SLOT]] == [[1, -1]]
    assert callable(second[tracer.NODE_PULLBACK]) and x.owner is trace and stacked.owner is trace


def test_masks_combined_with_and_or_still_select_gradients():
    x = np.array([-1.0, 0.5, 1.5, 2.5])
    (g,) = ad.gradient(lambda x: np.sum(np.where((x > 0) & (x < 2) | (x > 2.4), x * x, 0.0)), x)
    np.testing.assert_array_equal(g, [0.0, 1.0, 3.0, 5.0])  # d(x^2) = 2x where selected


def test_python_control_flow_on_traced_comparisons():
    def f(x):
        if x > 0:
            return x * x
        return -x

    assert ad.gradient(f, 3.0) == (6.0,)
    assert ad.gradient(f, -3.0) == (-1.0,)


# ---- NumPy functions (reductions, shape, linalg) ----------------------------------------

FUNCTIONS = {
    "np.sum": lambda x: np.sum(x * x),
    "np.sum(axis=0)": lambda x: np.sum(np.sin(x), axis=0),
    "np.mean": lambda x: np.mean(x ** 3),
    "np.prod": lambda x: np.prod(x),
    "np.max": lambda x: np.max(x * C23),
    "np.min": lambda x: np.min(x * C23),
    "np.reshape": lambda x: np.reshape(x, (3, 2)) * np.arange(6.0).reshape(3, 2),
    "np.transpose": lambda x: np.transpose(x) * np.arange(6.0).reshape(3, 2),
    "np.dot": lambda x: np.dot(x, V3),
    "np.matmul": lambda x: x @ np.arange(6.0).reshape(3, 2),
    "ndarray @ x": lambda x: np.arange(4.0).reshape(2, 2) @ x,
    "x @ x.T": lambda x: x @ x.T,
    "np.stack": lambda x: np.stack([x, x * x]),
    "np.concatenate": lambda x: np.concatenate([x, np.sin(x)], axis=1),
    "np.exp then np.sum": lambda x: np.exp(x) / np.sum(np.exp(x)),
}


@pytest.mark.parametrize("name", list(FUNCTIONS))
def test_array_functions_against_finite_differences(name):
    check_against_fd(FUNCTIONS[name], X23.copy())


# ---- indexing -------------------------------------------------------------------------------

X6 = np.array([0.5, 1.0, 1.5, 2.0, 2.5, 3.0])

INDEXING = {
    "x[1:4]": lambda x: x[1:4],
    "x[::-2]": lambda x: x[::-2],
    "x[2]": lambda x: x[2],
    "x[-1]": lambda x: x[-1],
    "x[[0, 0, 3, 0]] (repeated)": lambda x: x[[0, 0, 3, 0]],
    "x[np.array([5, 1, 5])]": lambda x: x[np.array([5, 1, 5])],
    "x[x > 1.2] (mask)": lambda x: x[x > 1.2],
    "x[bool mask array]": lambda x: x[np.array([True, False, True, False, False, True])],
    "x[None, 1:]": lambda x: x[None, 1:],
    "x[...]": lambda x: x[...] * x,
    "x[1:][::2][0] chained": lambda x: x[1:][::2][0] * x[1:][::2][1],
}


@pytest.mark.parametrize("name", list(INDEXING))
def test_indexing_against_finite_differences(name):
    check_against_fd(INDEXING[name], X6.copy())


INDEXING_2D = {
    "x[0]": lambda x: x[0],
    "x[:, 1]": lambda x: x[:, 1],
    "x[1, 2]": lambda x: x[1, 2],
    "x[:, [2, 2, 0]]": lambda x: x[:, [2, 2, 0]],
    "x[[1, 0, 1], [0, 0, 2]]": lambda x: x[[1, 0, 1], [0, 0, 2]],
    "x[x > 1]": lambda x: x[x > 1.0],
    "x[..., -1]": lambda x: x[..., -1],
    "x[:, None, ::2]": lambda x: x[:, None, ::2],
}


@pytest.mark.parametrize("name", list(INDEXING_2D))
def test_2d_indexing_against_finite_differences(name):
    check_against_fd(INDEXING_2D[name], X23.copy())


def test_repeated_fancy_index_accumulates_exactly():
    (g,) = ad.gradient(lambda x: np.sum(x[[0, 0, 0, 2]]), np.zeros(3))
    np.testing.assert_array_equal(g, [3.0, 0.0, 1.0])


def test_iterating_over_a_traced_array():
    (g,) = ad.gradient(lambda x: sum(row * row for row in x), np.array([1.0, 2.0, 3.0]))
    np.testing.assert_array_equal(g, [2.0, 4.0, 6.0])


# ---- attributes -------------------------------------------------------------------------------

def test_attributes_of_traced_arrays():
    seen = {}

    def f(x):
        seen.update(shape=x.shape, ndim=x.ndim, size=x.size, dtype=x.dtype, len=len(x),
                    Tshape=x.T.shape)
        return np.sum(x)

    ad.gradient(f, np.ones((2, 3), np.float32))
    assert seen == {"shape": (2, 3), "ndim": 2, "size": 6, "dtype": np.float32, "len": 2,
                    "Tshape": (3, 2)}


def test_attributes_of_traced_python_float():
    seen = {}

    def f(x):
        seen.update(shape=x.shape, ndim=x.ndim, size=x.size, dtype=x.dtype)
        return x * 2.0

    ad.gradient(f, 1.0)
    assert seen == {"shape": (), "ndim": 0, "size": 1, "dtype": np.float64}


def test_dot_T_gradient():
    w = np.arange(6.0).reshape(3, 2)
    check_against_fd(lambda x: x.T * w, X23.copy())


# ---- methods ------------------------------------------------------------------------------------

METHODS = {
    "x.sum()": lambda x: (x * x).sum(),
    "x.sum(axis=1)": lambda x: np.sin(x).sum(axis=1),
    "x.mean()": lambda x: (x ** 3).mean(),
    "x.mean(axis=0)": lambda x: (x ** 3).mean(axis=0),
    "x.max()": lambda x: (x * C23).max(),
    "x.min(axis=1)": lambda x: (x * C23).min(axis=1),
    "x.prod()": lambda x: x.prod(),
    "x.reshape(3, 2)": lambda x: x.reshape(3, 2) * np.arange(6.0).reshape(3, 2),
    "x.reshape((6,))": lambda x: x.reshape((6,)) * np.arange(6.0),
    "x.reshape(-1)": lambda x: x.reshape(-1) * np.arange(6.0),
    "x.ravel()": lambda x: x.ravel() * np.arange(6.0),
    "x.transpose()": lambda x: x.transpose() * np.arange(6.0).reshape(3, 2),
    "x.transpose(1, 0)": lambda x: x.transpose(1, 0) * np.arange(6.0).reshape(3, 2),
    "x.dot(v)": lambda x: x.dot(V3),
    "x.T.dot(x)": lambda x: x.T.dot(x),
}


@pytest.mark.parametrize("name", list(METHODS))
def test_methods_against_finite_differences(name):
    check_against_fd(METHODS[name], X23.copy())


# ---- dtypes ------------------------------------------------------------------------------------

def test_astype_float32_keeps_gradient():
    x = np.array([0.5, 1.0, 2.0])

    def f(x):
        y = x.astype(np.float32)
        assert y.dtype == np.float32
        return np.sum(y * y)

    (g,) = ad.gradient(f, x)
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, 2 * x, rtol=1e-6)


def test_astype_float64_from_float32_keeps_gradient_and_input_dtype():
    x = np.array([0.5, 1.0, 2.0], np.float32)
    (g,) = ad.gradient(lambda x: np.sum(np.sin(x.astype(np.float64))), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, np.cos(x.astype(np.float64)), rtol=1e-6)


def test_astype_int_stops_gradient():
    x = np.array([0.5, 1.7, 2.2])
    y, back = ad.pullback(lambda x: x.astype(np.int64) * x, x)
    np.testing.assert_array_equal(y, [0.0, 1.7, 4.4])
    np.testing.assert_array_equal(back(np.ones(3))[0], [0.0, 1.0, 2.0])


def test_astype_in_forward_mode():
    x = np.array([0.5, 1.0], np.float32)
    y, dy = ad.jvp(lambda x: x.astype(np.float64) * 2.0, (x,), (np.ones(2, np.float32),))
    np.testing.assert_allclose(dy, [2.0, 2.0])
    y, dy = ad.jvp(lambda x: x.astype(np.int32) * x, (np.array([1.5, 2.5]),), (np.ones(2),))
    np.testing.assert_allclose(dy, [1.0, 2.0])


def test_float32_gradient_stays_float32():
    x = np.array([0.1, 0.2], np.float32)
    (g,) = ad.gradient(lambda x: np.sum(np.exp(x) * 3.0), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 3 * np.exp(x), rtol=1e-6)


def test_numpy_float32_scalar_input():
    (g,) = ad.gradient(lambda x: x * x, np.float32(3.0))
    assert np.asarray(g).dtype == np.float32
    assert float(g) == 6.0


def test_integer_argument_is_refused_and_left_out_with_argnums():
    # it got NoTangent(), silently: w - lr * g left it as it was
    with pytest.raises(TypeError, match=r"argument 1 is an integer \(3\).*argnums=0"):
        ad.gradient(lambda x, k: x ** k, 2.0, 3)
    assert ad.grad(lambda x, k: x ** k)(2.0, 3) == pytest.approx(12.0)


def test_integer_array_argument_is_refused_and_inside_a_container_gets_no_tangent():
    with pytest.raises(TypeError, match=r"argument 1 is an array of dtype int64"):
        ad.gradient(lambda x, i: np.sum(x * i), np.ones(3), np.arange(3))
    gx, gi = ad.gradient(lambda x, d: np.sum(x * d["i"]), np.ones(3), {"i": np.arange(3)})
    np.testing.assert_array_equal(gx, [0.0, 1.0, 2.0])
    assert gi["i"] is ad.NoTangent()


# ---- the tape is released ----------------------------------------------------------------------

class Payload:
    """An object we can take a weak reference to."""

    def __init__(self):
        self.data = np.ones(200_000)


HELD = []


@ad.primitive
def hold(x):
    return x * 1.0


@ad.rrule.register(hold)
def hold_rrule(x):
    payload = Payload()
    HELD.append(weakref.ref(payload))

    def hold_pullback(g):
        assert payload.data.shape == (200_000,)
        return ad.NoTangent(), g

    return x * 1.0, hold_pullback


def test_tape_and_captured_state_released_after_gradient():
    HELD.clear()
    big_refs = []

    def f(x):
        big = x * np.ones(200_000)  # a big traced intermediate
        big_refs.append(weakref.ref(big.value))
        return np.sum(hold(big)) * 2.0

    (g,) = ad.gradient(f, 1.5)
    assert g == 400_000.0
    gc.collect()
    assert HELD and HELD[0]() is None
    assert big_refs and big_refs[0]() is None


def test_tape_released_when_pullback_dropped():
    HELD.clear()
    y, back = ad.pullback(lambda x: hold(x * 2.0), np.ones(3))
    np.testing.assert_array_equal(back(np.ones(3))[0], [2.0, 2.0, 2.0])
    del back
    gc.collect()
    assert HELD[0]() is None


def test_tape_released_without_cycle_collector():
    HELD.clear()
    gc.disable()
    try:
        ad.gradient(lambda x: hold(x) * 3.0, 1.0)
        assert HELD[0]() is None
    finally:
        gc.enable()


def test_repeated_gradients_do_not_accumulate_memory():
    f = lambda x: np.sum(np.sin(x * np.ones(50_000)) ** 2)  # noqa: E731
    ad.gradient(f, 0.3)
    gc.collect()
    tracemalloc.start()
    try:
        ad.gradient(f, 0.3)
        gc.collect()
        base, _ = tracemalloc.get_traced_memory()
        for _ in range(20):
            ad.gradient(f, 0.3)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert after - base < 400_000  # one 50_000-float array is 400 kB


# ---- nesting -----------------------------------------------------------------------------------

def d(f):
    """The derivative of a scalar function of a scalar, by reverse mode."""
    return lambda x: ad.gradient(f, x)[0]


def fwd(f):
    """The derivative of a scalar function of a scalar, by forward mode."""
    return lambda x: ad.jvp(f, (x,), (1.0,))[1]


@pytest.mark.parametrize("x", [0.3, 1.7, -2.1])
def test_second_and_third_derivatives_of_sin(x):
    assert d(d(np.sin))(x) == pytest.approx(-np.sin(x), rel=1e-12)
    assert d(d(d(np.sin)))(x) == pytest.approx(-np.cos(x), rel=1e-12)


@pytest.mark.parametrize("x", [0.5, 1.3])
def test_third_derivative_of_a_composite(x):
    f = lambda x: x ** 4 + np.exp(2.0 * x) / x  # noqa: E731
    # f''' = 24x + d3/dx3 [e^{2x} / x] = 24x + e^{2x} (8/x - 12/x^2 + 12/x^3 - 6/x^4)
    expected = 24 * x + np.exp(2 * x) * (8 / x - 12 / x ** 2 + 12 / x ** 3 - 6 / x ** 4)
    assert d(d(d(f)))(x) == pytest.approx(expected, rel=1e-10)
    assert fwd(fwd(fwd(f)))(x) == pytest.approx(expected, rel=1e-10)
    assert fwd(d(fwd(f)))(x) == pytest.approx(expected, rel=1e-10)
    assert d(fwd(d(f)))(x) == pytest.approx(expected, rel=1e-10)


def test_fourth_derivative_of_polynomial():
    assert d(d(d(d(lambda x: x ** 5))))(1.5) == pytest.approx(120 * 1.5)


@pytest.mark.parametrize("x", [0.0, 1.0, 3.5, -2.0])
def test_perturbation_confusion_reverse(x):
    # d/dx [x * d/dy (x + y)] = d/dx [x * 1] = 1   (a confused tracer gives 2)
    def f(x):
        return x * ad.gradient(lambda y: x + y, 1.0)[0]

    assert ad.gradient(f, x)[0] == 1.0


@pytest.mark.parametrize("x", [0.0, 1.0, 3.5])
def test_perturbation_confusion_forward(x):
    def f(x):
        return x * ad.jvp(lambda y: x + y, (1.0,), (1.0,))[1]

    assert ad.jvp(f, (x,), (1.0,))[1] == 1.0


@pytest.mark.parametrize("outer, inner", [("rev", "fwd"), ("fwd", "rev")])
def test_perturbation_confusion_mixed(outer, inner):
    def inner_d(g, y):
        return ad.gradient(g, y)[0] if inner == "rev" else ad.jvp(g, (y,), (1.0,))[1]

    def f(x):
        return x * inner_d(lambda y: x + y, 1.0)

    got = ad.gradient(f, 2.0)[0] if outer == "rev" else ad.jvp(f, (2.0,), (1.0,))[1]
    assert got == 1.0


def test_perturbation_confusion_product():
    # d/dx [x * d/dy (x * y)] = d/dx [x * x] = 2x
    def f(x):
        return x * ad.gradient(lambda y: x * y, 1.0)[0]

    assert ad.gradient(f, 3.0)[0] == pytest.approx(6.0)


def test_inner_gradient_of_closure_over_outer_variable():
    # g(x) = d/dy [sin(x * y)] at y=2 = x cos(2x);  g'(x) = cos(2x) - 2x sin(2x)
    def g(x):
        return ad.gradient(lambda y: np.sin(x * y), 2.0)[0]

    x = 0.9
    assert ad.gradient(g, x)[0] == pytest.approx(np.cos(2 * x) - 2 * x * np.sin(2 * x), rel=1e-12)


def _f_vec(x):
    return np.sum(np.sin(x) * x) + 0.5 * (x @ (A3 @ x))


A3 = np.array([[2.0, 1.0, 0.0], [0.5, 3.0, -1.0], [0.0, 2.0, 1.0]])


def _hessian_f_vec(x):
    # d2/dx2 sum(sin(x) x) = diag(2 cos x - x sin x); d2 [0.5 x A x] = (A + A^T) / 2
    return np.diag(2 * np.cos(x) - x * np.sin(x)) + 0.5 * (A3 + A3.T)


def test_forward_over_reverse_hessian_vector_product():
    x = np.array([0.3, -0.5, 1.2])
    v = np.array([1.0, 2.0, -1.0])
    _, hv = ad.jvp(lambda x: ad.gradient(_f_vec, x)[0], (x,), (v,))
    np.testing.assert_allclose(hv, _hessian_f_vec(x) @ v, rtol=1e-12)


def test_reverse_over_forward_hessian_vector_product():
    x = np.array([0.3, -0.5, 1.2])
    v = np.array([1.0, 2.0, -1.0])
    (hv,) = ad.gradient(lambda x: ad.jvp(_f_vec, (x,), (v,))[1], x)
    np.testing.assert_allclose(hv, _hessian_f_vec(x) @ v, rtol=1e-12)


def test_reverse_over_reverse_hessian_vector_product():
    x = np.array([0.3, -0.5, 1.2])
    v = np.array([1.0, 2.0, -1.0])
    (hv,) = ad.gradient(lambda x: np.sum(ad.gradient(_f_vec, x)[0] * v), x)
    np.testing.assert_allclose(hv, _hessian_f_vec(x) @ v, rtol=1e-12)


def test_elementwise_forward_over_reverse_on_arrays():
    x = np.array([0.3, -0.5, 1.2])
    v = np.array([1.0, 2.0, -1.0])
    f = lambda x: np.sum(np.sin(x) * x)  # noqa: E731
    _, hv = ad.jvp(lambda x: ad.gradient(f, x)[0], (x,), (v,))
    np.testing.assert_allclose(hv, (2 * np.cos(x) - x * np.sin(x)) * v, rtol=1e-12)


def test_pullback_inside_gradient():
    # d/dx <back(w), u> where back is the pullback of y = x^2 (elementwise): 2 w u
    u = np.array([1.0, -2.0])
    w = np.array([3.0, 0.5])

    def f(x):
        _, back = ad.pullback(lambda z: z * z, x)
        return np.sum(back(w)[0] * u)

    np.testing.assert_allclose(ad.gradient(f, np.array([0.7, 1.1]))[0], 2 * w * u)


def test_values_inside_nested_gradient_are_traced_by_the_outer_one():
    # the inner gradient's result depends on x, so the outer one differentiates it
    def f(x):
        (g,) = ad.gradient(lambda y: y * y * x, x)  # g = 2 y x at y = x, i.e. 2 x^2
        return g

    assert ad.gradient(f, 1.5)[0] == pytest.approx(4 * 1.5)


def test_big_cotangent_products_never_overwrite_arrays_held_elsewhere():
    # the backward pass writes g * d into d only when d is a temporary nobody else holds
    held = np.full(1 << 17, 3.0)

    @ad.primitive
    def scaled(x):
        return x * 3.0

    ad.scalar_rule(scaled, lambda x, y: held)  # the partial returns an array it keeps
    x = np.linspace(0.0, 1.0, 1 << 17)
    g, = ad.gradient(lambda x: np.sum(scaled(x) * 2.0), x)
    np.testing.assert_array_equal(g, np.full(1 << 17, 6.0))
    np.testing.assert_array_equal(held, np.full(1 << 17, 3.0))
    g, = ad.gradient(lambda x: np.sum(np.sin(x) * 2.0), x)  # temporaries: still right
    np.testing.assert_allclose(g, 2.0 * np.cos(x))


# ---- in-place work during backprop: only into buffers the backward pass made -----------------
# Arrays here have N elements, above the size from which backprop writes into buffers it
# allocated itself instead of allocating again. Each test builds a graph where writing into
# the wrong buffer (a user's array, a read-only broadcast view, a forward value another
# node still reads, a cotangent held by two slots) would change the answer; answers come
# from hand-worked derivatives, and every user array is checked unchanged afterwards.

N = 5000
XN = np.linspace(-1.5, 1.5, N)
CN = np.cos(np.arange(N)) + 2.0
C_ONLY_HERE = CN.copy()  # held by this module alone: one reference besides the tape's


def _frozen(*arrays):
    return [a.copy() for a in arrays]


def test_inplace_shared_intermediate_two_consumers():
    x, keep = XN.copy(), _frozen(XN)

    def f(x):
        h = np.tanh(x)
        return np.sum(h * h) + np.sum(np.sin(h)) + np.sum(h)

    h = np.tanh(XN)
    expected = (2 * h + np.cos(h) + 1.0) * (1.0 - h * h)
    np.testing.assert_allclose(ad.gradient(f, x)[0], expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, keep[0])


def test_inplace_cotangent_passed_to_two_slots():
    # add passes its cotangent through unchanged to both arguments: one array in two slots
    x, y, c = XN.copy(), XN[::-1].copy(), CN.copy()
    keep = _frozen(x, y, c)
    gx, gy = ad.gradient(lambda x, y: np.sum((x + y) * c) + np.sum(x - y) + np.sum(x * x), x, y)
    np.testing.assert_allclose(gx, c + 1.0 + 2 * XN, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gy, c - 1.0, rtol=1e-12, atol=1e-12)
    for a, k in zip((x, y, c), keep):
        np.testing.assert_array_equal(a, k)


def test_inplace_read_only_broadcast_cotangent():
    # sum's pullback gives a big array a read-only broadcast view; more contributions follow
    # into that slot
    x0 = np.linspace(-1.0, 1.0, 70_000)
    x = x0.copy()
    g = ad.gradient(lambda x: np.sum(x ** 2) + np.mean(x) + 2.0 * np.sum(x) + np.sum(x), x)[0]
    np.testing.assert_allclose(g, 3.0 + 2 * x0 + 1.0 / x0.size, rtol=1e-12, atol=1e-12)
    g[:] = 0.0  # the gradient handed out is the caller's to write into
    np.testing.assert_array_equal(x, x0)


def test_inplace_user_cotangent_untouched():
    x, ybar = XN.copy(), CN.copy()
    y, back = ad.pullback(lambda x: x + x * 3.0 + np.sin(x), x)
    first = back(ybar)[0]
    second = back(ybar)[0]  # the tape is kept: a second call must see the same values
    expected = ybar * (4.0 + np.cos(XN))
    np.testing.assert_allclose(first, expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(second, first)
    np.testing.assert_array_equal(ybar, CN)
    np.testing.assert_array_equal(x, XN)


@ad.primitive
def _half_sumsq(x):
    return 0.5 * np.sum(x * x)


@ad.rrule.register(_half_sumsq)
def _half_sumsq_rrule(x):
    def half_sumsq_pullback(g):
        # hands out the forward value itself when it can: a cotangent another node may read
        return ad.NoTangent(), x if g == 1.0 else g * x

    return _half_sumsq(x), half_sumsq_pullback


@ad.primitive
def _dot_with(x, c):
    return np.sum(x * c)


@ad.rrule.register(_dot_with)
def _dot_with_rrule(x, c):
    def dot_with_pullback(g):
        return ad.NoTangent(), c if g == 1.0 else g * c, ad.NoTangent()  # the user's array itself

    return _dot_with(x, c), dot_with_pullback


def test_inplace_forward_value_used_as_cotangent():
    # backward meets _half_sumsq first: h's slot then holds h, which the multiply node still
    # reads for its partials; adding into it would corrupt both h and the answer
    x = XN.copy()

    def f(x):
        h = np.sin(x)
        return np.sum(h * h) + np.sum(np.exp(h)) + _half_sumsq(h)

    h = np.sin(XN)
    expected = (2 * h + h + np.exp(h)) * np.cos(XN)
    np.testing.assert_allclose(ad.gradient(f, x)[0], expected, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(x, XN)


def _user_array_last(x):
    return np.sum(np.tanh(x)) + np.sum(x * x) + _dot_with(x, C_ONLY_HERE)


def test_inplace_user_array_used_as_cotangent():
    # backward meets _dot_with first, so x's slot starts out holding the user's array
    x = XN.copy()
    g = ad.gradient(_user_array_last, x)[0]
    np.testing.assert_allclose(g, 1.0 - np.tanh(XN) ** 2 + CN + 2 * XN, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(C_ONLY_HERE, CN)
    np.testing.assert_array_equal(x, XN)


def _times_user_array(x):
    return np.sum(x * C_ONLY_HERE) * 3.0 + np.sum(np.exp(x))


def test_inplace_partial_returning_user_array():
    # multiply's partial for x is the user's array itself: the product must go elsewhere
    x = XN.copy()
    g = ad.gradient(_times_user_array, x)[0]
    np.testing.assert_allclose(g, 3.0 * CN + np.exp(XN), rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(C_ONLY_HERE, CN)
    np.testing.assert_array_equal(x, XN)


def test_inplace_against_finite_differences_with_broadcasting():
    # big arguments the tape keeps only as shape and dtype, projected through broadcasting
    rng = np.random.default_rng(5)
    x, b, w = rng.normal(size=(100, 60)), rng.normal(size=60), rng.normal(size=(60, 3))
    keep = _frozen(x, b, w)

    def f(x, b, w):
        h = np.tanh(x + b)
        return np.sum(np.tanh(h @ w) ** 2) + np.mean(h * h)

    gx, gb, gw = ad.gradient(f, x, b, w)
    for i, (arg, g) in enumerate(((x, gx), (b, gb), (w, gw))):
        direction = np.cos(np.arange(arg.size)).reshape(arg.shape)
        args = [x, b, w]

        def along(t):
            moved = list(args)
            moved[i] = arg + t * direction
            return f(*moved)

        fd = (along(1e-6) - along(-1e-6)) / 2e-6
        np.testing.assert_allclose(np.sum(g * direction), fd, rtol=1e-6)
    for a, k in zip((x, b, w), keep):
        np.testing.assert_array_equal(a, k)


def test_tape_keeps_no_unread_forward_values():
    # sum(x**2): the square's output is read by no pullback, so backprop needs one fresh
    # n-array (the gradient) at a time, not the forward temporaries as well
    x = np.linspace(0.0, 1.0, 200_000)
    ad.gradient(lambda x: np.sum(x ** 2), x)
    tracemalloc.start()
    try:
        g = ad.gradient(lambda x: np.sum(x ** 2), x)[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    np.testing.assert_array_equal(g, 2.0 * x)
    # On 3.10 a temporary carries one more reference where the pullback looks, so the
    # refcount test that lets `2 * x * g` reuse its own buffer does not fire: one extra
    # n-array, never an unsafe write (the in-place tests above pass on every version).
    assert peak < (1.5 if sys.version_info >= (3, 11) else 2.5) * x.nbytes


def test_tanh_chain_peak_memory():
    # tanh's pullback builds one full-size buffer and multiplies into it; the tape keeps tanh's
    # output (its partial reads it) but not its input
    x = np.linspace(-2.0, 2.0, 200_000)
    f = lambda x: np.sum(np.tanh(np.tanh(x + 1.0) * 0.5))  # noqa: E731
    ad.gradient(f, x)
    tracemalloc.start()
    try:
        g = ad.gradient(f, x)[0]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    t1 = np.tanh(x + 1.0)
    np.testing.assert_allclose(g, (1 - np.tanh(t1 * 0.5) ** 2) * 0.5 * (1 - t1 ** 2), rtol=1e-12, atol=1e-12)
    assert peak < 4.5 * x.nbytes


def _fd(f, x, h=1e-6):
    return np.array([(f(x + h * e) - f(x - h * e)) / (2 * h) for e in np.eye(len(x))])


@pytest.mark.parametrize("name", ["dot", "dot_right", "arctan2", "matmul", "interp", "trapezoid",
                                  "convolve", "lstsq"])
def test_lists_of_numbers_beside_a_traced_array(name):
    """NumPy takes a list of numbers wherever it takes an array; the rules got the list
    itself and failed (``g * b`` with b a list). Both modes, against finite differences."""
    x, L, M = np.array([0.7, -1.3, 0.4]), [0.5, 2.0, -1.0], [[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]]
    f = {
        "dot": lambda x: np.dot(L, x),
        "dot_right": lambda x: np.dot(x, L),
        "arctan2": lambda x: np.sum(np.arctan2(L, x)),
        "matmul": lambda x: M @ x @ [1.0, 1.0],
        "interp": lambda x: np.sum(np.interp(x, [-2.0, 0.0, 2.0], [0.0, 1.0, 3.0])),
        "trapezoid": lambda x: np.trapezoid(x, [0.0, 1.0, 3.0]) if hasattr(np, "trapezoid")
        else np.trapz(x, [0.0, 1.0, 3.0]),
        "convolve": lambda x: np.sum(np.convolve(x, L) ** 2),
        "lstsq": lambda x: np.sum(np.linalg.lstsq(M, x[:2], rcond=None)[0] ** 2),
    }[name]
    want = _fd(f, x)
    np.testing.assert_allclose(ad.gradient(f, x)[0], want, rtol=1e-6, atol=1e-7)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(ad.jvp(f, (x,), (v,))[1], want @ v, rtol=1e-6, atol=1e-7)


def test_shapes_and_axes_given_as_tuples_stay_tuples():
    x = np.arange(6.0)
    g = ad.gradient(lambda x: np.sum(np.reshape(x, (2, 3)) * [1.0, 2.0, 3.0], axis=(0, 1)), x)[0]
    np.testing.assert_array_equal(g, [1.0, 2.0, 3.0, 1.0, 2.0, 3.0])


@pytest.mark.parametrize("name", ["round", "round_digits", "divmod", "rdivmod"])
def test_round_and_divmod_of_traced_values(name):
    """Python's round() and divmod() on traced values raised Python's own TypeError
    ("type Traced doesn't define __round__"). Both modes, against finite differences
    away from the jumps."""
    x = np.array([7.4, 2.3])
    f = {
        "round": lambda x: round(x[0]) * x[1],  # an int, as round(float) is
        "round_digits": lambda x: round(x[0], 1) * x[1] ** 2,
        "divmod": lambda x: divmod(x[0], 2.0)[1] * x[1] + divmod(x[0], 2.0)[0],
        "rdivmod": lambda x: divmod(7.5, x[1])[1] * x[0],
    }[name]
    want = _fd(f, x)
    np.testing.assert_allclose(ad.gradient(f, x)[0], want, rtol=1e-6, atol=1e-7)
    v = np.array([1.0, -2.0])
    np.testing.assert_allclose(ad.jvp(f, (x,), (v,))[1], want @ v, rtol=1e-6, atol=1e-7)


def test_round_of_a_traced_array_is_refused_as_numpy_refuses_it():
    with pytest.raises(TypeError, match=r"np\.round"):
        ad.gradient(lambda x: np.sum(round(x)), np.array([1.4, 2.6]))


def _normalize_(a):  # a helper that works in place, as NumPy code does
    a -= a.mean()
    a /= np.sqrt(np.sum(a * a))


_IN_PLACE = {
    "helper": lambda x: (lambda h: (_normalize_(h), np.sum(h[:2] ** 3))[1])(x * x + 1.0),
    "alias": lambda x: (lambda y: (lambda z: (y.__imul__(3.0), np.sum(z * x))[1])(y))(x * 1.0),
    "list": lambda x: _accumulate_in_place(x),
    "pow_matmul": lambda x: _square_in_place(x),
}


def _accumulate_in_place(x):
    a, seen = x * 2.0, []
    for k in range(3):
        seen.append(a)
        a += np.sin(x) * k  # NumPy: every entry of seen is the same array, changed
    return sum(np.sum(s * x) for s in seen)


def _square_in_place(x):
    m = np.outer(x, x) + np.eye(3)
    view = m
    m @= m.T
    m **= 2
    return np.sum(view * x)


@pytest.mark.parametrize("name", sorted(_IN_PLACE))
def test_in_place_operators_on_traced_arrays_change_every_name_for_them(name):
    """``a /= s`` on a traced array rebound the name a: a helper working in place, or an
    alias, kept the old values, and value and gradient were silently wrong. Value as NumPy
    gives it; gradient, jvp and Hessian against finite differences."""
    f, x = _IN_PLACE[name], np.array([0.7, -1.3, 0.4])
    value, (g,) = ad.value_and_gradient(f, x)
    assert value == pytest.approx(f(x.copy()), rel=1e-12)
    want = _fd(f, x)
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(ad.jvp(f, (x,), (v,))[1], want @ v, rtol=1e-6, atol=1e-7)
    hessian = np.array([_fd(lambda x: ad.gradient(f, x)[0][i], x) for i in range(3)])
    np.testing.assert_allclose(ad.hessian(f, x), hessian, rtol=1e-5, atol=1e-6)


def test_in_place_on_an_argument_and_on_numbers():
    def f(x, s):
        x += 1.0  # the argument: its gradient is still that of the value passed
        s *= 3.0  # a number: immutable in NumPy too, rebound
        return np.sum(x * x) * s
    x = np.array([0.5, 2.0])
    g = ad.gradient(f, x, 2.0)
    np.testing.assert_allclose(g[0], 2 * (x + 1.0) * 6.0)
    assert g[1] == pytest.approx(3.0 * np.sum((x + 1.0) ** 2))


def test_in_place_into_a_plain_array_names_the_operator_and_the_fix():
    def loss(w):
        total = np.zeros(2)
        for row in np.ones((3, 2)):
            total += row * w
        return np.sum(total)

    with pytest.raises(TypeError, match=r"x \+= y \(numpy.add\(x, y, out=x\)\) writes in place into x, a "
                                         r"plain NumPy array.*write x = x \+ y"):
        ad.gradient(loss, np.array([1.0, 2.0]))


@pytest.mark.parametrize("name", ["dot", "where", "maximum", "operator", "reflected", "polyval", "tuple",
                                  "nested"])
def test_lists_of_traced_numbers_where_numpy_takes_an_array(name):
    """NumPy reads [a[0], a[1]] as an array; the reverse rules got the list and failed
    ("can't multiply sequence by non-int", "'>=' not supported between list and int")
    while forward mode worked. Both modes to second order, against finite differences."""
    f = {
        "dot": lambda a: np.dot([a[0], a[1], 2.0], a),
        "where": lambda a: np.sum(np.where([True, False, True], [a[0], a[1], a[2]], a) ** 2),
        "maximum": lambda a: np.sum(np.maximum([a[0], a[1], 0.7], a ** 2) ** 2),
        "operator": lambda a: np.sum([a[0], a[1], 0.7] * a),
        "reflected": lambda a: np.sum((a - [a[2], 1.0, a[0]]) ** 2),
        "polyval": lambda a: np.polyval([a[0], a[1], 1.0], a[2]),
        "tuple": lambda a: np.dot((a[0], a[1], a[2]), a),
        "nested": lambda a: np.sum(np.dot([[a[0], a[1], 0.0], [1.0, a[2], a[0]]], a)),
    }[name]
    ad.testing.check_grads(f, np.array([1.3, 2.0, 0.5]), order=2)


def _aliased_floor_divide(x):
    y = x * 1.0
    alias = y
    y //= 0.5  # no derivative: the alias holds a constant from now on
    return np.sum(alias * x)


def _positive_is_a_copy(x):
    y = x * 2.0
    z = +y
    z += 1.0  # NumPy: +y is a new array, y unchanged
    return np.sum(y * x)


def _argument_aliased_then_changed(x):
    y = x
    y *= 2.0  # NumPy changes x too
    return np.sum(x * y)


@pytest.mark.parametrize("f", [_aliased_floor_divide, _positive_is_a_copy, _argument_aliased_then_changed])
def test_in_place_as_numpy_does_it_in_both_modes(f):
    """Reverse mode rebound the arguments where forward mode changed them, so the same f
    had two values; //= (no derivative) and +y (a copy) broke aliases. The value as
    NumPy's, gradient and jvp against finite differences."""
    x = np.array([0.3, 0.7, 1.2])
    value, (g,) = ad.value_and_gradient(f, x)
    assert value == pytest.approx(f(x.copy()), rel=1e-12)
    want = _fd(lambda x: f(x.copy()), x)
    np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7)
    v = np.array([1.0, -2.0, 0.5])
    y, dy = ad.jvp(f, (x,), (v,))
    assert y == pytest.approx(value, rel=1e-12)
    np.testing.assert_allclose(dy, want @ v, rtol=1e-6, atol=1e-7)


def test_in_place_keeps_the_shape_and_dtype_as_numpy_does():
    def grows(x):
        y = x * 1.0
        y += x[:, None]
        return np.sum(y)

    with pytest.raises(ValueError, match="non-broadcastable output operand"):
        ad.gradient(grows, np.ones(3))

    def float32(x):
        y = x * np.float32(2.0)
        y += np.ones(3)  # float64: NumPy casts the result back into y's float32
        assert y.dtype == np.float32
        return np.sum(y * y)

    g = ad.gradient(float32, np.ones(3, dtype=np.float32))[0]
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 4.0 * (2.0 + 1.0))


def test_a_power_of_a_list_of_traced_numbers():
    # x ** [a[0], 2.0] went to the general path, which cannot take a list holding boxes
    ad.testing.check_grads(lambda a: np.sum(a ** [a[0], 1.0, 2.0]), np.array([0.3, 0.6, 0.9]), order=2)


def test_a_trace_in_an_abandoned_task_stops_at_its_next_operation():
    """The executors' cancel flag reaches the tracer (through adrules._state): a chunk whose
    map has raised stops instead of running on; outside such a task nothing changes."""
    import contextvars

    from executors import _abandon

    flag = _abandon.ThreadFlag()
    task = contextvars.copy_context()
    task.run(_abandon.enter, flag)
    operations = []

    def f(x):
        for _ in range(5):
            x = np.sin(x) * 1.5
            operations.append(x)
            if len(operations) == 2:
                flag.set()  # the map raised elsewhere meanwhile
        return x

    with pytest.raises(_abandon.Abandoned):
        task.run(ad.gradient, f, 0.3)
    assert len(operations) == 2
    (g,) = ad.gradient(lambda x: np.sin(x) * 1.5, 0.3)  # this thread's context: no task
    assert g == pytest.approx(1.5 * np.cos(0.3))
