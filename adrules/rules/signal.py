"""Rules: differences, derivatives, integrals, interpolation, convolutions, cross products.

Each function here is written once as an implementation in NumPy calls that have rules
(slices, concatenate, matmul, take...) and registered with ``composite_rule``, which
gives its rrule and frule by tracing that implementation. Every float argument is
differentiable: ``interp`` w.r.t. ``x``, ``xp`` and ``fp``, ``gradient`` and
``trapezoid`` w.r.t. the samples and the coordinates. Polynomials (``polyval``,
``polyadd``, ``polysub``, ``polymul``, ``polyder``, ``polyint``, ``vander``, ``poly``,
``polyfit``) are 1-d coefficient arrays, highest power first. ``polyfit`` is NumPy's
algorithm with the least-squares solve through ``pinv`` (at constant rank), w.r.t. ``x``,
``y`` and ``w``; ``poly`` multiplies out the roots.

``np.convolve`` has a rule of its own: bilinear, its pullback is NumPy's ``correlate`` (which
conjugates its second argument: right for complex values too) and its frule two convolutions;
``correlate`` is written with it. Complex values go wherever the rules traced through take
them (each refuses them otherwise).
"""

import warnings

import numpy as np

from .. import ops
from ..registry import frule, primitive, rrule
from ..tracer import primal_value
from ..tangents import NoTangent, Thunk, ZeroTangent, is_zero
from ._compose import composite_rule
from ._utils import numpy_frule, numpy_rrule, tangent_at

_NOVALUE = getattr(np, "_NoValue", None)  # NumPy's "argument not given" marker


def _along(axis, ndim, index):
    """The index tuple that applies ``index`` along ``axis`` of an ``ndim``-d array."""
    full = [slice(None)] * ndim
    full[axis] = index
    return tuple(full)


def _column(c, axis, ndim):
    """1-d ``c`` shaped to broadcast along ``axis`` of an ``ndim``-d array."""
    return np.reshape(c, [-1 if d == axis else 1 for d in range(ndim)])


def _float_dtype(a):
    dtype = np.result_type(a)
    return dtype if dtype.kind == "f" else np.dtype(np.float64)


# ---- differences -------------------------------------------------------------------------
def _end_piece(value, a, axis):
    if np.ndim(value) == 0:
        shape = list(np.shape(a))
        shape[axis] = 1
        return np.broadcast_to(value, shape)
    return value


def diff(a, n=1, axis=-1, prepend=_NOVALUE, append=_NOVALUE):
    """``np.diff`` as slices: ``a[1:] - a[:-1]`` along ``axis``, ``n`` times."""
    axis = axis % np.ndim(a)
    pieces = [a]
    if prepend is not _NOVALUE:
        pieces.insert(0, _end_piece(prepend, a, axis))
    if append is not _NOVALUE:
        pieces.append(_end_piece(append, a, axis))
    if len(pieces) > 1:
        a = np.concatenate(pieces, axis)
    upper, lower = _along(axis, np.ndim(a), slice(1, None)), _along(axis, np.ndim(a), slice(None, -1))
    for _ in range(n):
        a = a[upper] - a[lower]
    return a


def ediff1d(ary, to_end=None, to_begin=None):
    pieces = [np.ravel(to_begin)] if to_begin is not None else []
    pieces.append(diff(np.ravel(ary)))
    if to_end is not None:
        pieces.append(np.ravel(to_end))
    return np.concatenate(pieces) if len(pieces) > 1 else pieces[0]


# ---- np.gradient: second-order central differences, NumPy's formulas ---------------------------
def _gradient_along(f, spacing, axis, edge_order):
    ndim, n = np.ndim(f), np.shape(f)[axis]
    if n < edge_order + 1:
        raise ValueError("Shape of array too small to calculate a numerical gradient, "
                         "at least (edge_order + 1) elements are required.")
    if np.ndim(spacing) == 0:
        dx = spacing * np.ones(n - 1, dtype=_float_dtype(f))
    else:
        dx = diff(spacing)
    at = lambda index: f[_along(axis, ndim, index)]  # noqa: E731
    col = lambda c: _column(c, axis, ndim)  # noqa: E731
    dx1, dx2 = dx[:-1], dx[1:]
    interior = (col(-dx2 / (dx1 * (dx1 + dx2))) * at(slice(None, -2))
                + col((dx2 - dx1) / (dx1 * dx2)) * at(slice(1, -1))
                + col(dx1 / (dx2 * (dx1 + dx2))) * at(slice(2, None)))
    if edge_order == 1:
        first = (at(slice(1, 2)) - at(slice(0, 1))) / dx[0]
        last = (at(slice(-1, None)) - at(slice(-2, -1))) / dx[-1]
    else:
        d1, d2 = dx[0], dx[1]
        first = (-(2.0 * d1 + d2) / (d1 * (d1 + d2)) * at(slice(0, 1))
                 + (d1 + d2) / (d1 * d2) * at(slice(1, 2)) - d1 / (d2 * (d1 + d2)) * at(slice(2, 3)))
        d1, d2 = dx[-2], dx[-1]
        last = (d2 / (d1 * (d1 + d2)) * at(slice(-3, -2)) - (d2 + d1) / (d1 * d2) * at(slice(-2, -1))
                + (2.0 * d2 + d1) / (d2 * (d1 + d2)) * at(slice(-1, None)))
    return np.concatenate([first, interior, last], axis)


