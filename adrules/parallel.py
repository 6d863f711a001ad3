"""psum and pmap: a parallel sum (and map) whose forward map AND pullback run on an executor.

    psum(f, xs, *shared)
      └─ split f into (state, rebuild): the parameters of a callable model, traced values
         captured by a closure ─ both become explicit inputs ("lifted"), so they get gradients
      └─ flatten (state, xs, shared) to leaves ─ _map_chunks(call, *leaves)   [a primitive]
           no traced leaf:  values only
           traced leaves:   the rrule below

    rrule forward, per chunk (chunk_ranges(len(xs), chunk_size): never depends on workers):
      schedule.run(chunk_forward, chunks, shared=(plan, state, shared))  inline or on the executor
        on the worker: y_c, back_c = pullback(fold over the chunk, in index order)
          scalar y_c ─ Backward.DONE: (y_c, back_c(1)) ─ one round trip, nothing left behind
          array  y_c ─ Backward.TAPE: back_c kept (serial, threads)
                     ─ Backward.RECOMPUTE: nothing kept (processes, Dask)
      as chunk results arrive, in chunk order:
        y = Σ y_c                  executors.TreeSum: the fixed pairwise tree by chunk index
        DONE: shared/state cotangents = ((g_0 + g_1) + g_2) + ...   _FoldSum: a left fold
              by chunk index, in place into one buffer of its own (a dense cotangent as big
              as a shared training set: one alive, not log2(chunks)); element cotangents kept
    rrule pullback(ȳ):
      DONE:      ȳ · the sums above; ȳ · element cotangents, gathered in order
      otherwise: schedule.run(back_c(ȳ) or recompute-then-pull back, chunks), same reduction

    under a second derivative (psum's inputs are traced by an outer differentiation):
      the chunk work becomes a pmap over chunks (_map_over_chunks) that the outer
      differentiation differentiates with these same rules, so it runs on the executor:
        hvp (jvp of a gradient):  per chunk, value, gradient at ȳ = 1 and their tangents
        gradient of a gradient:   per chunk, a pullback of the chunk's pullback
      the parent reduces chunk results as first order does (the same classes, traced).

    xs a list or tuple of numbers traced by one reverse trace, nothing else traced, on a
    call site the schedule runs in one pass (tiny work):  _sum_of_traced_numbers, no
      primitive: the one pass's cotangents at ȳ = 1 recorded on that trace as one node
      whose pullback scales them by ȳ; a forward pass it cannot finish (no one pass, a
      value that is not a scalar) goes to the rrule above, not run again (Call.forward)

What runs on one chunk (on a worker) is in ``chunks.py``; this module holds the
primitive, its rules, the reductions and the public entry points.

Every backend and worker count runs the same float operations in the same order, so
values and gradients, of first and second order, are bitwise identical for a given
chunk_size. ``f`` may return a container (``(loss, aux)``): values add leaf by leaf, and
the primitive returns the leaves, which the tracer boxes one by one.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Literal, Sequence

import numpy as np
from numpy.typing import NDArray

import executors

from . import sending
from .api import DEFAULT_CONFIG, _float_cotangent, _gather, pullback_of, traced_call
from ._state import STATE as _STATE, TracedValue
from .callables import has_traced as _has_traced, split_callable
from .schedule import run, run_in_one_pass, work_key
from .chunks import (
    Backward,
    ChunkForward,
    ChunkGradient,
    ChunkJVP,
    ChunkPullback,
    Plan,
    add_values,
    callable_of,
    chunk_backward,
    chunk_forward,
    chunk_pullback,
    chunk_value,
    expand,
    fold,
    fold_chunks,
    is_container,
    jvp_item,
    map_list,
    what,
    why_not_added,
    zero_to_none,
)
from .pytrees import _children, flatten, tree_map, unflatten
from .registry import frule, primitive, rrule
from .tangents import NoTangent, ZeroTangent, is_float_value, is_zero
from .tracer import _F64_SCALARS, Trace, Traced, TracerError, backprop, record, tracing

# ---------------------------------------------------------------------------
# chunks and their reduction
# ---------------------------------------------------------------------------


def _chunks(xs, chunk_size):
    size = chunk_size if chunk_size is not None else executors.current_chunk_size()
    return [(xs[a:b], a) for a, b in _bounds(len(xs), size)]


@functools.lru_cache(maxsize=256, typed=True)  # typed: chunk_size=True must still be refused
def _bounds(n, size):
    """``chunk_ranges`` as (start, stop) pairs, made once per (n, chunk_size): a call site
    calls with the same ones again and again."""
    return tuple((r.start, r.stop) for r in executors.chunk_ranges(n, size))


def _tree_add(a, b):
    if is_zero(a):
        return b
    if is_zero(b):
        return a
    return tree_map(lambda u, v: v if is_zero(u) else (u if is_zero(v) else u + v), a, b)


def _add_into(partial, value):
    """``partial + value`` written into ``partial`` when it is an array a reduction
    allocated itself (``_FoldSum`` passes only those); same bits as ``+``."""
    if (type(partial) is np.ndarray and type(value) is np.ndarray and partial.shape == value.shape
            and partial.dtype == np.result_type(partial, value)):
        return np.add(partial, value, out=partial)
    return _tree_add(partial, value)


_COPY_FIRST_NBYTES = 2**20  # below this, the copy costs more than the memory it saves


class _FoldSum:
    """``((g0 + g1) + g2) + ...`` over values pushed in chunk order, accumulated in place
    into a buffer this fold allocated: one partial sum alive, where a pairwise tree holds
    up to log2(chunks) of them (the 191 MiB shared cotangent of issue 9: 6x the array at
    16 chunks). The order depends only on the chunk index, so the bits do not depend on
    the backend or the worker count. A pushed value is never written into: it may be the
    caller's array, or the incoming ybar a pullback passed on unchanged."""

    __slots__ = ("total", "owned", "count")

    def __init__(self):
        self.total, self.owned, self.count = None, False, 0

    def push(self, value):
        self.count += 1
        if self.count == 1:
            if type(value) is np.ndarray and value.nbytes >= _COPY_FIRST_NBYTES:
                # our own copy now (the chunk's array is freed on return) rather than a
                # third array when the second value arrives
                self.total, self.owned = value.copy(order="K"), True
            else:
                self.total = value
            return
        if self.owned:
            out = _add_into(self.total, value)
        else:
            out = _tree_add(self.total, value)
        self.owned = out is not value and (self.owned or out is not self.total)
        self.total = out

    def result(self, zero):
        return zero if self.count == 0 else self.total


