"""rules/fft.py against central differences along real and imaginary directions: every
numpy.fft transform and shift with several n/s, axis/axes and norm (positional and keyword),
on real and complex inputs, reverse and forward mode, second order for a few; Parseval."""


import numpy as np
import pytest

import adrules as ad

import _complex_fd as fd  # noqa: E402  (tests/_complex_fd.py, which conftest.py loads)

# (function name, input shape, positional options, keyword options)
ONE_AXIS_CASES = [
    ((5,), (), {}),
    ((5,), (8,), {}),  # zero-padded
    ((6,), (), {"n": 4}),  # cropped
    ((3, 4), (None, 0, "ortho"), {}),
    ((3, 4), (3,), {"axis": -1, "norm": "forward"}),
    ((2, 5), (), {"n": 6, "axis": 0, "norm": "backward"}),
]
REAL_TO_COMPLEX_CASES = ONE_AXIS_CASES + [((6,), (), {}), ((5,), (), {"n": 9}), ((3, 5), (7, 1, "forward"), {})]
COMPLEX_TO_REAL_CASES = [
    ((4,), (), {}),
    ((4,), (7,), {}),  # odd output: no n/2 bin
    ((5,), (), {"n": 6}),  # input bins beyond n/2 are not read
    ((5,), (), {"n": 3}),
    ((3, 4), (None, 0, "ortho"), {}),
    ((2, 3), (), {"n": 5, "axis": -1, "norm": "forward"}),
]
MANY_AXES_CASES = [
    ((2, 3, 4), (), {}),
    ((2, 3, 4), ((3, 5), (0, 2)), {}),
    ((2, 3, 4), (), {"axes": (1,), "norm": "ortho"}),
    ((2, 3, 4), (), {"s": (4, 2, 3), "axes": (0, 1, 2), "norm": "forward"}),
    ((2, 3, 4), (), {"axes": (2, 0)}),  # axes out of order
    ((3, 4), (), {"s": (5, -1), "axes": (0, 1)}),  # -1: the input's length
    ((3, 4), (), {"s": (2, 5), "axes": (1, 1)}),  # one axis twice
]
TWO_AXES_CASES = [((3, 4), (), {}), ((3, 4), ((4, 6),), {}), ((2, 3, 4), (None, (0, 1), "ortho"), {})]


def _call(name, args, kwargs):
    f = getattr(np.fft, name)
    return lambda z: f(z, *args, **kwargs)


def _cases(names, cases, complex_inputs):
    return [pytest.param(name, shape, args, kwargs, c, id=f"{name}-{shape}-{args}-{kwargs}-{'c' if c else 'r'}")
            for name in names for shape, args, kwargs in cases for c in complex_inputs]


@pytest.mark.parametrize(
    "name, shape, args, kwargs, complex_input",
    _cases(["fft", "ifft"], ONE_AXIS_CASES, (False, True))
    + _cases(["rfft", "ihfft"], REAL_TO_COMPLEX_CASES, (False,))
    + _cases(["irfft", "hfft"], COMPLEX_TO_REAL_CASES, (False, True))
    + _cases(["fftn", "ifftn"], MANY_AXES_CASES, (False, True))
    + _cases(["rfftn"], MANY_AXES_CASES, (False,))
    + _cases(["irfftn"], MANY_AXES_CASES, (False, True))
    + _cases(["fft2", "ifft2", "irfft2"], TWO_AXES_CASES, (False, True))
    + _cases(["rfft2"], TWO_AXES_CASES, (False,)))
def test_transform_against_finite_differences(name, shape, args, kwargs, complex_input):
    z = fd.random_like(shape, complex_input, seed=len(shape))
    fd.check_both_modes(_call(name, args, kwargs), z)


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("shape, kwargs", [((5,), {}), ((4, 5), {"axes": 0}), ((3, 4, 5), {"axes": (0, 2)})])
@pytest.mark.parametrize("complex_input", [False, True])
def test_shifts(name, shape, kwargs, complex_input):
    fd.check_both_modes(_call(name, (), kwargs), fd.random_like(shape, complex_input, seed=3))


def test_parseval_the_gradient_of_the_spectrum_energy():
    # sum |fft x|^2 = n sum |x|^2: gradient 2 n x
    x = np.ones(4)
    np.testing.assert_allclose(ad.gradient(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2), x)[0], 8 * x)
    z = fd.random_like((5,), True, seed=1)
    np.testing.assert_allclose(ad.gradient(lambda z: np.sum(np.abs(np.fft.fft(z)) ** 2), z)[0], 10 * z)


@pytest.mark.parametrize("name, shape, complex_input, kwargs", [
    ("fft", (5,), True, {"n": 7}),
    ("ifft", (4,), False, {"norm": "ortho"}),
    ("rfft", (6,), False, {}),
    ("rfft", (5,), False, {"n": 4, "norm": "forward"}),
    ("irfft", (4,), True, {"n": 7}),
    ("hfft", (4,), True, {}),
    ("ihfft", (5,), False, {}),
    ("rfftn", (2, 3), False, {"s": (3, 4), "axes": (0, 1)}),
    ("irfftn", (2, 3), True, {}),
    ("fftshift", (5,), True, {}),
])
def test_second_order(name, shape, complex_input, kwargs):
    f = getattr(np.fft, name)
    w = np.arange(1.0, 1.0 + np.size(f(np.ones(shape), **kwargs))).reshape(np.shape(f(np.ones(shape), **kwargs)))

    def loss(z):  # not quadratic: a Hessian that depends on where it is taken
        return np.sum(np.abs(w * f(z, **kwargs)) ** 4)

    fd.check_second_order(loss, fd.random_like(shape, complex_input, seed=5))


def test_a_real_input_gets_a_real_gradient_and_complex64_stays_complex64():
    x = np.linspace(0.0, 1.0, 6, dtype=np.float32)
    g = ad.gradient(lambda x: np.sum(np.real(np.fft.fft(x)) * np.arange(6.0)), x)[0]
    assert g.dtype == np.float32
    expected = fd.fd_gradient(lambda x: np.sum(np.real(np.fft.fft(x)) * np.arange(6.0)), x.astype(np.float64), 0.5)
    np.testing.assert_allclose(g, expected, rtol=1e-5, atol=1e-5)
    z = (x + 1j * x[::-1]).astype(np.complex64)
    gz = ad.gradient(lambda z: np.sum(np.abs(np.fft.fft(z)) ** 2), z)[0]
    assert gz.dtype == np.complex64
    np.testing.assert_allclose(gz, 12 * z, rtol=1e-5)


def test_out_is_refused_with_the_fix():
    with pytest.raises(TypeError, match=r"numpy\.fft\.fft.*out="):  # by the tracer
        ad.gradient(lambda x: np.sum(np.real(np.fft.fft(x, out=np.empty(3, complex)))), np.ones(3))
    with pytest.raises(NotImplementedError, match=r"numpy\.fft\.rfft2.*drop out="):  # by the rule itself
        ad.rrule(np.fft.rfft2, np.ones((2, 2)), None, (-2, -1), None, np.empty((2, 2), complex))
