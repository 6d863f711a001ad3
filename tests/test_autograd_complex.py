"""HIPS autograd's own complex test cases, re-expressed for adrules.

The cases (functions, operands, shapes, option combinations, orders and modes) are those
of autograd's ``tests/test_complex.py``, the complex operands of ``tests/test_systematic.py``
(``stat_check``, ``unary_ufunc_check``, ``binary_ufunc_check`` and the ``C(...)`` operands of
the products) and the complex cases of ``tests/test_linalg.py``. Each is checked the way
autograd's ``check_grads`` checks it, against central finite differences:

- reverse: ``<v, back(ȳ)> == <ȳ, (f(x + εv/2) - f(x - εv/2)) / ε>`` for random directions
  ``v`` (complex for complex inputs) and cotangents ``ȳ`` (complex for complex outputs),
  with the real inner product ``<a, b> = Re sum(conj(a) b)`` of ChainRules' convention;
- forward: ``jvp(f, x, v)`` equals that difference quotient;
- order n: the same checks, order n - 1, of ``(x, v) -> jvp(f, x, v)`` and of
  ``(x, ȳ) -> back(ȳ)``.

Conventions differ: autograd's ``grad`` of a real ``f`` of ``z = x + iy`` is
``∂f/∂x - i ∂f/∂y``, the conjugate of adrules' (checked below with finite differences).

Cases that wait for complex rules still to come are listed in ``REFUSED``: they must
raise the clear refusal (``ComplexRuleError``, or ``NoRuleError`` where no rule exists at
all), never a wrong number, and a listed case that starts to pass fails the test until it
is taken off the list.
"""

import itertools
import zlib
import operator as op

import numpy as np
import pytest

import adrules as ad
from adrules.pytrees import flatten, unflatten
from adrules.registry import ComplexRuleError
from adrules.tracer import NoRuleError

EPS = 1e-6
RTOL, ATOL = 1e-5, 1e-6


# ---- the check, after autograd.test_util.check_grads -------------------------------------------


def _like(a, rng):
    """A random value in ``a``'s space: complex for complex ``a``, same shape, scalars as
    scalars; a tuple or list (several outputs: a cotangent argument at second order) leaf by leaf."""
    if isinstance(a, (tuple, list)):
        return type(a)(_like(e, rng) for e in a)
    shape = np.shape(a)
    v = rng.standard_normal(shape)
    if np.iscomplexobj(a):
        v = v + 1j * rng.standard_normal(shape)
    return v[()] if shape == () else v


def _tree_like(tree, rng):
    leaves, tdef = flatten(tree)
    return unflatten(tdef, [_like(leaf, rng) for leaf in leaves])


def _inner(a, b):
    """``Re sum(conj(a) b)`` over matching trees."""
    return sum(float(np.sum(np.real(np.conj(u) * w))) for u, w in zip(flatten(a)[0], flatten(b)[0]))


def _moved(a, d, t):
    """``a + t d`` for an argument ``a`` (an array, a number, or a tuple of them)."""
    if isinstance(a, (tuple, list)):
        return type(a)(_moved(x, y, t) for x, y in zip(a, d))
    return np.asarray(a) + t * np.asarray(d) if np.ndim(a) else a + t * d


def _shift(args, v, t):
    return tuple(_moved(a, d, t) for a, d in zip(args, v))


def _fd_jvp(f, args, v):
    plus, minus = f(*_shift(args, v, EPS / 2)), f(*_shift(args, v, -EPS / 2))
    leaves_p, tdef = flatten(plus)
    return unflatten(tdef, [(p - m) / EPS for p, m in zip(leaves_p, flatten(minus)[0])])


def _close(exact, numeric, what):
    assert abs(exact - numeric) < ATOL or abs(exact - numeric) <= RTOL * abs(exact + numeric), \
        f"{what}: analytic {exact}, numeric {numeric}"


