"""Rules: ``scipy.integrate.odeint``, differentiable with respect to the initial state
``y0``, the time points ``t``, the parameters in ``args`` and the state ``func`` carries
(a closure over traced values, a callable dataclass's fields); ``tfirst`` and
``full_output`` (its ``infodict`` has no derivative) as SciPy takes them.

A Python function that calls ``np.asarray``: ``scipy.integrate.odeint`` becomes an
``@adrules.primitive`` (``_scipy_entry.replace_function``) computing SciPy's solution.

Reverse mode is the adjoint method (Pontryagin; Chen et al. 2018 for ODE nets; autograd
and JAX differentiate odeint so too): between output times, backwards, one ODE for the
state y, its adjoint a = dL/dy and the parameters' cotangent p̄,

    dy/dt = f(y, t, p),   da/dt = -a ∂f/∂y,   dp̄/dt = -a ∂f/∂p,

restarted at each output time from the stored solution, a taking that time's cotangent
on. The vector-Jacobian products come from ``rrule_via_ad`` of ``f`` (one small tape per
evaluation). The time points' cotangents are ḡᵢ · f(yᵢ, tᵢ), and -a · f(y₀, t₀) for t₀.
The backward ODE is solved with this same primitive, so a derivative of the derivative
traces it again (reverse over reverse, as autograd's). Forward mode solves the
sensitivity equation ds/dt = ∂f/∂y s + ∂f/∂p dp alongside y, from s(t₀) = dy₀ - f(y₀, t₀) dt₀,
with ``frule_via_ad``. Both solve with the caller's ``rtol``, ``atol`` (their smallest
entry, for arrays), ``mxstep``, ``hmax``, ``hmin``, ``mxordn`` and ``mxords``; their
accuracy is the solver's.
"""

import inspect

import numpy as np
import scipy.integrate as si

from ..callables import has_traced
from ..pytrees import flatten, unflatten
from ..registry import frule, rrule
from ..tangents import NoTangent, ZeroTangent, is_float_value, is_zero
from ._scipy_entry import replace_function
from ..tangents import dense

odeint = replace_function(si, "odeint")
_SIGNATURE = inspect.signature(odeint)
_SOLVER_OPTIONS = ("rtol", "atol", "mxstep", "hmax", "hmin", "mxordn", "mxords")


def _bound(call, kwargs):
    bound = _SIGNATURE.bind(*call, **kwargs)
    bound.apply_defaults()
    return bound.arguments


def _solver_options(p):
    out = {k: p[k] for k in _SOLVER_OPTIONS if p[k] not in (None, 0, 0.0)}
    for k in ("rtol", "atol"):  # the augmented state is longer than y: one tolerance for all
        if k in out and np.ndim(out[k]):
            out[k] = float(np.min(out[k]))
    return out


def _rhs(func, args, tfirst):
    """f(y, t) with the extra arguments, whatever the call convention."""
    if tfirst:
        return lambda y, t: func(t, y, *args)
    return lambda y, t: func(y, t, *args)


class _Parameters:
    """The float leaves of ``(func, args)`` as one vector (``vector``), and back
    (``rebuild``). The object keeps only the structure and the other leaves: a function
    closing over it carries no traced value a derivative of this one must find."""

    def __init__(self, func, args):
        leaves, self.tree = flatten((func, args))
        self.moving = [i for i, v in enumerate(leaves) if is_float_value(v, allow_complex=False)]
        self.shapes = [np.shape(leaves[i]) for i in self.moving]
        self.sizes = [int(np.prod(s)) for s in self.shapes]
        self.size = sum(self.sizes)
        parts = [np.reshape(leaves[i], (-1,)) for i in self.moving]
        self.vector = np.concatenate(parts) if parts else np.zeros(0)
        self.others = [None if i in self.moving else v for i, v in enumerate(leaves)]

    def rebuild(self, vector, others=None):
        """``(func, args)`` with the float leaves read from ``vector`` (and the others
        ``others``, by default their values)."""
        leaves = list(self.others) if others is None else [others] * len(self.others)
        start = 0
        for i, shape, size in zip(self.moving, self.shapes, self.sizes):
            leaves[i] = np.reshape(vector[start:start + size], shape)
            start += size
        return unflatten(self.tree, leaves)


def _dense_flat(x, n):
    return np.zeros(n) if is_zero(x) else np.reshape(x, (n,))


