"""Containers as inputs and outputs: dict, list, tuple, NamedTuple, dataclass (frozen too),
registered nodes; non-differentiable leaves; callable models and their self slot."""

from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import pytest

import adrules as ad
from adrules.pytrees import flatten, unflatten


class Pair(NamedTuple):
    a: float
    b: np.ndarray


@dataclass
class Params:
    w: np.ndarray
    b: float
    n_steps: int = 2
    name: str = "p"


@dataclass(frozen=True)
class Frozen:
    w: np.ndarray
    b: float


@dataclass
class Validated:
    w: np.ndarray

    def __post_init__(self):
        if np.any(np.asarray(self.w) < 0):  # a gradient may be negative: must not be re-run
            raise ValueError("w must be non-negative")


class Affine:
    """A user class joined with register_node; ``tag`` is static data."""

    def __init__(self, w, b, tag="affine"):
        self.w, self.b, self.tag = w, b, tag


ad.register_node(Affine, lambda m: ((m.w, m.b), m.tag), lambda tag, c: Affine(c[0], c[1], tag))


@dataclass
class Linear:
    """A callable model with parameters."""

    w: np.ndarray
    b: float

    def __call__(self, x):
        return np.sum(self.w * x) + self.b


W = np.array([1.0, -2.0, 0.5])
X = np.array([0.3, 0.7, -1.1])


# ---- containers as inputs ------------------------------------------------------------------

def test_dict_input():
    (g,) = ad.gradient(lambda p: np.sum(p["w"] * X) * p["b"], {"w": W, "b": 2.0})
    assert type(g) is dict and set(g) == {"w", "b"}
    np.testing.assert_allclose(g["w"], X * 2.0)
    assert g["b"] == pytest.approx(np.sum(W * X))
    assert isinstance(g["b"], float)


def test_dict_input_keeps_key_order():
    (g,) = ad.gradient(lambda p: p["z"] * p["a"], {"z": 2.0, "a": 3.0})
    assert list(g) == ["z", "a"]


def test_list_input():
    (g,) = ad.gradient(lambda xs: xs[0] * xs[1] * xs[2], [2.0, 3.0, 5.0])
    assert type(g) is list
    assert g == [15.0, 10.0, 6.0]


def test_tuple_input():
    (g,) = ad.gradient(lambda t: np.sum(t[0] * t[1]), (W, X))
    assert type(g) is tuple and len(g) == 2
    np.testing.assert_allclose(g[0], X)
    np.testing.assert_allclose(g[1], W)


def test_namedtuple_input():
    (g,) = ad.gradient(lambda p: p.a * np.sum(p.b * p.b), Pair(3.0, X))
    assert type(g) is Pair
    assert g.a == pytest.approx(np.sum(X * X))
    np.testing.assert_allclose(g.b, 6.0 * X)


def test_dataclass_input_with_static_fields():
    p = Params(W, 0.5, n_steps=3, name="model")
    (g,) = ad.gradient(lambda p: np.sum(p.w * X) * p.n_steps + p.b, p)
    assert type(g) is Params
    np.testing.assert_allclose(g.w, 3 * X)
    assert g.b == 1.0
    assert g.n_steps is ad.NoTangent()
    assert g.name is ad.NoTangent()


def test_frozen_dataclass_input():
    (g,) = ad.gradient(lambda p: np.sum(np.sin(p.w)) * p.b, Frozen(W, 2.0))
    assert type(g) is Frozen
    np.testing.assert_allclose(g.w, 2.0 * np.cos(W))
    assert g.b == pytest.approx(np.sum(np.sin(W)))


def test_dataclass_gradient_skips_post_init_validation():
    (g,) = ad.gradient(lambda v: -np.sum(v.w), Validated(np.array([1.0, 2.0])))
    assert type(g) is Validated
    np.testing.assert_array_equal(g.w, [-1.0, -1.0])


def test_registered_node_input():
    m = Affine(np.array([1.0, 2.0]), 0.5, tag="layer1")
    (g,) = ad.gradient(lambda m: np.sum(m.w * m.w) + 3.0 * m.b, m)
    assert type(g) is Affine
    assert g.tag == "layer1"
    np.testing.assert_array_equal(g.w, [2.0, 4.0])
    assert g.b == 3.0


def test_nested_containers():
    tree = {"layers": [Params(W, 1.0), Params(2 * W, -1.0)], "scale": (2.0, 7)}

    def f(t):
        total = 0.0
        for p in t["layers"]:
            total = total + np.sum(p.w * X) + p.b
        return total * t["scale"][0]

    (g,) = ad.gradient(f, tree)
    assert type(g["layers"]) is list and type(g["scale"]) is tuple
    np.testing.assert_allclose(g["layers"][0].w, 2.0 * X)
    np.testing.assert_allclose(g["layers"][1].w, 2.0 * X)
    assert g["layers"][1].b == 2.0
    assert g["scale"][0] == pytest.approx(np.sum(W * X) + 1.0 + np.sum(2 * W * X) - 1.0)
    assert g["scale"][1] is ad.NoTangent()


