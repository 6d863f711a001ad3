"""psum and pmap: a parallel sum (and map) whose forward map AND pullback run on an executor.

    psum(f, xs, *shared)
      └─ split f into (state, rebuild): a callable model's parameters, traced values a
         closure captured ─ lifted to explicit inputs, so they get gradients
      └─ flatten (state, xs, shared) to leaves ─ _map_chunks(call, *leaves)  [a primitive]
    chunks: chunk_ranges(len(xs), chunk_size), never dependent on the workers; each phase
    goes through schedule.run, which runs the same chunk function inline or on the executor
    rrule forward (chunk_forward), results reduced as they arrive in chunk order:
        y = Σ y_c                 executors.TreeSum: a fixed pairwise tree by chunk index
        real scalar sum: each chunk's cotangents at ȳ = 1 come with its value; those of
        the state and shared arguments fold left by chunk index into one buffer
        (_FoldSum), the elements' are kept in order (a complex sum's pullback is linear
        in ȳ over the reals only, not ȳ times its cotangents at 1: it goes as below)
        otherwise: the chunk's pullback kept (serial, threads), or nothing (recomputed)
    rrule pullback(ȳ): a scalar sum scales the sums by ȳ; otherwise schedule.run again
    under a second derivative the chunk work is a pmap over chunks (_map_over_chunks),
    which the outer differentiation differentiates with these same rules, on the executor

Every backend and worker count runs the same float operations in the same order: values
and gradients, of first and second order, are bitwise identical for a given chunk_size.
``f`` may return a container (``(loss, aux)``): values add leaf by leaf, and the
primitive returns the leaves, which the tracer boxes one by one.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal, Sequence

import numpy as np
from numpy.typing import NDArray

import executors
from executors import hide_frames_of, user_frames, where_raised
from executors.base import add_note, check_timeout

from .._state import STATE as _STATE, TracedValue
from ..callables import has_traced as _has_traced, split_callable
from ..api import leaf_is_differentiable
from ..pytrees import LEAF, flatten, tangent_leaves, tree_map, unflatten
from ..registry import frule, primitive, rrule
from ..tangents import NoTangent, ZeroTangent, add_tangents, dense, is_zero
from ..tracer import Traced, TracerError, primal_value
from . import policy, schedule, to_workers
from .to_workers import PLAIN_SCALARS
from .chunks import (
    ChunkGradient,
    ChunkJVP,
    ChunkPullback,
    UserFunction,
    add_values,
    chunk_backward,
    chunk_forward,
    chunk_pullback,
    chunk_value,
    is_container,
    jvp_chunks,
    shape_or_type,
    why_not_added,
    zero_to_none,
)

hide_frames_of("adrules")  # an error in f shows f's frames and the user's, not these

# ---------------------------------------------------------------------------
# chunks and their reduction
# ---------------------------------------------------------------------------


def _chunks(xs, chunk_size):
    return [(xs[r.start:r.stop], r.start) for r in chunk_ranges_for(len(xs), chunk_size)]


def chunk_ranges_for(n: int, chunk_size: int | None) -> tuple[range, ...]:
    """``executors.chunk_ranges`` of ``n`` elements for a call's ``chunk_size`` (None:
    ``executors.config``'s, else the default), made once per (n, chunk_size).

    >>> chunk_ranges_for(10, 4)
    (range(0, 4), range(4, 8), range(8, 10))
    """
    return _ranges(n, chunk_size if chunk_size is not None else executors.current_chunk_size())


@functools.lru_cache(maxsize=256, typed=True)  # typed: chunk_size=True must still be refused
def _ranges(n, size):
    return tuple(executors.chunk_ranges(n, size))


def _tree_add(a, b):
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    return tree_map(add_tangents, a, b)


_COPY_FIRST_NBYTES = 2**20  # below this, a copy costs more than the memory it saves


class _FoldSum:
    """``((g0 + g1) + g2) + ...`` over values pushed in chunk order, accumulated in place
    into a buffer this fold allocated: one partial sum alive. The order depends only on
    the chunk index, so the bits depend on neither the backend nor the worker count. A
    pushed value is never written into: it may be the caller's array, or a ȳ a pullback
    passed on unchanged."""

    __slots__ = ("total", "owned", "count")

    def __init__(self):
        self.total, self.owned, self.count = None, False, 0

    def push(self, value):
        self.count += 1
        if self.count == 1:
            big = type(value) is np.ndarray and value.nbytes >= _COPY_FIRST_NBYTES
            # our own copy now (the chunk's array is freed on return) rather than a third
            # array when the second value arrives
            self.total, self.owned = (value.copy(order="K"), True) if big else (value, False)
            return
        total = self.total
        if (self.owned and type(value) is np.ndarray and total.shape == value.shape
                and total.dtype == np.result_type(total, value)):
            np.add(total, value, out=total)  # the same bits as total + value
            return
        out = _tree_add(total, value)
        self.owned = out is not value and (self.owned or out is not total)
        self.total = out

    def result(self, zero):
        return zero if self.count == 0 else self.total


def _element_leaves(parts, xs):
    """The leaves' cotangents of ``xs`` from those of its chunks (``parts``, in chunk
    order): an array's chunks' cotangents concatenated, a sequence's one after another."""
    if isinstance(xs, np.ndarray) or type(xs) is Traced:  # traced: under a second derivative
        return [np.concatenate([np.reshape(p[0], (-1,) + xs.shape[1:]) if not is_zero(p[0])
                                else np.zeros((0,) + xs.shape[1:], xs.dtype) for p in parts])]
    return [g for p in parts for g in p]


