"""psum and pmap: a parallel sum (and map) whose forward map AND pullback run on an executor.

    psum(f, xs, *shared)
      └─ split f into (state, rebuild): the parameters of a callable model, traced values
         captured by a closure ─ both become explicit inputs ("lifted"), so they get gradients
      └─ flatten (state, xs, shared) to leaves ─ _psum_leaves(plan, *leaves)   [a primitive]
           no traced leaf:  values only
           traced leaves:   the rrule below

    rrule forward, per chunk (chunk_ranges(len(xs), chunk_size): never depends on workers):
      executor.map(chunk_forward, chunks, shared=(plan, state, shared))
        on the worker: y_c, back_c = pullback(fold over the chunk, in index order)
          scalar y_c ─ eager: return (y_c, back_c(1)) ─ one round trip, nothing left behind
          array  y_c ─ threads/serial keep back_c; processes/dask drop it (recompute later)
      y = tree_sum(y_c)            fixed pairwise order by chunk index
    rrule pullback(ȳ):
      eager:  ȳ · tree_sum(state and shared grads); ȳ · per-element grads, gathered in order
      lazy:   executor.map(back_c(ȳ) or recompute-then-pull back, chunks), same reduction

Every backend and worker count runs the same float operations in the same order, so
values and gradients are bitwise identical for a given chunk_size. Under a second
derivative (psum's inputs are themselves traced) the chunks run in the calling thread,
traced by the outer differentiation.
"""

from __future__ import annotations

import numpy as np

import executors

from .api import jvp, pullback
from .callables import has_traced as _has_traced, split_callable
from .schedule import run, work_key
from .pytrees import flatten, tree_map, unflatten
from .registry import frule, primitive, rrule
from .tangents import NoTangent, ZeroTangent, is_zero
from .tracer import Traced, TracerError

# ---------------------------------------------------------------------------
# chunk work (runs on workers: module-level so it pickles by reference)
# ---------------------------------------------------------------------------


def _callable(rebuild, state, f):
    return f if rebuild is None else rebuild(state)


def _values(fn, xs, shared, start):
    """fn(x, *shared) for each element of the chunk, in index order; an exception says
    which element raised it."""
    for k in range(len(xs)):
        try:
            yield fn(xs[k], *shared)
        except Exception as e:
            _note(e, f"psum/pmap: raised by f at element {start + k}")
            raise


def _fold(fn, xs, shared, start, vectorized):
    """Sum of fn(x, *shared) over the chunk, a left fold in index order."""
    if vectorized:
        return np.sum(fn(xs, *shared))
    total = None
    for value in _values(fn, xs, shared, start):
        total = value if total is None else total + value
    return total


def _map_list(fn, xs, shared, start, vectorized):
    if vectorized:
        return list(fn(xs, *shared))
    return list(_values(fn, xs, shared, start))


def _note(exc, text):
    if hasattr(exc, "add_note"):
        exc.add_note(text)
    else:  # Python 3.10: no add_note; keep the same __notes__ list, as executors.base.annotate does
        try:
            exc.__notes__ = [*getattr(exc, "__notes__", ()), text]
        except Exception:
            pass


class Plan:
    """What every chunk needs to know, besides its own elements (small and picklable)."""

    def __init__(self, f, rebuild, kind, vectorized):
        self.f, self.rebuild, self.kind, self.vectorized = f, rebuild, kind, vectorized

    def body(self, state, xs, start, *shared):
        """The chunk's sum (or list) of ``f(x, *shared)`` for ``x`` in ``xs``."""
        reduce = _fold if self.kind == "sum" else _map_list
        return reduce(_callable(self.rebuild, state, self.f), xs, shared, start, self.vectorized)


def chunk_value(item, plan, state, shared):
    xs, start = item
    return plan.body(state, xs, start, *shared)


def _active_call(plan, start, active, state, xs, shared):
    """The chunk as a function of its differentiated parts only (``active``: per part of
    (state, xs, *shared), whether it holds traced values): constants are not differentiated."""
    body = plan.body
    full = [state, xs, *shared]
    idx = [i for i, a in enumerate(active) if a]

    def chunk_fn(*values):
        args = list(full)
        for i, v in zip(idx, values):
            args[i] = v
        return body(args[0], args[1], start, *args[2:])

    return chunk_fn, [full[i] for i in idx], idx