@pytest.mark.parametrize("const", [3, True, None, "label", np.int64(4), np.arange(3)])
def test_non_differentiable_leaves_get_no_tangent(const):
    (g,) = ad.gradient(lambda d: d["x"] * 2.0, {"x": 1.5, "c": const})
    assert g["x"] == 2.0
    assert g["c"] is ad.NoTangent()


def test_non_differentiable_leaves_in_list_and_tuple():
    (g,) = ad.gradient(lambda t: t[0] * t[2][0], [2.0, "s", (4.0, None, False)])
    assert g[0] == 4.0 and g[2][0] == 2.0
    assert g[1] is ad.NoTangent() and g[2][1] is ad.NoTangent() and g[2][2] is ad.NoTangent()


def test_unused_leaf_gets_zeros():
    (g,) = ad.gradient(lambda d: d["a"] * 2.0, {"a": 1.0, "b": np.ones(2)})
    np.testing.assert_array_equal(g["b"], [0.0, 0.0])


def test_container_next_to_plain_argument():
    gp, gx = ad.gradient(lambda p, x: np.sum(p["w"] * x), {"w": W}, X)
    np.testing.assert_allclose(gp["w"], X)
    np.testing.assert_allclose(gx, W)


# ---- containers as outputs -------------------------------------------------------------------

def test_pullback_with_dict_output():
    y, back = ad.pullback(lambda x: {"sq": x * x, "sin": np.sin(x), "k": 3}, X)
    assert set(y) == {"sq", "sin", "k"} and y["k"] == 3
    np.testing.assert_allclose(y["sq"], X * X)
    (g,) = back({"sq": np.ones(3), "sin": 2 * np.ones(3), "k": ad.NoTangent()})
    np.testing.assert_allclose(g, 2 * X + 2 * np.cos(X))


def test_pullback_with_tuple_output_and_zero_part():
    y, back = ad.pullback(lambda a, b: (a * b, a + b), 2.0, 3.0)
    assert y == (6.0, 5.0)
    assert back((1.0, 0.0)) == (3.0, 2.0)
    assert back((ad.ZeroTangent(), 1.0)) == (1.0, 1.0)


def test_pullback_with_dataclass_output():
    y, back = ad.pullback(lambda x: Frozen(x * 2.0, np.sum(x)), X)
    assert type(y) is Frozen
    np.testing.assert_allclose(y.w, 2 * X)
    (g,) = back(Frozen(np.array([1.0, 0.0, -1.0]), 10.0))
    np.testing.assert_allclose(g, [12.0, 10.0, 8.0])


def test_pullback_accepts_structural_tangent_for_dataclass_output():
    y, back = ad.pullback(lambda x: Frozen(x * 2.0, np.sum(x)), X)
    (g,) = back(ad.Tangent(Frozen, w=np.array([1.0, 0.0, -1.0]), b=10.0))
    np.testing.assert_allclose(g, [12.0, 10.0, 8.0])
    (g,) = back(ad.Tangent(Frozen, b=1.0))  # missing fields are zero
    np.testing.assert_allclose(g, [1.0, 1.0, 1.0])


def test_pullback_with_namedtuple_output():
    y, back = ad.pullback(lambda x: Pair(x * 3.0, np.exp(X) * x), 2.0)
    assert type(y) is Pair
    (g,) = back(Pair(1.0, np.ones(3)))
    assert g == pytest.approx(3.0 + np.sum(np.exp(X)))


def test_pullback_with_registered_node_output():
    y, back = ad.pullback(lambda x: Affine(x * x, x * 3.0, tag="out"), 2.0)
    assert type(y) is Affine and y.tag == "out"
    assert back(Affine(1.0, 1.0, tag="out")) == (7.0,)


def test_pullback_with_container_input_and_output():
    y, back = ad.pullback(lambda p: [p["a"] * p["b"], p["a"]], {"a": 2.0, "b": 5.0})
    (g,) = back([1.0, 1.0])
    assert g == {"a": 6.0, "b": 2.0}


def test_jvp_with_dataclass_and_namedtuple():
    p = Frozen(W, 2.0)
    tp = Frozen(np.ones(3), 0.5)
    y, dy = ad.jvp(lambda p: Pair(p.b * 2.0, p.w * p.b), (p,), (tp,))
    assert type(dy) is Pair
    assert dy.a == pytest.approx(1.0)
    np.testing.assert_allclose(dy.b, np.ones(3) * 2.0 + W * 0.5)


# ---- callable models: the self slot ------------------------------------------------------------