def _gather_elements(parts, xs):
    """Concatenate per-chunk element cotangents back into the structure of ``xs``."""
    if isinstance(xs, np.ndarray) or type(xs) is Traced:  # traced: under a second derivative
        return np.concatenate([np.reshape(p, (-1,) + xs.shape[1:]) if not is_zero(p)
                               else np.zeros((0,) + xs.shape[1:], xs.dtype) for p in parts]) \
            if parts else np.zeros_like(xs)
    out = []
    for p in parts:
        out.extend(p)
    return type(xs)(out) if isinstance(xs, tuple) else out


class _Values:
    """The chunks' values, combined as they arrive in chunk order: a streaming
    ``tree_sum`` for psum, a concatenation for pmap."""

    def __init__(self, kind, items):
        self.kind, self.items = kind, items
        self.sum = None  # made on the first value: a one pass sums at once (take_all)
        self.list = []

    def take(self, i, y):
        if self.kind == "sum":
            if self.sum is None:
                self.sum = executors.TreeSum(add=self._add)
            self._chunk = i
            self.sum.push(y)
        else:
            self.list.extend(y)

    def take_all(self, ys):
        """The values of every chunk, in chunk order (one pass over tiny chunks). A sum
        of plain numbers is tree-summed at once (``tree_sum``: the association
        ``TreeSum`` streams), with nothing to check."""
        if self.kind == "sum" and _PLAIN.issuperset(map(type, ys)):
            self.sum = _Total(executors.tree_sum(ys, zero=0.0))
            return
        for i, y in enumerate(ys):
            _check_no_escaped_trace(y)
            self.take(i, y)

    def _add(self, a, b):
        try:
            return add_values(a, b)
        except (ValueError, TypeError) as e:
            xs, start = self.items[self._chunk]
            raise type(e)(
                f"psum: the sum of f over elements {start}..{start + len(xs) - 1} ({what(b)}) "
                f"does not add to the sum over the elements before them ({what(a)}): "
                f"{why_not_added(a, b)}") from e

    def result(self):
        if self.kind == "sum":
            return 0.0 if self.sum is None else _summable(self.sum.result(zero=0.0))
        return self.list


