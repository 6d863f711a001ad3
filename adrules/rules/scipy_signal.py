"""Rules: scipy.signal's N-dimensional ``convolve`` and ``correlate`` (``mode`` 'full',
'valid', 'same'; any ``method``), ``fftconvolve`` (``axes=None``), and the 2-D
``convolve2d`` and ``correlate2d`` (``boundary='fill'`` with ``fillvalue=0``); real and complex
values.

Python functions that call ``np.asarray``: each name in ``scipy.signal`` becomes an
``@adrules.primitive`` (``_scipy_entry.replace_function``). A convolution is bilinear, and
every mode is a centered part of the full convolution (SciPy's ``_centered``), so
``convolve``'s pullback pads the cotangent back to the full shape and correlates it with
the other input ('valid' mode; SciPy's correlate conjugates its second input, which is the
adjoint's conj for complex values); its frule is ``convolve(da, b) + convolve(a, db)``. Both
call the primitives again: derivatives of derivatives work. ``correlate(a, b)`` is
``convolve(a, conj(flip(b)))`` and the others are written with ``convolve`` too
(``_compose.composite_rule``); ``correlate2d``'s 'same' mode takes the part of the full
correlation that starts half a sample later than ``correlate``'s does, as SciPy's.
"""

import numpy as np
import scipy.signal as sg

from ..tangents import NoTangent, Thunk, ZeroTangent, is_zero
from ._compose import composite_rule
from ._scipy_entry import replace_function
from ._utils import numpy_frule, numpy_rrule, tangent_at
from .signal import conj_if_complex, embed

convolve = replace_function(sg, "convolve")
correlate = replace_function(sg, "correlate")
fftconvolve = replace_function(sg, "fftconvolve")
convolve2d = replace_function(sg, "convolve2d")
correlate2d = replace_function(sg, "correlate2d")


def _full_shape(a, b):
    return tuple(int(m + n - 1) for m, n in zip(np.shape(a), np.shape(b)))


def _padded_to_full(g, full):
    """The cotangent ``g`` of a centered part of the full convolution, as one of the whole:
    zeros around it."""
    shape = np.shape(g)
    if shape == full:
        return g
    return embed(g, full, [(f - n) // 2 for f, n in zip(full, shape)])


def _flipped(a):
    """``a`` reversed along every axis (np.flip, as a slice)."""
    return a[(slice(None, None, -1),) * np.ndim(a)]


@numpy_rrule(convolve, complex=True)
def convolve_rrule(in1, in2, mode="full", method="auto"):
    y = convolve(in1, in2, mode, method)

    def convolve_pullback(g):
        g_full = _padded_to_full(g, _full_shape(in1, in2))
        return (NoTangent(), Thunk(lambda: correlate(g_full, in2, "valid", method)),
                Thunk(lambda: correlate(g_full, in1, "valid", method)))

    return y, convolve_pullback


@numpy_frule(convolve, complex=True)
def convolve_frule(tangents, in1, in2, mode="full", method="auto"):
    y = convolve(in1, in2, mode, method)
    d1, d2 = tangent_at(tangents, 0), tangent_at(tangents, 1)
    dy = ZeroTangent()
    if not is_zero(d1):
        dy = convolve(d1, in2, mode, method)
    if not is_zero(d2):
        dy = dy + convolve(in1, d2, mode, method)
    return y, dy


def _correlate(in1, in2, mode="full", method="auto"):
    return convolve(in1, conj_if_complex(_flipped(in2)), mode, method)


def _fftconvolve(in1, in2, mode="full", axes=None):
    if axes is not None:
        raise NotImplementedError("scipy.signal.fftconvolve: no rule for axes= (a convolution along some "
                                  "axes only); convolve all axes, or loop over the others.")
    return convolve(in1, in2, mode, "fft")


def _fill_only(name, boundary, fillvalue):
    if boundary not in ("fill", "pad") or np.any(fillvalue != 0):
        raise NotImplementedError(f"scipy.signal.{name}: no rule for boundary={boundary!r}, fillvalue="
                                  f"{fillvalue!r}; the rule covers boundary='fill' with fillvalue=0 (pad "
                                  f"the input with np.pad first for other boundaries).")


def _convolve2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    _fill_only("convolve2d", boundary, fillvalue)
    return convolve(in1, in2, mode, "direct")


def _correlate2d(in1, in2, mode="full", boundary="fill", fillvalue=0):
    _fill_only("correlate2d", boundary, fillvalue)
    full = convolve(in1, conj_if_complex(_flipped(in2)), "full", "direct")
    if mode == "full":
        return full
    s1, s2 = np.shape(in1), np.shape(in2)
    out = s1 if mode == "same" else tuple(abs(m - n) + 1 for m, n in zip(s1, s2))
    starts = [(f - n + 1) // 2 for f, n in zip(np.shape(full), out)]  # SciPy's 2-D 'same' rounds up
    part = full[tuple(slice(s, s + n) for s, n in zip(starts, out))]
    if mode == "valid" and any(m < n for m, n in zip(s1, s2)):
        return conj_if_complex(part)  # SciPy swaps the inputs here, and unlike correlate does not conjugate back
    return part


composite_rule(correlate, _correlate)
composite_rule(fftconvolve, _fftconvolve)
composite_rule(convolve2d, _convolve2d)
composite_rule(correlate2d, _correlate2d)
