"""The chunk work of psum and pmap, the same wherever it runs: inline, in a pool thread,
in a worker process or on a Dask worker. Everything here is at module level, so it
pickles by reference, and none of it knows about executors. Each function takes a
*group* of consecutive chunks, ``(xs, start)`` pairs, traced together on one tape with
boxes of their own (so each chunk's cotangents come from its own operations, in their
order, however chunks are grouped):

    UserFunction.body(state, xs, start, *shared)
                     f over one chunk: a left fold in index order (psum) or the
                     list of values (pmap)
    chunk_value      the values (nothing differentiated)
    chunk_forward    the values and, for a scalar sum, the cotangents at ȳ = 1; else
                     the chunks' pullbacks (kept where memory is shared) or nothing
    chunk_backward   recompute the chunks and pull their ȳ back (nothing kept on workers)
    chunk_pullback   pull ȳ back through kept pullbacks
    jvp_chunks       values and tangents (forward mode)
    trace_chunks     a group's chunk work traced once, on one tape (what chunk_forward
                     and chunk_backward run)
    ChunkGradient / ChunkPullback / ChunkJVP
                     what the rules map under a second derivative (a pmap over chunks,
                     differentiated in turn)
"""

from __future__ import annotations

import itertools
from typing import Any, Callable

import numpy as np
from executors import WhereRaised, mark_raised, where_raised
from executors.base import add_note

from ..api import DerivativeName, jvp, leaf_gradients, one_like, pullback_of, traced_call
from ..pytrees import LEAF, LEAF_TYPES, PyTree, flatten, tree_map, unflatten
from ..registry import Pullback
from ..tangents import NoTangent, ZeroTangent, is_zero
from ..tracer import F64_SCALARS, Traced, backprop
from .policy import in_time


def is_container(v):
    return type(v) not in LEAF_TYPES and type(v) is not Traced and flatten(v)[1].kind is not None


def add_values(a, b):
    """``a + b`` for values of ``f``; leaf by leaf when ``f`` returns a container (a tuple
    ``(loss, aux)``, a dict of metrics), which must then have the same structure, and
    each leaf the same shape (a sum that broadcast would depend on how the elements
    were split into chunks).

    >>> add_values((1.0, {"n": 2.0}), (3.0, {"n": 4.0}))
    (4.0, {'n': 6.0})
    """
    if not (is_container(a) or is_container(b)):
        if type(a) is str or type(b) is str:  # '+' would join them: not a sum
            raise TypeError("a string is not summed")
        if getattr(a, "shape", ()) != getattr(b, "shape", ()):
            raise ValueError(f"a value of shape {np.shape(b)} does not add to one of shape {np.shape(a)}")
        return a + b
    la, ta = flatten(a)
    lb, tb = flatten(b)
    if ta != tb:
        raise ValueError(f"a value of structure {tb} does not add to one of structure {ta}")
    return unflatten(ta, [add_values(u, v) for u, v in zip(la, lb)])


def why_not_added(a, b):
    """What the user should change when ``add_values(a, b)`` failed."""
    leaves = flatten(a)[0] + flatten(b)[0]
    if a is None or b is None:
        return "f returned None: is its return statement missing?"
    if any(v is None for v in leaves):
        return ("f's value holds None; psum adds f's values, so each must be a number or an "
                "array, or a container of them (collect other results with pmap)")
    if type(a) is str or type(b) is str:
        return "f returned a string, which psum does not add (collect strings with pmap)"
    if any(type(v) is str for v in leaves):
        return ("f's value holds a string, which psum does not add (collect it with pmap, or "
                "leave it out of f's value)")
    if flatten(a)[1] != flatten(b)[1]:
        return "every element must give a value of the same structure"
    return ("every element must give a value of the same shape (psum does not broadcast: "
            "the sum would depend on the chunks)")


def shape_or_type(value):
    shape = getattr(value, "shape", None)
    return f"shape {shape}" if shape is not None else f"a {type(value).__name__}"


def _over_chunk(fn, xs, shared, start, vectorized, summed):
    """``fn(x, *shared)`` over one chunk: their sum, a left fold in index order
    (``summed``), or their list; an error names the element that raised it."""
    if vectorized:
        leaves, tdef = _rows(fn(xs, *shared), len(xs), start)
        if summed:
            return unflatten(tdef, [np.sum(leaf, axis=0) for leaf in leaves])
        return [unflatten(tdef, [leaf[i] for leaf in leaves]) for i in range(len(xs))]
    out = []
    for k in range(len(xs)):
        try:
            value = fn(xs[k], *shared)
        except (Exception, SystemExit) as e:
            if not isinstance(fn, ChunkWork):  # which already named the user's element
                add_note(e, f"psum/pmap: raised by f at element {start + k}")
            raise
        if not (summed and k):
            out.append(value)
            continue
        try:
            out[0] = add_values(out[0], value)
        except (ValueError, TypeError) as e:
            raise type(e)(
                f"psum: f's value at element {start + k} ({shape_or_type(value)}) does not add to the "
                f"sum of elements {start}..{start + k - 1} ({shape_or_type(out[0])}): "
                f"{why_not_added(out[0], value)}") from e
    return (out[0] if out else None) if summed else out