class _Values:
    """The chunks' values, combined as they arrive in chunk order: a streaming
    ``tree_sum`` for psum (plain numbers are kept until the end and tree-summed there:
    the same association, without a call per addition), a concatenation for pmap."""

    def __init__(self, kind, items, check=True):
        self.kind, self.items, self.check = kind, items, check  # check: no traced value escaped
        self.sum = executors.TreeSum(add=self._add) if kind == "sum" else None
        self.list = []
        self._chunk = 0

    def take(self, i, y):
        if self.sum is None:
            if self.check:
                _check_no_escaped_trace(y)
            self.list.extend(y)
        elif type(y) in PLAIN_SCALARS and self.sum.count == 0:
            self.list.append(y)
        else:
            if self.check:
                _check_no_escaped_trace(y)
            if self.sum.count == 0:  # the numbers kept so far join the streaming sum, in order
                for k, v in enumerate(self.list):
                    self._chunk = k
                    self.sum.push(v)
            self._chunk = i
            self.sum.push(y)

    def _add(self, a, b):
        try:
            return add_values(a, b)
        except (ValueError, TypeError) as e:
            xs, start = self.items[self._chunk]
            raise type(e)(
                f"psum: the sum of f over elements {start}..{start + len(xs) - 1} ({shape_or_type(b)}) "
                f"does not add to the sum over the elements before them ({shape_or_type(a)}): "
                f"{why_not_added(a, b)}") from e

    def result(self):
        if self.sum is None:
            return self.list
        if self.sum.count == 0:
            return executors.tree_sum(self.list, zero=0.0)
        return _summable(self.sum.result())


