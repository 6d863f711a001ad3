"""ProjectTo, and the projection the tracer applies to every rule output."""

import numpy as np
import pytest

import adrules as ad


# ---- ProjectTo on its own ------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_projects_dtype(dtype):
    p = ad.ProjectTo(np.zeros(3, dtype))
    out = p(np.array([1.0, 2.0, 3.0], dtype=np.float64))
    assert out.dtype == dtype
    np.testing.assert_array_equal(out, [1.0, 2.0, 3.0])


def test_float64_cotangent_for_float32_primal_becomes_float32():
    out = ad.ProjectTo(np.zeros((2, 2), np.float32))(np.full((2, 2), 0.1))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, 0.1, rtol=1e-6)


def test_float32_scalar_primal():
    out = ad.ProjectTo(np.float32(1.0))(0.25)
    assert np.asarray(out).dtype == np.float32
    assert float(out) == 0.25


@pytest.mark.parametrize("shape, gshape, expected", [
    ((3,), (2, 3), [2.0, 2.0, 2.0]),                    # a leading axis was added
    ((2, 1), (2, 3), [[3.0], [3.0]]),                   # a size-1 axis was stretched
    ((1, 3), (4, 2, 3), [[8.0, 8.0, 8.0]]),             # both
    ((), (2, 2), 4.0),                                  # a scalar was broadcast
])
def test_unbroadcasts(shape, gshape, expected):
    out = ad.ProjectTo(np.zeros(shape))(np.ones(gshape))
    assert np.shape(out) == shape
    np.testing.assert_array_equal(out, expected)


def test_unbroadcast_keeps_float32():
    out = ad.ProjectTo(np.zeros((1, 3), np.float32))(np.ones((5, 3)))
    assert out.shape == (1, 3) and out.dtype == np.float32
    np.testing.assert_array_equal(out, [[5.0, 5.0, 5.0]])


def test_drops_imaginary_part_for_real_primal():
    out = ad.ProjectTo(np.zeros(2))(np.array([1.0 + 2.0j, -3.0 + 1.0j]))
    assert out.dtype.kind == "f"
    np.testing.assert_array_equal(out, [1.0, -3.0])


@pytest.mark.parametrize("primal", [3, np.int64(3), np.arange(3), True, np.array([True, False])])
def test_integer_and_bool_primals_get_no_tangent(primal):
    assert ad.ProjectTo(primal)(np.ones(np.shape(primal))) is ad.NoTangent()


@pytest.mark.parametrize("Z", [ad.ZeroTangent, ad.NoTangent])
def test_zeros_pass_through(Z):
    assert ad.ProjectTo(np.zeros(3))(Z()) is Z()


def test_trivial_dimensions_are_reshaped():
    out = ad.ProjectTo(np.zeros((3, 1)))(np.array([1.0, 2.0, 3.0]))
    assert out.shape == (3, 1)
    np.testing.assert_array_equal(out[:, 0], [1.0, 2.0, 3.0])


def test_size_mismatch_raises():
    with pytest.raises(ValueError):
        ad.ProjectTo(np.zeros(3))(np.ones(5))


def test_thunk_is_unthunked():
    out = ad.ProjectTo(np.zeros(2, np.float32))(ad.Thunk(lambda: np.ones(2)))
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [1.0, 1.0])


def test_containers_project_element_by_element():
    p = ad.ProjectTo([np.zeros(2, np.float32), 3, (np.zeros(()), np.zeros(3))])
    out = p([np.ones((4, 2)), 1.0, (np.float64(2.0), np.ones(3))])
    assert isinstance(out, list) and isinstance(out[2], tuple)
    assert out[0].dtype == np.float32
    np.testing.assert_array_equal(out[0], [4.0, 4.0])
    assert out[1] is ad.NoTangent()
    np.testing.assert_array_equal(out[2][1], np.ones(3))


def test_dict_projection_fills_missing_keys_with_zero():
    p = ad.ProjectTo({"w": np.zeros(2, np.float32), "b": np.zeros(())})
    out = p({"w": np.ones((3, 2))})
    assert out["w"].dtype == np.float32
    np.testing.assert_array_equal(out["w"], [3.0, 3.0])
    assert out["b"] is ad.ZeroTangent()


# ---- projection applied automatically by the tracer -----------------------------------

@ad.primitive
def widen(x):
    """Identity, with a rule that returns a broadcast-shaped float64 cotangent."""
    return x * 1


@ad.rrule.register(widen)
def widen_rrule(x):
    def widen_pullback(g):
        # a careless rule: broadcast to (4, *x.shape) and float64 regardless of x
        return ad.NoTangent(), np.broadcast_to(np.asarray(g, dtype=np.float64), (4,) + np.shape(x))

    return x * 1, widen_pullback


def test_tracer_projects_rule_outputs_to_shape_and_float32():
    x = np.array([1.0, 2.0, 3.0], np.float32)
    y, back = ad.pullback(widen, x)
    (g,) = back(np.array([1.0, 2.0, 3.0], np.float32))
    assert g.shape == (3,)
    assert g.dtype == np.float32
    np.testing.assert_array_equal(g, [4.0, 8.0, 12.0])  # the 4 broadcast copies summed


def test_tracer_projection_in_gradient_of_float32_scalar_output():
    x = np.array([0.5, -1.0], np.float32)
    (g,) = ad.gradient(lambda x: _first_plus_second(widen(x * x)), x)
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 4 * 2 * x, rtol=1e-6)


def _first_plus_second(v):
    return v[0] + v[1]


def test_tracer_projects_broadcast_cotangent_of_python_float_input():
    (g,) = ad.gradient(lambda x: _first_plus_second(widen(x) * np.ones(2)), 1.5)
    # d/dx of 2x through widen whose rule sums 4 copies: 4 * 2
    assert isinstance(g, float)
    assert g == 8.0


def test_float32_input_gets_float32_gradient_through_builtin_rules():
    x = np.array([0.1, 0.2, 0.3], np.float32)
    y, back = ad.pullback(lambda x: np.sin(x) * 2.0, x)
    (g,) = back(np.ones(3, np.float32))
    assert g.dtype == np.float32
    np.testing.assert_allclose(g, 2 * np.cos(x.astype(np.float64)), rtol=1e-6)


def test_broadcasting_in_binary_op_unbroadcasts_gradient():
    a = np.array([[1.0], [2.0]])       # (2, 1)
    b = np.array([10.0, 20.0, 30.0])   # (3,)
    y, back = ad.pullback(lambda a, b: a * b, a, b)
    ga, gb = back(np.ones((2, 3)))
    assert ga.shape == (2, 1) and gb.shape == (3,)
    np.testing.assert_array_equal(ga, [[60.0], [60.0]])
    np.testing.assert_array_equal(gb, [3.0, 3.0, 3.0])