def gradient(f, *varargs, axis=None, edge_order=1):
    ndim = np.ndim(f)
    axes = range(ndim) if axis is None else ((axis,) if np.ndim(axis) == 0 else axis)
    axes = [a % ndim for a in axes]
    if not varargs:
        spacings = [1.0] * len(axes)
    elif len(varargs) == 1 and np.ndim(varargs[0]) == 0:
        spacings = list(varargs) * len(axes)
    elif len(varargs) == len(axes):
        spacings = list(varargs)
    else:
        raise TypeError("numpy.gradient: invalid number of spacing arguments")
    out = tuple(_gradient_along(f, h, ax, edge_order) for h, ax in zip(spacings, axes))
    return out[0] if len(out) == 1 else out


# ---- integration -------------------------------------------------------------------------------
def trapezoid(y, x=None, dx=1.0, axis=-1):
    ndim = np.ndim(y)
    axis = axis % ndim
    if x is None:
        d = dx
    elif np.ndim(x) == 1:
        d = _column(diff(x), axis, ndim)
    else:
        d = diff(x, axis=axis)
    upper, lower = _along(axis, ndim, slice(1, None)), _along(axis, ndim, slice(None, -1))
    return np.sum(d * (y[upper] + y[lower]) / 2.0, axis)


# ---- interpolation --------------------------------------------------------------------------------
def interp(x, xp, fp, left=None, right=None, period=None):
    if np.iscomplexobj(x) or np.iscomplexobj(xp):  # as NumPy: only fp (and left, right) may be complex
        raise TypeError("numpy.interp: x and xp must be real (Cannot cast array data from complex to "
                        "float64); interpolate np.real(x) or the real and imaginary parts separately.")
    if period is not None:
        raise NotImplementedError(
            "numpy.interp(..., period=...) has no derivative rule; map x into one period "
            "(np.remainder) and extend xp, fp by one point at each end instead.")
    lo = fp[0] if left is None else left
    hi = fp[-1] if right is None else right
    if np.shape(xp)[0] == 1:
        inside = fp[0] + 0.0 * x
    else:
        j = np.clip(np.searchsorted(xp, x, side="right") - 1, 0, np.shape(xp)[0] - 2)
        x0, x1 = xp[j], xp[j + 1]
        inside = fp[j] + (x - x0) / (x1 - x0) * (fp[j + 1] - fp[j])
    return np.where(x < xp[0], lo, np.where(x > xp[-1], hi, inside))


# ---- convolution ------------------------------------------------------------------------------------
def _length(a):
    return np.shape(a)[0] if np.ndim(a) else 1  # NumPy takes a number as a 1-element signal


def _mode_start(n, m, mode):
    """Where ``mode``'s part of the full convolution of lengths ``n`` and ``m`` begins."""
    if mode in ("full", 2):
        return 0
    if mode in ("same", 1):
        return (min(n, m) - 1) // 2
    if mode in ("valid", 0):
        return min(n, m) - 1
    raise ValueError(f"numpy.convolve: mode must be 'full', 'same' or 'valid', got {mode!r}")


def conj_if_complex(x):
    """conj(x) for a complex x; a real x as it is (np.conjugate would copy it).

    >>> conj_if_complex(np.array([1 + 2j])), conj_if_complex(1.5)
    (array([1.-2.j]), 1.5)
    """
    return np.conjugate(x) if np.iscomplexobj(x) else x


@primitive
def embed(x, shape, starts):
    """``x`` placed at ``starts`` in zeros of ``shape``: the cotangent of a part of the full
    convolution as one of the whole (the adjoint of taking the part).

    >>> embed(np.array([1.0, 2.0]), (4,), (1,))
    array([0., 1., 2., 0.])
    """
    return np.pad(x, [(s, n - s - k) for s, n, k in zip(starts, shape, np.shape(x))])


