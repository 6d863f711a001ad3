"""jacobian and hessian of containers (dict, list, tuple, NamedTuple, dataclass,
register_node types), in and out, with JAX's convention: argument i's Jacobian is shaped
like the output, each of its leaves like argument i. Against central differences."""

import dataclasses
from typing import NamedTuple

import numpy as np
import pytest

import adrules as ad
from adrules.pytrees import flatten, unflatten

W = np.array([[0.3, -0.7, 0.2], [1.1, 0.4, -0.5]])
B = np.array([0.1, -0.2])
X = np.array([0.5, -1.0, 2.0])


class Pair(NamedTuple):
    w: object
    b: object


@dataclasses.dataclass
class Layer:
    w: object
    b: object


class Affine:  # a type of the user's, registered below
    def __init__(self, w, b):
        self.w, self.b = w, b


ad.register_node(Affine, lambda m: ((m.w, m.b), None), lambda aux, c: Affine(*c))


def central_differences(f, args, i, eps=1e-6):
    """Argument i's Jacobian of f assembled leaf by leaf, element by element, in the
    convention under test: the output's structure, each leaf argument i's structure."""
    leaves, tree = flatten(args[i])
    values, out_tree = flatten(f(*args))

    def at(k, step):
        moved = list(leaves)
        moved[k] = np.asarray(leaves[k], float) + step
        point = list(args)
        point[i] = unflatten(tree, moved)
        return [np.asarray(v, float) for v in flatten(f(*point))[0]]

    blocks = [[None] * len(leaves) for _ in values]
    for k, leaf in enumerate(leaves):
        shape = np.shape(leaf)
        cols = []
        for e in np.eye(int(np.prod(shape))):
            step = eps * e.reshape(shape)
            cols.append([(up - down) / (2 * eps) for up, down in zip(at(k, step), at(k, -step))])
        for o, v in enumerate(values):
            blocks[o][k] = np.stack([c[o] for c in cols], axis=-1).reshape(np.shape(v) + shape)
    return unflatten(out_tree, [unflatten(tree, row) for row in blocks])


def assert_trees_close(got, want, **tol):
    (got_leaves, got_tree), (want_leaves, want_tree) = flatten(got), flatten(want)
    assert got_tree == want_tree, f"structure {got_tree}, expected {want_tree}"
    for g, w in zip(got_leaves, want_leaves):
        assert np.shape(g) == np.shape(w)
        np.testing.assert_allclose(g, w, **tol)


def model(p, x):  # a dict of parameters in, a dict of values out
    h = np.tanh(p["w"] @ x + p["b"])
    return {"h": h, "loss": np.sum(h ** 2) * p["scale"]}


P = {"w": W, "b": B, "scale": 1.5}


@pytest.mark.parametrize("mode", ["fwd", "rev", None])
def test_a_dict_of_parameters_to_a_dict_of_values(mode):
    jp, jx = ad.jacobian(model, P, X, mode=mode)
    assert_trees_close(jp, central_differences(model, (P, X), 0), rtol=1e-6, atol=1e-8)
    assert_trees_close(jx, central_differences(model, (P, X), 1), rtol=1e-6, atol=1e-8)
    assert jp["h"]["w"].shape == (2, 2, 3) and jp["loss"]["scale"].shape == ()
    assert jx["h"].shape == (2, 3)  # an array argument's Jacobian: an array per value


def parts(c):
    return (c.w, c.b) if hasattr(c, "w") else (c[0], c[1])


def scaled_layer(c):  # a layer (w, b) and a scale (s, t) in any container
    (w, b), (_, t) = parts(parts(c)[0]), parts(parts(c)[1])
    return np.tanh(w @ X + b) * t