def _expand(grads, idx, n):
    out = [NoTangent()] * n
    for i, g in zip(idx, grads):
        out[i] = g
    return tuple(out)


def chunk_forward(item, plan, active, state, shared, keep_tape):
    """Forward on one chunk: eager gradients for a scalar sum, else a tape or nothing."""
    xs, start = item
    fn, args, idx = _active_call(plan, start, active, state, xs, shared)
    y, back = pullback(fn, *args)
    if plan.kind == "sum" and np.shape(y) == () and not isinstance(y, (list, tuple, dict)):
        dt = getattr(y, "dtype", None)
        return "eager", y, _expand(back(dt.type(1) if dt is not None else 1.0), idx, len(active))
    if keep_tape:
        return "tape", y, (lambda ybar: _expand(back(ybar), idx, len(active)))
    return "lazy", y, None


def chunk_backward(pair, plan, active, state, shared):
    """Recompute one chunk's forward and pull its ``ybar`` back (no state kept on workers)."""
    (xs, start), ybar = pair
    fn, args, idx = _active_call(plan, start, active, state, xs, shared)
    return _expand(pullback(fn, *args)[1](ybar), idx, len(active))


def chunk_pullback(pair):
    back, ybar = pair
    return back(ybar)


def chunk_jvp(item, plan, state, shared, tangents):
    (xs, start), (dxs, dstate, dshared) = item, tangents
    body = plan.body
    return jvp(lambda s, x, *sh: body(s, x, start, *sh), (state, xs, *shared), (dstate, dxs, *dshared))


# ---------------------------------------------------------------------------
# scheduling
# ---------------------------------------------------------------------------


def _slice(xs, r):
    return xs[r.start:r.stop]


def _chunks(xs, chunk_size):
    size = chunk_size if chunk_size is not None else executors.current_chunk_size()
    return [(_slice(xs, r), r.start) for r in executors.chunk_ranges(len(xs), size)]


def _tree_add(a, b):
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    return tree_map(lambda u, v: v if is_zero(u) else (u if is_zero(v) else u + v), a, b)


def _gather_elements(parts, xs):
    """Concatenate per-chunk element cotangents back into the structure of ``xs``."""
    if isinstance(xs, np.ndarray):
        return np.concatenate([np.reshape(p, (-1,) + xs.shape[1:]) if not is_zero(p)
                               else np.zeros((0,) + xs.shape[1:], xs.dtype) for p in parts]) \
            if parts else np.zeros_like(xs)
    out = []
    for p in parts:
        out.extend(p)
    return type(xs)(out) if isinstance(xs, tuple) else out


# ---------------------------------------------------------------------------
# the primitive over flat leaves, and its rules
# ---------------------------------------------------------------------------


class Call:
    """One psum/pmap call: how to rebuild (state, xs, shared) from the flat leaves."""

    def __init__(self, plan, treedef, active, executor, chunk_size, progress):
        self.plan, self.treedef, self.active = plan, treedef, active
        self.key = (plan.kind, work_key(plan.f if plan.f is not None else plan.rebuild))
        self.executor, self.chunk_size, self.progress = executor, chunk_size, progress

    def unpack(self, leaves):
        state, xs, shared = unflatten(self.treedef, leaves)
        return state, xs, tuple(shared)

    def label(self, phase):
        return f"{self.plan.kind} {phase}"


@primitive
def _psum_leaves(call, *leaves):
    state, xs, shared = call.unpack(leaves)
    executor = executors.resolve(call.executor)
    fn = chunk_value
    results = run(executor, fn, _chunks(xs, call.chunk_size), (call.plan, state, shared),
                  call.key, call.progress, call.label("forward"))
    _check_no_escaped_trace(results)
    if call.plan.kind == "sum":
        return executors.tree_sum(results) if results else 0.0
    return [y for part in results for y in part]