@rrule.register(embed, complex=True)
def embed_rrule(x, shape, starts):
    part = tuple(slice(s, s + k) for s, k in zip(starts, np.shape(x)))

    def embed_pullback(g):
        return NoTangent(), g[part], NoTangent(), NoTangent()

    return embed(x, shape, starts), embed_pullback


@frule.register(embed, complex=True)
def embed_frule(tangents, x, shape, starts):
    dx = tangents[1]
    return embed(x, shape, starts), (dx if is_zero(dx) else embed(dx, shape, starts))


@numpy_rrule(np.convolve, complex=True)
def convolve_rrule(a, v, mode="full"):
    """y[k] = sum_i a[i] v[k - i], from ``mode``'s start in the full convolution. Its adjoint
    in a is sum_k conj(v[k - i]) ȳ[k]: NumPy's correlate, which conjugates its second argument,
    of ȳ (zero-padded to the full length) with v."""
    y = np.convolve(a, v, mode)
    n, m = _length(a), _length(v)
    s = _mode_start(n, m, mode)
    a, v = (np.reshape(x, (1,)) if np.ndim(x) == 0 else x for x in (a, v))  # correlate takes 1-d only

    def convolve_pullback(g):
        if np.shape(g)[0] != n + m - 1:
            g = embed(g, (n + m - 1,), (s,))
        return (NoTangent(), Thunk(lambda: np.correlate(g, v, "valid")),
                Thunk(lambda: np.correlate(g, a, "valid")))

    return y, convolve_pullback


@numpy_frule(np.convolve, complex=True)
def convolve_frule(tangents, a, v, mode="full"):
    y = np.convolve(a, v, mode)
    da, dv = tangent_at(tangents, 0), tangent_at(tangents, 1)
    dy = ZeroTangent() if is_zero(da) else np.convolve(da, v, mode)
    if not is_zero(dv):
        dy = dy + np.convolve(a, dv, mode)
    return y, dy


def correlate(a, v, mode="valid"):
    """sum_n a[n + k] conj(v[n]), as NumPy defines it for either order of lengths."""
    v = conj_if_complex(v)
    if _length(a) < _length(v):  # NumPy correlates the longer against the shorter, then reverses
        return np.convolve(v, a[::-1], mode)[::-1]
    return np.convolve(a, v[::-1], mode)


# ---- cross products -----------------------------------------------------------------------------------
def cross(a, b, axisa=-1, axisb=-1, axisc=-1, axis=None):
    if axis is not None:
        axisa = axisb = axisc = axis
    a, b = np.moveaxis(a, axisa, -1), np.moveaxis(b, axisb, -1)
    (a0, a1), (b0, b1) = (a[..., 0], a[..., 1]), (b[..., 0], b[..., 1])
    if np.shape(a)[-1] == 2 and np.shape(b)[-1] == 2:
        return a0 * b1 - a1 * b0
    a2 = a[..., 2] if np.shape(a)[-1] == 3 else 0.0 * a0
    b2 = b[..., 2] if np.shape(b)[-1] == 3 else 0.0 * b0
    c = np.stack([a1 * b2 - a2 * b1, a2 * b0 - a0 * b2, a0 * b1 - a1 * b0], -1)
    return np.moveaxis(c, -1, axisc)


# ---- polynomials -----------------------------------------------------------------------------------------
def polyval(p, x):
    y = 0.0 * x + p[0]
    for k in range(1, np.shape(p)[0] if hasattr(p, "shape") else len(p)):
        y = y * x + p[k]  # Horner, like NumPy
    return y


def _aligned(a1, a2):
    """Coefficient arrays padded with leading zeros to one length (highest power first)."""
    n1, n2 = np.shape(a1)[0], np.shape(a2)[0]
    pad = lambda a, k: np.concatenate([np.zeros(k, dtype=np.result_type(a, 1.0)), a]) if k else a  # noqa: E731
    return pad(a1, max(n2 - n1, 0)), pad(a2, max(n1 - n2, 0))


def polyadd(a1, a2):
    a1, a2 = _aligned(a1, a2)
    return a1 + a2


def polysub(a1, a2):
    a1, a2 = _aligned(a1, a2)
    return a1 - a2


def polymul(a1, a2):
    return np.convolve(a1, a2)


def polyder(p, m=1):
    for _ in range(m):  # as NumPy's: a derivative of a constant is empty, not [0.]
        p = p[:-1] * np.arange(np.shape(p)[0] - 1, 0, -1)
    return p