class _Cotangents:
    """Per-chunk cotangents of ``(state, xs chunk, *shared)`` reduced as they arrive:
    state and shared leaves by a left fold in chunk order each (``_FoldSum``), element
    cotangents kept in order."""

    def __init__(self, call, state, xs, shared):
        self.call, self.xs = call, xs
        self.parts = [state, xs, *shared]
        state_def, xs_def, shared_def = call.treedef.children
        self.sizes = [state_def.n_leaves, xs_def.n_leaves, *(d.n_leaves for d in shared_def.children)]
        # a part not differentiated has no cotangent to fold (NoTangent() from every chunk)
        self.sums = {j: [_FoldSum() for _ in range(self.sizes[j])]
                     for j in range(len(self.parts)) if j != 1 and call.active[j]}
        self.elements = []

    def take(self, grads):
        """Add a chunk's cotangents: per part, its leaves' (see ``chunks._Layout.split``)."""
        for j, sums in self.sums.items():
            g = grads[j]
            leaves = [ZeroTangent()] * self.sizes[j] if is_zero(g) else g
            for acc, leaf in zip(sums, leaves):
                acc.push(leaf)
        if self.call.active[1]:
            self.elements.append(grads[1])

    def leaves(self, ybar=None):
        """Flat leaf cotangents aligned with ``flatten((state, xs, list(shared)))``,
        scaled by ``ybar`` when given."""
        out = []
        for j in range(len(self.parts)):
            if j == 1 and self.elements:
                leaves = _element_leaves(self.elements, self.xs)
            elif j in self.sums:
                leaves = [acc.result(zero=ZeroTangent()) for acc in self.sums[j]]
            else:
                leaves = [ZeroTangent()] * self.sizes[j]
            out.extend(leaves if ybar is None else [g if is_zero(g) else ybar * g for g in leaves])
        return out


def _is_one(ybar):
    if type(ybar) in PLAIN_SCALARS:
        return ybar == 1
    # getattr, not np.shape: a container's cotangent (f returned (loss, aux)) is a tuple,
    # which np.shape would try to make into one array
    return type(ybar) is not Traced and getattr(ybar, "shape", None) == () and ybar == 1


def _check_no_escaped_trace(value):
    if type(value) in PLAIN_SCALARS or type(value) is np.ndarray and value.dtype != object:
        return  # the common chunk values cannot hold a traced value: skip the flatten
    if _has_traced(value):
        raise TracerError(
            "psum/pmap: f uses a traced value it did not receive as an argument (captured "
            "through a global or an object psum cannot see into), so its gradient would be "
            "lost. Pass it explicitly as a shared argument: psum(loss, models, x) calls "
            "loss(model, x) for each model.")


# ---------------------------------------------------------------------------
# the primitive over flat leaves, and its rules
# ---------------------------------------------------------------------------


