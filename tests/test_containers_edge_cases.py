"""Containers and odd arrays through every derivative, as a researcher passes them: each
test is a case that was wrong (a crash with an unclear message, a type that changed, a
mistake refused by one derivative and taken by another), checked against values derived
by hand."""

from dataclasses import dataclass

import numpy as np
import pytest

import adrules as ad


@dataclass
class Params:
    w: np.ndarray
    k: int = 2


class Scaled:
    """A registered node whose static data is an array (a mask, a scale)."""

    def __init__(self, x, scale):
        self.x, self.scale = x, scale


ad.register_node(Scaled, lambda n: ((n.x,), n.scale), lambda scale, c: Scaled(c[0], scale))


# --- jvp: the tangent given as a list, or as something that is no number -------------

def test_jvp_takes_a_list_tangent_for_an_array_primal():
    # x * 2 on the list [1.0, 0.0] repeated it: "an frule returned a tangent of shape (4,)"
    x = np.array([1.0, 2.0])
    y, dy = ad.jvp(lambda x: x * 2, (x,), ([1.0, 0.0],))
    np.testing.assert_array_equal(dy, [2.0, 0.0])
    y, dy = ad.jvp(lambda x: x + x, (x,), ((1.0, 0.5),))
    np.testing.assert_array_equal(dy, [2.0, 1.0])


def test_jvp_list_tangent_takes_the_primal_dtype():
    _, dy = ad.jvp(lambda x: x * 2, (np.ones(2, np.float32),), ([1, 0],))
    assert dy.dtype == np.float32
    np.testing.assert_array_equal(dy, [2.0, 0.0])


@pytest.mark.parametrize("tangent", ["a", b"a", np.array(["a"])[0]])
def test_jvp_string_tangent_is_named(tangent):
    # was ProjectionError "the rule returned a str": the user's tangent, not a rule
    with pytest.raises(TypeError, match=r"jvp\(<lambda>\): the tangent of argument 0 is a"):
        ad.jvp(lambda x: x * 2, (1.0,), (tangent,))


def test_jvp_object_array_tangent_is_named():
    with pytest.raises(TypeError, match="tangent of argument 0 is an array of dtype object"):
        ad.jvp(lambda x: x * 2, (np.ones(2),), (np.array([1.0, None]),))


# --- hvp: v read as jvp reads tangents -------------------------------------------------

def f_dict(p):
    return p["a"] ** 2 * p["b"] + np.sum(p["w"] ** 3)


P_DICT = {"a": 1.0, "b": 3.0, "w": np.array([1.0, 2.0])}


def test_hvp_takes_v_with_the_keys_in_another_order():
    # refused: "v has structure dict(w=*, b=*, a=*) but x has structure dict(a=*, b=*, w=*)",
    # where jvp and pullback read a dict by key
    h = ad.hvp(f_dict, P_DICT, {"w": np.array([1.0, 1.0]), "b": 0.0, "a": 1.0})
    # H: d2/da2 = 2b = 6, d2/dadb = 2a = 2, d2/dw2 = diag(6 w)
    assert float(h["a"]) == 6.0 and float(h["b"]) == 2.0
    np.testing.assert_allclose(h["w"], [6.0, 12.0])


def test_hvp_takes_a_dict_or_structural_tangent_for_a_dataclass():
    f = lambda p: np.sum(p.w ** 3) * p.k
    x = Params(np.array([1.0, 2.0]))
    for v in ({"w": np.array([1.0, 0.0]), "k": 0}, ad.Tangent(Params, w=np.array([1.0, 0.0]))):
        h = ad.hvp(f, x, v)
        np.testing.assert_allclose(h.w, [12.0, 0.0])  # 6 w k along e0


def test_hvp_still_refuses_v_of_another_structure():
    with pytest.raises(TypeError, match="give v the structure of x"):
        ad.hvp(f_dict, P_DICT, (1.0, 0.0, np.ones(2)))
    with pytest.raises(TypeError, match="give v the structure of x"):
        ad.hvp(f_dict, P_DICT, {"a": 1.0, "b": 0.0, "W": np.ones(2)})
    with pytest.raises(TypeError, match="v has shape"):
        ad.hvp(f_dict, P_DICT, {"a": 1.0, "b": 0.0, "w": np.ones(3)})


def test_hvp_of_a_node_whose_static_data_is_an_array():
    # x's and v's structures were compared with ==: "truth value of an array is ambiguous"
    scale = np.array([3.0, 4.0])
    h = ad.hvp(lambda n: np.sum(n.x ** 3 * n.scale), Scaled(np.array([1.0, 2.0]), scale),
               Scaled(np.ones(2), scale))
    np.testing.assert_allclose(h.x, 6 * np.array([1.0, 2.0]) * scale)


def test_structures_with_array_static_data_compare():
    from adrules.pytrees import flatten
    a = flatten(Scaled(1.0, np.array([3.0, 4.0])))[1]
    assert a == flatten(Scaled(2.0, np.array([3.0, 4.0])))[1]
    assert a != flatten(Scaled(2.0, np.array([3.0, 5.0])))[1]
    assert a != flatten(Scaled(2.0, np.array([3.0, 4.0, 5.0])))[1]
    assert a != flatten(Scaled(2.0, None))[1]
    assert flatten(Scaled(1.0, (np.ones(2), "m")))[1] == flatten(Scaled(2.0, (np.ones(2), "m")))[1]


@ad.primitive
def cube_rev_only(x):
    return x ** 3


@ad.rrule.register(cube_rev_only)
def _cube_rrule(x):
    def cube_pullback(g):
        return ad.NoTangent(), 3 * x ** 2 * g
    return x ** 3, cube_pullback


