"""rules/scipy_fft.py against central differences along real and imaginary directions:
scipy.fft's transforms and shifts with n/s, axis/axes, norm, workers and overwrite_x (by
position and keyword), real and complex inputs, reverse and forward mode, second order."""


import numpy as np
import pytest

pytest.importorskip("scipy")
import scipy.fft as sf  # noqa: E402

import adrules as ad  # noqa: E402

import _complex_fd as fd  # noqa: E402  (tests/_complex_fd.py, which conftest.py loads)

ONE_AXIS = [((5,), (), {}), ((5,), (8, -1, "ortho"), {}), ((3, 4), (), {"n": 3, "axis": 0, "norm": "forward"}),
            ((2, 5), (), {"n": 7, "workers": 2, "overwrite_x": True})]
COMPLEX_TO_REAL = [((4,), (), {}), ((4,), (7,), {}), ((5,), (), {"n": 3, "norm": "ortho"}),
                   ((2, 3), (None, 0, "forward"), {})]
MANY_AXES = [((2, 3, 4), (), {}), ((2, 3, 4), ((3, 5), (0, 2)), {}), ((2, 3, 4), (), {"s": (4, 2), "norm": "ortho"}),
             ((2, 3, 4), (), {"s": 3, "axes": 1, "norm": "forward"}), ((2, 3, 4), (), {"axes": (2, 0), "workers": 2})]
TWO_AXES = [((3, 4), (), {}), ((2, 3, 4), ((4, -1),), {"norm": "ortho"})]


def _cases(names, cases, complex_inputs):
    return [pytest.param(name, shape, args, kwargs, c, id=f"{name}-{shape}-{args}-{kwargs}-{'c' if c else 'r'}")
            for name in names for shape, args, kwargs in cases for c in complex_inputs]


@pytest.mark.parametrize(
    "name, shape, args, kwargs, complex_input",
    _cases(["fft", "ifft"], ONE_AXIS, (False, True))
    + _cases(["rfft", "ihfft"], ONE_AXIS, (False,))
    + _cases(["irfft", "hfft"], COMPLEX_TO_REAL, (False, True))
    + _cases(["fftn", "ifftn", "irfftn", "hfftn"], MANY_AXES, (False, True))
    + _cases(["rfftn", "ihfftn"], MANY_AXES, (False,))
    + _cases(["fft2", "ifft2", "irfft2", "hfft2"], TWO_AXES, (False, True))
    + _cases(["rfft2", "ihfft2"], TWO_AXES, (False,)))
def test_transform_against_finite_differences(name, shape, args, kwargs, complex_input):
    f = getattr(sf, name)
    z = fd.random_like(shape, complex_input, seed=len(shape))
    fd.check_both_modes(lambda w: f(w, *args, **kwargs), z)


@pytest.mark.parametrize("name", ["fftshift", "ifftshift"])
@pytest.mark.parametrize("shape, kwargs", [((5,), {}), ((3, 4, 5), {"axes": (0, 2)})])
def test_shifts(name, shape, kwargs):
    f = getattr(sf, name)
    fd.check_both_modes(lambda w: f(w, **kwargs), fd.random_like(shape, True, seed=3))


def test_overwrite_x_does_not_overwrite_what_the_tape_reads():
    z = fd.random_like((4,), True, seed=2)

    def loss(z):  # z ** 3's pullback reads z after the transform ran
        return np.sum(np.abs(z ** 3)) + np.sum(np.abs(sf.fft(z, overwrite_x=True)) ** 2)

    np.testing.assert_allclose(ad.gradient(loss, z.copy())[0], fd.fd_gradient(loss, z, 1e-6), rtol=1e-6)


def test_parseval():
    np.testing.assert_allclose(ad.gradient(lambda x: np.sum(np.abs(sf.fft(x)) ** 2), np.ones(4))[0], 8 * np.ones(4))


@pytest.mark.parametrize("name, shape, complex_input, kwargs", [
    ("fft", (5,), True, {"n": 7}),
    ("rfft", (5,), False, {"norm": "ortho"}),
    ("hfftn", (2, 3), True, {}),
    ("ihfft2", (2, 3), False, {"s": (3, 4)}),
])
def test_second_order(name, shape, complex_input, kwargs):
    f = getattr(sf, name)
    w = np.arange(1.0, 1.0 + f(np.ones(shape), **kwargs).size).reshape(f(np.ones(shape), **kwargs).shape)
    z = fd.random_like(shape, complex_input, seed=5)
    fd.check_second_order(lambda z: np.sum(np.abs(w * f(z, **kwargs)) ** 4), z)


def test_scipy_says_what_is_wrong_with_a_call():
    with pytest.raises(ValueError, match="unique"):
        ad.gradient(lambda x: np.sum(np.real(sf.fftn(x, axes=(0, 0)))), np.ones((2, 2)))
    with pytest.raises(TypeError, match="real"):
        ad.gradient(lambda z: np.sum(np.abs(sf.rfft(z))), np.ones(3) + 1j)
