"""Complex values through the user-facing transforms, each checked against central finite
differences along the real and imaginary parts (ChainRules' convention: the cotangent of
z = x + iy for a real loss L is ∂L/∂x + i ∂L/∂y), and the errors for what has no answer."""

import numpy as np
import pytest

import adrules as ad
from adrules.registry import ComplexRuleError

Z = np.array([0.6 + 0.8j, -1.1 + 0.3j, 0.2 - 0.5j])
X = np.array([0.3, -0.7, 1.2])
H = 1e-6


def loss(z):
    return np.sum(np.abs(np.exp(z) * z) ** 2) + np.real(np.sum(z ** 2 * np.conj(z[::-1])))


def fd_cotangent(f, z):
    """∂f/∂x + i ∂f/∂y for each element of complex z, f real-valued."""
    z = np.asarray(z, dtype=complex)
    g = np.zeros(z.shape, dtype=complex)
    for k in np.ndindex(z.shape):
        for unit in (1.0, 1j):
            e = np.zeros(z.shape, dtype=complex)
            e[k] = unit * H
            g[k] += unit * (f(z + e) - f(z - e)) / (2 * H)
    return g


def fd_directional(f, z, v):
    return (f(z + H * v) - f(z - H * v)) / (2 * H)


# ---- gradients ----------------------------------------------------------------------------

def test_gradient_and_value_and_gradient():
    expected = fd_cotangent(loss, Z)
    np.testing.assert_allclose(ad.gradient(loss, Z)[0], expected, rtol=1e-6)
    value, (g,) = ad.value_and_gradient(loss, Z)
    assert value == pytest.approx(loss(Z))
    np.testing.assert_allclose(g, expected, rtol=1e-6)


def test_grad_and_value_and_grad_with_argnums():
    f = lambda w, z: np.sum(np.abs(w * z) ** 2)  # noqa: E731
    gw, gz = ad.grad(f, argnums=(0, 1))(X, Z)
    np.testing.assert_allclose(gz, fd_cotangent(lambda z: f(X, z), Z), rtol=1e-6)
    assert gw.dtype == np.float64  # a real argument's cotangent stays real
    np.testing.assert_allclose(gw, [fd_directional(lambda w: f(w, Z), X, e) for e in np.eye(3)], rtol=1e-6)
    value, g = ad.value_and_grad(f, argnums=1)(X, Z)
    assert value == pytest.approx(f(X, Z))
    np.testing.assert_allclose(g, gz, rtol=1e-12)


def test_elementwise_grad():
    f = lambda z: np.abs(z) ** 3  # noqa: E731
    np.testing.assert_allclose(ad.elementwise_grad(f)(Z), fd_cotangent(lambda z: np.sum(f(z)), Z), rtol=1e-6)


def test_complex64_stays_complex64():
    g = ad.gradient(lambda z: np.sum(np.abs(z) ** 2), Z.astype(np.complex64))[0]
    assert g.dtype == np.complex64
    np.testing.assert_allclose(g, 2 * Z, rtol=1e-5)


def test_container_of_complex_leaves():
    params = {"z": Z, "c": np.complex128(0.5 - 0.2j), "w": X}

    def f(p):
        return np.sum(np.abs(p["z"] * p["c"] + p["w"]) ** 2)

    g = ad.gradient(f, params)[0]
    np.testing.assert_allclose(g["z"], fd_cotangent(lambda z: f({**params, "z": z}), Z), rtol=1e-6)
    np.testing.assert_allclose(g["c"], fd_cotangent(lambda c: f({**params, "c": c[()]}), params["c"]), rtol=1e-6)
    assert g["w"].dtype == np.float64


# ---- pullback and jvp ---------------------------------------------------------------------

def test_pullback_complex_cotangent_of_complex_output():
    f = lambda z: np.exp(z) * np.conj(z)  # noqa: E731  (neither holomorphic nor real)
    ybar = np.array([0.3 - 1j, 2 + 0.5j, -0.7 + 0.1j])
    y, back = ad.pullback(f, Z)
    np.testing.assert_allclose(y, f(Z))
    # the pullback of ȳ is the gradient of the real loss Re(sum(conj(ȳ) f(z)))
    expected = fd_cotangent(lambda z: np.real(np.sum(np.conj(ybar) * f(z))), Z)
    np.testing.assert_allclose(back(ybar)[0], expected, rtol=1e-6)