def check_grads(f, *args, modes=("fwd", "rev"), order=2, rng=None):
    rng = np.random.default_rng(0) if rng is None else rng
    name = getattr(f, "__name__", "f")
    if "fwd" in modes:
        v = tuple(_like(a, rng) for a in args)
        _, dy = ad.jvp(f, args, v)
        numeric = _fd_jvp(f, args, v)
        u = _tree_like(numeric, rng)
        _close(_inner(u, dy), _inner(u, numeric), f"jvp of {name}")
        if order > 1:
            n = len(args)

            def jvp_f(*xv):
                return ad.jvp(f, xv[:n], xv[n:])[1]

            jvp_f.__name__ = f"jvp_{name}"
            check_grads(jvp_f, *args, *tuple(_like(a, rng) for a in args), modes=modes, order=order - 1, rng=rng)
    if "rev" in modes:
        y, back = ad.pullback(f, *args)
        ybar = _tree_like(y, rng)
        xbar = back(ybar)
        v = tuple(_like(a, rng) for a in args)
        for g, a in zip(flatten(xbar)[0], flatten(args)[0]):
            assert np.iscomplexobj(g) == np.iscomplexobj(a), f"pullback of {name}: a cotangent in the wrong space"
        _close(_inner(v, xbar), _inner(ybar, _fd_jvp(f, args, v)), f"pullback of {name}")
        if order > 1:
            n = len(args)

            def vjp_f(*xy):
                return ad.pullback(f, *xy[:n])[1](xy[n])

            vjp_f.__name__ = f"vjp_{name}"
            check_grads(vjp_f, *args, ybar, modes=modes, order=order - 1, rng=rng)


def combo_check(fun, argnums, modes=("fwd", "rev"), order=2):
    """autograd's combo_check: every combination of the operand lists and keyword options;
    ``argnums`` say which operands are differentiated (the others are held fixed)."""
    def run(*operand_lists, **options):
        keys = list(options)
        for operands in itertools.product(*operand_lists):
            for values in itertools.product(*(options[k] for k in keys)):
                kwargs = dict(zip(keys, values))
                fixed = list(operands)

                def f(*diff, _fixed=fixed, _kwargs=kwargs):
                    full = list(_fixed)
                    for i, d in zip(argnums, diff):
                        full[i] = d
                    return fun(*full, **_kwargs)

                f.__name__ = getattr(fun, "__name__", "f")
                check_grads(f, *(operands[i] for i in argnums), modes=modes, order=order)
    return run


# ---- the operands of autograd's test_systematic (its complex makers) ----------------------------

_rs = [np.random.default_rng(1)]  # each case draws from its own seed (set by the test)
R = lambda *shape: _rs[0].standard_normal(shape)[()]  # noqa: E731
C = lambda *shape: (_rs[0].standard_normal(shape) + 1j * _rs[0].standard_normal(shape))[()]  # noqa: E731
rand = lambda *shape: _rs[0].uniform(size=shape)[()]  # noqa: E731


def transform(lims, x):
    return x * (lims[1] - lims[0]) + lims[0]


def stat_check(fun):
    # test_systematic's stat_check, its complex part
    x, c, A = 3.5, R() + 0.1j * R(), R()
    B, C_, D, E = R(3), R(2, 3), R(1, 3), R(2, 3) + 0.1j * R(2, 3)
    check = combo_check(fun, (0,))
    check([x, c, A])
    check([B, C_, D, E], axis=[None, 0], keepdims=[True, False])


def unary_ufunc_check(fun, lims=(-2, 2)):
    comp = transform(lims, 0.4) + 0.1j * transform(lims, 0.3)
    matc = transform(lims, rand(3, 2)) + 0.1j * rand(3, 2)
    combo_check(fun, (0,))([comp, matc])


def binary_ufunc_check(fun, lims_A=(-2, 2), lims_B=(-2, 2)):
    A = lambda x: transform(lims_A, x)  # noqa: E731
    B = lambda x: transform(lims_B, x)  # noqa: E731
    scalar, comp, vector, matc, mat2 = 0.6, 0.6 + 0.3j, rand(2), rand(3, 2) + 0.1j * rand(3, 2), rand(1, 2)
    combo_check(fun, (0, 1))([A(scalar), A(comp), A(vector), A(matc), A(mat2)],
                             [B(scalar), B(comp), B(vector), B(matc), B(mat2)])


def complex_pairs(fun, lefts, rights, order=2, **options):
    """The combinations of a product's operand lists with a complex operand among them
    (the all-real ones are autograd's real cases, covered by the real-valued suites)."""
    for a, b in itertools.product(lefts, rights):
        if np.iscomplexobj(a) or np.iscomplexobj(b):
            combo_check(fun, (0, 1), order=order)([a], [b], **options)


def _norm_case(shape, **kw):
    return lambda: check_grads(lambda x: np.linalg.norm(x, **kw), C(*shape), modes=("rev",))


def _sym(a):  # Hermitian-making is not autograd's: its eigh cases pass a general matrix
    return a