class _Cotangents:
    """Per-chunk cotangents of ``(state, xs chunk, *shared)`` reduced as they arrive:
    state and shared leaves by a left fold in chunk order each (``_FoldSum``: one
    partial sum alive, not one dense cotangent per chunk), element cotangents kept in
    order."""

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
        self._fold(grads)
        if self.call.active[1]:
            self.elements.append(grads[1])

    def _fold(self, grads):
        for j, sums in self.sums.items():
            g = grads[j]
            leaves = [ZeroTangent()] * self.sizes[j] if is_zero(g) else flatten(g)[0]
            for acc, leaf in zip(sums, leaves):
                acc.push(leaf)

    def take_done(self, done):
        """Every chunk's cotangents from a ``_DoneInOnePass``, in chunk order."""
        layout, grads = done.layout, done.grads
        if layout.whole:  # the whole xs's element cotangents are already gathered
            self.elements.append(grads[0])
            if not self.sums:
                return  # nothing else differentiated
        for a, b in layout.spans:  # with ``whole``, NoTangent() in the elements' place
            g = expand(grads[a:b], layout.idx, layout.n_parts)
            self._fold(g)
            if self.call.active[1] and not layout.whole:
                self.elements.append(g[1])

    def leaves(self, ybar=None):
        """Flat leaf cotangents aligned with ``flatten((state, xs, list(shared)))``,
        scaled by ``ybar`` when given."""
        out = []
        for j, part in enumerate(self.parts):
            if j == 1:
                g = _gather_elements(self.elements, self.xs) if self.elements else NoTangent()
                leaves = [ZeroTangent()] * self.sizes[1] if is_zero(g) else flatten(g)[0]
            elif j in self.sums:
                leaves = [acc.result(zero=ZeroTangent()) for acc in self.sums[j]]
            else:
                leaves = [ZeroTangent()] * self.sizes[j]
            out.extend(leaves if ybar is None else [_scale(v, ybar) for v in leaves])
        return out


class _Total:
    """A sum already made, where ``_Values`` keeps a ``TreeSum``."""

    __slots__ = ("total",)

    def __init__(self, total):
        self.total = total

    def result(self, zero):
        return self.total


def _scale(g, ybar):
    return g if is_zero(g) else ybar * g


def _is_one(ybar):
    if type(ybar) in _PLAIN:
        return ybar == 1
    # getattr, not np.shape: a container's cotangent (f returned (loss, aux)) is a tuple,
    # which np.shape would try to make into one array
    return type(ybar) is not Traced and getattr(ybar, "shape", None) == () and ybar == 1


# ---------------------------------------------------------------------------
# the primitive over flat leaves, and its rules
# ---------------------------------------------------------------------------


class Call:
    """One psum/pmap call: how to rebuild (state, xs, shared) from the flat leaves,
    and where its chunks run."""

    def __init__(self, plan, treedef, active, about, executor, chunk_size, progress, dispatch):
        self.plan, self.treedef, self.active, self.about = plan, treedef, active, about
        self.key = (plan.kind, work_key(plan.f if plan.f is not None else plan.rebuild))
        self.executor, self.chunk_size, self.progress = executor, chunk_size, progress
        self.dispatch = dispatch
        self.name = "psum" if plan.kind == "sum" else "pmap"
        self.out_tree = None  # set when f's values are containers: the primitive returns leaves
        # (executor, items, ran, chunks): the forward pass _sum_of_traced_numbers already
        # asked the schedule for, when it could not finish the call itself
        self.forward = None
        self.cotangent_bytes = 0  # of each chunk's dense cotangents: set by _psum_rrule

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
        state, xs, shared = unflatten(self.treedef, sending.leaves_as_received(leaves))
        return state, xs, tuple(shared)

    def resolve(self, state, xs, shared):
        """The executor, once what its workers would receive is known to travel."""
        executor = executors.resolve(self.executor)
        if not executor.shares_memory:
            sending.check(self.name, self.about, self.plan, state, xs, shared, executor, self.key)
        return executor

    def dense_cotangent_bytes(self, state, shared):
        """Bytes of the dense cotangents in each chunk's gradients: of what is
        differentiated besides xs (f's state, shared arguments), whole in every chunk."""
        parts = ([state] if self.active[0] else []) + [s for s, a in zip(shared, self.active[2:]) if a]
        return sum(getattr(leaf, "nbytes", 8) for part in parts for leaf in flatten(part)[0])

    def run(self, executor, phase, fn, items, shared, on_result=None):
        # a chunk's result holds a dense cotangent only of what is differentiated besides
        # xs (f's state, shared arguments): without one, results are small
        small = not (self.active[0] or any(self.active[2:]))
        return run(executor, fn, items, shared, key=self.key, dispatch=self.dispatch,
                   on_result=on_result, progress=self.progress,
                   label=f"{self.name} {phase}", about=self.about, small_results=small,
                   result_bytes=self.cotangent_bytes)

    def run_in_one_pass(self, executor, phase, fn, n, work):
        """``(True, work())`` where the schedule would run every chunk of ``fn`` inline."""
        return run_in_one_pass(executor, fn, n, work, key=self.key, dispatch=self.dispatch,
                               progress=self.progress, label=f"{self.name} {phase}",
                               about=self.about)


