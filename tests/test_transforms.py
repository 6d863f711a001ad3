"""grad, value_and_grad and elementwise_grad (JAX's and autograd's function transforms),
against finite differences and closed forms; and the errors every derivative gives for
arguments that can carry no derivative, bad argnums and has_aux misuse."""

import numpy as np
import pytest

import adrules as ad


def fd_grad(f, x, h=1e-6):
    """Central differences of scalar f at float array (or number) x."""
    x = np.asarray(x, dtype=float)
    g = np.zeros_like(x)
    for k in np.ndindex(x.shape):
        e = np.zeros_like(x)
        e[k] = h
        g[k] = (f(x + e) - f(x - e)) / (2 * h)
    return g


def loss(w, x, y, scale=1.0):
    return scale * np.mean((np.tanh(x @ w) - y) ** 2)


RNG = np.random.default_rng(0)
W, X, Y = RNG.normal(size=3), RNG.normal(size=(5, 3)), RNG.normal(size=5)


def test_grad_is_the_gradient_of_the_first_argument_by_default():
    np.testing.assert_allclose(ad.grad(loss)(W, X, Y), fd_grad(lambda w: loss(w, X, Y), W), rtol=1e-7)


def test_grad_argnums_tuple_negative_and_keywords():
    gw, gy = ad.grad(loss, argnums=(0, 2))(W, X, Y, scale=2.0)
    np.testing.assert_allclose(gw, fd_grad(lambda w: loss(w, X, Y, 2.0), W), rtol=1e-7)
    np.testing.assert_allclose(gy, fd_grad(lambda y: loss(W, X, y, 2.0), Y), rtol=1e-7)
    (gy2,) = ad.grad(loss, argnums=(-1,))(W, X, Y)
    np.testing.assert_allclose(gy2, fd_grad(lambda y: loss(W, X, y), Y), rtol=1e-7)
    gx = ad.grad(loss, argnums=1)(W, X, Y)
    np.testing.assert_allclose(gx, fd_grad(lambda x: loss(W, x, Y), X), rtol=1e-7)


def test_autograd_spelling_argnum():
    np.testing.assert_allclose(ad.grad(loss, argnum=1)(W, X, Y), fd_grad(lambda x: loss(W, x, Y), X), rtol=1e-7)
    with pytest.raises(TypeError, match="not both"):
        ad.grad(loss, 1, argnum=1)


def test_grad_of_a_container_comes_back_as_that_container_with_integer_leaves_untouched():
    params = {"w": W, "layers": 2}

    def f(p, x):
        return np.sum(np.tanh(x @ p["w"])) * p["layers"]

    g = ad.grad(f)(params, X)
    np.testing.assert_allclose(g["w"], fd_grad(lambda w: f({"w": w, "layers": 2}, X), W), rtol=1e-7)
    assert g["layers"] is ad.NoTangent()


def test_value_and_grad():
    value, g = ad.value_and_grad(loss)(W, X, Y)
    assert value == pytest.approx(loss(W, X, Y), rel=1e-14)
    np.testing.assert_allclose(g, fd_grad(lambda w: loss(w, X, Y), W), rtol=1e-7)
    value, (gw, gx) = ad.value_and_grad(loss, argnums=(0, 1))(W, X, Y)
    np.testing.assert_allclose(gx, fd_grad(lambda x: loss(W, x, Y), X), rtol=1e-7)


def test_has_aux_returns_aux_as_plain_values():
    def f(w, x):
        pred = np.tanh(x @ w)
        return np.sum(pred ** 2), {"pred": pred, "n": len(x)}

    g, aux = ad.grad(f, has_aux=True)(W, X)
    np.testing.assert_allclose(g, fd_grad(lambda w: f(w, X)[0], W), rtol=1e-7)
    assert type(aux["pred"]) is np.ndarray and aux["n"] == 5
    np.testing.assert_allclose(aux["pred"], np.tanh(X @ W))
    (value, aux2), g2 = ad.value_and_grad(f, has_aux=True)(W, X)
    assert value == pytest.approx(np.sum(np.tanh(X @ W) ** 2)) and type(aux2["pred"]) is np.ndarray


def test_has_aux_inside_an_outer_derivative_keeps_the_outer_trace():
    # d/dv of the aux (pred = tanh(v * x0)) seen through an inner grad
    def inner(w, v):
        pred = np.tanh(v * w)
        return np.sum(pred * w), pred

    def outer(v):
        g, pred = ad.grad(inner, has_aux=True)(np.array([0.3, -0.2]), v)
        return np.sum(pred) + np.sum(g)

    fd = (outer(0.7 + 1e-6) - outer(0.7 - 1e-6)) / 2e-6
    assert ad.grad(outer)(0.7) == pytest.approx(fd, rel=1e-6)