CASES = {
    # ---- test_complex.py
    "complex.real_type": lambda: _real_type(np.real),
    "complex.real_if_close_type": lambda: _real_type(lambda x: np.real(np.real_if_close(x))),
    "complex.angle_real": lambda: _with_gradient(np.angle, rand()),
    "complex.angle_complex": lambda: _with_gradient(np.angle, rand() + 1j * rand()),
    "complex.abs_real": lambda: (check_grads(np.abs, 1.1), check_grads(_gradient_of(np.abs), 2.1)),
    "complex.abs_complex": lambda: (check_grads(np.abs, 1.1 + 1.2j), check_grads(_gradient_of(np.abs), 1.1 + 1.3j)),
    # ---- test_systematic.py: statistics of complex operands
    **{f"systematic.{f.__name__}": (lambda f=f: lambda: stat_check(f))()
       for f in (np.max, np.mean, np.min, np.sum, np.prod, np.var, np.std)},
    # ---- unary ufuncs on complex operands (lims as in autograd)
    **{f"systematic.{name}": (lambda f=f, lims=lims: lambda: unary_ufunc_check(f, lims))()
       for name, f, lims in [
           ("sin", np.sin, (-2, 2)), ("abs", np.abs, (0.1, 4.0)), ("absolute", np.absolute, (0.1, 4.0)),
           ("arccosh", np.arccosh, (1.1, 4.0)), ("arcsinh", np.arcsinh, (-0.9, 0.9)),
           ("arctanh", np.arctanh, (-0.9, 0.9)), ("cos", np.cos, (-2, 2)), ("cosh", np.cosh, (-2, 2)),
           ("exp", np.exp, (-2, 2)), ("exp2", np.exp2, (-2, 2)), ("expm1", np.expm1, (-2, 2)),
           ("log", np.log, (0.2, 2.0)), ("log10", np.log10, (0.2, 2.0)), ("log1p", np.log1p, (0.2, 2.0)),
           ("log2", np.log2, (0.2, 2.0)), ("sinh", np.sinh, (-2, 2)), ("sqrt", np.sqrt, (1.0, 3.0)),
           ("tan", np.tan, (-1.1, 1.1)), ("tanh", np.tanh, (-2, 2)), ("real", np.real, (-2, 2)),
           ("real_ic", np.real_if_close, (-2, 2)), ("imag", np.imag, (-2, 2)), ("conj", np.conj, (-2, 2)),
           ("conjugate", np.conjugate, (-2, 2)), ("angle", np.angle, (-2, 2))]},
    # ---- binary ufuncs and operators with complex operands
    "systematic.add": lambda: binary_ufunc_check(np.add),
    "systematic.op_mul": lambda: binary_ufunc_check(op.mul),
    "systematic.op_add": lambda: binary_ufunc_check(op.add),
    "systematic.op_sub": lambda: binary_ufunc_check(op.sub),
    # ---- products with the C(...) operands
    "systematic.kron": lambda: complex_pairs(np.kron, [R(5, 5), R(4, 4), R(5), R(5, 1), R(1, 5), R(), C(5, 5)],
                                             [R(3, 3), R(2, 2), R(3), R(1, 3), R(3, 1), R(), C(3, 3)]),
    "systematic.dot": lambda: complex_pairs(np.dot, [1.5, R(3), R(2, 3), R(2, 2, 3), C(3), C(2, 3)],
                                            [0.3, R(3), R(3, 4), R(2, 3, 4), C(3)], order=3),
    "systematic.outer": lambda: complex_pairs(np.outer, [R(3), C(3)], [R(3), C(3)], order=3),
    "systematic.matmul": lambda: complex_pairs(np.matmul, [R(3), R(2, 3), R(2, 2, 3), C(3), C(2, 3)],
                                               [R(3), R(3, 4), R(2, 3, 4), C(3), C(3, 4)]),
    "systematic.tensordot_1": lambda: complex_pairs(np.tensordot, [R(1, 3), R(2, 3, 2), C(1, 3)],
                                                    [R(3), R(3, 1), R(3, 4, 2), C(3)], order=3,
                                                    axes=[[(1,), (0,)]]),
    "systematic.einsum_matmult": lambda: combo_check(lambda a, b: np.einsum("ij,jk->ik", a, b), (0, 1))(
        [R(2, 3), C(2, 3)], [R(3, 4), C(3, 4)]),
    # ---- test_linalg.py's complex cases (reverse mode, order 2, as autograd runs them)
    "linalg.vector_2norm_complex": _norm_case((6,)),
    "linalg.frobenius_norm_complex": _norm_case((6, 5)),
    "linalg.frobenius_norm_axis_complex": _norm_case((6, 5, 4), axis=(0, 1)),
    **{f"linalg.vector_norm_ord_complex[{k}]": _norm_case((6,), ord=k) for k in (2, 3, 4)},
    **{f"linalg.norm_axis_complex[{k}]": _norm_case((6, 5, 4), axis=k) for k in (0, 1, 2)},
    "linalg.norm_nuclear_complex": _norm_case((6, 5), ord="nuc"),
    "linalg.norm_nuclear_axis_complex": _norm_case((6, 5, 4), ord="nuc", axis=(0, 1)),
    "linalg.eigvalh_lower_complex": lambda: check_grads(_eigh_abs("L"), _sym(C(6, 6)), modes=("rev",)),
    "linalg.eigvalh_upper_complex": lambda: check_grads(_eigh_abs("U"), _sym(C(6, 6)), modes=("rev",)),
    "linalg.eig_real": lambda: check_grads(_eig_abs(np.abs), R(8, 8), modes=("rev",)),
    "linalg.eig_complex": lambda: check_grads(_eig_abs(lambda w: w), C(8, 8), modes=("rev",)),
    "linalg.eig_batched": lambda: check_grads(_eig_abs(lambda w: w), C(5, 8, 8), modes=("rev",)),
    **{f"linalg.svd_{kind}_complex": (lambda shape=shape: lambda: check_grads(_svd_abs, C(*shape), modes=("rev",)))()
       for kind, shape in [("wide_2d", (3, 5)), ("wide_3d", (4, 3, 5)), ("square_2d", (4, 4)),
                           ("square_3d", (3, 4, 4)), ("tall_2d", (5, 3)), ("tall_3d", (4, 5, 3))]},
    **{f"linalg.svd_only_s_{kind}_complex": (lambda shape=shape: lambda: check_grads(
        lambda x: np.linalg.svd(x, full_matrices=False, compute_uv=False), C(*shape), modes=("rev",)))()
       for kind, shape in [("2d", (5, 3)), ("3d", (4, 5, 3))]},
}