def _rows(out, n, start):
    """The leaves and structure of ``f``'s value on a vectorized chunk of ``n`` elements
    (from ``start``), each leaf holding one row per element; anything else is refused, as
    summing it whole would be a wrong sum (per-element vectors added into one number, a
    dict's keys listed)."""
    leaves, tdef = flatten(out)
    for leaf in leaves:
        shape = np.shape(leaf.value if type(leaf) is Traced else leaf)
        if type(leaf) is str or not shape or shape[0] != n:
            where = "" if tdef is LEAF else f" holding {shape_or_type(leaf)}"
            raise ValueError(
                f"psum/pmap(vectorized=True): f returned {shape_or_type(out)}{where} for the chunk of elements "
                f"{start}..{start + n - 1} ({n} rows of xs); it must return one value per element, "
                f"stacked along axis 0 (shape ({n}, ...)), or a tuple or dict of such arrays.")
    return leaves, tdef


class UserFunction:
    """The user's ``f`` as every chunk applies it (small and picklable): ``f`` (or
    ``rebuild``, which makes it from its lifted state), whether the chunks are summed or
    listed, and whether ``f`` takes a whole chunk at once."""

    def __init__(self, f, rebuild, kind, vectorized):
        self.f, self.rebuild, self.kind, self.vectorized = f, rebuild, kind, vectorized

    def body(self, state, xs, start, *shared):
        """The chunk's sum (or list) of ``f(x, *shared)`` for ``x`` in ``xs``."""
        fn = self.f if self.rebuild is None else self.rebuild(state)
        return _over_chunk(fn, xs, shared, start, self.vectorized, self.kind == "sum")


def chunk_value(group, plan, state, shared):
    """The values of a group of consecutive chunks (nothing differentiated)."""
    return in_time(group, lambda item: plan.body(state, item[0], item[1], *shared))


class _Layout:
    """Where each chunk of a group finds its differentiated parts among the arguments
    traced: a list or tuple ``xs`` is one argument for the whole group (each chunk takes
    its slice of the boxes: one box per element still), the other differentiated parts
    (``own``: which of (state, xs, *shared) hold traced values) one argument each per
    chunk."""

    def __init__(self, group, active, state, shared):
        self.group, self.n = group, len(active)
        self.whole = whole = active[1] and type(group[0][0]) in (list, tuple)
        self.own = own = [i for i, a in enumerate(active) if a and not (whole and i == 1)]
        self.args = args = []
        if whole:  # (where each chunk's elements start among the group's)
            self.firsts = list(itertools.accumulate((len(xs) for xs, _ in group), initial=0))
            joined = [x for xs, _ in group for x in xs]
            args.append(joined if type(group[0][0]) is list else tuple(joined))
        if own:
            for xs, _ in group:
                parts = (state, xs, *shared)
                args.extend([parts[i] for i in own])

    def parts(self, j, values, state, shared):
        """Chunk ``j``'s (state, xs, *shared), its differentiated parts from ``values``."""
        parts = [state, self.group[j][0], *shared]
        if self.own:
            base = int(self.whole) + j * len(self.own)
            for a, i in enumerate(self.own):
                parts[i] = values[base + a]
        if self.whole:
            parts[1] = values[0][self.firsts[j]:self.firsts[j + 1]]
        return parts

    def gather(self, plans, cot):
        """The cotangents of each traced argument's leaves (``leaf_gradients``), and where
        each element of the group's xs starts among its leaves."""
        if self.whole:
            self.starts = list(itertools.accumulate((e.n_leaves for e in plans[0][0].children), initial=0))
        return [leaf_gradients(plan, cot) for plan in plans]

    def split(self, grads):
        """Each chunk's cotangents of (state, xs, *shared), from ``gather``'s: for a
        differentiated part, its leaves' cotangents in ``flatten``'s order (its elements'
        one after another for xs), else ``NoTangent()``."""
        out, own, whole = [], self.own, self.whole
        for j in range(len(self.group)):
            full = [_NO_TANGENT] * self.n
            if own:
                base = int(whole) + j * len(own)
                for a, i in enumerate(own):
                    full[i] = grads[base + a]
            if whole:
                full[1] = grads[0][self.starts[self.firsts[j]]:self.starts[self.firsts[j + 1]]]
            out.append(tuple(full))
        return out


_NO_TANGENT = NoTangent()


