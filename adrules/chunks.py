"""One chunk's work for psum and pmap, the same wherever it runs: inline, in a pool
thread, in a worker process or on a Dask worker. Everything here is at module level, so
it pickles by reference (a worker imports this module), and none of it knows about
executors.

    Plan.body(state, xs, start, *shared)   f over one chunk: a left fold in index order
                                           (psum) or the list of values (pmap)
    chunk_value      the body's value (nothing differentiated)
    chunk_forward    value and, for a scalar sum, the cotangents at ȳ = 1 at once;
                     else the chunk's pullback (kept where memory is shared) or nothing
    chunk_backward   recompute the chunk and pull its ȳ back (nothing kept on workers)
    chunk_pullback   pull ȳ back through a kept pullback
    chunk_jvp        value and tangent (forward mode)
    ChunkGradient / ChunkPullback / ChunkJVP
                     what the rules map under a second derivative (a pmap over
                     chunks, differentiated in turn)
"""

from __future__ import annotations

import numpy as np

from .api import jvp, pullback_or_gradient
from .pytrees import LEAF, LEAF_TYPES, flatten, tree_map, unflatten
from .tangents import NoTangent, ZeroTangent, is_zero
from .tracer import Traced


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


def what(value):
    shape = getattr(value, "shape", None)
    return f"shape {shape}" if shape is not None else f"a {type(value).__name__}"


def _blame(e, fn, element):
    if not isinstance(fn, ChunkWork):  # which already named the user's element
        note(e, f"psum/pmap: raised by f at element {element}")


def note(exc, text):
    """``exc.add_note(text)``, on Python 3.10 too."""
    if hasattr(exc, "add_note"):
        exc.add_note(text)
    else:  # Python 3.10: keep the same __notes__ list that 3.11 would print
        try:
            exc.__notes__ = [*getattr(exc, "__notes__", ()), text]
        except Exception:
            pass


def fold(fn, xs, shared, start, vectorized):
    """Sum of fn(x, *shared) over the chunk, a left fold in index order."""
    if vectorized:
        leaves, tdef = _rows(fn(xs, *shared), len(xs), start)
        return unflatten(tdef, [np.sum(leaf, axis=0) for leaf in leaves])
    total = None
    for k in range(len(xs)):
        try:
            value = fn(xs[k], *shared)
        except (Exception, SystemExit) as e:
            _blame(e, fn, start + k)
            raise
        if k == 0:
            total = value
            continue
        try:
            total = add_values(total, value)
        except (ValueError, TypeError) as e:
            raise type(e)(
                f"psum: f's value at element {start + k} ({what(value)}) does not add to the "
                f"sum of elements {start}..{start + k - 1} ({what(total)}): "
                f"{why_not_added(total, value)}") from e
    return total


def map_list(fn, xs, shared, start, vectorized):
    if vectorized:
        leaves, tdef = _rows(fn(xs, *shared), len(xs), start)
        return [unflatten(tdef, [leaf[i] for leaf in leaves]) for i in range(len(xs))]
    out = []
    for k in range(len(xs)):
        try:
            out.append(fn(xs[k], *shared))
        except (Exception, SystemExit) as e:
            _blame(e, fn, start + k)
            raise
    return out


def _rows(out, n, start):
    """The leaves and structure of ``f``'s value on a vectorized chunk of ``n`` elements
    (from ``start``), each leaf holding one row per element; anything else is refused, as
    summing it whole would be a wrong sum (per-element vectors added into one number, a
    dict's keys listed)."""
    leaves, tdef = flatten(out)
    for leaf in leaves:
        shape = np.shape(leaf.value if type(leaf) is Traced else leaf)
        if type(leaf) is str or not shape or shape[0] != n:
            where = "" if tdef is LEAF else f" holding {what(leaf)}"
            raise ValueError(
                f"psum/pmap(vectorized=True): f returned {what(out)}{where} for the chunk of elements "
                f"{start}..{start + n - 1} ({n} rows of xs); it must return one value per element, "
                f"stacked along axis 0 (shape ({n}, ...)), or a tuple or dict of such arrays.")
    return leaves, tdef


class Plan:
    """What every chunk needs to know, besides its own elements (small and picklable):
    ``f`` (or ``rebuild``, which makes it from its lifted state), whether the chunks are
    summed or listed, and whether ``f`` takes a whole chunk at once."""

    def __init__(self, f, rebuild, kind, vectorized):
        self.f, self.rebuild, self.kind, self.vectorized = f, rebuild, kind, vectorized

    def body(self, state, xs, start, *shared):
        """The chunk's sum (or list) of ``f(x, *shared)`` for ``x`` in ``xs``."""
        fn = self.f if self.rebuild is None else self.rebuild(state)
        reduce = fold if self.kind == "sum" else map_list
        return reduce(fn, xs, shared, start, self.vectorized)


def chunk_value(item, plan, state, shared):
    xs, start = item
    return plan.body(state, xs, start, *shared)