def test_rrule_via_ad_of_callable_model_gives_parameter_gradient_in_self_slot():
    model = Linear(W, 0.5)
    y, back = ad.rrule_via_ad(model, X)
    assert y == pytest.approx(np.sum(W * X) + 0.5)
    mbar, xbar = back(2.0)
    assert type(mbar) is Linear
    np.testing.assert_allclose(mbar.w, 2.0 * X)
    assert mbar.b == 2.0
    np.testing.assert_allclose(xbar, 2.0 * W)


def test_rrule_via_ad_of_closure_has_no_self_tangent():
    y, back = ad.rrule_via_ad(lambda x: np.sum(x * W), X)
    mbar, xbar = back(1.0)
    assert ad.unthunk(mbar) is ad.NoTangent()
    np.testing.assert_allclose(xbar, W)


def test_gradient_with_respect_to_a_callable_model():
    def loss(model, x):
        return model(x) ** 2

    gm, gx = ad.gradient(loss, Linear(W, 0.5), X)
    r = np.sum(W * X) + 0.5
    assert type(gm) is Linear
    np.testing.assert_allclose(gm.w, 2 * r * X)
    assert gm.b == pytest.approx(2 * r)
    np.testing.assert_allclose(gx, 2 * r * W)


@ad.primitive
def call_model(model, x):
    return model(x)


@ad.rrule.register(call_model, config=True)
def call_model_rrule(config, model, x):
    y, back = config.rrule_via_ad(model, x)

    def call_model_pullback(ybar):
        model_bar, x_bar = back(ybar)
        return ad.NoTangent(), model_bar, x_bar

    return y, call_model_pullback


def test_model_through_higher_order_primitive_gets_gradient_via_self_slot():
    def loss(model, x):
        return call_model(model, x) ** 2

    gm, gx = ad.gradient(loss, Linear(W, 0.5), X)
    r = np.sum(W * X) + 0.5
    assert type(gm) is Linear
    np.testing.assert_allclose(gm.w, 2 * r * X)
    assert gm.b == pytest.approx(2 * r)
    np.testing.assert_allclose(gx, 2 * r * W)


def test_model_through_higher_order_primitive_with_constant_input():
    (gm,) = ad.gradient(lambda m: call_model(m, X) ** 2, Linear(W, 0.5))
    r = np.sum(W * X) + 0.5
    np.testing.assert_allclose(gm.w, 2 * r * X)
    assert gm.b == pytest.approx(2 * r)


# ---- flatten / unflatten --------------------------------------------------------------------------

@pytest.mark.parametrize("tree", [
    {"a": [1.0, (2.0, 3)], "b": None},
    Pair(1.0, np.ones(2)),
    Params(W, 1.0),
    Frozen(W, 2.0),
    [Affine(1.0, 2.0, "t"), ()],
    5.0,
])
def test_flatten_unflatten_roundtrip(tree):
    leaves, tdef = flatten(tree)
    rebuilt = unflatten(tdef, leaves)
    assert type(rebuilt) is type(tree)
    again, tdef2 = flatten(rebuilt)
    assert tdef2 == tdef
    assert len(again) == len(leaves)
    for a, b in zip(again, leaves):
        assert a is b


@pytest.mark.parametrize("tree", [
    {"w": np.ones((2, 3)), "b": np.zeros(3), "s": 1.5},  # leaves only: the flat path
    {"w": np.ones(2), "inner": {"b": 2.0}},  # a nested dict: the general path
    {},
    [{"a": 1.0}, {"a": 2.0, "b": np.ones(1)}],
])
def test_dict_structure_and_leaf_count_match_a_hand_count(tree):
    """A dict of leaves is flattened without a call per leaf; its structure must still
    equal the general path's (a gradient's structure is compared with its input's) and
    count its leaves."""
    from adrules.pytrees import LEAF, TreeDef

    def by_hand(x):  # the structure built child by child, as for any container
        if isinstance(x, dict):
            return TreeDef(dict, tuple(x), tuple(by_hand(v) for v in x.values()))
        if isinstance(x, list):
            return TreeDef(list, None, tuple(by_hand(v) for v in x))
        return LEAF

    def count(x):
        if isinstance(x, dict):
            return sum(count(v) for v in x.values())
        if isinstance(x, list):
            return sum(count(v) for v in x)
        return 1

    leaves, tdef = flatten(tree)
    assert tdef == by_hand(tree) and by_hand(tree) == tdef
    assert tdef.n_leaves == len(leaves) == count(tree)
    rebuilt = unflatten(tdef, [f"leaf{i}" for i in range(len(leaves))])
    assert flatten(rebuilt)[0] == [f"leaf{i}" for i in range(len(leaves))]
    if isinstance(tree, dict):
        assert list(rebuilt) == list(tree)  # key order kept
    if leaves:
        with pytest.raises(StopIteration):  # too few leaves
            unflatten(tdef, leaves[:-1])
