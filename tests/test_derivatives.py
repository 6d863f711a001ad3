"""jacobian, hessian, hvp: against hand-derived derivatives and finite differences, in
both modes, on executors (bitwise identical), and with clear errors for bad input."""

import numpy as np
import pytest

import adrules as ad
import executors


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")

W = np.random.default_rng(0).normal(size=(4, 3))
B = np.random.default_rng(1).normal(size=4)


def layer(x):
    return np.tanh(W @ x + B)


def layer_jacobian(x):  # hand-derived: diag(1 - tanh²) W
    return (1 - np.tanh(W @ x + B) ** 2)[:, None] * W


def quartic(x):
    return np.sum(x ** 4) + x[0] * x[1]


def quartic_hessian(x):  # hand-derived
    h = np.diag(12 * x ** 2)
    h[0, 1] += 1.0
    h[1, 0] += 1.0
    return h


X = np.array([0.3, -0.7, 1.1])


@pytest.mark.parametrize("mode", ["fwd", "rev", None])
def test_jacobian_of_a_layer(mode):
    jac, = ad.jacobian(layer, X, mode=mode)
    np.testing.assert_allclose(jac, layer_jacobian(X), rtol=1e-12)


def test_jacobian_of_several_arguments_has_output_then_input_shape():
    a, b = np.ones((2, 3)), np.arange(3.0)
    ja, jb = ad.jacobian(lambda a, b: a * b, a, b)
    assert ja.shape == (2, 3, 2, 3) and jb.shape == (2, 3, 3)
    np.testing.assert_allclose(jb[1, :, :], np.diag(a[1]))
    np.testing.assert_allclose(ja.reshape(6, 6), np.diag(np.tile(b, 2)))


def test_jacobian_of_a_scalar_function_is_its_gradient():
    j, = ad.jacobian(quartic, X, mode="rev")
    np.testing.assert_allclose(j, ad.gradient(quartic, X)[0])


def test_hessian_and_hvp_match_hand_derivation():
    np.testing.assert_allclose(ad.hessian(quartic, X), quartic_hessian(X), rtol=1e-12)
    v = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(ad.hvp(quartic, X, v), quartic_hessian(X) @ v, rtol=1e-12)


def test_hvp_matches_finite_differences_of_the_gradient():
    v, h = np.array([0.2, 0.4, -1.0]), 1e-5
    grad = lambda x: ad.gradient(lambda x: np.sum(np.sin(x) * np.exp(x[::-1])), x)[0]  # noqa: E731
    fd = (grad(X + h * v) - grad(X - h * v)) / (2 * h)
    got = ad.hvp(lambda x: np.sum(np.sin(x) * np.exp(x[::-1])), X, v)
    np.testing.assert_allclose(got, fd, rtol=1e-7, atol=1e-9)


@pytest.mark.parametrize("backend", [("threads", 2), ("processes", 2)])
def test_columns_on_an_executor_are_bitwise_identical_to_serial(backend):
    name, n = backend
    ex = executors.resolve(name, n_workers=n)
    x = np.linspace(-1, 1, 12)
    f = lambda x: np.tanh(np.outer(x, x)).sum(axis=0)  # noqa: E731
    for mode in ("fwd", "rev"):
        serial, = ad.jacobian(f, x, mode=mode, executor="serial", chunk_size=3)
        parallel, = ad.jacobian(f, x, mode=mode, executor=ex, chunk_size=3)
        assert serial.tobytes() == parallel.tobytes()
    g = lambda x: np.sum(np.sin(x) ** 2 * x[::-1])  # noqa: E731
    assert (ad.hessian(g, x, executor="serial", chunk_size=5).tobytes()
            == ad.hessian(g, x, executor=ex, chunk_size=5).tobytes())


def test_hessian_of_a_loss_with_a_psum():
    models = [np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.3, -0.2])]

    def loss(x):
        return ad.psum(lambda w, x: np.sum(np.tanh(w * x)) ** 2, models, x, executor="threads")

    def plain(x):
        return sum(np.sum(np.tanh(w * x)) ** 2 for w in models)

    np.testing.assert_allclose(ad.hessian(loss, X), ad.hessian(plain, X), rtol=1e-12)


def test_third_derivative_by_nesting():
    d3 = ad.gradient(lambda x: ad.gradient(lambda x: ad.gradient(np.sin, x)[0], x)[0], 0.4)[0]
    assert np.isclose(d3, -np.cos(0.4), rtol=1e-14)