@rrule.register(_psum_leaves)
def _psum_rrule(call, *leaves):
    state, xs, shared = call.unpack(leaves)
    if any(type(v) is Traced for v in leaves):
        return _nested_rrule(call, state, xs, shared, leaves)
    executor = executors.resolve(call.executor)
    items = _chunks(xs, call.chunk_size)
    results = run(executor, chunk_forward, items, (call.plan, call.active, state, shared, executor.shares_memory),
                  call.key, call.progress, call.label("forward"))
    _check_no_escaped_trace([r[1] for r in results])
    ys = [r[1] for r in results]
    y = (executors.tree_sum(ys) if ys else 0.0) if call.plan.kind == "sum" else [v for p in ys for v in p]

    def psum_pullback(ybar):
        if call.plan.kind == "sum" and results and all(r[0] == "eager" for r in results):
            grads = [_scale(r[2], ybar) for r in results]
        elif all(r[0] == "tape" for r in results):
            bars = _chunk_bars(call, items, ybar)
            grads = run(executor, chunk_pullback, [(r[2], b) for r, b in zip(results, bars)],
                        (), call.key, call.progress, call.label("backward"))
        else:
            bars = _chunk_bars(call, items, ybar)
            grads = run(executor, chunk_backward, list(zip(items, bars)),
                        (call.plan, call.active, state, shared), call.key, call.progress, call.label("backward"))
        return (NoTangent(), NoTangent(), *_leaf_cotangents(call, grads, state, xs, shared))

    return y, psum_pullback


def _chunk_bars(call, items, ybar):
    if call.plan.kind == "sum":
        return [ybar] * len(items)
    bars, pos = [], 0
    for xs, _ in items:
        bars.append(list(ybar[pos:pos + len(xs)]))
        pos += len(xs)
    return bars


def _scale(grads, ybar):
    if type(ybar) is not Traced and np.shape(ybar) == () and ybar == 1:
        return grads  # 1 * g is g, bit for bit: skip a pass over every gradient
    return tuple(tree_map(lambda g: g if is_zero(g) else ybar * g, g_arg) for g_arg in grads)


def _leaf_cotangents(call, grads, state, xs, shared):
    """Reduce per-chunk (state, xs_chunk, *shared) cotangents into flat leaf cotangents."""
    parts = [state, xs, *shared]
    if grads:
        reduced = [executors.tree_sum([g[0] for g in grads], add=_tree_add),
                   _gather_elements([g[1] for g in grads], xs) if call.active[1] else NoTangent(),
                   *(executors.tree_sum([g[2 + j] for g in grads], add=_tree_add)
                     for j in range(len(shared)))]
    else:
        reduced = [NoTangent()] * len(parts)
    return _flat_cotangents(parts, reduced)


def _flat_cotangents(parts, cotangents):
    """Leaf cotangents aligned with ``flatten((state, xs, list(shared)))``."""
    out = []
    for primal, g in zip(parts, cotangents):
        n = len(flatten(primal)[0])
        out.extend([ZeroTangent()] * n if is_zero(g) else flatten(g)[0])
    return out


def _check_no_escaped_trace(results):
    for r in results:
        if _has_traced(r):
            raise TracerError(
                "psum/pmap: f uses a traced value it did not receive as an argument (captured "
                "through a global or an object psum cannot see into), so its gradient would be "
                "lost. Pass it explicitly as a shared argument: psum(loss, models, x) calls "
                "loss(model, x) for each model.")


def _nested_rrule(call, state, xs, shared, leaves):
    """Under a higher derivative: run in this thread, traced by the outer differentiation."""
    body = call.plan.body

    def whole(s, x, *sh):
        parts = [body(s, chunk, start, *sh) for chunk, start in _chunks(x, call.chunk_size)]
        if call.plan.kind == "sum":
            return executors.tree_sum(parts) if parts else 0.0
        return [v for p in parts for v in p]

    y, back = pullback(whole, state, xs, *shared)

    def psum_nested_pullback(ybar):
        return (NoTangent(), NoTangent(), *_flat_cotangents([state, xs, *shared], back(ybar)))

    return y, psum_nested_pullback