class PsumCall:
    """One psum/pmap call: how to rebuild (state, xs, shared) from the flat leaves,
    and where its chunks run; ``user_f``: the function the user passed (named in
    messages and in the log)."""

    def __init__(self, plan, treedef, active, user_f, executor, chunk_size, progress, dispatch, timeout=None):
        self.plan, self.treedef, self.active, self.user_f = plan, treedef, active, user_f
        self.timeout = timeout  # seconds for each pass over the chunks, or None
        self.ranges = ()  # each chunk's (start, stop) in xs
        self.outer = None  # the call over whose chunks this one maps (under a higher derivative)
        self.key = (plan.kind, schedule.work_key(plan.f if plan.f is not None else plan.rebuild))
        self.executor, self.chunk_size, self.progress = executor, chunk_size, progress
        self.dispatch = dispatch
        self.name = "psum" if plan.kind == "sum" else "pmap"
        self.out_tree = None  # set when f's values are containers: the primitive returns leaves

    def chunks(self, xs):
        """``xs`` in chunks, as ``(elements, start)`` pairs."""
        items = _chunks(xs, self.chunk_size)
        self.ranges = [(start, start + len(part)) for part, start in items]
        return items

    def elements(self, chunks):
        """The indices of the user's elements in ``chunks`` (of a pmap over chunks: theirs)."""
        out = []
        for c in chunks:
            a, b = self.ranges[c]
            out.extend(range(a, b) if self.outer is None else self.outer.elements(range(a, b)))
        return out

    def output(self, y):
        """What the primitive returns for the value ``y``: ``y`` itself when it is one
        array or number, else its leaves (the tracer boxes a flat sequence of outputs),
        which ``rebuild`` turns back into ``y``'s structure."""
        if self.plan.kind == "sum" and not is_container(y):
            self.out_tree = None
            return y
        leaves, self.out_tree = flatten(y)
        return tuple(leaves)

    def rebuild(self, out):
        return out if self.out_tree is None else unflatten(self.out_tree, list(out))

    def unpack(self, leaves):
        state, xs, shared = unflatten(self.treedef, to_workers.leaves_as_received(leaves))
        return state, xs, tuple(shared)

    def resolve(self, state, xs, shared):
        """The executor, once what its workers would receive is known to travel (its
        workers are started by ``policy.decide``, for work that gains on them)."""
        executor = executors.resolve(self.executor)
        if self.timeout is not None and not executor.supports_timeout:
            raise ValueError(f"{self.name}: timeout= cannot be honoured on the {executor.name!r} executor "
                             "(it cannot leave a task behind): use executor='threads', 'processes' or "
                             "'dask', or timeout=None")
        if not executor.shares_memory:
            to_workers.check(self.name, self.user_f, self.plan, state, xs, shared, executor, self.key)
        return executor

    def result_bytes(self, state, shared):
        """Bytes of the dense cotangents in each chunk's gradients: of what is
        differentiated besides xs (f's state, shared arguments), whole in every chunk."""
        parts = ([state] if self.active[0] else []) + [s for s, a in zip(shared, self.active[2:]) if a]
        return sum(getattr(leaf, "nbytes", 8) for part in parts for leaf in flatten(part)[0])

    def run(self, executor, phase, fn, items, shared, on_result=None, result_bytes=0):
        try:
            return schedule.run(executor, fn, items, shared, key=self.key, dispatch=self.dispatch,
                                on_result=on_result, progress=self.progress, label=f"{self.name} {phase}",
                                user_f=self.user_f, result_bytes=result_bytes, timeout=self.timeout)
        except executors.MapTimeoutError as e:
            if where_raised(e) is not None or e.unit != "chunks":
                raise  # raised by f (a psum of its own): not this call's
            raise self.timed_out(e, phase, executor.name) from None
        except executors.WorkerError as e:
            where = where_raised(e)  # its chunks, where the worker died running several
            if where is not None and where.last is not None and phase == "forward":
                first, (xs, start) = items[where.index][1], items[where.last]  # (xs, start) pairs: name them
                last = start + len(xs) - 1
                add_note(e, f"{self.name}: the worker died running f over "
                        f"{f'element {first}' if first == last else f'elements {first}..{last}'}")
            raise

    def timed_out(self, e, phase, executor_name):
        """The executor's timeout error of ``phase``, in the user's words: their elements."""
        running, waiting = self.elements(e.running), self.elements(e.not_started)
        which = {"backward": " (its pullback: the gradient)", "forward (jvp)": " (forward mode)"}.get(phase, "")
        fix = "If f is only slow, pass a larger timeout= (seconds for the whole call; None: no limit)"
        fix += f"; if it hangs, call f on xs[{running[0]}] alone to see where." if running else "."
        return executors.MapTimeoutError(f"{self.name}{which} on the {executor_name!r} executor", e.timeout,
                                         running, waiting, f"{e.note} {fix}".strip(), "elements")


@primitive
def _map_chunks(call, *leaves):
    return call.output(_value(call, *call.unpack(leaves)))


def _value(call, state, xs, shared):
    """The sum (or list) of ``f`` over ``xs``: the primitive, on values."""
    executor = call.resolve(state, xs, shared)
    items = call.chunks(xs)
    values = _Values(call.plan.kind, items)
    call.run(executor, "forward", chunk_value, items, (call.plan, state, shared),
             lambda i, y: values.take(i, y))
    return values.result()


