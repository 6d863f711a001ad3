"""rules/scipy_special_python.py: logsumexp (its whole signature), softmax, log_softmax,
polygamma, multigammaln, zeta and factorial, against finite differences (rrule, frule,
second order) over scalar, vector, matrix and broadcast inputs, and against closed forms."""

import subprocess
import sys

import numpy as np
import pytest

sp = pytest.importorskip("scipy.special", reason="SciPy is an optional extra: pip install adrules[scipy]")

import adrules as ad  # noqa: E402
from adrules.testing import check_frule, check_grads, check_rrule  # noqa: E402

RNG = np.random.default_rng(0)
A = RNG.normal(size=(3, 4))
B = RNG.uniform(0.5, 2.0, size=4)
SIGNED = np.array([1.0, -0.4, 2.0, -1.0])


@pytest.mark.parametrize("a, kwargs", [
    (0.7, {}),
    (A[0], {}),
    (A, {}),
    (A, {"axis": 1}),
    (A, {"axis": 0, "keepdims": True}),
    (A, {"axis": (0, 1)}),
    (A, {"axis": -1, "b": B}),  # b broadcast against a
    (A[:, :1], {"axis": 1, "b": B}),  # a broadcast against b
    (A, {"axis": None, "b": B, "keepdims": True}),
], ids=["number", "vector", "matrix", "axis", "keepdims", "axes", "b", "a-broadcast", "b-keepdims"])
def test_logsumexp(a, kwargs):
    check_rrule(sp.logsumexp, a, fkwargs=kwargs)
    check_frule(sp.logsumexp, a, fkwargs=kwargs)
    check_grads(lambda a: sp.logsumexp(a, **kwargs), a, order=2)
    if "b" in kwargs:
        rest = {k: v for k, v in kwargs.items() if k != "b"}
        check_grads(lambda a, b: sp.logsumexp(a, b=b, **rest), a, kwargs["b"], order=2)
        check_grads(lambda a, b: sp.logsumexp(a, rest.get("axis"), b), a, kwargs["b"], order=2)


def test_logsumexp_return_sign_with_negative_weights():
    f = lambda a, b: sp.logsumexp(a, axis=-1, b=b, return_sign=True)  # noqa: E731
    y, sign = f(A, SIGNED)
    assert set(np.unique(sign)) <= {-1.0, 1.0}
    check_grads(lambda a, b: f(a, b)[0], A, SIGNED, order=2)
    # the gradient is the signed softmax: sum_i b_i e^a_i / S, by hand
    (ga,) = ad.gradient(lambda a: np.sum(f(a, SIGNED)[0]), A)
    s = np.sum(SIGNED * np.exp(A), axis=-1, keepdims=True)
    np.testing.assert_allclose(ga, SIGNED * np.exp(A) / s, rtol=1e-12)


def test_logsumexp_gradient_is_the_softmax_and_zero_where_every_term_is():
    (g,) = ad.gradient(lambda a: np.sum(sp.logsumexp(a, axis=1)), A)
    np.testing.assert_allclose(g, np.exp(A) / np.sum(np.exp(A), axis=1, keepdims=True), rtol=1e-13)
    (g,) = ad.gradient(lambda a: sp.logsumexp(a), np.array([-np.inf, -np.inf]))
    np.testing.assert_array_equal(g, [0.0, 0.0])


@pytest.mark.parametrize("f", [sp.softmax, sp.log_softmax], ids=["softmax", "log_softmax"])
@pytest.mark.parametrize("x, axis", [(A[0], None), (A, None), (A, 0), (A, -1), (A, (0, 1))],
                         ids=["vector", "matrix", "axis0", "axis-1", "axes"])
def test_softmax_and_log_softmax(f, x, axis):
    check_rrule(f, x, fkwargs={"axis": axis})
    check_frule(f, x, fkwargs={"axis": axis})
    check_grads(lambda x: f(x, axis=axis), x, order=2)
    check_grads(lambda x: f(x, axis), x, modes=("rev",), order=1)


def test_log_softmax_jacobian_by_hand():
    x = A[1]
    (jac,) = ad.jacobian(lambda x: sp.log_softmax(x), x)
    np.testing.assert_allclose(jac, np.eye(4) - sp.softmax(x)[None, :], rtol=1e-12)


@pytest.mark.parametrize("shape", [(), (4,), (2, 3)])
def test_polygamma_multigammaln_zeta_factorial(shape):
    x = RNG.uniform(2.2, 4.0, size=shape)
    for n in (0, 1, 3):
        check_grads(lambda x: sp.polygamma(n, x), x, order=2)
    check_grads(lambda a: sp.multigammaln(a, 3), x, order=2)
    check_grads(lambda q: sp.zeta(3.0, q), x, order=2)
    check_grads(lambda q: sp.zeta(2.5, q=q), x, order=2)
    check_grads(lambda n: sp.factorial(n), x, order=2)
    check_grads(lambda n: sp.factorial(n, exact=False), x, modes=("rev",), order=1)


def test_polygamma_broadcast_orders_and_closed_forms():
    x = np.array([0.7, 1.5, 3.0])
    n = np.array([[0], [2]])
    check_grads(lambda x: sp.polygamma(n, x), x, order=2)
    (g,) = ad.gradient(lambda x: np.sum(sp.polygamma(1, x)), x)
    np.testing.assert_allclose(g, sp.polygamma(2, x), rtol=1e-13)
    (g,) = ad.gradient(lambda a: sp.multigammaln(a, 2), 3.0)
    assert g == pytest.approx(sp.digamma(3.0) + sp.digamma(2.5), rel=1e-13)


def test_zeta_has_no_derivative_in_its_exponent():
    with pytest.raises(NotImplementedError, match="zeta: no derivative with respect to x"):
        ad.gradient(lambda s: sp.zeta(s, 2.0), 3.0)


def test_values_are_scipys_and_untraced_calls_unchanged():
    assert hasattr(sp.logsumexp, "__adrules_primitive__")
    y, _ = ad.pullback(lambda a: sp.logsumexp(a, axis=1, b=B), A)
    np.testing.assert_array_equal(y, sp.logsumexp.__wrapped__(A, axis=1, b=B))
    assert sp.softmax(A, axis=0).shape == A.shape


def _run(code):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout


def test_a_name_bound_before_adrules_was_imported_is_named_in_the_error():
    out = _run("from scipy.special import logsumexp\nimport numpy as np, adrules as ad\n"
               "try:\n    ad.gradient(lambda x: logsumexp(x), np.ones(2))\n"
               "except TypeError as e:\n    print(e)\n"
               "import scipy.special\nprint(ad.gradient(lambda x: scipy.special.logsumexp(x), np.zeros(2))[0])")
    assert "scipy.special.logsumexp has a rule, but the function called here is SciPy's own" in out
    assert "import adrules first" in out and out.strip().endswith("[0.5 0.5]")