def test_no_perturbation_confusion_in_forward_mode():
    # d/dx [x · d/dy (x + y)] = 1; confusing the two perturbations gives 2
    inner = lambda x: ad.jvp(lambda y: x + y, (2.0,), (1.0,))[1]  # noqa: E731
    assert ad.jvp(lambda x: x * inner(x), (3.0,), (1.0,))[1] == 1.0


def test_bad_input_is_named():
    with pytest.raises(ValueError, match="mode must be"):
        ad.jacobian(layer, X, mode="sideways")
    with pytest.raises(TypeError, match=r"argument 0\['n'\] is an integer \(3\)"):
        ad.jacobian(lambda d: d["x"] * d["n"], {"x": X, "n": 3})
    with pytest.raises(TypeError, match="argument 0 is a str"):
        ad.jacobian(lambda s: X, "x")
    with pytest.raises(TypeError, match="v has shape"):
        ad.hvp(quartic, X, np.ones(2))
    with pytest.raises(TypeError, match="tangent of argument 0 has shape"):
        ad.jvp(layer, (X,), (np.ones(2),))


def test_a_function_without_an_frule_names_itself():
    @ad.primitive
    def only_reverse(x):
        return x * 2.0

    ad.rrule.register(only_reverse)(lambda x: (only_reverse(x), lambda g: (ad.NoTangent(), 2.0 * g)))
    assert ad.gradient(lambda x: only_reverse(x), 1.0) == (2.0,)
    with pytest.raises(TypeError, match=r"no frule for .*only_reverse.*@adrules\.frule\.register"):
        ad.jvp(only_reverse, (1.0,), (1.0,))


# ---- hessian of several arguments: blocks, like jacobian -----------------------------------

M = np.random.default_rng(2).normal(size=(2, 3))


def two_args(a, b):
    return np.sum(np.tanh(a @ b)) + a[0] ** 3 * np.sum(b[1])


def test_hessian_of_several_arguments_is_the_blocks():
    # hand math: f = sum(a * b) has H_aa = H_bb = 0 and H_ab = H_ba = I
    blocks = ad.hessian(lambda a, b: np.sum(a * b), np.ones(2), np.ones(2))
    np.testing.assert_array_equal(np.block([list(row) for row in blocks]),
                                  np.block([[np.zeros((2, 2)), np.eye(2)], [np.eye(2), np.zeros((2, 2))]]))
    # scalars: f = a * b**2 has H = [[0, 2b], [2b, 2a]]
    (haa, hab), (hba, hbb) = ad.hessian(lambda a, b: a * b ** 2, 3.0, 2.0)
    assert (haa, hab, hba, hbb) == (0.0, 4.0, 4.0, 6.0) and np.shape(hab) == ()


@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
def test_hessian_blocks_match_the_flat_hessian(backend):
    a, b = np.array([0.3, -0.7]), M
    flat = ad.hessian(lambda z: two_args(z[:2], z[2:].reshape(2, 3)), np.concatenate([a, b.ravel()]))
    blocks = ad.hessian(two_args, a, b, executor=backend, chunk_size=3)
    sizes = [(0, 2), (2, 8)]
    for i, x in enumerate((a, b)):
        for j, y in enumerate((a, b)):
            assert blocks[i][j].shape == x.shape + y.shape
            np.testing.assert_allclose(blocks[i][j].reshape(x.size, y.size),
                                       flat[sizes[i][0]:sizes[i][1], sizes[j][0]:sizes[j][1]], rtol=1e-12)
    serial = ad.hessian(two_args, a, b, executor="serial", chunk_size=3)
    assert all(serial[i][j].tobytes() == blocks[i][j].tobytes() for i in range(2) for j in range(2))


def test_hessian_blocks_against_finite_differences():
    a, b = np.array([0.3, -0.7]), M
    (_, hab), _ = ad.hessian(two_args, a, b)
    eps = 1e-6
    for k in range(b.size):  # column k of d(grad_a)/db by central differences of the gradient
        e = np.zeros(b.size)
        e[k] = eps
        col = (ad.gradient(two_args, a, b + e.reshape(b.shape))[0]
               - ad.gradient(two_args, a, b - e.reshape(b.shape))[0]) / (2 * eps)
        np.testing.assert_allclose(hab.reshape(2, -1)[:, k], col, rtol=1e-6, atol=1e-8)


def test_hessian_of_one_argument_stays_an_array_and_nests():
    assert isinstance(ad.hessian(quartic, X), np.ndarray)
    # d/da of sum(H_ab) for f = sum(a**2 * b): H_ab = diag(2a), so the gradient is 2
    (g,) = ad.gradient(lambda a: np.sum(ad.hessian(lambda u, v: np.sum(u ** 2 * v), a, X)[0][1]), X)
    np.testing.assert_allclose(g, [2.0, 2.0, 2.0])


