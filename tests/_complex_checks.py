"""Finite-difference checks of rules at complex arguments, for the rule tests (loaded by path:
``load_complex_checks()`` in a test file).

ChainRules' convention: for a real loss ``L(z)`` of ``z = x + iy`` the cotangent is
``∂L/∂x + i ∂L/∂y``. A pullback of ``ȳ`` is the gradient of ``L = Re(sum(conj(ȳ) * f(z)))``,
so ``check_rrule`` compares it with central differences of that ``L`` along the real and the
imaginary direction of every element; ``check_frule`` compares the frule's tangent with central
differences of ``f`` along a random complex direction. Real arguments get real directions (and
their cotangent must be real: projection), complex ones complex directions. Arguments are
walked through lists and tuples (``np.concatenate``'s list); other arguments are held fixed.
"""

import numpy as np

import adrules as ad
from adrules.projection import project_like
from adrules.pytrees import flatten, unflatten
from adrules.tangents import NoTangent, ZeroTangent, is_zero, unthunk

_H = 1e-3  # a five-point stencil: error ~h^4, rounding ~1e-16/h


def is_diff(x):
    """A float or complex array or number: an argument that is differentiated."""
    if isinstance(x, (float, complex, np.floating, np.complexfloating)) and not isinstance(x, bool):
        return True
    return isinstance(x, np.ndarray) and x.dtype.kind in "fc"


def is_complex(x):
    return isinstance(x, (complex, np.complexfloating)) or getattr(x, "dtype", None) is not None \
        and x.dtype.kind == "c"


def paths(tree, prefix=()):
    """(path, leaf) of the differentiable leaves of nested lists and tuples."""
    if isinstance(tree, (list, tuple)):
        for i, t in enumerate(tree):
            yield from paths(t, prefix + (i,))
    elif is_diff(tree):
        yield prefix, tree


def get(tree, path):
    for i in path:
        tree = unthunk(tree)
        if tree is None or is_zero(tree) or isinstance(tree, NoTangent):
            return None
        tree = tree[i]
    tree = unthunk(tree)
    return None if tree is None or is_zero(tree) or isinstance(tree, NoTangent) else tree


def put(tree, path, value):
    if not path:
        return value
    items = list(tree)
    items[path[0]] = put(items[path[0]], path[1:], value)
    return items if isinstance(tree, list) else tuple(items)


def random_like(x, rng):
    """A random direction shaped like ``x``: complex for a complex ``x``, else real (its dtype)."""
    shape = np.shape(x)
    v = rng.uniform(-1, 1, shape)
    if is_complex(x):
        v = v + 1j * rng.uniform(-1, 1, shape)
    if isinstance(x, np.ndarray):
        return v.astype(x.dtype)
    return complex(v) if is_complex(x) else float(v)


def complexify(x, rng):
    """A complex array near float array ``x`` (imaginary parts ±0.2..0.6, away from the real
    axis where branch cuts lie); a symmetric matrix becomes Hermitian. Others as they are."""
    if not (isinstance(x, np.ndarray) and x.dtype.kind == "f"):
        if isinstance(x, list):
            return [complexify(e, rng) for e in x]
        return x
    im = rng.uniform(0.2, 0.6, x.shape) * rng.choice([-1.0, 1.0], x.shape)
    if x.ndim >= 2 and x.shape[-1] == x.shape[-2] and np.allclose(x, np.swapaxes(x, -1, -2)):
        im = np.swapaxes(np.triu(im, 1), -1, -2) - np.triu(im, 1)  # antisymmetric: Hermitian result
    ctype = np.complex64 if x.dtype == np.float32 else np.complex128
    return (x + 1j * im).astype(ctype)


def _stencil(g, t):
    """d/dt g(t) at 0 by the five-point stencil."""
    return (-g(2 * t) + 8 * g(t) - 8 * g(-t) + g(-2 * t)) / (12 * t)