def test_grad_of_grad_and_elementwise_grad_match_closed_forms():
    assert ad.grad(ad.grad(lambda t: np.sin(t) * t))(0.8) == pytest.approx(2 * np.cos(0.8) - 0.8 * np.sin(0.8))
    x = np.linspace(-2, 2, 7)
    np.testing.assert_allclose(ad.elementwise_grad(np.tanh)(x), 1 - np.tanh(x) ** 2, rtol=1e-12)
    d2 = ad.elementwise_grad(ad.elementwise_grad(np.tanh))(x)
    t = np.tanh(x)
    np.testing.assert_allclose(d2, -2 * t * (1 - t ** 2), rtol=1e-10)
    gx, ga = ad.elementwise_grad(lambda x, a: a * x ** 2, argnum=(0, 1))(x, 3.0)
    np.testing.assert_allclose(gx, 6 * x)
    assert ga == pytest.approx(np.sum(x ** 2))


def test_transformed_function_names_itself():
    g = ad.grad(loss, argnums=(0, 2))
    assert g.__name__ == "grad_loss" and "(0, 2)" in g.__doc__


# ---- no silent non-gradients ------------------------------------------------------------

class Plain:
    def __init__(self):
        self.w = np.ones(2)

    def __call__(self, x):
        return self.w @ x


def _f(a, b):
    return np.sum(np.asarray(b, dtype=float)) * 0.0 + np.sum(a * 2.0)


BAD = [
    ("integer", 3, r"is an integer \(3\), which carries no derivative.*Cast it to float \(float\(x\)\)"),
    ("bool", True, r"is a boolean \(True\), which carries no derivative"),
    ("int array", np.arange(3), r"is an array of dtype int64, which carries no derivative.*x\.astype\(float\)"),
    ("bool array", np.array([True, False]), r"is an array of dtype bool"),
    ("numpy integer", np.int32(4), r"is an integer \(np\.int32\(4\)\)"),
]


@pytest.mark.parametrize("kind, bad, message", BAD, ids=[b[0] for b in BAD])
def test_every_derivative_refuses_integers_and_booleans(kind, bad, message):
    a = np.ones(3)
    f = lambda a, b: np.sum(a * 2.0)  # noqa: E731  (b is data)
    with pytest.raises(TypeError, match=r"^gradient\(<lambda>\): argument 1 " + message + r".*argnums=0"):
        ad.gradient(f, a, bad)
    with pytest.raises(TypeError, match=r"^value_and_gradient\(<lambda>\): argument 1 " + message):
        ad.value_and_gradient(f, a, bad)
    with pytest.raises(TypeError, match=r"^pullback\(<lambda>\): argument 1 " + message + ".*closure"):
        ad.pullback(f, a, bad)
    with pytest.raises(TypeError, match=r"^grad\(<lambda>\): argument 1 " + message + r".*argnums=0"):
        ad.grad(f, argnums=(0, 1))(a, bad)
    with pytest.raises(TypeError, match=r"^grad\(<lambda>\): argument 1 " + message):
        ad.grad(f, argnums=1)(a, bad)
    with pytest.raises(TypeError, match=r"^value_and_grad\(<lambda>\): argument 1 " + message):
        ad.value_and_grad(f, argnums=1)(a, bad)
    with pytest.raises(TypeError, match=r"^elementwise_grad\(<lambda>\): argument 1 " + message):
        ad.elementwise_grad(f, argnum=1)(a, bad)
    with pytest.raises(TypeError, match=r"^jacobian\(<lambda>\): argument 1 " + message + ".*closure"):
        ad.jacobian(f, a, bad)
    with pytest.raises(TypeError, match=r"^hessian\(<lambda>\): argument 0 " + message):
        ad.hessian(lambda b: np.sum(b * 1.0), bad)
    with pytest.raises(TypeError, match=r"^hvp\(<lambda>\): x " + message):
        ad.hvp(lambda b: np.sum(b * 1.0), bad, np.ones(np.shape(bad)))
    # jvp: the tangent says what moves; a non-zero one for an integer is refused
    tangent = 1.0 if np.ndim(bad) == 0 else np.ones(np.shape(bad))
    with pytest.raises(TypeError, match=r"^jvp\(<lambda>\): argument 1 is (an integer|a boolean).*which has no "
                                        r"tangent, but its tangent is not zero"):
        ad.jvp(f, (a, bad), (a, tangent))
    # left out, it is data: fine
    assert ad.grad(f)(a, bad).tolist() == [2.0, 2.0, 2.0]
    assert ad.jvp(f, (a, bad), (a, ad.ZeroTangent()))[1] == pytest.approx(6.0)