def test_hessian_without_a_point():
    """hessian(f) is autograd's and JAX's transform; called with no point, it says how to call it."""
    with pytest.raises(TypeError, match=r"hessian\(quartic\) returns a function: call it with the point"):
        ad.hessian(quartic)()


def _logsumexp_with_an_rrule_only():
    @ad.primitive
    def lse(x):
        m = np.max(x)
        return m + np.log(np.sum(np.exp(x - m)))

    @ad.rrule.register(lse)
    def lse_rrule(x):
        y = lse(x)  # as examples/custom_rule.py: the rule calls the primitive
        return y, lambda g: (ad.NoTangent(), g * np.exp(x - y))

    return lse


def test_hessian_and_hvp_of_a_primitive_with_an_rrule_only():
    """Forward-over-reverse meets the primitive in forward mode, where it has no frule;
    reverse-over-reverse needs only the rrule (and a traceable pullback), which is what
    the README's "second order differentiates your pullback" promises. jvp itself still
    says it has no frule."""
    lse = _logsumexp_with_an_rrule_only()
    x, v = np.array([0.3, -1.0, 2.0]), np.array([1.0, 0.5, -2.0])
    p = np.exp(x - np.log(np.sum(np.exp(x))))
    h_true = np.diag(p) - np.outer(p, p)  # the softmax Jacobian
    np.testing.assert_allclose(ad.hessian(lse, x), h_true, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ad.hessian(lse, x, executor="threads", chunk_size=1), h_true,
                               rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(ad.hvp(lse, x, v), h_true @ v, rtol=1e-12, atol=1e-15)
    g = lambda a, b: ad.gradient(lambda a, b: lse(a) + lse(a * b), a, b)  # noqa: E731
    blocks = ad.hessian(lambda a, b: lse(a) + lse(a * b), x, v)
    eps = 1e-6
    for j, arg in enumerate((x, v)):
        for k in range(arg.size):
            e = np.zeros_like(arg)
            e[k] = eps
            up, down = ((x + e, v), (x - e, v)) if j == 0 else ((x, v + e), (x, v - e))
            col = [(gu - gd) / (2 * eps) for gu, gd in zip(g(*up), g(*down))]
            for i in range(2):
                np.testing.assert_allclose(blocks[i][j][:, k], col[i], rtol=1e-6, atol=1e-8)
    with pytest.raises(ad.tracer.NoRuleError, match="no frule"):
        ad.jvp(lse, (x,), (v,))


def test_an_integer_array_point_is_refused_with_its_dtype_and_the_fix():
    with pytest.raises(TypeError, match=r"argument 0 is an array of dtype int64.*x\.astype\(float\)"):
        ad.jacobian(lambda x: x * 2.0, np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError, match=r"dtype bool"):
        ad.hessian(lambda x: np.sum(x * 2.0), np.array([True, False]))


@pytest.mark.parametrize("mode", ["fwd", "rev", None])
@pytest.mark.parametrize("f", [lambda x: x > 1.5, lambda x: np.argsort(x), lambda x: (x > 1.5) * x])
def test_jacobian_of_int_and_bool_outputs_in_every_mode(f, mode):
    # outputs without a tangent: forward mode failed reshaping NoTangent columns
    x = np.array([1.0, 2.0, 0.5])
    jac = ad.jacobian(f, x, mode=mode)[0]
    eps = 1e-6
    fd = np.stack([(np.asarray(f(x + eps * e), float) - np.asarray(f(x - eps * e), float)) / (2 * eps)
                   for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(jac, fd, atol=1e-9)
    assert jac.shape == (3, 3)


def test_hvp_hessian_and_jacobian_refuse_an_integer_point_alike():
    # hvp returned NoTangent(), then took 2 as 2.0, as jacobian and hessian did, where
    # gradient returned NoTangent(): an integer is refused by every derivative now
    for call in (lambda: ad.hvp(lambda t: t ** 4, 2, 1.0), lambda: ad.hessian(lambda t: t ** 4, 2),
                 lambda: ad.jacobian(lambda t: t ** 4, 2)):
        with pytest.raises(TypeError, match=r"is an integer \(2\), which carries no derivative.*float\(x\)"):
            call()
    assert ad.hvp(lambda t: t ** 4, 2.0, 1.0) == 48.0 == ad.hessian(lambda t: t ** 4, 2.0)


@pytest.mark.parametrize("mode", ["fwd", "rev", None])
def test_jacobian_of_a_list_of_values_in_every_mode(mode):
    # rev (and the default, for fewer outputs than inputs) failed: "the cotangent has
    # structure * but the output has list(*, *)", naming pullback, which the user never called
    x = np.array([0.5, -0.5, 1.1])
    want = np.array([[x[1], x[0], 0.0], [0.0, 0.0, 2 * x[2]]])
    np.testing.assert_allclose(ad.jacobian(lambda x: [x[0] * x[1], x[2] ** 2], x, mode=mode)[0], want)
    with pytest.raises(TypeError, match=r"f returned a tuple of values of shapes \[\(\), \(3,\)\]"):
        ad.jacobian(lambda x: (np.sum(x), x), x, mode=mode)


def test_jacobian_falls_back_to_forward_mode_for_a_primitive_with_an_frule_only():
    @ad.primitive
    def square(x):
        return x ** 2

    @ad.frule.register(square)
    def _(tangents, x):
        return x ** 2, 2 * x * tangents[1]

    x = np.array([1.0, 2.0, 3.0])
    f = lambda z: np.stack([np.sum(square(z)), z[0]])  # noqa: E731  2 outputs < 3 inputs: rows first
    np.testing.assert_allclose(ad.jacobian(f, x)[0], [[2.0, 4.0, 6.0], [1.0, 0.0, 0.0]])


def test_hessian_at_an_empty_array():
    # np.stack of no columns: "need at least one array to stack"
    h = ad.hessian(lambda x: np.sum(x ** 2), np.zeros((0, 2)))
    assert h.shape == (0, 2, 0, 2)


@pytest.mark.parametrize("flag", [True, np.True_], ids=["bool", "np.bool_"])
def test_jacobian_and_hessian_refuse_a_flag_they_would_differentiate(flag):
    # every argument is differentiated: a flag passed along got a derivative, as 1.0
    x = np.array([1.0, 2.0])
    with pytest.raises(TypeError, match=r"^hessian\(<lambda>\): argument 1 is a boolean .*closure"):
        ad.hessian(lambda x, b: np.sum(x ** 2) * np.sum(b), x, flag)
    with pytest.raises(TypeError, match=r"^jacobian\(<lambda>\): argument 1 is a boolean .*closure"):
        ad.jacobian(lambda x, b: x * np.sum(b), x, flag)


def test_hvp_names_itself_for_an_integer_array_or_a_plain_class():
    # the errors came from the jvp hvp calls: "jvp(f): argument 0 is an integer ..."
    class Plain:
        def __init__(self):
            self.w = np.ones(2)

    with pytest.raises(TypeError, match=r"^hvp\(<lambda>\): x is an array of dtype int64, .*astype\(float\)"):
        ad.hvp(lambda x: np.sum(x ** 3), np.array([1, 2]), np.ones(2))
    with pytest.raises(TypeError, match=r"^hvp\(<lambda>\): x is an object of class Plain whose attributes w "
                                        r"hold floats, .*register_node"):
        ad.hvp(lambda m: np.sum(m.w), Plain(), Plain())
    # integer data in a container, held fixed, is fine
    h = ad.hvp(lambda p: np.sum(p["w"][p["i"]] ** 3), {"w": np.ones(3), "i": np.array([0, 2])},
               {"w": np.ones(3), "i": np.zeros(2, dtype=int)})
    np.testing.assert_allclose(h["w"], [6.0, 0.0, 6.0])


@pytest.mark.parametrize("f", [
    lambda p: np.sum((A_ROWS - p) ** 2),
    lambda p: np.sum((p - A_ROWS) ** 2),
    lambda p: np.sum((A_ROWS + p[None, :]) ** 2),
    lambda p: np.sum(np.add(A_ROWS, p) ** 2),
], ids=["constant-minus", "minus-constant", "plus-row", "np.add"])
def test_forward_mode_through_a_constant_broadcast_against_a_smaller_traced_operand(f):
    # the tangent of A - p is -dp, of p's shape: refused as "another shape" (stop 23)
    p = np.array([0.5, -0.25])
    want_grad = np.array([(f(p + e) - f(p - e)) / 2e-6 for e in 1e-6 * np.eye(2)])
    np.testing.assert_allclose(ad.hessian(f, p), 2 * len(A_ROWS) * np.eye(2), rtol=1e-12)
    np.testing.assert_allclose(ad.jvp(f, (p,), (np.array([1.0, 0.0]),))[1], want_grad[0], rtol=1e-6)
    np.testing.assert_allclose(ad.jacobian(f, p, mode="fwd")[0], want_grad, rtol=1e-6)


A_ROWS = np.array([[0.0, 0.0], [1.0, 0.0], [0.0, 2.0]])