@primitive
def _map_chunks(call, *leaves):
    return call.output(_value(call, *call.unpack(leaves)))


def _value(call, state, xs, shared):
    """The sum (or list) of ``f`` over ``xs``: the primitive, on values."""
    executor = call.resolve(state, xs, shared)
    items = _chunks(xs, call.chunk_size)
    values = _Values(call.plan.kind, items)

    def take(i, y):
        _check_no_escaped_trace(y)
        values.take(i, y)

    def all_inline():
        plan = call.plan
        fn = callable_of(plan.rebuild, state, plan.f)
        if plan.kind == "sum":
            values.take_all(fold_chunks(fn, xs, items, shared, plan.vectorized))
        else:
            values.take_all([map_list(fn, chunk, shared, start, plan.vectorized) for chunk, start in items])

    ran, _ = call.run_in_one_pass(executor, "forward", chunk_value, len(items), all_inline)
    if not ran:
        call.run(executor, "forward", chunk_value, items, (call.plan, state, shared), take)
    return values.result()


@rrule.register(_map_chunks)
def _psum_rrule(call, *leaves):
    state, xs, shared = call.unpack(leaves)
    if Traced in set(map(type, leaves)):
        return _nested_rrule(call, state, xs, shared, leaves)
    if call.forward is None:
        executor = call.resolve(state, xs, shared)
        items = _chunks(xs, call.chunk_size)
    else:
        executor, items, ran, chunks = call.forward
    values = _Values(call.plan.kind, items)
    eager = _Cotangents(call, state, xs, shared)
    call.cotangent_bytes = call.dense_cotangent_bytes(state, shared)

    def take(i, result):
        _check_no_escaped_trace(result.value)
        values.take(i, result.value)
        if result.backward is Backward.DONE:  # reduce the gradients now: keep nothing of the chunk
            eager.take(result.grads)
            result.grads = None
        result.value = None
        return result

    def take_one_pass(chunks):
        if type(chunks) is not _DoneInOnePass:
            return [take(i, c) for i, c in enumerate(chunks)]
        values.take_all(chunks.values)
        eager.take_done(chunks)
        return chunks

    if call.forward is None:
        ran, chunks = call.run_in_one_pass(
            executor, "forward", chunk_forward, len(items),
            lambda: take_one_pass(_forward_in_one_pass(call, items, xs, state, shared)))
    elif ran:
        chunks = take_one_pass(chunks)
    if not ran:
        chunks = call.run(executor, "forward", chunk_forward, items,
                          (call.plan, call.active, state, shared, executor.shares_memory), take)
    y = call.output(values.result())

    def psum_pullback(ybar):
        ybar = sending.as_received(call.rebuild(ybar))  # np.broadcast_to(...) is strided
        if type(chunks) is _DoneInOnePass or chunks and all(c.backward is Backward.DONE for c in chunks):
            leaf_bars = eager.leaves(None if _is_one(ybar) else ybar)
        else:
            bars = _chunk_bars(call, items, ybar)
            grads = _Cotangents(call, state, xs, shared)
            take_grads = lambda i, g: grads.take(g)  # noqa: E731
            if chunks and all(type(c.pullback) is _ChunkOfOnePass for c in chunks):
                for g in chunks[0].pullback.together.chunks(bars):
                    grads.take(g)
            elif all(c.backward is Backward.TAPE for c in chunks):
                call.run(executor, "backward", chunk_pullback,
                         [(c.pullback, b) for c, b in zip(chunks, bars)], (), take_grads)
            else:
                call.run(executor, "backward", chunk_backward, list(zip(items, bars)),
                         (call.plan, call.active, state, shared), take_grads)
            leaf_bars = grads.leaves()
        return (NoTangent(), NoTangent(), *leaf_bars)

    return y, psum_pullback


_PSUM_RULE = rrule.lookup(_map_chunks)  # what _sum_of_traced_numbers records, as apply would


