"""Rules: ``numpy.fft`` — the discrete Fourier transforms and the shifts, complex values included.

Every transform is linear over the reals, so its frule is the transform of the tangent (same
``n``/``s``, ``axis``/``axes``, ``norm``) and its pullback is its adjoint, x̄ = Aᴴ ȳ (ChainRules'
convention). NumPy computes an n-dimensional transform as a chain of one-axis steps (``fftn``:
``fft`` along each axis from the last; ``rfftn``: ``rfft`` along the last, then ``fft``;
``irfftn``: ``ifft`` along all but the last, then ``irfft``); the pullback runs the steps'
adjoints in reverse order:

* ``fft`` with norm N: ``ifft`` with the dual norm (backward ↔ forward, ortho ↔ ortho): the
  adjoint of the unscaled ``fft`` is ``n * ifft``; ``ifft``'s adjoint is ``fft`` likewise;
* ``rfft``: ``irfft`` of the cotangent with the bins other than 0 and n/2 halved (``irfft``
  counts each of them twice, once for its mirror image, and reads only the real parts of
  bins 0 and n/2, which is all the adjoint has there);
* ``irfft``: ``rfft`` of the cotangent with the bins other than 0 and n/2 doubled;
* a length ``n`` other than the input's: the step zero-padded or cropped its input, so the
  adjoint crops or zero-pads the cotangent back (``resize``).

``hfft(a)`` is ``irfft(conj(a))`` and ``ihfft(a)`` is ``conj(rfft(a))``, the norm swapped, as NumPy
computes them; the adjoint of ``conj`` is ``conj``. ``fftshift``'s adjoint is ``ifftshift`` on the
same axes, and back. Pullbacks call these functions again, so derivatives of derivatives work.
A real input gets the real part of its cotangent (projection).

>>> import numpy as np, adrules as ad
>>> ad.gradient(lambda x: np.sum(np.abs(np.fft.fft(x)) ** 2), np.array([1.0, 2.0]))[0]
array([4., 8.])
"""

import inspect

import numpy as np

from ..registry import frule, primitive, rrule
from ..tangents import NoTangent, ZeroTangent, is_zero
from ._utils import numpy_frule, numpy_rrule, tangent_at

_DUAL_NORM = {None: "forward", "backward": "forward", "ortho": "ortho", "forward": "backward"}
_SWAPPED_NORM = _DUAL_NORM  # NumPy's _swap_direction: hfft's norm for its irfft


# ---- cropping and zero-padding along one axis, a primitive of its own --------------------------
def _along(axis, ndim, index):
    full = [slice(None)] * ndim
    full[axis] = index
    return tuple(full)


@primitive
def resize(x, axis, length):
    """``x`` cropped or zero-padded at the end to ``length`` along ``axis`` (as ``fft(x, n)``
    does to its input).

    >>> resize(np.array([1.0, 2.0]), 0, 3)
    array([1., 2., 0.])
    """
    have = np.shape(x)[axis]
    if length <= have:
        return x[_along(axis, np.ndim(x), slice(0, length))]
    width = [(0, 0)] * np.ndim(x)
    width[axis] = (0, length - have)
    return np.pad(x, width)


@rrule.register(resize, complex=True)
def resize_rrule(x, axis, length):
    have = np.shape(x)[axis]

    def resize_pullback(g):
        return NoTangent(), resize(g, axis, have), NoTangent(), NoTangent()

    return resize(x, axis, length), resize_pullback


@frule.register(resize, complex=True)
def resize_frule(tangents, x, axis, length):
    dx = tangents[1]
    return resize(x, axis, length), (dx if is_zero(dx) else resize(dx, axis, length))


def _fit(x, axis, length):
    return x if np.shape(x)[axis] == length else resize(x, axis, length)


