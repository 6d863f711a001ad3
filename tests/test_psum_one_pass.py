"""Tiny chunks that the schedule runs inline go through one tape in one pass
(``parallel._forward_in_one_pass``) instead of one tape, pullback and map step per chunk.

The one pass must give the bits that per-chunk tapes on a real executor give
(``dispatch="always"``), for psum with scalar and array values, pmap, every kind of
differentiated input, cotangents other than 1, float32; and keep the log record and the
errors that name the element.
"""

import logging

import numpy as np
import pytest

import adrules as ad
import executors
from adrules import parallel, schedule


@pytest.fixture(autouse=True)
def fresh_schedule(monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    monkeypatch.setattr(schedule, "ONE_PASS_SECONDS", 10.0)  # these chunks count as tiny, however loaded the machine
    schedule.forget()
    yield
    schedule.forget()


@pytest.fixture
def one_passes(monkeypatch):
    """Counts the calls that ran in one pass."""
    calls = []
    real = parallel._forward_in_one_pass

    def counted(*args):
        calls.append(1)
        return real(*args)

    monkeypatch.setattr(parallel, "_forward_in_one_pass", counted)
    return calls


@pytest.fixture(scope="module")
def threads():
    """Two threads whose dispatch never pays: after a call site's first call, every call
    runs inline whatever the machine's load does to the timings."""
    with executors.ThreadExecutor(2) as ex:
        ex.dispatch_cost = ex.call_cost = 10.0
        yield ex


def _bits(tree):
    return [np.asarray(leaf).tobytes() for leaf in ad.pytrees.flatten(tree)[0]
            if not isinstance(leaf, ad.NoTangent)]


def _twice(fn):
    """The second call of a call site: the first taught the schedule the work is tiny."""
    fn()
    return fn()


def loss(w, x, scale):
    return np.sum(np.tanh(x @ w) * scale) ** 2


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    return [rng.normal(size=3) for _ in range(9)], rng.normal(size=(4, 3)), rng.normal(size=4)


@pytest.mark.parametrize("chunk_size", [1, 2, 4])
def test_scalar_psum_gradients_of_elements_and_shared_match_per_chunk_tapes(
        data, threads, one_passes, chunk_size):
    ws, x, scale = data

    def value_and_grad(dispatch):
        return ad.value_and_gradient(
            lambda ws, x, scale: ad.psum(loss, ws, x, scale, executor=threads,
                                         chunk_size=chunk_size, dispatch=dispatch),
            ws, x, scale)

    want = value_and_grad("always")
    assert not one_passes
    got = _twice(lambda: value_and_grad("auto"))
    assert one_passes
    assert _bits(got) == _bits(want)
    loop = ad.value_and_gradient(lambda ws, x, s: sum(loss(w, x, s) for w in ws), ws, x, scale)
    for u, v in zip(ad.pytrees.flatten(got)[0], ad.pytrees.flatten(loop)[0]):
        np.testing.assert_allclose(u, v, rtol=1e-12)


def test_cotangent_other_than_one_and_a_closures_state(data, threads, one_passes):
    _, x, _ = data
    xs = list(np.linspace(-0.3, 1.0, 7))

    def pulled(dispatch):
        def total(w):
            return ad.psum(lambda xi: np.sum(np.sin(w * xi)), xs, executor=threads, chunk_size=2,
                           dispatch=dispatch)
        y, back = ad.pullback(total, x[0])
        return y, back(np.float64(0.37))

    want = pulled("always")
    got = _twice(lambda: pulled("auto"))
    assert one_passes
    assert _bits(got) == _bits(want)
    np.testing.assert_allclose(got[1][0], 0.37 * sum(np.cos(x[0] * v) * v for v in xs), rtol=1e-12)


def array_valued(w, x):
    return np.tanh(x @ w)


@pytest.mark.parametrize("kind", ["psum", "pmap"])
def test_array_values_and_pmap_pull_back_per_chunk(data, threads, one_passes, kind):
    ws, x, _ = data
    op = ad.psum if kind == "psum" else ad.pmap
    ybar = np.random.default_rng(2).normal(size=4)
    bar = ybar if kind == "psum" else [ybar * (k + 1) for k in range(len(ws))]

    def pulled(dispatch):
        y, back = ad.pullback(lambda ws, x: op(array_valued, ws, x, executor=threads, chunk_size=2,
                                               dispatch=dispatch), ws, x)
        return y, back(bar)

    want = pulled("always")
    got = _twice(lambda: pulled("auto"))
    assert one_passes
    assert _bits(got) == _bits(want)


def test_float32(threads, one_passes):
    rng = np.random.default_rng(3)
    ws = [rng.normal(size=5).astype(np.float32) for _ in range(6)]
    x = rng.normal(size=5).astype(np.float32)

    def grads(dispatch):
        return ad.gradient(lambda ws, x: ad.psum(lambda w, x: np.sum(np.exp(w * x)), ws, x,
                                                 executor=threads, chunk_size=2, dispatch=dispatch),
                           ws, x)

    want = grads("always")
    got = _twice(lambda: grads("auto"))
    assert one_passes
    assert _bits(got) == _bits(want)
    assert got[1].dtype == np.float32


def test_logged_as_an_inline_phase(data, threads, one_passes, caplog):
    ws, x, scale = data
    grad = lambda: ad.gradient(lambda ws: ad.psum(loss, ws, x, scale, executor=threads), ws)  # noqa: E731
    grad()
    with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
        grad()
    assert one_passes
    lines = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert len(lines) == 1 and "psum forward of loss" in lines[0] and "9 chunks, inline" in lines[0]


def breaks_at_five(w):
    if w == 5.0:
        raise ValueError("no fives")
    return w * w


@pytest.mark.parametrize("differentiate", [False, True])
def test_errors_name_the_element(threads, one_passes, differentiate):
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
    assert not differentiate or one_passes


def test_only_tiny_work_in_few_chunks_goes_in_one_pass(data, threads, one_passes, monkeypatch):
    """One pass holds every chunk's tape and shared cotangents at once: bigger work, or
    more chunks, goes chunk by chunk."""
    ws, x, scale = data
    grad = lambda chunk_size: ad.gradient(  # noqa: E731
        lambda ws: ad.psum(loss, ws, x, scale, executor=threads, chunk_size=chunk_size), ws)
    monkeypatch.setattr(schedule, "ONE_PASS_SECONDS", 0.0)
    _twice(lambda: grad(1))
    assert not one_passes
    monkeypatch.setattr(schedule, "ONE_PASS_SECONDS", 10.0)
    monkeypatch.setattr(schedule, "ONE_PASS_CHUNKS", 4)
    schedule.forget()
    _twice(lambda: grad(1))  # 9 chunks
    assert not one_passes
    _twice(lambda: grad(3))  # 3 chunks
    assert one_passes