@frule.register(_psum_leaves)
def _psum_frule(tangents, call, *leaves):
    state, xs, shared = call.unpack(leaves)
    dstate, dxs, dshared = unflatten(call.treedef, [_dense_tangent(t, v) for t, v in zip(tangents[2:], leaves)])
    executor = executors.resolve(call.executor)
    items = _chunks(xs, call.chunk_size)
    d_items = _chunks(dxs, call.chunk_size)
    pairs = [(item, (d[0], dstate, tuple(dshared))) for item, d in zip(items, d_items)]
    if any(type(v) is Traced for v in leaves):
        results = [_jvp_item(p, call.plan, state, shared) for p in pairs]
    else:
        results = run(executor, _jvp_item, pairs, (call.plan, state, shared), call.key, call.progress,
                      call.label("forward"))
    if call.plan.kind == "sum":
        return executors.tree_sum([r[0] for r in results]), executors.tree_sum([r[1] for r in results])
    return [v for r in results for v in r[0]], [d for r in results for d in r[1]]


def _jvp_item(pair, plan, state, shared):
    item, (dxs, dstate, dshared) = pair
    return chunk_jvp(item, plan, state, shared, (dxs, dstate, dshared))


def _dense_tangent(t, v):
    if is_zero(t):
        return np.zeros_like(v) if getattr(v, "dtype", None) is not None or isinstance(v, float) else t
    return t


# ---------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------


def _call(kind, f, xs, shared, executor, chunk_size, vectorized, progress):
    if not callable(f):
        raise TypeError(f"{kind}: f must be callable, got {type(f).__name__}; the form is "
                        f"{kind}(f, xs, *shared).")
    if not hasattr(xs, "__len__") or not hasattr(xs, "__getitem__") or isinstance(xs, (str, dict)):
        raise TypeError(f"{kind}: xs must be a list, tuple or array of elements, got "
                        f"{type(xs).__name__}.")
    if vectorized and not isinstance(xs, np.ndarray):
        raise TypeError(f"{kind}(vectorized=True): xs must be a NumPy array whose chunks "
                        f"(slices along the first axis) f receives; got {type(xs).__name__}.")
    state, rebuild = split_callable(f)
    plan = Plan(f if rebuild is None else None, rebuild, "sum" if kind == "psum" else "map", vectorized)
    leaves, treedef = flatten((state, xs, list(shared)))
    active = (state is not None, _has_traced(xs), *(_has_traced(s) for s in shared))
    call = Call(plan, treedef, active, executor, chunk_size, progress)
    return _psum_leaves(call, *leaves)


def psum(f, xs, *shared, executor=None, chunk_size=None, vectorized=False, progress=False):
    """``sum(f(x, *shared) for x in xs)``, with the forward map and the pullback on an executor.

    Differentiable with respect to the elements of ``xs`` (arrays, dicts, dataclass
    models...), the ``shared`` arguments and the state of ``f`` (a callable model's
    parameters, values captured by a closure). Chunks depend only on ``len(xs)`` and
    ``chunk_size``, so the value and every gradient are bitwise identical on every
    backend and worker count. With ``vectorized=True``, ``f`` receives a whole chunk
    (a slice of the array ``xs``) and returns its per-element values.

    >>> import numpy as np, adrules as ad
    >>> models = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    >>> x = np.array([0.5, -1.0])
    >>> float(ad.psum(lambda w, x: np.sum(w * x) ** 2, models, x, executor="serial"))
    8.5
    >>> g_models, g_x = ad.gradient(lambda ms, x: ad.psum(lambda w, x: np.sum(w * x) ** 2, ms, x,
    ...                                                   executor="serial"), models, x)
    >>> g_x
    array([-18., -26.])
    """
    return _call("psum", f, xs, shared, executor, chunk_size, vectorized, progress)


def pmap(f, xs, *shared, executor=None, chunk_size=None, vectorized=False, progress=False):
    """``[f(x, *shared) for x in xs]`` on an executor; differentiable like ``psum``.

    >>> import numpy as np, adrules as ad
    >>> [float(v) for v in ad.pmap(lambda w: np.sum(w ** 2), [np.ones(2), np.ones(3)], executor="serial")]
    [2.0, 3.0]
    """
    return _call("pmap", f, xs, shared, executor, chunk_size, vectorized, progress)
