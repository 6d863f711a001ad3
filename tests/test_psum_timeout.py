"""psum/pmap ``timeout=``: past it, ``executors.MapTimeoutError`` names the elements still
running and those not started, and the next call on the same executor runs at once: on
threads the pool's stuck threads are left behind, on processes the workers running them
are replaced (Dask: tests/test_psum_faults.py, on its cluster). Each stuck element waits
far longer than the bounds asserted here, so a call that waited for it fails the test."""

import math
import re
import threading
import time

import numpy as np
import pytest

import adrules as ad
import executors
from adrules._psum import schedule

N = 6
W = np.array([0.5, -1.0, 2.0])
WEIGHT = N * (N + 1) / 2  # sum over i of (i + 1)


def _want_value():
    return WEIGHT * float(np.sum(W ** 2))  # sum_i (i + 1) |w|^2, computed apart from psum


def _want_gradient():
    return 2 * WEIGHT * W


@pytest.fixture(autouse=True)
def fresh_call_sites():
    schedule.forget()


@pytest.fixture
def release():
    """Set at the end of the test: threads left waiting on it finish then."""
    event = threading.Event()
    yield event
    event.set()


def _waiting_on(release, stuck):
    def f(i, w):
        if i in stuck:
            release.wait(120)
        return (i + 1) * np.sum(w ** 2)
    return f


def _sleeping_on(stuck, seconds=120):
    def f(i, w):
        if i in stuck:
            time.sleep(seconds)
        return (i + 1) * np.sum(w ** 2)
    return f


def _plain(i, w):
    return (i + 1) * np.sum(w ** 2)


def _call(kind, f, ex, timeout, chunk_size=1):
    """The value, or the value and the gradient with respect to W (kind "...-gradient")."""
    fn = ad.psum if kind.startswith("psum") else ad.pmap

    def total(w):
        out = fn(f, list(range(N)), w, executor=ex, chunk_size=chunk_size, timeout=timeout,
                 dispatch="always")  # (as a timeout does) on the executor, not inline
        return out if fn is ad.psum else sum(out)
    if kind.endswith("gradient"):
        value, (g,) = ad.value_and_gradient(total, W)
        return float(value), g
    return float(total(W)), None


def _raises_in_time(kind, f, ex, timeout, limit):
    t0 = time.monotonic()
    with pytest.raises(executors.MapTimeoutError) as info:
        _call(kind, f, ex, timeout)
    assert time.monotonic() - t0 < limit
    return info.value


def _works_at_once(kind, ex, limit):
    t0 = time.monotonic()
    value, g = _call(kind, _plain, ex, timeout=None)
    assert time.monotonic() - t0 < limit
    assert value == pytest.approx(_want_value())
    if g is not None:
        np.testing.assert_allclose(g, _want_gradient())


# ---------------------------------------------------------------- bad input


@pytest.mark.parametrize("fn", [ad.psum, ad.pmap])
@pytest.mark.parametrize("timeout, error, words", [
    (-1, ValueError, "a number of seconds greater than 0"), (0, ValueError, "a number of seconds greater than 0"),
    (math.nan, ValueError, "a number of seconds greater than 0"),
    ("3", TypeError, "a number of seconds"), (True, TypeError, "a number of seconds"),
])
def test_a_timeout_that_is_not_a_positive_number_of_seconds_is_refused(fn, timeout, error, words):
    with pytest.raises(error, match=rf"^{fn.__name__}: timeout must be {words}.*None for no limit; "
                                    rf"got {re.escape(repr(timeout))}$"):
        fn(_plain, [0, 1], W, executor="serial", timeout=timeout)


def test_an_infinite_timeout_is_no_limit():
    assert ad.psum(_plain, list(range(N)), W, executor="serial", timeout=math.inf) == pytest.approx(_want_value())


def test_the_joblib_executor_refuses_a_timeout_it_cannot_honour():
    pytest.importorskip("joblib")
    with pytest.raises(ValueError, match=r"psum: timeout= cannot be honoured on the 'joblib' executor"):
        ad.psum(_plain, [0, 1], W, executor="joblib", timeout=5)


# ---------------------------------------------------------------- threads


@pytest.mark.parametrize("kind", ["psum", "pmap", "psum-gradient", "pmap-gradient"])
def test_threads_a_stuck_element_times_out_and_the_next_call_runs_at_once(kind, release):
    ex = executors.ThreadExecutor(2)
    _works_at_once(kind, ex, limit=10)  # (the pool up)
    # both threads stuck: a next call that waited for either would wait for ever
    err = _raises_in_time(kind, _waiting_on(release, {1, 2}), ex, timeout=1.0, limit=6)
    assert isinstance(err, TimeoutError)
    assert err.running == [1, 2] and err.not_started == [3, 4, 5] and err.timeout == 1.0
    name = kind.split("-")[0]
    assert str(err).startswith(f"{name} on the 'threads' executor passed its timeout of 1 s "
                               "(still running: elements 1..2; not started: elements 3..5). "
                               "A thread cannot be stopped")
    assert "call f on xs[1] alone" in str(err)
    _works_at_once(kind, ex, limit=5)
    ex.close()