def test_pullback_complex_output_of_real_input():
    f = lambda x: np.exp(1j * x) * x  # noqa: E731
    ybar = np.array([0.3 - 1j, 2 + 0.5j, -0.7 + 0.1j])
    (g,) = ad.pullback(f, X)[1](ybar)
    expected = [fd_directional(lambda x: np.real(np.sum(np.conj(ybar) * f(x))), X, e) for e in np.eye(3)]
    assert g.dtype == np.float64
    np.testing.assert_allclose(g, expected, rtol=1e-6)


def test_jvp_complex_tangent():
    f = lambda z, x: np.exp(z) * np.conj(z) + x  # noqa: E731
    v, u = np.array([1 - 0.5j, 0.2j, -0.3 + 1j]), np.array([0.4, -0.1, 0.9])
    y, dy = ad.jvp(f, (Z, X), (v, u))
    np.testing.assert_allclose(y, f(Z, X))
    expected = (f(Z + H * v, X + H * u) - f(Z - H * v, X - H * u)) / (2 * H)
    np.testing.assert_allclose(dy, expected, rtol=1e-6)


# ---- jacobian -----------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["fwd", "rev", None])
def test_jacobian_real_output_complex_input_rows_are_cotangents(mode):
    f = lambda z: np.abs(z) ** 2 * np.real(z[::-1])  # noqa: E731
    (J,) = ad.jacobian(f, Z, mode=mode)
    expected = np.stack([fd_cotangent(lambda z, k=k: f(z)[k], Z) for k in range(3)])
    np.testing.assert_allclose(J, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("mode", ["fwd", "rev", None])
def test_jacobian_complex_output_real_input_columns_are_tangents(mode):
    f = lambda x: np.exp(1j * x) * x[::-1]  # noqa: E731
    (J,) = ad.jacobian(f, X, mode=mode)
    expected = np.stack([fd_directional(f, X, e) for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(J, expected, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("mode", ["fwd", "rev"])
def test_jacobian_holomorphic(mode):
    f = lambda z: np.exp(z * z[::-1] * (1 + 1j)) * z + np.sin(np.sum(z))  # noqa: E731
    (J,) = ad.jacobian(f, Z, mode=mode, holomorphic=True)
    # f'(z): along a real direction, and along an imaginary one divided by i (Cauchy-Riemann)
    along_x = np.stack([fd_directional(f, Z, e) for e in np.eye(3)], axis=-1)
    along_y = np.stack([fd_directional(f, Z, 1j * e) / 1j for e in np.eye(3)], axis=-1)
    np.testing.assert_allclose(J, along_x, rtol=1e-6)
    np.testing.assert_allclose(J, along_y, rtol=1e-6)


def test_jacobian_complex_of_complex_needs_holomorphic():
    with pytest.raises(TypeError, match=r"holomorphic=True.*z\.real, z\.imag"):
        ad.jacobian(lambda z: np.conj(z) * z, Z)
    with pytest.raises(TypeError, match="holomorphic=True is for a complex function.*output is real"):
        ad.jacobian(lambda z: np.abs(z), Z, holomorphic=True)
    with pytest.raises(TypeError, match="argument 1 is real"):
        ad.jacobian(lambda z, x: z * x, Z, X, holomorphic=True)


# ---- second order -------------------------------------------------------------------------

def test_hvp_is_the_derivative_of_the_gradient():
    v = np.array([1 - 0.5j, 0.2j, -0.3 + 1j])
    gradient = lambda z: ad.gradient(loss, z)[0]  # noqa: E731
    expected = fd_directional(gradient, Z, v)  # itself checked by test_gradient_and_value_and_gradient
    np.testing.assert_allclose(ad.hvp(loss, Z, v), expected, rtol=1e-5)
    # the Hessian of f(x + iy) in (x, y) applied to (Re v, Im v), packed as complex
    (hxx, hxy), (hyx, hyy) = ad.hessian(lambda x, y: loss(x + 1j * y), Z.real, Z.imag)
    packed = hxx @ v.real + hxy @ v.imag + 1j * (hyx @ v.real + hyy @ v.imag)
    np.testing.assert_allclose(ad.hvp(loss, Z, v), packed, rtol=1e-10)
    # along a real direction: the derivative of the gradient as z moves along the real axis
    np.testing.assert_allclose(ad.hvp(loss, Z, v.real), fd_directional(gradient, Z, v.real), rtol=1e-5)


def test_hvp_in_a_container():
    p, v = {"z": Z, "w": X}, {"z": 1j * np.ones(3), "w": np.ones(3)}
    f = lambda p: np.sum(np.abs(p["z"] * p["w"]) ** 2)  # noqa: E731
    h = ad.hvp(f, p, v)
    g_at = lambda t: ad.gradient(f, {"z": Z + t * v["z"], "w": X + t * v["w"]})[0]  # noqa: E731
    for k in p:
        np.testing.assert_allclose(h[k], (g_at(H)[k] - g_at(-H)[k]) / (2 * H), rtol=1e-5)


def test_hessian_of_a_complex_point_points_to_hvp():
    with pytest.raises(TypeError, match=r"argument 0 is complex.*hessian\(lambda x, y: loss\(x \+ 1j \* y\)"
                                        r".*hvp\(loss, z, v\)"):
        ad.hessian(loss, Z)
    with pytest.raises(TypeError, match=r"argument 0\['z'\] is complex"):
        ad.hessian(lambda p: np.sum(np.abs(p["z"]) ** 2), {"z": Z})


# ---- bad input ----------------------------------------------------------------------------

@pytest.mark.parametrize("call", [
    lambda f: ad.gradient(f, Z),
    lambda f: ad.value_and_gradient(f, Z),
    lambda f: ad.grad(f)(Z),
    lambda f: ad.value_and_grad(f)(Z),
], ids=["gradient", "value_and_gradient", "grad", "value_and_grad"])
def test_complex_output_to_gradient_says_what_to_use(call):
    with pytest.raises(TypeError, match=r"complex number.*real scalar.*np\.abs\(z\) \*\* 2.*pullback"):
        call(lambda z: np.sum(z ** 2))


def test_complex_output_to_elementwise_grad():
    with pytest.raises(TypeError, match=r"elementwise_grad.*complex values.*pullback"):
        ad.elementwise_grad(lambda z: z ** 2)(Z)


@ad.primitive
def real_only_square(x):
    return x * x


ad.scalar_rule(real_only_square, lambda x, y: 2 * x)


@ad.primitive
def real_only_cube(x):
    return x ** 3


@ad.rrule.register(real_only_cube)
def _real_only_cube_rrule(x):
    return x ** 3, lambda g: (ad.NoTangent(), 3 * x ** 2 * g)


@ad.frule.register(real_only_cube)
def _real_only_cube_frule(tangents, x):
    return x ** 3, 3 * x ** 2 * tangents[1]


@pytest.mark.parametrize("f, how", [
    (real_only_square, r"scalar_rule\(.*real_only_square, \.\.\., complex=True\)"),
    (real_only_cube, r"register\(.*real_only_cube, complex=True\)"),
], ids=["scalar_rule", "rrule"])
def test_complex_value_reaching_a_real_only_rule_reverse(f, how):
    with pytest.raises(ComplexRuleError, match=r"real_only_.*rrule.*" + how):
        ad.gradient(lambda z: np.sum(np.abs(f(z)) ** 2), Z)
    with pytest.raises(ComplexRuleError, match="real_only_"):  # a complex intermediate of a real input
        ad.gradient(lambda x: np.sum(np.abs(f(x * (1 + 1j))) ** 2), X)


@pytest.mark.parametrize("f, how", [
    (real_only_square, r"scalar_rule\(.*real_only_square, \.\.\., complex=True\)"),
    (real_only_cube, r"frule\.register\(.*real_only_cube, complex=True\)"),
], ids=["scalar_rule", "frule"])
def test_complex_value_reaching_a_real_only_rule_forward(f, how):
    with pytest.raises(ComplexRuleError, match=r"real_only_.*frule.*" + how):
        ad.jvp(f, (Z,), (np.ones(3, complex),))


def test_complex_tangent_for_a_real_input_in_jvp():
    with pytest.raises(TypeError, match=r"tangent of .* is complex, but the primal is real.*astype\(complex\)"):
        ad.jvp(np.sin, (X,), (np.ones(3) * 1j,))


def test_complex_v_for_a_real_point_in_hvp():
    with pytest.raises(TypeError, match=r"hvp.*v is complex but x is real"):
        ad.hvp(lambda x: np.sum(x ** 3), X, 1j * np.ones(3))


@ad.primitive
def square_rrule_only(z):
    return z * z


@ad.rrule.register(square_rrule_only, complex=True)
def _square_rrule_only_rrule(z):
    return z * z, lambda g: (ad.NoTangent(), np.conj(2 * z) * g)


def test_hvp_reverse_over_reverse_for_an_rrule_only_primitive():
    f = lambda z: np.sum(np.abs(square_rrule_only(z)) ** 2)  # noqa: E731  (|z|^4)
    v = np.array([1 - 0.5j, 0.2j, -0.3 + 1j])
    gradient = lambda z: 4 * np.abs(z) ** 2 * z  # noqa: E731  ∂/∂x + i ∂/∂y of (x² + y²)²
    np.testing.assert_allclose(fd_cotangent(f, Z), gradient(Z), rtol=1e-6)
    np.testing.assert_allclose(ad.hvp(f, Z, v), fd_directional(gradient, Z, v), rtol=1e-6)


@pytest.mark.parametrize("f, arg, mode", [
    (lambda z: np.abs(z) ** 2 * np.real(z[::-1]), Z, "fwd"),
    (lambda z: np.abs(z) ** 2 * np.real(z[::-1]), Z, "rev"),
    (lambda x: np.exp(1j * x) * x[::-1], X, "rev"),
], ids=["real-of-complex-fwd", "real-of-complex-rev", "complex-of-real-rev"])
def test_complex_jacobian_is_bitwise_the_same_on_threads(f, arg, mode):
    serial = ad.jacobian(f, arg, mode=mode, executor="serial")[0]
    threads = ad.jacobian(f, arg, mode=mode, executor="threads", chunk_size=1)[0]
    assert serial.dtype == threads.dtype == np.complex128 and np.array_equal(serial, threads)


def test_jacobian_at_a_container_with_complex_leaves():
    p = {"z": Z, "w": 2.0}
    f = lambda p: np.abs(p["z"]) ** 2 * p["w"]  # noqa: E731
    (J,) = ad.jacobian(f, p)
    expected_z = np.stack([fd_cotangent(lambda z, k=k: f({"z": z, "w": 2.0})[k], Z) for k in range(3)])
    np.testing.assert_allclose(J["z"], expected_z, rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(J["w"], np.abs(Z) ** 2, rtol=1e-12)


@pytest.mark.parametrize("f", [np.abs, np.angle, lambda z: np.abs(z) ** 3, lambda z: np.imag(z) * np.abs(z)],
                         ids=["abs", "angle", "abs-cubed", "imag-times-abs"])
def test_python_complex_scalar_point(f):
    z = 0.6 - 0.8j  # a Python complex: the rules read its dtype as they read an array's
    expected = fd_cotangent(lambda w: f(w[()]), np.asarray(z))
    assert ad.gradient(f, z)[0] == pytest.approx(complex(expected), rel=1e-6)
    assert ad.grad(f)(z) == pytest.approx(complex(expected), rel=1e-6)
    v = 0.3 + 0.4j
    assert ad.jvp(f, (z,), (v,))[1] == pytest.approx(np.real(fd_directional(f, z, v)), rel=1e-6)