@rrule.register(_map_chunks, complex=True)  # complex values: see the module docstring
def _psum_rrule(call, *leaves):
    state, xs, shared = call.unpack(leaves)
    if Traced in set(map(type, leaves)):
        return _nested_rrule(call, state, xs, shared)
    executor = call.resolve(state, xs, shared)
    items = call.chunks(xs)
    values = _Values(call.plan.kind, items)
    grads_at_one = _Cotangents(call, state, xs, shared)
    nbytes = call.result_bytes(state, shared)
    with_grads = []

    def take(i, result):
        values.take(i, result.value)
        if result.grads is not None:  # reduce the gradients now: keep nothing of the chunk
            grads_at_one.take(result.grads)
            with_grads.append(i)
        return result.pullback  # None, or the chunk's kept pullback

    kept_pullbacks = call.run(executor, "forward", chunk_forward, items,
                              (call.plan, call.active, state, shared, executor.shares_memory), take, nbytes)
    all_at_one = len(with_grads) == len(items)  # every chunk's cotangents came with its value
    y = call.output(values.result())

    def psum_pullback(ybar):
        ybar = to_workers.as_received(call.rebuild(ybar))  # np.broadcast_to(...) is strided
        if all_at_one:
            return (NoTangent(), NoTangent(), *grads_at_one.leaves(None if _is_one(ybar) else ybar))
        with user_frames():
            return pull_back(ybar)

    def pull_back(ybar):
        bars = _chunk_bars(call, items, ybar)
        grads = _Cotangents(call, state, xs, shared)
        take_grads = lambda i, g: grads.take(g)  # noqa: E731
        if items and all(back is not None for back in kept_pullbacks):
            call.run(executor, "backward", chunk_pullback, list(zip(kept_pullbacks, bars)), (), take_grads,
                     nbytes)
        else:
            call.run(executor, "backward", chunk_backward, list(zip(items, bars)),
                     (call.plan, call.active, state, shared), take_grads, nbytes)
        return (NoTangent(), NoTangent(), *grads.leaves())

    return y, psum_pullback


def _chunk_bars(call, items, ybar):
    if call.plan.kind == "sum":
        return [ybar] * len(items)
    bars, pos = [], 0
    for xs, _ in items:
        bars.append(list(ybar[pos:pos + len(xs)]))
        pos += len(xs)
    return bars


def _nested_rrule(call, state, xs, shared):
    """psum's rrule under a higher derivative (its inputs are traced by an outer
    differentiation): the chunk work is a pmap over chunks that the outer
    differentiation differentiates with pmap's own rules, so it runs on the executor.

    First pass, one task per chunk: the chunk's value and, for a scalar sum, its
    cotangents at ȳ = 1 (the pullback is linear in ȳ, so it is ȳ times their sum): an
    hvp is then one forward-over-reverse pass per chunk. Otherwise the pullback maps a
    second time, each chunk pulling back its own ȳ.
    """
    items = call.chunks(xs)
    first = _map_over_chunks(call, ChunkGradient(call.plan, call.active), items, (state, *shared),
                             "value and gradient")
    y = _values(call, items, [r[0] for r in first])
    all_at_one = all(len(r) == 2 for r in first)  # every chunk's cotangents at ȳ = 1 came

    def psum_nested_pullback(ybar):
        with user_frames():
            return pull_back(call.rebuild(ybar))

    def pull_back(ybar):
        scale = None
        if all_at_one:
            grads = [r[1] for r in first]
            scale = None if _is_one(ybar) else ybar
        else:
            per_chunk = call.plan.kind == "map"
            elements = list(zip(items, _chunk_bars(call, items, ybar))) if per_chunk else items
            grads = _map_over_chunks(call, ChunkPullback(call.plan, call.active, per_chunk), elements,
                                     (state, None if per_chunk else ybar, *shared), "gradient")
        cotangents = _Cotangents(call, state, xs, shared)  # the first-order reduction, traced
        for g in grads:
            cotangents.take(g)
        return (NoTangent(), NoTangent(), *cotangents.leaves(scale))

    return call.output(y), psum_nested_pullback