def _chunks_fn(plan, layout, state, shared):
    """The group's chunks as one function of the arguments ``layout`` traces, returning
    the list of their values: those of the group's first chunks when its time ran out
    (the group contract, ``policy.in_time``)."""
    group, body = layout.group, plan.body

    def chunks_fn(*values):
        def chunk(j):
            parts = layout.parts(j, values, state, shared)
            return body(parts[0], parts[1], group[j][1], *parts[2:])

        return in_time(range(len(group)), chunk)

    return chunks_fn


def trace_chunks(f: Callable[..., Any], args: tuple[Any, ...], at_one: bool,
                 gather: Callable[..., Any] | None = None) -> tuple[list[Any], Any, Pullback | None]:
    """psum's chunk work, traced once: ``f(*args)`` returns a list of values, one per
    chunk. ``(values, cotangents, None)`` when ``at_one`` is asked and every value is a
    real number (a real sum's pullback is linear in ȳ, so the cotangents of ``args`` at ȳ = 1 say it
    all, from one reverse pass at once), else ``(values, None, back)`` as ``pullback``
    gives. Cotangents come as ``gather(plans, cotangents by slot)`` makes them, by default
    each argument's leaves' (``leaf_gradients``), which psum adds up leaf by leaf. The
    caller names what ``f`` returned in its own errors.

    >>> import numpy as np
    >>> trace_chunks(lambda x: [np.sum(x * x)], (np.array([1.0, 2.0]),), at_one=True)
    ([np.float64(5.0)], [[array([2., 4.])]], None)
    """
    fname, gather = DerivativeName("pullback", f), gather or _each_leaf
    trace, plans, outs = traced_call(fname, f, args)
    if at_one:
        values, seeds = [], []
        for out in outs:
            traced = type(out) is Traced and out.owner is trace
            value = out.value if traced else out
            if not (type(value) in F64_SCALARS or (value is not None and type(value) is not str
                                                    and flatten(value)[1] is LEAF and np.shape(value) == ()
                                                    and not np.iscomplexobj(value))):
                break  # a complex value's pullback is linear in ȳ over the reals only: keep it
            values.append(value)
            if traced:
                seeds.append((out.slot, one_like(value)))
        else:
            return values, gather(plans, backprop(trace, seeds)), None
    y, back = pullback_of(fname, trace, plans, outs, gather)
    return y, None, back


def _each_leaf(plans, cot):
    return [leaf_gradients(plan, cot) for plan in plans]


def _traced(group, plan, active, state, shared, at_one):
    """``trace_chunks`` of the group; an error of a rule's pullback named by the group's
    elements (an error of f names its own element)."""
    layout = _Layout(group, active, state, shared)
    try:
        ys, grads, back = trace_chunks(_chunks_fn(plan, layout, state, shared), tuple(layout.args), at_one,
                                       layout.gather)
    except (Exception, SystemExit) as e:
        where = where_raised(e)
        if where is None or where.part is None:  # not raised by f, which names its chunk
            _name_elements(e, "the pullback of f", group)
        raise
    layout.group = group[:len(ys)]  # the chunks that ran
    if grads is not None:
        return ys, layout.split(grads), None
    return ys, None, _GroupPullback(back, layout)


class ChunkForward:
    """What ``chunk_forward`` gives for each chunk: its value and either its cotangents
    at ȳ = 1 (``grads``: a scalar sum, whose pullback is linear in ȳ), its pullback
    (``pullback``: kept where memory is shared), or neither (recomputed later)."""

    __slots__ = ("value", "grads", "pullback")

    def __init__(self, value, grads=None, pullback=None):
        self.value, self.grads, self.pullback = value, grads, pullback

    def __reduce__(self):
        return (ChunkForward, (self.value, self.grads, self.pullback))


def chunk_forward(group, plan, active, state, shared, keep_tape):
    """Forward on a group of consecutive chunks, traced on one tape, each chunk with
    boxes of its own: for a scalar sum the cotangents at ȳ = 1 at once (one reverse pass
    for the group); else each chunk's pullback on the group's tape, or nothing. Each
    chunk's cotangents come from its own operations, in their order: the bits do not
    depend on how chunks were grouped."""
    ys, grads, back = _traced(group, plan, active, state, shared, plan.kind == "sum")
    if grads is not None:
        return [ChunkForward(y, grads=g) for y, g in zip(ys, grads)]
    if keep_tape:
        return [ChunkForward(y, pullback=_OneOfGroup(back, j)) for j, y in enumerate(ys)]
    return [ChunkForward(y) for y in ys]


def chunk_backward(group, plan, active, state, shared):
    """Recompute a group of chunks and pull each one's ȳ back (nothing kept on workers):
    ``group`` holds ``((xs, start), ybar)`` pairs."""
    _, _, back = _traced([item for item, _ in group], plan, active, state, shared, at_one=False)
    return back.all([ybar for _, ybar in group[:len(back.group)]])