def _forward_in_one_pass(call, items, xs, state, shared):
    """What ``chunk_forward`` returns for each chunk, from one tape over all of them: tiny
    chunks the schedule runs inline anyway, without a tape, a pullback and a map step per
    chunk (issue 9: 10 cheap scalars cost ~10x the loop). Each chunk's differentiated
    parts are arguments of their own and each chunk's value an output of its own, seeded
    as ``chunk_forward`` seeds it, so each chunk's gradients come from the same float
    operations in the same order: the same bits. A list or tuple ``xs`` is boxed once,
    each chunk receiving its slice (still its own elements' boxes).

    A scalar sum gives ``_DoneInOnePass``, the gradients at ȳ = 1 of every chunk at once;
    otherwise one ``ChunkForward`` per chunk, each pulling back on the shared tape."""
    plan, active = call.plan, call.active
    whole = active[1] and type(xs) in (list, tuple)
    idx = [i for i, a in enumerate(active) if a and not (whole and i == 1)]
    args = [xs] if whole else []
    if not idx:  # only the whole xs is differentiated: chunks have no arguments of their own
        spans = [(1, 1)] * len(items)
    else:
        spans = []
        for xs_c, _ in items:
            parts = (state, xs_c, *shared)
            spans.append((len(args), len(args) + len(idx)))
            args.extend([parts[i] for i in idx])
    reduce = fold if plan.kind == "sum" else map_list

    def all_chunks(*values):  # Plan.body per chunk, its parts as active_call puts them
        if not idx and plan.rebuild is None:  # the common case: only xs differentiated
            if plan.kind == "sum":
                return fold_chunks(plan.f, values[0], items, shared, plan.vectorized)
            boxed = values[0]
            return [map_list(plan.f, boxed[start:start + len(xs_c)], shared, start, plan.vectorized)
                    for xs_c, start in items]
        ys = []
        fn = plan.f  # the same for every chunk, unless its state is differentiated
        for (xs_c, start), (a, _) in zip(items, spans):
            parts = [state, values[0][start:start + len(xs_c)] if whole else xs_c, *shared]
            for k, i in enumerate(idx):
                parts[i] = values[a + k]
            if plan.rebuild is not None:
                fn = plan.rebuild(parts[0])
            ys.append(reduce(fn, parts[1], parts[2:], start, plan.vectorized))
        return ys

    trace, plans, ys = traced_call(_ONE_PASS_NAME, all_chunks, tuple(args))
    layout = _OnePassLayout(items, spans, idx, len(active), whole)
    if plan.kind == "sum":
        done = _seeds_at_one(trace, ys)
        if done is not None:
            return _DoneInOnePass(done[0], _gather(plans, backprop(trace, done[1], consume=False)), layout)
    return _chunks_of_one_tape(trace, plans, ys, layout)


def _one_pass_over_numbers(call, items, values, shared):
    """``_forward_in_one_pass`` of a psum over a list or tuple of float64 numbers, the
    only thing differentiated: each number boxed and its cotangent read back directly,
    not through flattening and gathering (on tiny work, the cost that remains). The same
    boxes, operations and seeds: the same bits."""
    trace = Trace(DEFAULT_CONFIG)
    boxes = [Traced(v, trace) for v in values]
    with tracing():
        ys = fold_chunks(call.plan.f, boxes, items, shared, False)
    layout = _OnePassLayout(items, [(1, 1)] * len(items), [], len(call.active), True)
    done = _seeds_at_one(trace, ys)
    if done is None:
        leaves, tdef = flatten(values)  # the numbers, in order
        return _chunks_of_one_tape(trace, [(tdef, leaves, [b.slot for b in boxes])], ys, layout)
    cot = backprop(trace, done[1], consume=False)
    return _DoneInOnePass(done[0], ([_float_cotangent(cot[b.slot]) for b in boxes],), layout)


def _chunks_of_one_tape(trace, plans, ys, layout):
    """One ``ChunkForward`` per chunk traced on the one pass's tape, each pulling back on it."""
    ys, back = pullback_of(_ONE_PASS_NAME, trace, plans, ys)
    together = _OnePassPullback(back, layout)
    return [ChunkForward(y, Backward.TAPE, pullback=_ChunkOfOnePass(together, c))
            for c, y in enumerate(ys)]


_ONE_PASS_NAME = "psum (one pass over tiny chunks)"


class _OnePassLayout:
    """Where each chunk's parts are among the one pass's arguments: ``spans[c]`` the
    chunk's own arguments (its parts ``idx`` of ``(state, xs, *shared)``), and with
    ``whole`` argument 0 the whole ``xs``, of which the chunk has a slice."""

    def __init__(self, items, spans, idx, n_parts, whole):
        self.items, self.spans, self.idx, self.n_parts, self.whole = items, spans, idx, n_parts, whole

    def chunk(self, c, grads):
        """Chunk ``c``'s cotangents of ``(state, xs, *shared)`` among ``grads``."""
        a, b = self.spans[c]
        out = expand(grads[a:b], self.idx, self.n_parts)
        if self.whole:
            xs_c, start = self.items[c]
            out = (out[0], grads[0][start:start + len(xs_c)], *out[2:])
        return out