@ad.primitive
def _held_in_pullback(w, i, release):
    return w * 1.0


@ad.rrule.register(_held_in_pullback)
def _held_in_pullback_rrule(w, i, release):
    def held_pullback(ybar):
        if i == 3:
            release.wait(120)
        return ad.NoTangent(), ybar, ad.NoTangent(), ad.NoTangent()
    return w * 1.0, held_pullback


def test_threads_a_pullback_stuck_on_one_element_times_out_naming_it(release):
    """pmap keeps its chunks' pullbacks on threads and runs them in a second pass: the
    forward pass is done in time, the pullback's pass stops at its own timeout."""
    def f(i, w):
        return (i + 1) * np.sum(_held_in_pullback(w, i, release) ** 2)
    ex = executors.ThreadExecutor(2)
    t0 = time.monotonic()
    with pytest.raises(executors.MapTimeoutError, match=r"^pmap \(its pullback: the gradient\) on the 'threads' "
                                                        r"executor passed its timeout of 1 s \(still running: "
                                                        r"elements 3") as info:
        ad.gradient(lambda w: sum(ad.pmap(f, list(range(N)), w, executor=ex, chunk_size=1, timeout=1)), W)
    assert time.monotonic() - t0 < 6
    assert 3 in info.value.running
    _works_at_once("pmap-gradient", ex, limit=5)
    ex.close()


def test_threads_forward_mode_times_out_too(release):
    ex = executors.ThreadExecutor(2)
    f = _waiting_on(release, {4})
    t0 = time.monotonic()
    with pytest.raises(executors.MapTimeoutError, match=r"^psum \(forward mode\) on the 'threads' executor "
                                                        r"passed its timeout of 1 s \(still running: elements 4"):
        ad.jvp(lambda w: ad.psum(f, list(range(N)), w, executor=ex, chunk_size=1, timeout=1), (W,), (W,))
    assert time.monotonic() - t0 < 6
    _, dy = ad.jvp(lambda w: ad.psum(_plain, list(range(N)), w, executor=ex, chunk_size=1, dispatch="always"),
                   (W,), (W,))
    assert float(dy) == pytest.approx(2 * WEIGHT * float(W @ W))
    ex.close()


def test_an_executor_map_times_out_naming_its_items(release):
    with executors.ThreadExecutor(2) as ex:
        with pytest.raises(executors.MapTimeoutError, match=r"^a map of 4 items on the 'threads' executor passed its "
                                                            r"timeout of 0.5 s \(still running: items 0..1; not "
                                                            r"started: items 2..3\)"):
            ex.map(lambda i: release.wait(120) if i < 2 else i, range(4), timeout=0.5)
        assert ex.map(abs, [-1, -2], timeout=5) == [1, 2]


# ---------------------------------------------------------------- processes


def _started(ex):
    ex.start()
    deadline = time.monotonic() + 60
    while not ex.ready() and time.monotonic() < deadline:
        time.sleep(0.05)
    return ex


@pytest.mark.parametrize("kind", ["psum", "pmap-gradient"])
def test_processes_the_workers_running_stuck_elements_are_replaced(kind):
    ex = _started(executors.resolve("processes", n_workers=2))
    before = set(ex.worker_pids())
    err = _raises_in_time(kind, _sleeping_on({0, 1}), ex, timeout=2.0, limit=10)
    assert err.running == [0, 1] and err.not_started == [2, 3, 4, 5]
    assert "The worker processes still running were stopped" in str(err)
    _works_at_once(kind, ex, limit=30)  # new workers started: not after the stuck 120 s
    assert not before & set(ex.worker_pids())


# ---------------------------------------------------------------- serial


@pytest.mark.parametrize("kind", ["psum", "pmap-gradient"])
def test_serial_checks_the_time_between_chunks_and_names_those_not_run(kind):
    def slow(i, w):
        time.sleep(0.3)
        return (i + 1) * np.sum(w ** 2)
    err = _raises_in_time(kind, slow, "serial", timeout=0.5, limit=3)
    assert err.running == [] and err.not_started and err.not_started[-1] == N - 1
    assert "checks the time only between them" in str(err)
    _works_at_once(kind, "serial", limit=3)
