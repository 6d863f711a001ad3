"""How psum reduces the cotangents of shared arguments: a left fold in chunk order,
((g0 + g1) + g2) + ..., accumulated in place into a buffer the fold allocated itself.

Checked against per-chunk gradients written out by hand and folded with NumPy; on every
backend, including threads whose chunks finish out of order; never writing into an array
the fold did not allocate; and with a bounded number of dense cotangents alive.
"""

import functools
import threading
import time
import tracemalloc

import numpy as np
import pytest

import adrules as ad
import executors

N_ELEMENTS = 7


def fit(w, d):
    return np.sum(np.sin(d * w))


def fit_gradient(w, d):
    """d/dd of fit(w, d), by hand."""
    return np.cos(d * w) * w


@pytest.fixture(scope="module")
def shared():
    return np.random.default_rng(3).normal(size=1000)


@pytest.fixture(scope="module")
def weights():
    return [0.3 + 0.7 * k for k in range(N_ELEMENTS)]


def _fold(values):
    return functools.reduce(lambda a, b: a + b, values)


def _psum_gradient(weights, d, executor, f=fit):
    return ad.gradient(lambda d: ad.psum(f, weights, d, executor=executor, chunk_size=1,
                                         dispatch="always"), d)[0]


def test_left_fold_in_chunk_order_not_the_pairwise_tree(shared, weights):
    per_chunk = [fit_gradient(w, shared) for w in weights]
    want = _fold(per_chunk)
    assert want.tobytes() != executors.tree_sum(per_chunk).tobytes()  # the order is visible
    got = _psum_gradient(weights, shared, "serial")
    assert got.tobytes() == want.tobytes()


@pytest.mark.parametrize("backend", ["threads", "processes", "dask"])
def test_same_bits_on_every_backend(shared, weights, backend):
    if backend == "dask":
        pytest.importorskip("distributed")
    want = _fold([fit_gradient(w, shared) for w in weights])
    with executors.resolve(backend, n_workers=2) as ex:
        got = _psum_gradient(weights, shared, ex)
    assert got.tobytes() == want.tobytes()


_finished = []
_finished_lock = threading.Lock()


def slow_early_fit(w, d):
    """fit, with element 1 finishing well after element 2."""
    if w == 1.0:
        time.sleep(0.2)
    with _finished_lock:
        _finished.append(w)
    return fit(w, d)


def test_out_of_order_completion_on_threads_gives_the_same_bits(shared):
    weights = [0.5, 1.0, 1.5, 2.0, 2.5]
    want = _fold([fit_gradient(w, shared) for w in weights])
    _finished.clear()
    with executors.ThreadExecutor(2) as ex:
        got = _psum_gradient(weights, shared, ex, f=slow_early_fit)
    assert _finished.index(1.5) < _finished.index(1.0)  # element 2 did finish first
    assert got.tobytes() == want.tobytes()


# ---- the fold never writes into an array it did not allocate -------------------------


def passed_through(w, d):
    return d  # f returns its shared argument: its cotangent is the incoming ybar itself


@pytest.mark.parametrize("size", [10, 300_000])  # below and above the copy-first size
@pytest.mark.parametrize("backend", ["serial", "threads"])
def test_incoming_ybar_is_not_written_into(backend, size):
    d = np.linspace(0.0, 1.0, size)
    ybar = np.random.default_rng(0).normal(size=size)
    kept = ybar.copy()
    y, back = ad.pullback(lambda d: ad.psum(passed_through, [1.0, 2.0, 3.0, 4.0], d,
                                            executor=backend, chunk_size=1, dispatch="always"), d)
    np.testing.assert_array_equal(y, 4 * d)
    g, = back(ybar)
    assert ybar.tobytes() == kept.tobytes()
    assert g.tobytes() == (((kept + kept) + kept) + kept).tobytes()


CAPTURED = np.random.default_rng(1).normal(size=300_000)


@ad.primitive
def dot_captured(d):
    return np.sum(d * CAPTURED)


@ad.rrule.register(dot_captured)
def _dot_captured_rrule(d):
    def dot_captured_pullback(g):
        return ad.NoTangent(), (CAPTURED if g == 1 else g * CAPTURED)  # the user's own array

    return dot_captured(d), dot_captured_pullback


def uses_captured(w, d):
    return dot_captured(d)


@pytest.mark.parametrize("backend", ["serial", "threads"])
def test_a_captured_user_array_is_not_written_into(backend):
    kept = CAPTURED.copy()
    g = _psum_gradient([1.0, 2.0, 3.0], np.zeros_like(CAPTURED), backend, f=uses_captured)
    assert CAPTURED.tobytes() == kept.tobytes()
    assert g.tobytes() == ((kept + kept) + kept).tobytes()


# ---- memory ---------------------------------------------------------------------


def scaled_sum(w, d):
    return np.sum(d * w)


@pytest.mark.parametrize("backend", ["serial", "threads"])
def test_peak_memory_does_not_grow_with_the_chunk_count(backend):
    """16 chunks of a gradient w.r.t. one big shared array: the fold holds one partial sum
    and, on 2 threads, at most one finished chunk cotangent per worker (the pairwise tree
    held up to 4 partial sums, 6x the array on serial and 8x on threads)."""
    d = np.random.default_rng(0).normal(size=1_000_000)
    weights = [float(k + 1) for k in range(16)]
    with executors.resolve(backend, n_workers=2) as ex:
        _psum_gradient(weights[:2], d, ex, f=scaled_sum)  # warm: threads, caches
        tracemalloc.start()
        try:
            g = _psum_gradient(weights, d, ex, f=scaled_sum)
            peak = tracemalloc.get_traced_memory()[1] / d.nbytes
        finally:
            tracemalloc.stop()
    np.testing.assert_allclose(g, sum(weights) * np.ones_like(d))
    assert peak <= 3.5, peak


def test_thread_workers_run_at_most_one_task_each_ahead_of_the_reduction():
    started_ahead, delivered, lock = [], [0], threading.Lock()

    def work(i):
        with lock:
            started_ahead.append(i + 1 - delivered[0])
        time.sleep(0.002 * (i % 3))
        return i

    def reduce_one(i, result):
        delivered[0] += 1
        return result

    with executors.ThreadExecutor(2) as ex:
        assert ex.map(work, range(12), on_result=reduce_one) == list(range(12))
        assert max(started_ahead) <= 2
        assert ex.map(work, range(12)) == list(range(12))  # no reduction: no window