def chunk_pullback(group):
    """Pull ȳ back through kept pullbacks (``group`` holds ``(pullback, ybar)`` pairs); a
    forward group whose chunks are all there, in order, in one pass over its tape."""
    out = []
    for tape, run in itertools.groupby(group, key=lambda pair: pair[0].group):
        run = list(run)
        if [back.j for back, _ in run] == list(range(len(tape.group))):
            out.extend(tape.all([ybar for _, ybar in run]))
        else:
            out.extend(back(ybar) for back, ybar in run)
    return out


class _GroupPullback:
    """The pullback of a group's chunks traced on one tape: all at once, or one chunk's."""

    __slots__ = ("back", "layout", "group")

    def __init__(self, back, layout):
        self.back, self.layout, self.group = back, layout, layout.group

    def all(self, bars):
        try:
            grads = self.back(list(bars))
        except (Exception, SystemExit) as e:
            _name_elements(e, "the pullback of f", self.group)
            raise
        return self.layout.split(grads)

    def one(self, j, ybar):
        bars = [ybar if k == j else ZeroTangent() for k in range(len(self.group))]
        return self.all(bars)[j]


class _OneOfGroup:
    __slots__ = ("group", "j")

    def __init__(self, group, j):
        self.group, self.j = group, j

    def __call__(self, ybar):
        return self.group.one(self.j, ybar)


def _name_elements(e, who, group):
    first, last = group[0][1], group[-1][1] + len(group[-1][0]) - 1
    add_note(e, f"psum/pmap: raised by {who} over {f'element {last}' if first == last else f'elements {first}..{last}'}")


def chunk_jvp(item, plan, state, shared, tangents):
    (xs, start), (dxs, dstate, dshared) = item, tangents
    body = plan.body
    # Arguments with a zero tangent are constants of the chunk, not jvp's primals: a
    # shared object that is neither array nor container (a settings object, an
    # executor) gets one, and jvp would refuse it as a primal.
    args, dargs = (state, xs, *shared), (dstate, dxs, *dshared)
    moving = [i for i, d in enumerate(dargs) if not is_zero(d)]

    def chunk(*moved):
        s, x, *sh = args
        if moved:
            whole = list(args)
            for i, v in zip(moving, moved):
                whole[i] = v
            s, x, *sh = whole
        y = body(s, x, start, *sh)
        if y is None:  # (jvp's own message named this function)
            raise TypeError(f"psum: {why_not_added(y, y)}")
        return y

    return jvp(chunk, tuple(args[i] for i in moving), tuple(dargs[i] for i in moving))


def jvp_chunks(group, plan, state, shared):
    """``(value, tangent)`` of each chunk of a group: ``((xs, start), tangents)`` pairs."""
    return in_time(group, lambda pair: chunk_jvp(pair[0], plan, state, shared, pair[1]))


class ChunkWork:
    """Work on one chunk of a psum/pmap, itself mapped over chunks by a pmap (under a
    higher derivative). Plain picklable objects: no differentiable state of their own."""

    def __init__(self, plan, active):
        self.plan, self.active = plan, active


class ChunkGradient(ChunkWork):
    """``(value,)`` of one chunk, or ``(value, cotangents at ȳ = 1)`` for a scalar sum."""

    def __call__(self, item, state, *shared):
        (y,), grads, _ = _traced([item], self.plan, self.active, state, shared, self.plan.kind == "sum")
        return (y,) if grads is None else (y, grads[0])


class ChunkPullback(ChunkWork):
    """The cotangents of one chunk's parts for its ȳ (given with the chunk for a pmap,
    shared by every chunk for a sum)."""

    def __init__(self, plan, active, per_chunk):
        super().__init__(plan, active)
        self.per_chunk = per_chunk

    def __call__(self, element, state, ybar, *shared):
        item, ybar = element if self.per_chunk else (element, ybar)
        _, _, back = _traced([item], self.plan, self.active, state, shared, at_one=False)
        return back.all([ybar])[0]


class ChunkJVP(ChunkWork):
    """``(value, tangent)`` of one chunk along the tangents given with it."""

    def __call__(self, element, state, dstate, *shared_and_tangents):
        item, dxs = element
        n = len(shared_and_tangents) // 2
        shared, dshared = shared_and_tangents[:n], shared_and_tangents[n:]
        tangents = tree_map(none_to_zero, (dxs, dstate, tuple(dshared)))
        return chunk_jvp(item, self.plan, state, shared, tangents)


# Zero tangents travel as None: a pmap's arguments are values (of an outer differentiation).
def zero_to_none(t):
    return None if is_zero(t) else t


def none_to_zero(t):
    return ZeroTangent() if t is None else t