class _DoneInOnePass:
    """A scalar sum's one pass: each chunk's value, and the cotangents at ȳ = 1 of the
    one pass's arguments (``layout`` says whose)."""

    __slots__ = ("values", "grads", "layout")

    def __init__(self, values, grads, layout):
        self.values, self.grads, self.layout = values, grads, layout


_ONE = np.float64(1.0)  # one seed for every float64 output: a scalar nobody writes into


def _seeds_at_one(trace, outs):
    """``(values, seeds)``: every output's value, and every traced output's slot seeded
    with one (what ``pullback``'s ``back`` does for ``chunk_forward``: a seed of the
    output's dtype); or None unless every output is a scalar."""
    values, seeds = [], []
    for y in outs:
        if type(y) is Traced and y._trace is trace:
            v = y.value
            if type(v) in _F64_SCALARS:  # the common case, sooner
                seeds.append((y.slot, _ONE))
            elif type(v) not in _PLAIN and np.shape(v) != ():
                return None
            else:
                dt = getattr(v, "dtype", None)
                seeds.append((y.slot, _ONE if dt is None else dt.type(1)))
            values.append(v)
        elif type(y) not in _PLAIN and (is_container(y) or np.shape(y) != ()):
            return None
        else:
            values.append(y)
    return values, seeds


class _OnePassPullback:
    """The pullbacks of chunks traced on one tape: per chunk, or all at once (one walk of
    the tape instead of one per chunk; the same bits, since each chunk's arguments get
    cotangents from that chunk's operations only)."""

    def __init__(self, back, layout):
        self.back, self.layout = back, layout

    def chunks(self, bars):
        grads = self.back(list(bars))
        return [self.layout.chunk(c, grads) for c in range(len(self.layout.spans))]

    def chunk(self, c, ybar):
        bars = [ybar if k == c else ZeroTangent() for k in range(len(self.layout.spans))]
        return self.layout.chunk(c, self.back(bars))


class _ChunkOfOnePass:
    __slots__ = ("together", "index")

    def __init__(self, together, index):
        self.together, self.index = together, index

    def __call__(self, ybar):
        return self.together.chunk(self.index, ybar)


def _chunk_bars(call, items, ybar):
    if call.plan.kind == "sum":
        return [ybar] * len(items)
    bars, pos = [], 0
    for xs, _ in items:
        bars.append(list(ybar[pos:pos + len(xs)]))
        pos += len(xs)
    return bars


_PLAIN = frozenset((float, int, np.float64, np.float32))


def _check_no_escaped_trace(value):
    if type(value) in _PLAIN or type(value) is np.ndarray and value.dtype != object:
        return  # the common chunk values cannot hold a traced value: skip the flatten
    if _has_traced(value):
        raise TracerError(
            "psum/pmap: f uses a traced value it did not receive as an argument (captured "
            "through a global or an object psum cannot see into), so its gradient would be "
            "lost. Pass it explicitly as a shared argument: psum(loss, models, x) calls "
            "loss(model, x) for each model.")


def _nested_rrule(call, state, xs, shared, leaves):
    """psum's rrule under a higher derivative (its inputs are traced by an outer
    differentiation): the chunk work is a pmap over chunks that the outer
    differentiation differentiates with pmap's own rules, so it runs on the executor.

    First pass, one task per chunk: the chunk's value and, for a scalar sum, its
    cotangents at ȳ = 1 (the pullback is linear in ȳ, so it is ȳ times their sum): an
    hvp is then one forward-over-reverse pass per chunk. Otherwise the pullback maps a
    second time, each chunk pulling back its own ȳ.
    """
    items = _chunks(xs, call.chunk_size)
    first = _map_over_chunks(call, ChunkGradient(call.plan, call.active), items, (state, *shared),
                             "value and gradient")
    y = _reduce_values(call, [r[0] for r in first])
    done = all(len(r) == 2 for r in first)

    def psum_nested_pullback(ybar):
        ybar = call.rebuild(ybar)
        scale = None
        if done:
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
    sub = Call(Plan(work, None, "map", False), treedef, active, call.about, call.executor, 1,
               call.progress, call.dispatch)
    sub.key = (call.key, type(work).__name__)  # learnt apart from the user's first-order calls
    sub.name = f"{call.name} {phase}"
    return sub.rebuild(_map_chunks(sub, *leaves))