def _map_over_chunks(call, work, elements, shared, phase):
    """``[work(e, *shared) for e in elements]`` (one element per chunk of ``call``) as a
    pmap on ``call``'s executor, so an outer differentiation runs its rules there too."""
    leaves, treedef = flatten((None, elements, list(shared)))
    active = (False, _has_traced(elements), *(_has_traced(s) for s in shared))
    sub = PsumCall(UserFunction(work, None, "map", False), treedef, active, call.user_f, call.executor, 1,
                   call.progress, call.dispatch, call.timeout)
    sub.outer = call  # its elements are call's chunks: a timeout names the user's elements
    sub.key = (call.key, type(work).__name__)  # measured apart from the user's first-order calls
    sub.name = f"{call.name} {phase}"
    return sub.rebuild(_map_chunks(sub, *leaves))


def _values(call, items, values):
    """The sum (or list) of the chunks' ``values`` (traced by an outer differentiation,
    perhaps), in the order the first-order rules make it."""
    out = _Values(call.plan.kind, items, check=False)
    for i, y in enumerate(values):
        out.take(i, y)
    return out.result()


def _summable(y):
    """The sum ``y``; one element's value has not been added to anything, so nothing has
    yet shown that it cannot be summed: None (a missing return) or a string."""
    if type(y) in PLAIN_SCALARS or type(y) is np.ndarray:
        return y
    if y is None or type(y) is str or any(v is None or type(v) is str for v in flatten(y)[0]):
        raise TypeError(f"psum: {why_not_added(y, y)}")
    return y


@frule.register(_map_chunks, complex=True)
def _psum_frule(tangents, call, *leaves):
    state, xs, shared = call.unpack(leaves)
    dstate, dxs, dshared = unflatten(call.treedef, to_workers.leaves_as_received(
        [dense(t, v) if getattr(v, "dtype", None) is not None or isinstance(v, float) else t
         for t, v in zip(tangents[2:], leaves)]))
    items = call.chunks(xs)
    d_items = _chunks(dxs, call.chunk_size)
    # under another differentiation, of the primals or of the tangents (the gradient of a
    # jvp with respect to its direction): see _nested_rrule
    if any(type(v) is Traced for v in leaves) or _has_traced(tangents[2:]):
        elements = [(item, tree_map(zero_to_none, d[0])) for item, d in zip(items, d_items)]
        tangents = tree_map(zero_to_none, (dstate, *dshared))
        results = _map_over_chunks(call, ChunkJVP(call.plan, call.active), elements,
                                   (state, tangents[0], *shared, *tangents[1:]), "jvp")
    else:
        executor = call.resolve(state, xs, shared)
        pairs = [(item, (d[0], dstate, tuple(dshared))) for item, d in zip(items, d_items)]
        results = call.run(executor, "forward (jvp)", jvp_chunks, pairs, (call.plan, state, shared))
    y = _values(call, items, [r[0] for r in results])
    if call.plan.kind == "sum":
        dy = executors.tree_sum([r[1] for r in results], _tree_add) if results else ZeroTangent()
    else:
        dy = [d for r in results for d in ([ZeroTangent()] * len(r[0]) if is_zero(r[1]) else r[1])]
    out = call.output(y)
    if call.out_tree is None:
        return out, dy
    return out, tuple(ZeroTangent() for _ in out) if is_zero(dy) else tuple(tangent_leaves(dy, call.out_tree))


# ---------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------