def polyint(p, m=1, k=None):
    # k * np.ones(m), not np.full(m, k), which takes no traced k
    constants = np.zeros(m) if k is None else (k * np.ones(m) if np.ndim(k) == 0 else k)
    for i in range(m):
        n = np.shape(p)[0]
        p = np.concatenate([p / np.arange(n, 0, -1), np.reshape(constants[i], (1,))])
    return p


def vander(x, N=None, increasing=False):
    powers = np.arange(np.shape(x)[0] if N is None else N)
    powers = powers if increasing else powers[::-1]
    return np.reshape(x, (-1, 1)) ** powers.astype(np.result_type(x, 1.0))


def poly(seq_of_zeros):
    roots = np.atleast_1d(seq_of_zeros)
    shape = np.shape(roots)
    if len(shape) == 2 and shape[0] == shape[1] and shape[0] != 0:
        raise NotImplementedError(
            "numpy.poly of a square matrix (its characteristic polynomial) goes through complex "
            "eigenvalues, which have no rule: pass the real roots instead.")
    if len(shape) != 1:
        raise ValueError("input must be 1d or non-empty square 2d array.")
    if shape[0] == 0:
        return 1.0
    dtype = np.dtype(np.mintypecode(np.result_type(roots).char))
    if np.result_type(roots) != dtype:
        roots = ops.astype(roots, dtype)
    zero = np.zeros(1, dtype)
    a = np.ones(1, dtype)
    for i in range(shape[0]):  # a times (x - root): NumPy's convolve with [1, -root]
        a = np.concatenate([a, zero]) - roots[i] * np.concatenate([zero, a])
    if dtype.kind == "c":  # as NumPy: real coefficients when the roots come in conjugate pairs
        values = np.asarray(primal_value(roots))
        if np.all(np.sort(values) == np.sort(np.conjugate(values))):
            a = np.real(a)
    return a


def polyfit(x, y, deg, rcond=None, full=False, w=None, cov=False):
    for option, value in (("full", full), ("cov", cov)):
        if value is not False:
            raise NotImplementedError(
                f"numpy.polyfit(..., {option}={value!r}) has no derivative rule: call it without "
                f"{option}= (the coefficients are differentiable) and compute the residuals or "
                f"covariance from them.")
    order = int(deg) + 1
    x, y = np.add(x, 0.0), np.add(y, 0.0)  # as NumPy's asarray(x) + 0.0: floats
    if deg < 0:
        raise ValueError("expected deg >= 0")
    if np.ndim(x) != 1:
        raise TypeError("expected 1D vector for x")
    if np.size(x) == 0:
        raise TypeError("expected non-empty vector for x")
    if np.ndim(y) < 1 or np.ndim(y) > 2:
        raise TypeError("expected 1D or 2D array for y")
    if np.shape(x)[0] != np.shape(y)[0]:
        raise TypeError("expected x and y to have same length")
    if rcond is None:
        rcond = np.shape(x)[0] * np.finfo(np.result_type(x)).eps
    lhs, rhs = vander(x, order), y
    if w is not None:
        w = np.add(w, 0.0)
        if np.ndim(w) != 1:
            raise TypeError("expected a 1-d array for weights")
        if np.shape(w)[0] != np.shape(y)[0]:
            raise TypeError("expected w and y to have the same length")
        lhs = lhs * w[:, None]
        rhs = rhs * (w[:, None] if np.ndim(rhs) == 2 else w)
    scale = np.sqrt(np.sum(lhs * lhs, axis=0))
    lhs = lhs / scale
    if np.linalg.matrix_rank(lhs, rtol=rcond) != order:  # lstsq's rank: singular values above rcond * max
        warnings.warn("Polyfit may be poorly conditioned", np.exceptions.RankWarning, stacklevel=2)
    c = np.linalg.pinv(lhs, rcond) @ rhs
    return (c.T / scale).T


# ---- the table -------------------------------------------------------------------------------------------
composite_rule(np.diff, diff)
composite_rule(np.ediff1d, ediff1d)
composite_rule(np.gradient, gradient)
composite_rule(getattr(np, "trapezoid", None) or getattr(np, "trapz"), trapezoid)  # trapz before NumPy 2.0
composite_rule(np.interp, interp)
composite_rule(np.correlate, correlate)
composite_rule(np.cross, cross)
composite_rule(np.polyval, polyval)
composite_rule(np.polyadd, polyadd)
composite_rule(np.polysub, polysub)
composite_rule(np.polymul, polymul)
composite_rule(np.polyder, polyder)
composite_rule(np.polyint, polyint)
composite_rule(np.vander, vander)
composite_rule(np.poly, poly)
composite_rule(np.polyfit, polyfit)