def active_call(plan, start, active, state, xs, shared):
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


def expand(grads, idx, n):
    out = [NoTangent()] * n
    for i, g in zip(idx, grads):
        out[i] = g
    return tuple(out)


class ChunkForward:
    """What ``chunk_forward`` returns: the chunk's value and either its cotangents at
    ȳ = 1 (``grads``: a scalar sum, whose pullback is linear in ȳ), its pullback
    (``pullback``: kept where memory is shared), or neither (recomputed later)."""

    __slots__ = ("value", "grads", "pullback")

    def __init__(self, value, grads=None, pullback=None):
        self.value, self.grads, self.pullback = value, grads, pullback

    def __reduce__(self):
        return (ChunkForward, (self.value, self.grads, self.pullback))


def chunk_forward(item, plan, active, state, shared, keep_tape):
    """Forward on one chunk: cotangents at once for a scalar sum, else a tape or nothing."""
    xs, start = item
    fn, args, idx = active_call(plan, start, active, state, xs, shared)
    y, grads, back = _traced(pullback_or_gradient, start, len(xs), fn, args, plan.kind == "sum")
    if grads is not None:
        return ChunkForward(y, grads=expand(grads, idx, len(active)))
    if keep_tape:
        back = _PullingBack(back, start, len(xs))
        return ChunkForward(y, pullback=lambda ybar: expand(back(ybar), idx, len(active)))
    return ChunkForward(y)


def chunk_backward(pair, plan, active, state, shared):
    """Recompute one chunk's forward and pull its ``ybar`` back (no state kept on workers)."""
    (xs, start), ybar = pair
    fn, args, idx = active_call(plan, start, active, state, xs, shared)
    back = pullback_or_gradient(fn, args, scalar=False)[2]
    return expand(_PullingBack(back, start, len(xs))(ybar), idx, len(active))


def chunk_pullback(pair):
    back, ybar = pair
    return back(ybar)


def _traced(run, start, n, *args):
    """``run(*args)``, an error of a rule's pullback named by the chunk's elements."""
    try:
        return run(*args)
    except (Exception, SystemExit) as e:
        if not any("raised by f at element" in str(m) for m in getattr(e, "__notes__", ())):
            _name_elements(e, "the pullback of f", start, n)
        raise


def _name_elements(e, who, start, n):
    last = start + n - 1
    note(e, f"psum/pmap: raised by {who} over {f'element {last}' if n == 1 else f'elements {start}..{last}'}")


class _PullingBack:
    """A chunk's pullback whose errors name the chunk's elements (one tape serves all
    of the chunk's elements)."""

    __slots__ = ("back", "start", "n")

    def __init__(self, back, start, n):
        self.back, self.start, self.n = back, start, n

    def __call__(self, ybar):
        try:
            return self.back(ybar)
        except (Exception, SystemExit) as e:
            _name_elements(e, "the pullback of f", self.start, self.n)
            raise


def chunk_jvp(item, plan, state, shared, tangents):
    (xs, start), (dxs, dstate, dshared) = item, tangents
    body = plan.body

    def chunk(s, x, *sh):
        y = body(s, x, start, *sh)
        if y is None:  # (jvp's own message named this function)
            raise TypeError(f"psum: {why_not_added(y, y)}")
        return y

    return jvp(chunk, (state, xs, *shared), (dstate, dxs, *dshared))


def jvp_item(pair, plan, state, shared):
    item, (dxs, dstate, dshared) = pair
    return chunk_jvp(item, plan, state, shared, (dxs, dstate, dshared))


class ChunkWork:
    """Work on one chunk of a psum/pmap, itself mapped over chunks by a pmap (under a
    higher derivative). Plain picklable objects: no differentiable state of their own."""

    def __init__(self, plan, active):
        self.plan, self.active = plan, active


class ChunkGradient(ChunkWork):
    """``(value,)`` of one chunk, or ``(value, cotangents at ȳ = 1)`` for a scalar sum."""

    def __call__(self, item, state, *shared):
        xs, start = item
        fn, args, idx = active_call(self.plan, start, self.active, state, xs, shared)
        y, grads, _ = pullback_or_gradient(fn, args, self.plan.kind == "sum")
        return (y,) if grads is None else (y, expand(grads, idx, len(self.active)))


class ChunkPullback(ChunkWork):
    """The cotangents of one chunk's parts for its ȳ (given with the chunk for a pmap,
    shared by every chunk for a sum)."""

    def __init__(self, plan, active, per_chunk):
        super().__init__(plan, active)
        self.per_chunk = per_chunk

    def __call__(self, element, state, ybar, *shared):
        (xs, start), ybar = element if self.per_chunk else (element, ybar)
        fn, args, idx = active_call(self.plan, start, self.active, state, xs, shared)
        return expand(pullback_or_gradient(fn, args, scalar=False)[2](ybar), idx, len(self.active))


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