def _psum_or_pmap(kind, f, xs, shared, executor, chunk_size, vectorized, progress, dispatch, timeout):
    if not callable(f):
        raise TypeError(f"{kind}: f must be callable, got {type(f).__name__}; the form is "
                        f"{kind}(f, xs, *shared).")
    if not hasattr(xs, "__len__") or not hasattr(xs, "__getitem__") or isinstance(xs, (str, dict)):
        fix = ", which can be gone through once only: pass list(xs)" if hasattr(xs, "__next__") else ""
        raise TypeError(f"{kind}: xs must be a sequence of elements (list, tuple, range, array), "
                        f"got {type(xs).__name__}{fix}.")
    if getattr(primal_value(xs), "ndim", None) == 0:
        raise TypeError(f"{kind}: xs is a 0-d array (one value), which has no elements to go "
                        f"through: pass [x] for one element, or an array whose first axis runs over "
                        f"the elements.")
    for name, flag in (("vectorized", vectorized), ("progress", progress)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{kind}: {name} must be True or False, got {flag!r}.")
    if vectorized and not isinstance(primal_value(xs), np.ndarray):
        raise TypeError(f"{kind}(vectorized=True): xs must be a NumPy array whose chunks "
                        f"(slices along the first axis) f receives; got {type(xs).__name__}.")
    dispatch = policy.resolve_dispatch(kind, dispatch)
    timeout = check_timeout(timeout, kind)
    state, rebuild = split_callable(f)
    plan = UserFunction(f if rebuild is None else None, rebuild, "sum" if kind == "psum" else "map", vectorized)
    call = PsumCall(plan, None, (False,) * (2 + len(shared)), f, executor, chunk_size, progress, dispatch, timeout)
    if not _STATE.active:  # nothing is differentiated anywhere: no primitive call to record
        as_received = to_workers.as_received
        return _value(call, as_received(state), as_received(xs), tuple(map(as_received, shared)))
    leaves, treedef = flatten((state, xs, list(shared)))
    _check_shared_containers(kind, leaves, treedef)
    call.treedef, call.active = treedef, (state is not None, *_traced_parts(leaves, treedef))
    return call.rebuild(_map_chunks(call, *leaves))


def _check_shared_containers(kind, leaves, treedef):
    """Refuse, naming it as the user passed it, an object inside a shared argument's
    container that is neither array, number nor container (the chunk's own
    differentiation would name an argument of psum's internals). A shared argument that
    is such an object itself is a constant of f, as in a closure."""
    state_def, xs_def, shared_def = treedef.children
    start = state_def.n_leaves + xs_def.n_leaves
    for k, d in enumerate(shared_def.children):
        if d is not LEAF:
            for j, leaf in enumerate(leaves[start:start + d.n_leaves]):
                leaf_is_differentiable(leaf, kind, f"leaf {j} of shared argument {k}")
        start += d.n_leaves


def _traced_parts(leaves, treedef):
    """Whether ``xs`` and each shared argument hold traced values, read from the leaves
    of ``(state, xs, shared)`` (flattened once) by their types."""
    state_def, xs_def, shared_def = treedef.children
    out, start = [], state_def.n_leaves
    for d in (xs_def, *shared_def.children):
        types = set(map(type, leaves[start:start + d.n_leaves]))
        out.append(any(issubclass(t, TracedValue) for t in types))
        start += d.n_leaves
    return out


def psum(f: Callable[..., Any], xs: Sequence[Any] | NDArray[Any], *shared: Any,
         executor: executors.Executor | str | None = None, chunk_size: int | None = None,
         dispatch: Literal["auto", "always"] | None = None, vectorized: bool = False,
         progress: bool = False, timeout: float | None = None) -> Any:
    """``sum(f(x, *shared) for x in xs)``, with the forward map and the pullback on an executor.

    Differentiable with respect to the elements of ``xs`` (arrays, dicts, dataclass
    models...), the ``shared`` arguments and the state of ``f`` (a callable model's
    parameters, values captured by a closure).

    - ``executor``: an ``executors.Executor`` or a name ("serial", "threads",
      "processes", "dask"); by default ``executors.config(...)``, then the
      ``ADRULES_EXECUTOR`` environment variable, then "threads".
    - ``chunk_size``: elements per chunk (one tape per chunk); by default
      ``executors.config(chunk_size=...)``, else ``len(xs) / 16`` rounded up. Chunks
      depend only on ``len(xs)`` and ``chunk_size``, so the value and every gradient
      are bitwise identical on every backend and worker count.
    - ``dispatch``: "auto" (default: chunks run on the executor when that is expected
      to be clearly faster than running them inline, from chunk 0's time and the
      executor's measured overhead) or "always". The ``adrules.schedule`` logger says,
      at DEBUG level, where each phase ran and why.
    - ``vectorized=True``: ``f`` receives a whole chunk (a slice of the array ``xs``)
      and returns its per-element values.
    - ``progress=True``: a tqdm progress bar over chunks (needs tqdm).
    - ``timeout``: seconds the whole call may take (None, the default: no limit); under
      differentiation the same again for the pullback's pass, which computes the
      gradients (and each pass of a higher derivative). Past it,
      ``executors.MapTimeoutError`` (a ``TimeoutError``) names the elements still running
      (those of the chunks running) and those not started, and the executor is usable
      at once. Every chunk then runs on the executor (as with ``dispatch="always"``), since
      work in the calling thread cannot be left behind. What becomes of the elements still
      running: on "threads", they run on in the background until ``f`` returns (a thread
      cannot be stopped; the next call uses fresh threads, and Python waits for them at
      exit); on "processes", their worker processes are stopped and replaced; on "dask",
      the workers running them are restarted when the executor started the cluster (on
      your own cluster they run on); "serial" runs chunks in the calling thread and checks
      the time only between them, so it never stops a chunk mid-way; "joblib" refuses it.

    ``f`` must be pure: the same element gives the same value wherever it runs.
    Elements, shared arguments and values may be complex (a complex ``z = x + iy`` gets
    the cotangent ``∂L/∂x + i ∂L/∂y``, as everywhere in adrules).

    >>> import numpy as np, adrules as ad
    >>> models = [np.array([1.0, 2.0]), np.array([3.0, 4.0])]
    >>> x = np.array([0.5, -1.0])
    >>> float(ad.psum(lambda w, x: np.sum(w * x) ** 2, models, x, executor="serial"))
    8.5
    >>> g_models, g_x = ad.gradient(lambda ms, x: ad.psum(lambda w, x: np.sum(w * x) ** 2, ms, x,
    ...                                                   executor="serial"), models, x)
    >>> g_x
    array([-18., -26.])
    >>> zs = [np.array([1 + 1j]), np.array([2 - 1j])]
    >>> ad.gradient(lambda zs: ad.psum(lambda z: np.sum(np.abs(z) ** 2), zs, executor="serial"), zs)[0]
    [array([2.+2.j]), array([4.-2.j])]
    """
    with user_frames():
        return _psum_or_pmap("psum", f, xs, shared, executor, chunk_size, vectorized, progress, dispatch, timeout)


def pmap(f: Callable[..., Any], xs: Sequence[Any] | NDArray[Any], *shared: Any,
         executor: executors.Executor | str | None = None, chunk_size: int | None = None,
         dispatch: Literal["auto", "always"] | None = None, vectorized: bool = False,
         progress: bool = False, timeout: float | None = None) -> list[Any]:
    """``[f(x, *shared) for x in xs]`` on an executor; differentiable like ``psum``,
    with the same arguments.

    >>> import numpy as np, adrules as ad
    >>> [float(v) for v in ad.pmap(lambda w: np.sum(w ** 2), [np.ones(2), np.ones(3)], executor="serial")]
    [2.0, 3.0]
    """
    with user_frames():
        return _psum_or_pmap("pmap", f, xs, shared, executor, chunk_size, vectorized, progress, dispatch, timeout)
