"""Finite-difference checks of rules on complex (and real) values, for the rule tests of
linear maps such as the FFTs. The test files load it by path: pytest imports them with
``--import-mode=importlib``, where a test file cannot import its neighbours.

ChainRules' convention: for a real loss L(z) the cotangent of z = x + iy is ∂L/∂x + i ∂L/∂y;
the pullback of ȳ is the gradient of L(z) = Re(sum(conj(ȳ) * f(z))).
"""

import numpy as np

import adrules as ad


def random_like(shape, complex_, seed):
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1.0, 1.0, size=shape)
    return x + 1j * rng.uniform(-1.0, 1.0, size=shape) if complex_ else x


def fd_gradient(loss, z, h):
    """Central differences of the real ``loss`` along the real and (complex z) imaginary parts."""
    z = np.asarray(z)
    out = np.zeros(z.shape, z.dtype if z.dtype.kind == "c" else np.float64)
    for index in np.ndindex(z.shape):
        e = np.zeros(z.shape, out.dtype)
        e[index] = h
        out[index] = (loss(z + e) - loss(z - e)) / (2 * h)
        if z.dtype.kind == "c":
            out[index] += 1j * (loss(z + 1j * e) - loss(z - 1j * e)) / (2 * h)
    return out


def check_both_modes(f, z, h=0.5, atol=1e-9, seed=7):
    """``f``'s pullback of a random cotangent and its jvp along a random direction (complex
    where the value is) against central differences; ``h`` may be large for a linear ``f``."""
    y, back = ad.pullback(f, z)
    y_plain = f(z)
    np.testing.assert_allclose(y, y_plain, atol=1e-12)
    ybar = random_like(np.shape(y_plain), np.iscomplexobj(y_plain), seed)
    (zbar,) = back(ybar)
    expected = fd_gradient(lambda w: np.real(np.sum(np.conj(ybar) * f(w))), z, h)
    assert np.iscomplexobj(zbar) == np.iscomplexobj(z), (zbar, z)
    np.testing.assert_allclose(zbar, expected, atol=atol, err_msg="pullback")
    v = random_like(np.shape(z), np.iscomplexobj(z), seed + 1)
    _, dy = ad.jvp(f, (z,), (v,))
    np.testing.assert_allclose(dy, (f(z + h * v) - f(z - h * v)) / (2 * h), atol=atol, err_msg="jvp")
    assert np.iscomplexobj(dy) == np.iscomplexobj(y_plain)


def check_second_order(loss, z, h=1e-5, rtol=1e-6, seed=11):
    """The Hessian-vector product of the real ``loss`` (of z as (x, y) when complex), both
    forward-over-reverse (``ad.hvp``) and reverse-over-reverse, against central differences
    of the gradient."""
    v = random_like(np.shape(z), np.iscomplexobj(z), seed)

    def gradient(w):
        return ad.gradient(loss, w)[0]

    expected = (gradient(z + h * v) - gradient(z - h * v)) / (2 * h)
    scale = np.max(np.abs(expected))
    np.testing.assert_allclose(ad.hvp(loss, z, v), expected, rtol=rtol, atol=rtol * scale)
    reverse = ad.gradient(lambda w: np.real(np.sum(np.conj(v) * gradient(w))), z)[0]
    np.testing.assert_allclose(reverse, expected, rtol=rtol, atol=rtol * scale)