@pytest.mark.parametrize("container", [
    [[W, B], [np.ones(2), 2.0]],
    ((W, B), (np.ones(2), 2.0)),
    Pair(Pair(W, B), Pair(np.ones(2), 2.0)),
    Layer(Layer(W, B), Layer(np.ones(2), 2.0)),
    Affine(Affine(W, B), Affine(np.ones(2), 2.0)),
    [Pair(W, B), Layer(np.ones(2), 2.0)],
], ids=["list", "tuple", "namedtuple", "dataclass", "registered", "mixed"])
@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_lists_tuples_namedtuples_dataclasses_and_registered_types(container, mode):
    (j,) = ad.jacobian(scaled_layer, container, mode=mode)
    assert type(j) is type(container) and type(parts(j)[1]) is type(parts(container)[1])
    assert_trees_close(j, central_differences(scaled_layer, (container,), 0), rtol=1e-6, atol=1e-8)
    assert parts(parts(j)[0])[0].shape == (2, 2, 3)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_namedtuple_and_dataclass_outputs_are_trees(mode):
    f = lambda x: Pair(x * X, np.sum(x ** 3))  # noqa: E731
    (j,) = ad.jacobian(f, X, mode=mode)
    assert type(j) is Pair
    np.testing.assert_allclose(j.w, np.diag(X))
    np.testing.assert_allclose(j.b, 3 * X ** 2)
    g = lambda p: Layer(p["w"] @ X, p["b"] * 2.0)  # noqa: E731
    (j,) = ad.jacobian(g, {"w": W, "b": B}, mode=mode)
    assert type(j) is Layer and set(j.w) == {"w", "b"}
    assert_trees_close(j, central_differences(g, ({"w": W, "b": B},), 0), rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["fwd", "rev", None])
def test_a_list_output_is_still_one_stacked_array(mode):
    # the array convention, kept: a list or tuple of values is one array
    x = np.array([0.5, -0.5, 1.1])
    (j,) = ad.jacobian(lambda p: [p["a"] * p["b"], p["b"] ** 2], {"a": x[0], "b": x[1]}, mode=mode)
    np.testing.assert_allclose(j["a"], [x[1], 0.0])
    np.testing.assert_allclose(j["b"], [x[0], 2 * x[1]])
    with pytest.raises(TypeError, match=r"f returned a tuple of values of shapes \[\(\), \(2,\)\]"):
        ad.jacobian(lambda p: (np.sum(p["a"]), p["a"]), {"a": B}, mode=mode)


def test_an_int_value_of_a_dict_output_has_a_zero_jacobian():
    for mode in ("fwd", "rev"):
        (j,) = ad.jacobian(lambda x: {"order": np.argsort(x), "y": x ** 2}, X, mode=mode)
        np.testing.assert_array_equal(j["order"], np.zeros((3, 3)))
        np.testing.assert_allclose(j["y"], np.diag(2 * X))


def test_on_an_executor_in_chunks_as_in_serial():
    serial = ad.jacobian(model, P, X, mode="fwd", executor="serial", chunk_size=2)
    assert_trees_close(serial, tuple(central_differences(model, (P, X), i) for i in (0, 1)),
                       rtol=1e-5, atol=1e-7)
    for mode in ("fwd", "rev"):
        threads = ad.jacobian(model, P, X, mode=mode, executor="threads", chunk_size=1)
        assert_trees_close(threads, serial, rtol=1e-14)
    h = ad.hessian(lambda p: model(p, X)["loss"], P, executor="threads", chunk_size=1)
    assert_trees_close(h, ad.hessian(lambda p: model(p, X)["loss"], P, executor="serial"), rtol=1e-14)
    grad = lambda p: ad.gradient(lambda q: model(q, X)["loss"], p)[0]  # noqa: E731
    assert_trees_close(h, central_differences(grad, (P,), 0), rtol=1e-5, atol=1e-7)


def quadratic(p):  # sum(a**2 * b) + a0 * c**3
    return np.sum(p["a"] ** 2 * p["b"]) + p["a"][0] * p["c"] ** 3