def _real_type(fn):
    # test_real_type / test_real_if_close_type: a real input gets a real gradient, a complex one a complex one
    g = ad.gradient(lambda x: np.sum(fn(x)), 2.0)[0]
    assert np.isrealobj(g) and g == 1.0
    g = ad.gradient(lambda x: np.sum(fn(x)), 1.0j)[0]
    assert np.iscomplexobj(g) and g == 1.0  # ∂Re z/∂x + i ∂Re z/∂y


def _gradient_of(f):
    def d_f(x):
        return ad.gradient(f, x)[0]
    d_f.__name__ = f"gradient_of_{f.__name__}"
    return d_f


def _with_gradient(f, x):
    check_grads(f, x)
    check_grads(_gradient_of(f), x)


def _eigh_abs(uplo):
    def fun(x):
        w, v = np.linalg.eigh(x, uplo)
        return w, np.abs(v)
    return fun


def _eig_abs(of_w):
    def fun(x):
        w, v = np.linalg.eig(x)
        return of_w(w), np.abs(v)
    return fun


def _svd_abs(x):
    u, s, v = np.linalg.svd(x, full_matrices=False)
    return np.abs(u), s, np.abs(v)


# Cases refused today with a clear error, waiting for complex rules in other rule families.
# case -> the function whose rule refuses (numpy.broadcast_to: np.sum's pullback, second order)
REFUSED: dict = {}


@pytest.mark.parametrize("case", sorted(CASES))
def test_autograd_complex_case(case):
    _rs[0] = np.random.default_rng(zlib.crc32(case.encode()))
    if case not in REFUSED:
        CASES[case]()
        return
    try:
        CASES[case]()
    except (ComplexRuleError, NoRuleError) as e:  # refused, never a wrong number
        assert REFUSED[case] in str(e), f"{case}: refused by another function than listed: {e}"
    else:
        pytest.fail(f"{case} passes now: take it off REFUSED")


def test_autograd_convention_is_the_conjugate_of_ours():
    autograd = pytest.importorskip("autograd")
    anp = autograd.numpy
    z = np.array([0.3 + 1.2j, -0.7 + 0.4j])

    def loss(np_):
        return lambda z: np_.sum(np_.abs(np_.exp(z) * (1 + 2j)) ** 2 + np_.real(z * z))

    def fd(z):
        g = np.zeros_like(z)
        for i in range(z.size):
            for step in (1.0, 1j):
                e = np.zeros_like(z)
                e[i] = EPS * step
                g[i] += step * (loss(np)(z + e) - loss(np)(z - e)) / (2 * EPS)
        return g

    ours = ad.gradient(loss(np), z)[0]
    np.testing.assert_allclose(ours, fd(z), rtol=1e-6)
    np.testing.assert_allclose(np.conj(autograd.grad(loss(anp))(z)), fd(z), rtol=1e-6)
