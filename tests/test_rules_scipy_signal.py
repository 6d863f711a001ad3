"""rules/scipy_signal.py: convolve, correlate, fftconvolve, convolve2d and correlate2d in
every mode, for inputs of either size, real and complex, against finite differences in both
modes to second order; values SciPy's own; a convolution's gradient by hand."""

import importlib.util
import pathlib

import numpy as np
import pytest

sg = pytest.importorskip("scipy.signal", reason="SciPy is an optional extra: pip install adrules[scipy]")

import adrules as ad  # noqa: E402
from adrules.testing import check_grads  # noqa: E402

RNG = np.random.default_rng(0)
PAIRS = [((7,), (3,)), ((3,), (7,)), ((6,), (4,)), ((5, 6), (2, 3)), ((2, 3), (5, 6)), ((5, 4), (4, 4))]
FUNCTIONS = {
    "convolve": lambda a, b, mode: sg.convolve(a, b, mode),
    "convolve-direct": lambda a, b, mode: sg.convolve(a, b, mode=mode, method="direct"),
    "convolve-fft": lambda a, b, mode: sg.convolve(a, b, mode, "fft"),
    "correlate": lambda a, b, mode: sg.correlate(a, b, mode),
    "fftconvolve": lambda a, b, mode: sg.fftconvolve(a, b, mode),
    "convolve2d": lambda a, b, mode: sg.convolve2d(a, b, mode),
    "correlate2d": lambda a, b, mode: sg.correlate2d(a, b, mode),
}


CASES = [(name, shapes) for name in FUNCTIONS for shapes in PAIRS
         if not name.endswith("2d") or len(shapes[0]) == 2]  # convolve2d: 2-D inputs only


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("name, shapes", CASES, ids=[f"{n}-{a}x{b}" for n, (a, b) in CASES])
def test_convolutions(name, shapes, mode):
    a, b = RNG.normal(size=shapes[0]), RNG.normal(size=shapes[1])
    f = FUNCTIONS[name]
    original = getattr(sg, name.split("-")[0]).__wrapped__
    y, _ = ad.pullback(lambda a, b: f(a, b, mode), a, b)
    np.testing.assert_allclose(y, original(a, b, mode), rtol=1e-10, atol=1e-12)
    check_grads(lambda a, b: f(a, b, mode), a, b, order=2)


def test_convolution_gradient_by_hand():
    # y = conv(a, b) full: dy_n/da_k = b_{n-k}, so sum(y)'s gradient in a is sum(b) everywhere
    a, b = RNG.normal(size=5), RNG.normal(size=3)
    ga, gb = ad.gradient(lambda a, b: np.sum(sg.convolve(a, b)), a, b)
    np.testing.assert_allclose(ga, np.full(5, np.sum(b)), rtol=1e-12)
    np.testing.assert_allclose(gb, np.full(3, np.sum(a)), rtol=1e-12)


def test_unsupported_options_say_so():
    a = RNG.normal(size=(3, 3))
    with pytest.raises(NotImplementedError, match="boundary='wrap'"):
        ad.gradient(lambda a: np.sum(sg.convolve2d(a, np.ones((2, 2)), boundary="wrap")), a)
    with pytest.raises(NotImplementedError, match="axes="):
        ad.gradient(lambda a: np.sum(sg.fftconvolve(a, np.ones((2, 2)), axes=[0])), a)


# ---- complex values: central differences along real and imaginary directions -------------------
_spec = importlib.util.spec_from_file_location("_complex_fd", pathlib.Path(__file__).with_name("_complex_fd.py"))
fd = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fd)


@pytest.mark.parametrize("mode", ["full", "valid", "same"])
@pytest.mark.parametrize("name, shapes", CASES, ids=[f"{n}-{a}x{b}" for n, (a, b) in CASES])
def test_convolutions_complex(name, shapes, mode):
    f = FUNCTIONS[name]
    a, b = fd.random_like(shapes[0], True, seed=1), fd.random_like(shapes[1], True, seed=2)
    fd.check_both_modes(lambda z: f(z, b, mode), a, h=1e-3)
    fd.check_both_modes(lambda z: f(a, z, mode), b, h=1e-3)
    fd.check_both_modes(lambda x: f(x, b, mode), np.real(a), h=1e-3)  # real signal, complex kernel


@pytest.mark.parametrize("name", ["convolve", "correlate", "correlate2d"])
def test_convolutions_complex_second_order(name):
    f = FUNCTIONS[name]
    b = fd.random_like((2, 2), True, seed=2)
    fd.check_second_order(lambda z: np.sum(np.abs(f(z, b, "same")) ** 4), fd.random_like((3, 3), True, seed=1))
    fd.check_second_order(lambda z: np.sum(np.abs(f(b, z, "full")) ** 4), fd.random_like((2, 3), True, seed=3))