# ---- the one-axis steps and their adjoints -------------------------------------------------------
def _bin_weights(n, axis, ndim, interior):
    """``interior`` at the bins of a length-``n`` real transform other than 0 and n/2, 1 there,
    shaped to broadcast along ``axis``."""
    k = np.arange(n // 2 + 1)
    w = np.where((k > 0) & (2 * k < n), interior, 1.0)
    return np.reshape(w, [-1 if d == axis else 1 for d in range(ndim)])


def _fft_adjoint(g, n, axis, norm, length):
    return _fit(np.fft.ifft(g, None, axis, _DUAL_NORM[norm]), axis, length)


def _ifft_adjoint(g, n, axis, norm, length):
    return _fit(np.fft.fft(g, None, axis, _DUAL_NORM[norm]), axis, length)


def _rfft_adjoint(g, n, axis, norm, length):
    g = g * _bin_weights(n, axis, np.ndim(g), 0.5)
    return _fit(np.fft.irfft(g, n, axis, _DUAL_NORM[norm]), axis, length)


def _irfft_adjoint(g, n, axis, norm, length):
    g = np.fft.rfft(g, None, axis, _DUAL_NORM[norm]) * _bin_weights(n, axis, np.ndim(g), 2.0)
    return _fit(g, axis, length)


_ADJOINTS = {"fft": _fft_adjoint, "ifft": _ifft_adjoint, "rfft": _rfft_adjoint, "irfft": _irfft_adjoint}


def _chain(shape, steps):
    """``steps`` ((kind, n or None, axis), in the order applied) with ``n`` resolved as the
    one-axis functions do and each step's input length along its axis."""
    shape, chain = list(shape), []
    for kind, n, axis in steps:
        axis = axis % len(shape)
        length = shape[axis]
        if n is None:
            n = 2 * (length - 1) if kind == "irfft" else length
        chain.append((kind, n, axis, length))
        shape[axis] = n // 2 + 1 if kind == "rfft" else n
    return chain


# ---- what each function computes, as steps -----------------------------------------------------
#: the one-axis functions: (step, conjugated): hfft conjugates its input, ihfft its output
ONE_AXIS = {"fft": ("fft", None), "ifft": ("ifft", None), "rfft": ("rfft", None),
            "irfft": ("irfft", None), "hfft": ("irfft", "input"), "ihfft": ("rfft", "output")}
#: the n-dimensional functions: (the step along the last axis, conjugated); the other axes take
#: fft after rfft, ifft before irfft (SciPy's hfftn is irfftn of the conjugate, as hfft)
MANY_AXES = {"fftn": ("fft", None), "ifftn": ("ifft", None), "rfftn": ("rfft", None),
             "irfftn": ("irfft", None), "fft2": ("fft", None), "ifft2": ("ifft", None),
             "rfft2": ("rfft", None), "irfft2": ("irfft", None), "hfftn": ("irfft", "input"),
             "hfft2": ("irfft", "input"), "ihfftn": ("rfft", "output"), "ihfft2": ("rfft", "output")}


def _as_list(v):
    return [v] if np.ndim(v) == 0 else list(v)  # SciPy takes one int for s and for axes


def steps_of(name, shape, size, axes):
    """The one-axis steps, in the order applied, of transform ``name`` with ``n`` or ``s``
    (``size``) and ``axis`` or ``axes``: NumPy's ``_cook_nd_args`` (SciPy's
    ``_init_nd_shape_and_axes`` agrees on the calls both accept) and the order of its loops.

    >>> steps_of("irfftn", (2, 3, 4), None, None)
    [('ifft', 2, -3), ('ifft', 3, -2), ('irfft', 6, -1)]
    """
    if name in ONE_AXIS:
        return [(ONE_AXIS[name][0], size, axes)]
    last = MANY_AXES[name][0]
    if axes is not None:
        axes = _as_list(axes)
    shapeless = size is None
    s = (list(shape) if axes is None else [shape[a] for a in axes]) if shapeless else _as_list(size)
    axes = list(range(-len(s), 0)) if axes is None else axes
    if last == "irfft" and shapeless and axes:
        s[-1] = 2 * (shape[axes[-1]] - 1)
    s = [shape[a] if k == -1 else k for k, a in zip(s, axes)]
    if not axes:
        return []
    if last == "rfft":  # rfft along the last axis first, then fft from the second last back
        return [("rfft", s[-1], axes[-1])] + [("fft", s[i], axes[i]) for i in range(len(axes) - 2, -1, -1)]
    if last == "irfft":  # ifft along all but the last axis in order, then irfft
        return [("ifft", s[i], axes[i]) for i in range(len(axes) - 1)] + [("irfft", s[-1], axes[-1])]
    return [(last, s[i], axes[i]) for i in range(len(axes) - 1, -1, -1)]


def transform_pullback_of(name, shape, size, axes, norm):
    """The pullback of transform ``name`` of an input of ``shape``: the steps' adjoints."""
    chain = _chain(shape, steps_of(name, shape, size, axes))
    conjugated = (ONE_AXIS.get(name) or MANY_AXES[name])[1]
    if conjugated is not None:
        norm = _SWAPPED_NORM[norm]

    def fft_pullback(g):
        if conjugated == "output":
            g = np.conjugate(g)
        for kind, n, axis, length in reversed(chain):
            g = _ADJOINTS[kind](g, n, axis, norm, length)
        if conjugated == "input":
            g = np.conjugate(g)
        return NoTangent(), g

    return fft_pullback


def _without_out(f, options):
    if options and options[0] is not None:
        raise NotImplementedError(f"numpy.fft.{f.__name__}(..., out=...) has no derivative rule: the "
                                  f"result would be written into an array the tape cannot follow; "
                                  f"drop out= and use the returned array.")
    return options


def register_transform(f, name, primal_options=_without_out):
    """Register the rrule and frule of transform ``f`` (``name``, one of ``ONE_AXIS`` or
    ``MANY_AXES``), called as ``f(a, n or s, axis or axes, norm, *options)`` with the names and
    defaults of ``f``'s signature (keywords reach a primitive's rule as keywords);
    ``primal_options(f, options)`` gives the options to compute the value with, or raises for
    those that have no derivative. The frule transforms the tangent with the same ``n``/``s``,
    axes and norm, and no other option."""
    signature = inspect.signature(f)
    defaults = [p.default for p in signature.parameters.values() if p.kind is p.POSITIONAL_OR_KEYWORD]

    def arguments(args, keywords):
        if keywords:
            bound = signature.bind(*args, **keywords)
            bound.apply_defaults()
            args, keywords = bound.args, bound.kwargs
        else:
            args = (*args, *defaults[len(args):])
        return args[0], args[1], args[2], args[3], primal_options(f, args[4:]), keywords

    def fft_rrule(*args, **keywords):
        a, size, axes, norm, options, keywords = arguments(args, keywords)
        y = f(a, size, axes, norm, *options, **keywords)
        return y, transform_pullback_of(name, np.shape(a), size, axes, norm)

    def fft_frule(tangents, *args, **keywords):
        a, size, axes, norm, options, keywords = arguments(args, keywords)
        y = f(a, size, axes, norm, *options, **keywords)
        da = tangent_at(tangents, 0)
        return y, (ZeroTangent() if is_zero(da) else f(da, size, axes, norm))

    fft_rrule.__name__ = fft_rrule.__qualname__ = f"{name}_rrule"
    fft_frule.__name__ = fft_frule.__qualname__ = f"{name}_frule"
    numpy_rrule(f, complex=True)(fft_rrule)
    numpy_frule(f, complex=True)(fft_frule)


for _name in (*ONE_AXIS, *MANY_AXES):
    if hasattr(np.fft, _name):
        register_transform(getattr(np.fft, _name), _name)


# ---- shifts: permutations, each the other's adjoint -----------------------------------------------
def register_shifts(shift, unshift):
    """Register the rrule and frule of ``shift`` (``fftshift`` or ``ifftshift``), whose adjoint
    is ``unshift``, the other."""
    @numpy_rrule(shift, complex=True)
    def shift_rrule(x, axes=None):
        def shift_pullback(g):
            return NoTangent(), unshift(g, axes)

        return shift(x, axes), shift_pullback

    @numpy_frule(shift, complex=True)
    def shift_frule(tangents, x, axes=None):
        dx = tangent_at(tangents, 0)
        return shift(x, axes), (ZeroTangent() if is_zero(dx) else shift(dx, axes))


register_shifts(np.fft.fftshift, np.fft.ifftshift)
register_shifts(np.fft.ifftshift, np.fft.fftshift)