def _reduce_values(call, values):
    if call.plan.kind == "sum":
        if not values:
            return 0.0
        try:
            total = executors.tree_sum(values, add_values)
        except (ValueError, TypeError) as e:
            misfit = next((v for v in values[1:] if not _adds(values[0], v)), values[0])
            raise type(e)(f"psum: f's values do not add: {why_not_added(values[0], misfit)}") from e
        return _summable(total)
    return [v for part in values for v in part]


def _summable(y):
    """The sum ``y``; one element's value has not been added to anything, so nothing has
    yet shown that it cannot be summed: None (a missing return) or a string."""
    if type(y) in _PLAIN or type(y) is np.ndarray:
        return y
    if y is None or type(y) is str or any(v is None or type(v) is str for v in flatten(y)[0]):
        raise TypeError(f"psum: {why_not_added(y, y)}")
    return y


def _adds(a, b):
    try:
        add_values(a, b)
    except (ValueError, TypeError):
        return False
    return True


@frule.register(_map_chunks)
def _psum_frule(tangents, call, *leaves):
    state, xs, shared = call.unpack(leaves)
    dstate, dxs, dshared = unflatten(call.treedef, sending.leaves_as_received(
        [_dense_tangent(t, v) for t, v in zip(tangents[2:], leaves)]))
    items = _chunks(xs, call.chunk_size)
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
        results = call.run(executor, "forward (jvp)", jvp_item, pairs, (call.plan, state, shared))
    y = _reduce_values(call, [r[0] for r in results])
    if call.plan.kind == "sum":
        dy = executors.tree_sum([r[1] for r in results], _tree_add) if results else ZeroTangent()
    else:
        dy = [d for r in results for d in ([ZeroTangent()] * len(r[0]) if is_zero(r[1]) else r[1])]
    out = call.output(y)
    if call.out_tree is None:
        return out, dy
    return out, tuple(ZeroTangent() for _ in out) if is_zero(dy) else tuple(_flat_like(call.out_tree, dy))


def _flat_like(tree, dy):
    """Leaves of the tangent ``dy`` of a value of structure ``tree``; a zero part gives
    zero leaves."""
    if tree.kind is None:
        return [dy]
    if is_zero(dy):
        return [ZeroTangent()] * tree.n_leaves
    children = _children(dy)[2]
    return [leaf for c, d in zip(tree.children, children) for leaf in _flat_like(c, d)]


def _dense_tangent(t, v):
    if is_zero(t):
        return np.zeros_like(v) if getattr(v, "dtype", None) is not None or isinstance(v, float) else t
    return t


# ---------------------------------------------------------------------------
# public entry points
# ---------------------------------------------------------------------------


def _call(kind, f, xs, shared, executor, chunk_size, vectorized, progress, dispatch):
    if not callable(f):
        raise TypeError(f"{kind}: f must be callable, got {type(f).__name__}; the form is "
                        f"{kind}(f, xs, *shared).")
    if not hasattr(xs, "__len__") or not hasattr(xs, "__getitem__") or isinstance(xs, (str, dict)):
        fix = ", which can be gone through once only: pass list(xs)" if hasattr(xs, "__next__") else ""
        raise TypeError(f"{kind}: xs must be a sequence of elements (list, tuple, range, array), "
                        f"got {type(xs).__name__}{fix}.")
    for name, flag in (("vectorized", vectorized), ("progress", progress)):
        if not isinstance(flag, (bool, np.bool_)):
            raise TypeError(f"{kind}: {name} must be True or False, got {flag!r}.")
    if vectorized and not isinstance(_primal(xs), np.ndarray):
        raise TypeError(f"{kind}(vectorized=True): xs must be a NumPy array whose chunks "
                        f"(slices along the first axis) f receives; got {type(xs).__name__}.")
    try:
        dispatch = executors.resolve_dispatch(dispatch)
    except ValueError as e:
        raise ValueError(f"{kind}: {e}") from None
    state, rebuild = split_callable(f)
    plan = Plan(f if rebuild is None else None, rebuild, "sum" if kind == "psum" else "map", vectorized)
    call = Call(plan, None, (False,) * (2 + len(shared)), f, executor, chunk_size, progress, dispatch)
    if not _STATE.active:  # nothing is differentiated anywhere: no primitive call to record
        as_received = sending.as_received  # part by part: tiny work's numbers are not flattened
        return _value(call, as_received(state), as_received(xs), tuple(map(as_received, shared)))
    trace = _the_trace_of_numbers(xs) if state is None and kind == "psum" and not vectorized else None
    if trace is not None and not (shared and _has_traced(shared)):
        y = _sum_of_traced_numbers(call, trace, xs, shared)
        if y is not _HANDED_OVER:
            return y
    leaves, treedef = flatten((state, xs, list(shared)))
    call.treedef, call.active = treedef, (state is not None, *_traced_parts(leaves, treedef))
    return call.rebuild(_map_chunks(call, *leaves))