# ---- reverse mode: the adjoint -----------------------------------------------------------------------
def _augmented_dynamics(config, params, n, tfirst):
    """The backward ODE of (y, a, p̄) as a function of the flat state."""
    vector, structure = params.vector, params
    structure.vector = None  # the parameters travel in ``vector``, a cell a derivative can see

    def dynamics(state, t):
        y, a = state[:n], state[n:2 * n]

        def rhs(y, t, p):
            func, args = structure.rebuild(p)
            return np.reshape(_rhs(func, args, tfirst)(y, t), (n,))

        dy, back = config.rrule_via_ad(rhs, y, t, vector)
        _, y_bar, _, p_bar = back(-a)
        return np.concatenate([dy, _dense_flat(y_bar, n), _dense_flat(p_bar, structure.size)])

    return dynamics


def odeint_rrule(config, *call, **kwargs):
    p = _bound(call, kwargs)
    func, y0, t, args, tfirst = p["func"], p["y0"], p["t"], p["args"], p["tfirst"]
    out = odeint(*call, **kwargs)
    solution = out[0] if p["full_output"] else out
    n, times = int(np.size(y0)), (t if has_traced(t) else np.asarray(t, dtype=float))

    def odeint_pullback(g):
        g_y = g[0] if p["full_output"] else g
        if is_zero(g_y):
            return (NoTangent(),) + (NoTangent(),) * len(call)
        count = np.shape(solution)[0]
        g_y, ys = np.reshape(g_y, (count, n)), np.reshape(solution, (count, n))
        params = _Parameters(func, args)
        dynamics = _augmented_dynamics(config, params, n, tfirst)
        f = _rhs(func, args, tfirst)
        options = _solver_options(p)
        a, p_bar, t_bars = np.zeros(n), np.zeros(params.size), []
        for i in range(count - 1, 0, -1):
            a = a + g_y[i]
            t_bars.append(np.sum(g_y[i] * np.reshape(f(ys[i], times[i]), (n,))))
            start = np.concatenate([ys[i], a, p_bar])
            end = odeint(dynamics, start, np.stack([times[i], times[i - 1]]), **options)[1]
            a, p_bar = end[n:2 * n], end[2 * n:]
        t_bars.append(-np.sum(a * np.reshape(f(ys[0], times[0]), (n,))))  # moving t0 moves the start
        a = a + g_y[0]
        func_bar, args_bar = params.rebuild(p_bar, NoTangent())
        slots = (NoTangent(), func_bar, np.reshape(a, np.shape(y0)),
                 np.reshape(np.stack(t_bars[::-1]), np.shape(times)), args_bar)
        return (slots + (NoTangent(),) * len(call))[:len(call) + 1]

    return out, odeint_pullback


# ---- forward mode: the sensitivity equation -------------------------------------------------------------
def _sensitivity_dynamics(config, func, args, dfunc, dargs, n, tfirst):
    def call(func, y, t, args):
        return np.reshape(_rhs(func, args, tfirst)(y, t), (n,))

    def dynamics(state, t):
        y, s = state[:n], state[n:]
        dy, ds = config.frule_via_ad((NoTangent(), dfunc, s, ZeroTangent(), dargs), call, func, y, t, args)
        return np.concatenate([dy, dense(ds, dy)])

    return dynamics


def odeint_frule(config, tangents, *call, **kwargs):
    p = _bound(call, kwargs)
    func, y0, t, args, tfirst = p["func"], p["y0"], p["t"], p["args"], p["tfirst"]
    out = odeint(*call, **kwargs)
    solution = out[0] if p["full_output"] else out
    dfunc, dy0, dt, dargs = (tangents[i] if i < len(tangents) else ZeroTangent() for i in range(1, 5))
    if all(is_zero(d) or isinstance(d, NoTangent) for d in (dy0, dt)) and not _moves(dfunc) and not _moves(dargs):
        return out, ZeroTangent()
    n, times = int(np.size(y0)), (t if has_traced(t) else np.asarray(t, dtype=float))
    count = np.shape(solution)[0]
    f = _rhs(func, args, tfirst)
    s0 = _dense_flat(dy0, n)
    if not is_zero(dt):
        s0 = s0 - np.reshape(f(np.reshape(y0, (n,)), times[0]), (n,)) * dt[0]
    dynamics = _sensitivity_dynamics(config, func, args, dfunc, dargs, n, tfirst)
    joint = odeint(dynamics, np.concatenate([np.reshape(y0, (n,)), s0]), times, **_solver_options(p))
    ys, dys = np.reshape(solution, (count, n)), joint[:, n:]
    if not is_zero(dt):
        rates = np.stack([np.reshape(f(ys[i], times[i]), (n,)) for i in range(count)])
        dys = dys + rates * np.reshape(dt, (count, 1))
    dys = np.reshape(dys, np.shape(solution))
    return out, ((dys, ZeroTangent()) if p["full_output"] else dys)


def _moves(tangent):
    return any(not is_zero(v) and not isinstance(v, NoTangent) for v in flatten(tangent)[0])


rrule.register(odeint, config=True)(odeint_rrule)
frule.register(odeint, config=True)(odeint_frule)
