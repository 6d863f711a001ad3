"""Chunks run inline give the bits that chunks on an executor give (``dispatch="always"``),
for psum with scalar and array values, pmap, every kind of differentiated input,
cotangents other than 1, float32; and keep the log record and the errors that name the
element.
"""

import logging

import numpy as np
import pytest

import adrules as ad
import executors
from adrules import pytrees
from adrules._psum import parallel, schedule


@pytest.fixture(autouse=True)
def fresh_schedule(monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    schedule.forget()
    yield
    schedule.forget()


@pytest.fixture(scope="module")
def threads():
    """Two threads whose overhead never pays: with dispatch "auto", every call runs
    inline, whatever the machine's load does to the timings."""
    with executors.ThreadExecutor(2) as ex:
        ex._overhead = (10.0, 10.0, 0.0)
        yield ex


def _bits(tree):
    return [np.asarray(leaf).tobytes() for leaf in ad.pytrees.flatten(tree)[0]
            if not isinstance(leaf, ad.NoTangent)]


def _twice(fn):
    """The second call of a call site (the first call's result is the same)."""
    first = fn()
    second = fn()
    assert _bits(first) == _bits(second)
    return second


def _always_then_auto(run, *args):
    """``(run("always", *args), run("auto", *args))``: every chunk on the executor, then
    every chunk inline."""
    want = run("always", *args)
    return want, _twice(lambda: run("auto", *args))


def loss(w, x, scale):
    return np.sum(np.tanh(x @ w) * scale) ** 2


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    return [rng.normal(size=3) for _ in range(9)], rng.normal(size=(4, 3)), rng.normal(size=4)


@pytest.mark.parametrize("chunk_size", [1, 2, 4])
def test_scalar_psum_gradients_of_elements_and_shared_match_per_chunk_tapes(
        data, threads, chunk_size):
    ws, x, scale = data

    def value_and_grad(dispatch):
        return ad.value_and_gradient(
            lambda ws, x, scale: ad.psum(loss, ws, x, scale, executor=threads,
                                         chunk_size=chunk_size, dispatch=dispatch),
            ws, x, scale)

    want = value_and_grad("always")
    got = _twice(lambda: value_and_grad("auto"))
    assert _bits(got) == _bits(want)
    loop = ad.value_and_gradient(lambda ws, x, s: sum(loss(w, x, s) for w in ws), ws, x, scale)
    for u, v in zip(ad.pytrees.flatten(got)[0], ad.pytrees.flatten(loop)[0]):
        np.testing.assert_allclose(u, v, rtol=1e-12)


def test_cotangent_other_than_one_and_a_closures_state(data, threads):
    _, x, _ = data
    xs = list(np.linspace(-0.3, 1.0, 7))

    def pulled(dispatch):
        def total(w):
            return ad.psum(lambda xi: np.sum(np.sin(w * xi)), xs, executor=threads, chunk_size=2,
                           dispatch=dispatch)
        y, back = ad.pullback(total, x[0])
        return y, back(np.float64(0.37))

    want, got = _always_then_auto(pulled)
    assert _bits(got) == _bits(want)
    np.testing.assert_allclose(got[1][0], 0.37 * sum(np.cos(x[0] * v) * v for v in xs), rtol=1e-12)


def array_valued(w, x):
    return np.tanh(x @ w)


@pytest.mark.parametrize("kind", ["psum", "pmap"])
def test_array_values_and_pmap_pull_back_per_chunk(data, threads, kind):
    ws, x, _ = data
    op = ad.psum if kind == "psum" else ad.pmap
    ybar = np.random.default_rng(2).normal(size=4)
    bar = ybar if kind == "psum" else [ybar * (k + 1) for k in range(len(ws))]

    def pulled(dispatch):
        y, back = ad.pullback(lambda ws, x: op(array_valued, ws, x, executor=threads, chunk_size=2,
                                               dispatch=dispatch), ws, x)
        return y, back(bar)

    want, got = _always_then_auto(pulled)
    assert _bits(got) == _bits(want)


def test_float32(threads):
    rng = np.random.default_rng(3)
    ws = [rng.normal(size=5).astype(np.float32) for _ in range(6)]
    x = rng.normal(size=5).astype(np.float32)

    def grads(dispatch):
        return ad.gradient(lambda ws, x: ad.psum(lambda w, x: np.sum(np.exp(w * x)), ws, x,
                                                 executor=threads, chunk_size=2, dispatch=dispatch),
                           ws, x)

    want, got = _always_then_auto(grads)
    assert _bits(got) == _bits(want)
    assert got[1].dtype == np.float32


def test_logged_as_an_inline_phase(data, threads, caplog):
    ws, x, scale = data
    grad = lambda: ad.gradient(lambda ws: ad.psum(loss, ws, x, scale, executor=threads), ws)  # noqa: E731
    grad()
    with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
        grad()
    lines = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert len(lines) == 1 and "psum forward of loss" in lines[0] and "9 chunks, inline" in lines[0]


def breaks_at_five(w):
    if w == 5.0:
        raise ValueError("no fives")
    return w * w


@pytest.mark.parametrize("differentiate", [False, True])
def test_errors_name_the_element(threads, differentiate):
    ok = [1.0, 2.0, 3.0, 4.0]
    bad = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    if differentiate:
        run = lambda xs: ad.gradient(lambda xs: ad.psum(breaks_at_five, xs, executor=threads), xs)  # noqa: E731
    else:
        run = lambda xs: ad.psum(breaks_at_five, xs, executor=threads)  # noqa: E731
    run(ok)
    with pytest.raises(ValueError, match="no fives") as info:
        run(bad)
    assert any("element 4" in note for note in getattr(info.value, "__notes__", []))


# ---------------------------------------------------------------------------
# tiny work: lists and tuples of numbers, closures' state, mixed value types
# ---------------------------------------------------------------------------


def cheap(x):
    return x * x + 1.0


@pytest.mark.parametrize("container", [list, tuple])
@pytest.mark.parametrize("chunk_size", [None, 1, 3])
def test_scalars_bits_match_per_chunk_tapes_and_the_loop(threads, container, chunk_size):
    xs = container(float(v) for v in np.linspace(-1.3, 2.1, 10))

    def grad(dispatch):
        return ad.value_and_gradient(
            lambda xs: ad.psum(cheap, xs, executor=threads, chunk_size=chunk_size, dispatch=dispatch), xs)

    want, got = _always_then_auto(grad)
    assert _bits(got) == _bits(want)
    assert type(got[1][0]) is container and all(type(g) is float for g in got[1][0])
    loop = ad.gradient(lambda xs: sum(cheap(x) for x in xs), xs)[0]
    assert list(got[1][0]) == list(loop)  # 2x: exact, whatever the order


def test_elements_with_shared_arguments_and_closure_state(threads):
    rng = np.random.default_rng(11)
    xs = [{"a": rng.normal(size=3), "b": float(rng.normal())} for _ in range(7)]
    shared = rng.normal(size=3)

    def loss(x, v, s=0.7):
        return np.sum(np.sin(x["a"] * v)) * x["b"] * s

    def pulled(dispatch, ybar):
        def total(xs, v, s):  # s: differentiated state of the closure psum receives
            return ad.psum(lambda x, v: loss(x, v, s), xs, v, executor=threads, chunk_size=2,
                           dispatch=dispatch)
        y, back = ad.pullback(total, xs, shared, 0.7)
        return y, back(ybar)

    for ybar in (1.0, np.float64(-0.43)):
        want, got = _always_then_auto(pulled, ybar)
        assert _bits(got) == _bits(want)
    loop = ad.gradient(lambda xs, v: sum(loss(x, v) for x in xs), xs, shared)
    got = pulled("auto", 1.0)[1]
    np.testing.assert_allclose(got[1], loop[1], rtol=1e-12)
    for g, h in zip(got[0], loop[0]):
        np.testing.assert_allclose(g["a"], h["a"], rtol=1e-12)
        np.testing.assert_allclose(g["b"], h["b"], rtol=1e-12)


@pytest.mark.parametrize("kind", ["psum", "pmap"])
def test_array_values_of_a_list_pull_back_per_chunk(threads, kind):
    rng = np.random.default_rng(5)
    xs = [rng.normal(size=2) for _ in range(5)]
    op = ad.psum if kind == "psum" else ad.pmap
    bar = np.array([0.3, -1.1]) if kind == "psum" else [np.array([k, 1.0 - k]) for k in range(5)]

    def pulled(dispatch):
        y, back = ad.pullback(lambda xs: op(lambda x: np.tanh(x) * 2.0, xs, executor=threads,
                                            chunk_size=2, dispatch=dispatch), xs)
        return y, back(bar)

    want, got = _always_then_auto(pulled)
    assert _bits(got) == _bits(want)


def test_constant_chunks_and_float32(threads):
    xs = [np.float32(v) for v in (0.5, -2.0, 3.0, 1.5)]

    def grad(dispatch):  # elements 2 and 3 give constants: zero cotangents
        return ad.gradient(lambda xs: ad.psum(lambda x: x * x if x < 2.5 else np.float32(1.0), xs,
                                              executor=threads, chunk_size=1, dispatch=dispatch), xs)

    want, got = _always_then_auto(grad)
    assert _bits(got) == _bits(want)


@pytest.mark.parametrize("values", [
    [1.0, 2, np.float64(0.1), np.float32(3.0)],  # plain numbers: tree-summed at once
    [1.0, np.array(2.0), 0.5],  # a 0-d array among them: streamed
    [np.ones(2), np.arange(2.0), np.full(2, 0.25)],
])
def test_values_of_mixed_types_sum_as_per_chunk(threads, values):
    def value(dispatch):
        return ad.psum(lambda i: values[i], list(range(len(values))), executor=threads, chunk_size=1,
                       dispatch=dispatch)

    want, got = _always_then_auto(value)
    assert _bits(got) == _bits(want) and type(got) is type(want)


def test_flat_lists_flatten_and_rebuild_as_nested_ones():
    tree = [1.0, (2.0, np.ones(2)), [], {"a": [3.0, 4.0]}, (5.0,)]
    leaves, tdef = pytrees.flatten(tree)
    assert len(leaves) == 6 and tdef.n_leaves == 6
    assert pytrees.unflatten(tdef, leaves)[3] == {"a": [3.0, 4.0]}
    assert pytrees.flatten([1.0, 2.0])[1] == pytrees.TreeDef(list, None, (pytrees.LEAF, pytrees.LEAF))
    assert pytrees.unflatten(pytrees.flatten((1.0, 2.0))[1], [3.0, 4.0]) == (3.0, 4.0)
    with pytest.raises(StopIteration):
        pytrees.unflatten(pytrees.flatten([1.0, 2.0])[1], [3.0])


def test_float_cotangents_accumulate_without_projection():
    x = 1.7
    g = ad.gradient(lambda x: x * x + x * 3.0 + np.sin(x), x)[0]
    assert type(g) is float
    np.testing.assert_allclose(g, 2 * x + 3.0 + np.cos(x), rtol=1e-15)
    g32 = ad.gradient(lambda x: x * x, np.float32(1.5))[0]
    assert g32.dtype == np.float32


def test_which_parts_are_differentiated_is_read_from_the_leaves(threads):
    """xs constant, one shared argument traced and one not: only the traced one gets a
    cotangent, as chunk by chunk."""
    xs = [float(v) for v in range(5)]
    fixed = np.array([0.5, -1.0])

    def grad(dispatch):
        return ad.gradient(lambda w: ad.psum(lambda x, w, c: np.sum(np.sin(w * x) * c), xs, w, fixed,
                                             executor=threads, chunk_size=2, dispatch=dispatch),
                           np.array([0.3, 0.7]))

    want, got = _always_then_auto(grad)
    assert _bits(got) == _bits(want)
    assert parallel._traced_parts([None, 1.0, 2.0, fixed], pytrees.flatten((None, [1.0, 2.0], [fixed]))[1]) \
        == [False, False]


def test_values_without_any_trace_keep_their_structure(threads):
    xs = [1.0, 2.0, 3.0]
    total = _twice(lambda: ad.psum(lambda x: (x, {"sq": x * x}), xs, executor=threads))
    assert total == (6.0, {"sq": 14.0})
    assert _twice(lambda: ad.pmap(lambda x: [x], xs, executor=threads)) == [[1.0], [2.0], [3.0]]
    assert ad.psum(cheap, [], executor=threads) == 0.0


def test_inline_chunks_run_as_worker_context(threads):
    seen = ad.pmap(lambda i: executors.in_worker(), [0, 1, 2], executor=threads)
    assert seen == [True] * 3 and executors.in_worker() is False


def test_traced_numbers_whose_f_gives_constants(threads):
    xs = [1.0, 2.0, 3.0]

    def value_and_grad(dispatch):
        return ad.value_and_gradient(lambda xs: ad.psum(lambda x: 2, xs, executor=threads,
                                                        dispatch=dispatch) * 1.0, xs)

    want, got = _always_then_auto(value_and_grad)
    assert got == want == (6.0, ([0.0, 0.0, 0.0],))


_ESCAPED = []


def reads_a_traced_global(x):
    return x * _ESCAPED[0]


def test_traced_numbers_with_f_reading_a_traced_value_it_was_not_given(threads):
    def total(xs, v):
        _ESCAPED[:] = [v]
        return ad.psum(reads_a_traced_global, xs, executor=threads)

    xs = [1.0, 2.0]
    _ESCAPED[:] = [3.0]  # a first call, with nothing escaping
    ad.gradient(lambda xs: ad.psum(reads_a_traced_global, xs, executor=threads), xs)
    with pytest.raises(ad.tracer.TracerError, match="Pass it explicitly as a shared argument"):
        ad.gradient(total, xs, 3.0)
    _ESCAPED.clear()