def _primal(x):
    """``x`` without its boxes (traced by nested differentiations)."""
    while type(x) is Traced:
        x = x.value
    return x


def _the_trace_of_numbers(xs):
    """The reverse trace of ``xs`` when it is a list or tuple of float64 numbers all
    traced by that one trace (nothing else: not an outer differentiation's values)."""
    if type(xs) not in (list, tuple) or not xs or type(xs[0]) is not Traced:
        return None
    trace = xs[0]._trace
    if trace.forward:
        return None
    for x in xs:
        if type(x) is not Traced or x._trace is not trace or type(x.value) not in _F64_SCALARS:
            return None
    return trace


_HANDED_OVER = object()


def _sum_of_traced_numbers(call, trace, xs, shared):
    """psum of ``f`` over numbers traced by ``trace`` (and nothing else traced) without
    the primitive: the one pass's chunk cotangents at ȳ = 1, recorded on ``trace`` as one
    node whose pullback scales them by ȳ, as ``_psum_rrule``'s does: the same bits.
    The primitive's flattening, boxing and unboxing, its reductions' bookkeeping and
    its general pullback cost tiny work (issue 9: 10 scalars) about 30 µs.

    Where the one pass does not run, or gives no scalar sum, the forward pass is handed
    to ``_psum_rrule`` (``call.forward``, not run again) and ``_HANDED_OVER`` returned."""
    values = [x.value for x in xs]
    call.active = (False, True, *(False for _ in shared))
    executor = call.resolve(None, values, shared)
    items = _chunks(values, call.chunk_size)
    ran, chunks = call.run_in_one_pass(executor, "forward", chunk_forward, len(items),
                                       lambda: _one_pass_over_numbers(call, items, values, shared))
    if not (ran and type(chunks) is _DoneInOnePass):
        call.forward = (executor, items, ran, chunks)
        return _HANDED_OVER
    if _PLAIN.issuperset(map(type, chunks.values)):  # as _Values.take_all sums plain numbers
        y = executors.tree_sum(chunks.values)
    else:
        total = _Values("sum", items)
        total.take_all(chunks.values)
        y = total.result()
    if not is_float_value(y):
        return y
    grads = chunks.grads[0]  # of the whole xs: a list or tuple, one number per element

    def psum_pullback(ybar):
        scale = None if _is_one(ybar) else ybar
        return (NoTangent(), *(grads if scale is None else [_scale(g, scale) for g in grads]))

    return record(trace, _PSUM_RULE, y, [x.slot for x in xs], values, psum_pullback)


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
         progress: bool = False) -> Any:
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
    - ``dispatch``: "auto" (default: chunks whose work cannot pay for dispatch run
      inline, decided from chunk 0's time on a call site's first call) or "always".
      The ``adrules.schedule`` logger says, at DEBUG level, where each phase ran and why.
    - ``vectorized=True``: ``f`` receives a whole chunk (a slice of the array ``xs``)
      and returns its per-element values.
    - ``progress=True``: a tqdm progress bar over chunks (needs tqdm).

    ``f`` must be pure: the same element gives the same value wherever it runs.

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
    return _call("psum", f, xs, shared, executor, chunk_size, vectorized, progress, dispatch)


def pmap(f: Callable[..., Any], xs: Sequence[Any] | NDArray[Any], *shared: Any,
         executor: executors.Executor | str | None = None, chunk_size: int | None = None,
         dispatch: Literal["auto", "always"] | None = None, vectorized: bool = False,
         progress: bool = False) -> list[Any]:
    """``[f(x, *shared) for x in xs]`` on an executor; differentiable like ``psum``,
    with the same arguments.

    >>> import numpy as np, adrules as ad
    >>> [float(v) for v in ad.pmap(lambda w: np.sum(w ** 2), [np.ones(2), np.ones(3)], executor="serial")]
    [2.0, 3.0]
    """
    return _call("pmap", f, xs, shared, executor, chunk_size, vectorized, progress, dispatch)