def test_hessian_of_a_dict_against_the_hand_derived_one():
    a, b, c = np.array([1.0, 2.0]), np.array([3.0, -1.0]), 0.5
    h = ad.hessian(quadratic, {"a": a, "b": b, "c": c})
    e0 = np.array([1.0, 0.0])
    want = {
        "a": {"a": np.diag(2 * b), "b": np.diag(2 * a), "c": 3 * c ** 2 * e0},
        "b": {"a": np.diag(2 * a), "b": np.zeros((2, 2)), "c": np.zeros(2)},
        "c": {"a": 3 * c ** 2 * e0, "b": np.zeros(2), "c": np.array(6 * a[0] * c)},
    }
    assert_trees_close(h, want, rtol=1e-12, atol=1e-14)


def test_hessian_of_a_dataclass_and_an_array_against_differences_of_the_gradient():
    def loss(layer, x):
        return np.sum(np.tanh(layer.w @ x + layer.b) ** 2)

    layer = Layer(W, B)
    (hll, hlx), (hxl, hxx) = ad.hessian(loss, layer, X)
    grad_layer = lambda layer, x: ad.gradient(loss, layer, x)[0]  # noqa: E731
    grad_x = lambda layer, x: ad.gradient(loss, layer, x)[1]  # noqa: E731
    assert_trees_close(hll, central_differences(grad_layer, (layer, X), 0), rtol=1e-5, atol=1e-7)
    assert_trees_close(hlx, central_differences(grad_layer, (layer, X), 1), rtol=1e-5, atol=1e-7)
    assert_trees_close(hxl, central_differences(grad_x, (layer, X), 0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(hxx, central_differences(grad_x, (layer, X), 1), rtol=1e-5, atol=1e-7)
    assert type(hll) is Layer and type(hll.w) is Layer and hll.w.b.shape == (2, 3, 2)


def test_containers_nested_in_another_differentiation():
    a = np.array([0.5, -1.5])
    # d/da of sum(jacobian of p -> p["a"]**3): sum of diag(3 a**2) -> 6 a
    (g,) = ad.gradient(lambda a: np.sum(ad.jacobian(lambda p: p["a"] ** 3, {"a": a})[0]["a"]), a)
    np.testing.assert_allclose(g, 6 * a)
    # the Hessian of sum(a**4) is diag(12 a**2); its derivative by a, diag of 24 a
    (t,) = ad.jacobian(lambda a: np.diag(ad.hessian(lambda p: np.sum(p[0] ** 4), [a])[0][0]), a)
    np.testing.assert_allclose(t, np.diag(24 * a))


def test_empty_containers():
    assert ad.jacobian(lambda p: X, {}) == ({},)
    assert ad.hessian(lambda p: 1.0, {}) == {}


@pytest.mark.parametrize("call, where", [
    (lambda: ad.jacobian(lambda p: p["w"] * p["n"], {"w": B, "n": 3}), r"argument 0\['n'\] is an integer \(3\)"),
    (lambda: ad.hessian(lambda x, p: np.sum(x * p.b), X, Layer(1.0, np.int64(2))), r"argument 1\.b is an integer"),
    (lambda: ad.jacobian(lambda p: p[0] * 2.0, [B, True]), r"argument 0\[1\] is a boolean \(True\)"),
])
def test_an_integer_leaf_is_refused_with_its_path_and_the_fix(call, where):
    with pytest.raises(TypeError, match=where + r".*capture it in a closure.*to differentiate at that value"):
        call()


def test_an_int_array_or_a_string_leaf_is_refused_with_its_path():
    with pytest.raises(TypeError, match=r"argument 0\['idx'\]\[0\] is an array of dtype int64.*astype\(float\)"):
        ad.jacobian(lambda p: p["w"], {"w": B, "idx": [np.arange(2)]})
    with pytest.raises(TypeError, match=r"argument 0\['name'\] is a str.*capture it in a closure"):
        ad.hessian(lambda p: np.sum(p["w"]), {"w": B, "name": "layer 1"})
    with pytest.raises(TypeError, match=r"f returned a str at output\['name'\]; a Jacobian is of numbers"):
        ad.jacobian(lambda x: {"y": x, "name": "layer 1"}, X)