def _tol(*trees):
    """2e-3 where single precision takes part (an argument or an output), else 1e-6."""
    low = any(getattr(x, "dtype", None) in (np.float32, np.complex64)
              for tree in trees for x in flatten(tree)[0])
    return 2e-3 if low else 1e-6


def _out_leaves(y):
    return [leaf for leaf in flatten(y)[0] if is_diff(leaf)]


def check_rrule(f, *args, fkwargs=None, seed=0, rtol=None, atol=None, gauge=None, through=None):
    """The rrule of ``f`` at ``args``: primal, and every differentiable argument's cotangent
    against central differences of ``Re(sum(conj(ȳ) f))`` along real and imaginary parts.

    ``gauge(ys, ts)``, for outputs with a gauge (each eigenvector's phase), returns the
    tangents or cotangents ``ts`` of output leaves ``ys`` without their gauge components:
    ȳ is projected so that the loss does not see the phases. ``through(x)`` is applied to
    each differentiable argument before ``f`` in the differences (not in the rule): a rule
    written for Hermitian matrices is checked as the rule of ``f((a + a^H)/2)``."""
    fkwargs = fkwargs or {}
    rng = np.random.default_rng(seed)
    out = ad.rrule(f, *args, **fkwargs)
    assert out is not None, f"{f}: no rrule"
    y, back = out
    expected_y = f(*args, **fkwargs)
    for a, b in zip(flatten(y)[0], flatten(expected_y)[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12, err_msg=f"{f}: primal")
    leaves, tdef = flatten(y)
    drawn = [random_like(leaf, rng) if is_diff(leaf) else NoTangent() for leaf in leaves]
    if gauge is not None:
        diff = [i for i, leaf in enumerate(leaves) if is_diff(leaf)]
        for i, t in zip(diff, gauge([leaves[i] for i in diff], [drawn[i] for i in diff])):
            drawn[i] = t
    ybar = unflatten(tdef, drawn)
    bars = _out_leaves(ybar)
    cot = back(ybar)

    def loss(a):
        if through is not None:
            a = _through(a, through)
        return sum(float(np.sum(np.real(np.conj(b) * np.asarray(v, dtype=np.result_type(v, b)))))
                   for b, v in zip(bars, _out_leaves(f(*a, **fkwargs))))

    arglist = list(args)
    for path, x in paths(arglist):
        got = get(cot, (path[0] + 1,) + path[1:])
        # the tracer projects: sums a broadcast cotangent, keeps a real argument's real part
        got = np.zeros(np.shape(x)) if got is None else np.asarray(project_like(got, x))
        assert np.shape(got) == np.shape(x), f"{f}: cotangent shape {np.shape(got)} for argument {path}"
        want = np.zeros(np.shape(x), complex)
        flat_x = np.asarray(x)
        for e in range(flat_x.size):
            for unit in ((1.0, 1j) if is_complex(x) else (1.0,)):
                def moved(t):
                    xe = flat_x.astype(complex if is_complex(x) else float).ravel().copy()
                    xe[e] += t * unit
                    xe = xe.reshape(np.shape(x)).astype(flat_x.dtype)
                    return loss(put(arglist, path, xe if isinstance(x, np.ndarray) else type(x)(xe.item())))
                want.flat[e] += unit * _stencil(moved, _H)
        tol = _tol(arglist, y)
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(got, want, rtol=rtol or tol, atol=(atol or tol) * scale,
                                   err_msg=f"{f}: cotangent of argument {path}")


def check_frule(f, *args, fkwargs=None, seed=1, rtol=None, atol=None, gauge=None, through=None):
    """The frule of ``f`` at ``args`` along a random direction (complex for complex arguments)
    against central differences of ``f`` along it. ``gauge`` (see ``check_rrule``) removes
    the gauge components of both tangents before they are compared; ``through`` is applied
    to the random directions (Hermitian directions for a rule written for Hermitian
    matrices, at a Hermitian point)."""
    fkwargs = fkwargs or {}
    rng = np.random.default_rng(seed)
    arglist = list(args)
    dirs = {path: random_like(x, rng) for path, x in paths(arglist)}
    if through is not None:
        dirs = {path: np.asarray(through(v)).astype(np.result_type(v)) if isinstance(v, np.ndarray) else v
                for path, v in dirs.items()}
    tangents = [NoTangent()]
    for i, a in enumerate(arglist):
        t = a
        mine = [(p, v) for p, v in dirs.items() if p[0] == i]
        if not mine:
            tangents.append(ZeroTangent() if is_diff(a) else NoTangent())
            continue
        for p, v in mine:
            t = put([t], (0,) + p[1:], v)[0]
        if isinstance(t, (list, tuple)):  # non-differentiable leaves of a list get no tangent
            t = _no_tangents_except(t, {p[1:] for p, _ in mine})
        tangents.append(t)
    out = ad.frule(tuple(tangents), f, *args, **fkwargs)
    assert out is not None, f"{f}: no frule"
    y, dy = out

    def moved(t):
        a = arglist
        for p, v in dirs.items():
            x = get(a, p)
            a = put(a, p, (x + t * v).astype(x.dtype) if isinstance(x, np.ndarray) else type(x)(x + t * v))
        return f(*a, **fkwargs)

    ys, yt = flatten(y)
    dys = flatten(dy)[0] if isinstance(dy, (list, tuple)) else [dy]
    assert len(dys) == len(ys) or len(ys) == 1, f"{f}: {len(dys)} tangents for {len(ys)} outputs"
    got, wants, ks = [], [], [k for k, leaf in enumerate(ys) if is_diff(leaf)]
    for k in ks:
        leaf = ys[k]
        d = unthunk(dys[k] if len(ys) > 1 else dy)
        d = np.zeros(np.shape(leaf)) if d is None or is_zero(d) or isinstance(d, NoTangent) else np.asarray(d)
        if not is_complex(leaf):
            assert d.dtype.kind != "c" or not np.any(np.imag(d)), f"{f}: complex tangent for real output {k}"
        got.append(d)
        wants.append(_stencil(lambda t: np.asarray(flatten(moved(t))[0][k], dtype=complex), _H))
    if gauge is not None:
        leaves = [ys[k] for k in ks]
        got, wants = gauge(leaves, got), gauge(leaves, wants)
    for k, d, want in zip(ks, got, wants):
        tol = _tol(arglist, y)
        scale = max(1.0, float(np.max(np.abs(want), initial=0.0)))
        np.testing.assert_allclose(d, want, rtol=rtol or tol, atol=(atol or tol) * scale,
                                   err_msg=f"{f}: tangent of output {k}")


def _through(arglist, through):
    out = arglist
    for path, x in paths(arglist):
        out = put(out, path, np.asarray(through(x)).astype(np.result_type(x)))
    return out


def _unphase(vectors, t, axis):
    """``t`` without its components along i·vectors (each vector along ``axis`` alone, real
    inner product): what a change of each vector's phase adds."""
    iv = 1j * vectors
    return t - iv * (np.sum(np.real(np.conj(iv) * t), axis, keepdims=True)
                     / np.sum(np.abs(vectors) ** 2, axis, keepdims=True))


def eig_gauge(ys, ts):
    """For (w, v) of eig or eigh: v's columns without their phase components."""
    (_, v), (tw, tv) = ys, ts
    return [tw, _unphase(v, np.asarray(tv), -2) if is_complex(v) else tv]


def svd_gauge(ys, ts):
    """For (u, s, vh) of svd: each pair u[:, k], vh[k] turns by one phase, opposite ways."""
    (u, _, vh), (tu, ts_, tvh) = ys, ts
    if not (is_complex(u) or is_complex(vh)):
        return ts
    k = np.shape(u)[-1]
    # vh's rows, conjugated (vh^H's columns), turn with u's columns: one vector per pair;
    # conjugation keeps the real inner product, so the projection is taken there
    both = np.concatenate([u, np.conj(np.swapaxes(vh, -1, -2))], -2)
    tboth = np.concatenate([np.asarray(tu), np.conj(np.swapaxes(np.asarray(tvh), -1, -2))], -2)
    out = _unphase(both, tboth, -2)
    tu2, tvh2 = out[..., :np.shape(u)[-2], :k], np.conj(np.swapaxes(out[..., np.shape(u)[-2]:, :], -1, -2))
    return [tu2, ts_, tvh2]


def _no_tangents_except(t, keep, prefix=()):
    if isinstance(t, (list, tuple)):
        items = [_no_tangents_except(e, keep, prefix + (i,)) for i, e in enumerate(t)]
        return items if isinstance(t, list) else tuple(items)
    return t if prefix in keep else NoTangent()


def check_both(f, *args, fkwargs=None, seed=0):
    check_rrule(f, *args, fkwargs=fkwargs, seed=seed)
    check_frule(f, *args, fkwargs=fkwargs, seed=seed + 1)


def grad_fd(loss, z, h=_H):
    """The ChainRules cotangent of real ``loss`` at array ``z`` (real or complex) by differences."""
    z = np.asarray(z)
    out = np.zeros(z.shape, z.dtype)
    for e in range(z.size):
        for unit in ((1.0, 1j) if z.dtype.kind == "c" else (1.0,)):
            def moved(t):
                w = z.copy()
                w.flat[e] += t * unit
                return float(loss(w))
            out.flat[e] += unit * _stencil(moved, h)
    return out


def check_gradient(loss, z, rtol=1e-6, atol=1e-7):
    """``ad.gradient`` of real ``loss`` at ``z`` against differences."""
    (g,) = ad.gradient(loss, z)
    np.testing.assert_allclose(g, grad_fd(loss, z), rtol=rtol, atol=atol)
    return g


def check_hvp(loss, z, seed=2, rtol=1e-5, atol=1e-6):
    """Forward over reverse along a random complex direction ``v`` against differences of
    the gradient: (g(z + hv) - g(z - hv)) / 2h, the gradient taken by adrules (checked apart)."""
    rng = np.random.default_rng(seed)
    v = random_like(np.asarray(z), rng)
    _, hv = ad.jvp(lambda w: ad.gradient(loss, w)[0], (z,), (v,))
    want = _stencil(lambda t: ad.gradient(loss, z + t * v)[0], _H)
    np.testing.assert_allclose(hv, want, rtol=rtol, atol=atol)



def complex_args(args, seed=0):
    """``args`` with every float array (in lists too) made complex (``complexify``); exact
    zeros stay zero and NaNs NaN, so cases built around them keep their point."""
    rng = np.random.default_rng(seed)

    def one(a):
        if isinstance(a, list):
            return [one(e) for e in a]
        if isinstance(a, np.ndarray) and a.dtype.kind == "f":
            z = complexify(a, rng)
            return np.where(a == 0, 0, z).astype(z.dtype)
        return a

    return tuple(one(a) for a in args)


def real_loss(f, *rest, seed=5, **kwargs):
    """A real loss of ``f(z, *rest)`` mixing a non-holomorphic and a holomorphic part:
    ``sum(|y|**2) + Re(sum(c * y))`` over every output ``y`` (a list of outputs too)."""
    def loss(z):
        out = f(z, *rest, **kwargs)
        total = 0.0
        for k, y in enumerate(out if isinstance(out, (list, tuple)) else [out]):
            c = complexify(np.ones(np.shape(y)), np.random.default_rng(seed + k))
            total = total + np.sum(np.real(y * np.conj(y))) + np.sum(np.real(c * y))
        return total

    return loss