def test_hvp_reverse_over_reverse_with_a_structural_v_leaving_a_field_out():
    # no frule: hvp goes reverse-over-reverse, where v's left-out field is ZeroTangent()
    f = lambda p: np.sum(cube_rev_only(p["w"])) * p["s"]
    h = ad.hvp(f, {"w": np.array([1.0, 2.0]), "s": 2.0}, ad.Tangent(dict, w=np.array([1.0, 0.0])))
    np.testing.assert_allclose(h["w"], [12.0, 0.0])  # 6 w s along e0
    np.testing.assert_allclose(h["s"], 3.0)  # d2/ds dw0 = 3 w0^2


# --- NumPy scalars keep their type and dtype ------------------------------------------

def test_gradient_of_an_unused_numpy_scalar_is_a_scalar_of_its_dtype():
    # was array(0., dtype=float32), where the used one's was np.float32(2.0)
    gx, gy = ad.gradient(lambda x, y: x * 2, np.float32(1), np.float32(1))
    assert type(gx) is np.float32 and gx == 2.0
    assert type(gy) is np.float32 and gy == 0.0
    _, back = ad.pullback(lambda x, y: x * 2, np.float32(1), np.float32(1))
    gx, gy = back(np.float32(1))
    assert type(gy) is np.float32 and gy == 0.0


def test_jvp_of_a_constant_numpy_scalar_output_is_a_scalar():
    _, (dx, dc) = ad.jvp(lambda x: (x * 2, np.float32(3)), (np.float32(1),), (np.float32(1),))
    assert type(dx) is np.float32 and dx == 2.0
    assert type(dc) is np.float32 and dc == 0.0


def test_jacobian_and_hessian_at_a_float32_scalar_keep_float32():
    # the point was turned into a float64 array, as a float32 array's is not
    (j,) = ad.jacobian(lambda x: x ** 2, np.float32(2.0))
    assert j.dtype == np.float32 and j.shape == () and j == 4.0
    h = ad.hessian(lambda x: x ** 3, np.float32(2.0))
    assert h.dtype == np.float32 and h.shape == () and h == 12.0


# --- jacobian of a complex output: reverse mode kept only the real part ----------------

def test_jacobian_of_a_complex_output_is_complex_by_default():
    # a scalar output made the default mode reverse, whose pullback projects onto the real
    # inputs: the Jacobian of sum(x) * 1j came back as zeros
    x = np.array([1.0, 2.0])
    (j,) = ad.jacobian(lambda x: np.sum(x) * 1j, x)
    np.testing.assert_array_equal(j, [1j, 1j])
    (j,) = ad.jacobian(lambda x: np.exp(1j * x[0]) * x, x)  # d/dx0 of e^{i x0} x
    e = np.exp(1j * x[0])
    np.testing.assert_allclose(j, [[e + 1j * e * x[0], 0], [1j * e * x[1], e]])


def test_jacobian_of_a_complex_output_in_reverse_mode_keeps_the_imaginary_part():
    x = np.array([1.0, 2.0])
    f = lambda x: np.exp(1j * x[0]) * x  # noqa: E731
    (rev,) = ad.jacobian(f, x, mode="rev")
    e = np.exp(1j * x[0])
    np.testing.assert_allclose(rev, [[e + 1j * e * x[0], 0], [1j * e * x[1], e]])


# --- array subclasses whose meaning the tracer would drop -------------------------------

MASKED = np.ma.array([1.0, 2.0], mask=[False, True])


@pytest.mark.parametrize("call", [
    lambda f: ad.gradient(f, MASKED),
    lambda f: ad.gradient(f, {"x": MASKED}),
    lambda f: ad.jvp(f, (MASKED,), (np.ones(2),)),
    lambda f: ad.jacobian(f, MASKED),
    lambda f: ad.hvp(f, MASKED, np.ones(2)),
])
def test_masked_array_is_refused(call):
    # np.sum of it is 1.0 (the masked 2.0 left out), but the mask was dropped: gradient [1, 1]
    with pytest.raises(TypeError, match="masked array.*filled"):
        call(lambda x: np.sum(x))


@pytest.mark.filterwarnings("ignore:the matrix subclass:PendingDeprecationWarning")
def test_matrix_is_refused_with_the_fix():
    # was "matrix.sum() got an unexpected keyword argument 'keepdims'" from a rule
    with pytest.raises(TypeError, match=r"np\.matrix.*np\.asarray"):
        ad.gradient(lambda x: np.sum(x), np.matrix([[1.0, 2.0]]))


def test_memmap_and_other_array_subclasses_are_still_taken(tmp_path):
    m = np.memmap(tmp_path / "x.dat", dtype=float, mode="w+", shape=(2,))
    m[:] = [1.0, 2.0]
    (g,) = ad.gradient(lambda x: np.sum(x ** 2), m)
    np.testing.assert_array_equal(g, [2.0, 4.0])


# --- jacobian of what f returned ---------------------------------------------------------

def test_jacobian_of_a_nested_list_output_is_of_the_array_it_spells():
    # [[x0, x1], [x1 * x0, 2.0]] raised "np.asarray / np.array of a traced value": one level was stacked
    x = np.array([2.0, 3.0])
    f = lambda x: [[x[0], x[1]], [x[1] * x[0], 2.0]]
    expected = np.array([[[1.0, 0.0], [0.0, 1.0]], [[3.0, 2.0], [0.0, 0.0]]])
    for mode in ("fwd", "rev", None):
        (j,) = ad.jacobian(f, x, mode=mode)
        np.testing.assert_array_equal(j, expected)