def test_every_derivative_refuses_an_object_of_a_plain_class():
    m, x = Plain(), np.array([1.0, 2.0])
    f = lambda m, x: m(x)  # noqa: E731
    pattern = r"argument 0 is an object of class Plain whose attributes w hold floats, which adrules cannot " \
              r"look inside.*@dataclass, or register it with adrules\.register_node\(Plain"
    for api, call in [("gradient", lambda: ad.gradient(f, m, x)),
                      ("value_and_gradient", lambda: ad.value_and_gradient(f, m, x)),
                      ("pullback", lambda: ad.pullback(f, m, x)),
                      ("grad", lambda: ad.grad(f)(m, x)),
                      ("value_and_grad", lambda: ad.value_and_grad(f, argnums=(0, 1))(m, x)),
                      ("elementwise_grad", lambda: ad.elementwise_grad(f)(m, x)),
                      ("jacobian", lambda: ad.jacobian(f, m, x)),
                      ("hessian", lambda: ad.hessian(f, m, x)),
                      ("jvp", lambda: ad.jvp(f, (m, x), (Plain(), x)))]:
        with pytest.raises(TypeError, match=rf"^{api}\(<lambda>\): " + pattern):
            call()
    with pytest.raises(TypeError, match=r"^hvp\(<lambda>\): x is an object of class Plain"):
        ad.hvp(lambda m: m(x), m, Plain())
    assert ad.grad(f, argnums=1)(m, x).tolist() == [1.0, 1.0]  # left out: it is data


def test_gradient_without_arguments_says_what_to_write():
    def nll(w, x, y, z):
        return np.sum(w)

    for api in ("gradient", "value_and_gradient"):
        with pytest.raises(TypeError, match=rf"^{api}\(nll\) was given no arguments to differentiate at: "
                                            rf"{api}\(nll, x, \.\.\.\).*write adrules\.grad\(nll\)"):
            getattr(ad, api)(nll)


@pytest.mark.parametrize("transform", [ad.grad, ad.value_and_grad])
def test_argnums_out_of_range_repeated_or_not_ints(transform):
    name = transform.__name__
    with pytest.raises(TypeError, match=rf"^{name}: argnums=2 names argument 2, but f was called with 2 "
                                        r"positional arguments"):
        transform(lambda a, b: np.sum(a), argnums=2)(np.ones(2), np.ones(2))
    with pytest.raises(TypeError, match=r"argnums=\(0, -3\) names argument -3, but f was called with 2"):
        transform(lambda a, b: np.sum(a), argnums=(0, -3))(np.ones(2), np.ones(2))
    with pytest.raises(ValueError, match=rf"^{name}: argnums=\(0, 1, 0\) names argument 0 more than once; "
                                         r"name each argument once: argnums=\(0, 1\)"):
        transform(lambda a, b: np.sum(a), argnums=(0, 1, 0))
    with pytest.raises(ValueError, match=r"names the same argument twice among 2"):
        transform(lambda a, b: np.sum(a), argnums=(1, -1))(np.ones(2), np.ones(2))
    for bad in ("0", 1.0, True, (), (0, "1")):
        with pytest.raises(TypeError, match=rf"^{name}: argnums must be an int or"):
            transform(lambda a: np.sum(a), argnums=bad)
    with pytest.raises(TypeError, match=rf"^{name}\(f\): f must be the function to differentiate"):
        transform(np.ones(2))


@pytest.mark.parametrize("returned", [lambda w: np.sum(w), lambda w: (np.sum(w),),
                                      lambda w: (np.sum(w), 1, 2), lambda w: [np.sum(w)]])
def test_has_aux_with_a_function_that_does_not_return_a_pair(returned):
    for transform in (ad.grad, ad.value_and_grad):
        with pytest.raises(TypeError, match=rf"^{transform.__name__}\(<lambda>, has_aux=True\): f must return "
                                            r"a pair \(value, aux\), got a"):
            transform(returned, has_aux=True)(np.ones(2))
    with pytest.raises(TypeError, match="has_aux must be True or False"):
        ad.grad(lambda w: np.sum(w), has_aux=1)


def test_grad_of_a_non_scalar_names_grad():
    with pytest.raises(TypeError, match=r"^grad\(<lambda>\): f returned an array of shape \(2,\), but grad needs "
                                        r"a scalar"):
        ad.grad(lambda w: w * 2.0)(np.ones(2))
