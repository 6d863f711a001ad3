"""rules/scipy_integrate.py: odeint's adjoint (reverse) and sensitivity (forward) rules
against finite differences to second order, with respect to y0, t, the parameters in args
and values a closure or tfirst function carries; and against the closed-form solution of
dy/dt = -k y."""

import numpy as np
import pytest

si = pytest.importorskip("scipy.integrate", reason="SciPy is an optional extra: pip install adrules[scipy]")

import adrules as ad  # noqa: E402
from adrules.testing import check_grads  # noqa: E402

TIGHT = {"rtol": 1e-10, "atol": 1e-10}
LOOSE = {"rtol": 1e-4, "atol": 1e-5}  # the solver's accuracy, not the rule's, limits agreement
RNG = np.random.default_rng(0)


def dynamics(y, t, arg1, arg2):  # autograd's test problem
    return -np.sqrt(t) - y + arg1 - np.mean((y + arg2) ** 2)


@pytest.mark.parametrize("modes", [("rev",), ("fwd",)])
def test_y0_t_and_args(modes):
    y0, t = RNG.normal(size=3), np.linspace(0.1, 0.2, 4)
    a1, a2 = RNG.normal(size=3), RNG.normal(size=3)
    check_grads(lambda y0, t, a1, a2: si.odeint(dynamics, y0, t, (a1, a2), **TIGHT), y0, t, a1, a2,
                modes=modes, order=2, **LOOSE)


@pytest.mark.parametrize("modes", [("rev",), ("fwd",)])
def test_a_closure_over_parameters_an_ode_net(modes):
    w = RNG.normal(size=(2, 2)) * 0.5
    check_grads(lambda w, y0: si.odeint(lambda y, t: np.tanh(w @ y), y0, np.linspace(0.0, 1.0, 3), **TIGHT),
                w, np.array([0.5, -0.3]), modes=modes, order=2, **LOOSE)


def test_scalar_state_tfirst_keywords_and_full_output():
    check_grads(lambda y0, k: si.odeint(lambda t, y, k: -k * y * y, y0, [0.0, 0.5, 1.0], args=(k,), tfirst=True,
                                        **TIGHT), 1.5, 0.7, order=2, **LOOSE)
    check_grads(lambda y0: si.odeint(lambda y, t: np.sin(y), y0, np.array([0.0, 1.0]), full_output=True,
                                     **TIGHT)[0], np.array([0.3, 1.0]), order=1, **LOOSE)


def test_exponential_decay_by_hand():
    # y(t) = y0 exp(-k (t - t0)): every derivative in closed form, t0 included
    k, y0, t = 0.7, np.array([1.0, 2.0]), np.array([0.0, 0.5, 1.5])
    decay = lambda y0, k, t: np.sum(si.odeint(lambda y, t, k: -k * y, y0, t, (k,), **TIGHT))  # noqa: E731
    g_y0, g_k, g_t = ad.gradient(decay, y0, k, t)
    e = np.exp(-k * (t - t[0]))
    np.testing.assert_allclose(g_y0, np.full(2, np.sum(e)), rtol=1e-7)
    assert g_k == pytest.approx(np.sum(-(t - t[0])[:, None] * y0 * e[:, None]), rel=1e-7)
    rate = -k * np.sum(y0) * e  # d/dt_i of sum(y(t_i)), i >= 1
    np.testing.assert_allclose(g_t, [-np.sum(rate[1:]), rate[1], rate[2]], rtol=1e-7)
    _, dy = ad.jvp(lambda k: si.odeint(lambda y, t, k: -k * y, y0, t, (k,), **TIGHT), (k,), (1.0,))
    np.testing.assert_allclose(dy, -(t - t[0])[:, None] * y0 * e[:, None], rtol=1e-7, atol=1e-12)


def test_one_time_point_and_untraced_calls():
    g = ad.gradient(lambda y0: np.sum(si.odeint(lambda y, t: -y, y0, [0.0])), np.array([1.0, 2.0]))[0]
    np.testing.assert_array_equal(g, [1.0, 1.0])
    y = si.odeint(lambda y, t: -y, np.array([1.0]), [0.0, 1.0], **TIGHT)
    assert y[-1, 0] == pytest.approx(np.exp(-1.0), rel=1e-8)
