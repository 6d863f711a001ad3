"""Where chunk work runs: the decision logic (fed with timings, so no clock is involved),
the first call of a call site, the log, and the guarantee that results never depend on
where chunks ran."""

import functools
import logging
import os
import threading
import time

import numpy as np
import pytest

import adrules as ad
import executors
from adrules import schedule


class _Pool:
    """Stands in for an executor in the decision logic: only its cost figures are read."""

    name, shares_memory = "fake", True
    dispatch_cost, call_cost, startup_cost = 1e-3, 1e-3, 1.0

    def __init__(self, n_workers=2, ready=True):
        self.n_workers, self._ready, self.started = n_workers, ready, False

    def ready(self):
        return self._ready

    def start(self, preload=()):
        self.started = True


@pytest.fixture(scope="module")
def processes():
    return executors.resolve("processes", n_workers=2)


def _site(chunk_seconds, inline=True):
    site = schedule._Site()
    site.chunk_seconds, site.measured_inline = chunk_seconds, inline
    return site


def test_tiny_work_runs_inline_and_big_work_in_parallel():
    assert not schedule._wants_parallel(_site(1e-4), _Pool(), 10)[0]  # 1 ms of work in all
    assert schedule._wants_parallel(_site(1e-3), _Pool(), 16)[0]  # 16 ms
    assert schedule._wants_parallel(_site(1e-2), _Pool(), 2)[0]
    assert not schedule._wants_parallel(_site(1.0), _Pool(n_workers=1), 10)[0]


def test_break_even_follows_work_over_workers_plus_dispatch():
    # 4 chunks of 30 ms on a backend costing 12 ms a call: 120 ms inline against about
    # 60 + 12 ms in parallel, so parallel (the old rule kept this inline)
    dask_like = _Pool()
    dask_like.call_cost, dask_like.dispatch_cost = 10e-3, 2e-3
    assert schedule._wants_parallel(_site(0.030), dask_like, 4)[0]
    assert not schedule._wants_parallel(_site(0.005), dask_like, 4)[0]  # 20 ms: not worth 12


def test_workers_not_up_count_their_start_up_and_are_started_for_next_time():
    cold = _Pool(ready=False)
    parallel, why = schedule._wants_parallel(_site(0.050), cold, 8)  # 0.4 s of work, 1 s start-up
    assert not parallel and cold.started and "starting" in str(why)
    heavy = _Pool(ready=False)
    assert schedule._wants_parallel(_site(1.0), heavy, 8)[0]  # 8 s of work pays for start-up
    tiny = _Pool(ready=False)
    assert not schedule._wants_parallel(_site(1e-5), tiny, 8)[0] and not tiny.started



class _CountsReady(_Pool):
    def ready(self):
        self.asked = getattr(self, "asked", 0) + 1
        return self._ready


@pytest.mark.parametrize("ready", [True, False])
def test_work_below_a_call_s_cost_is_decided_without_asking_whether_workers_are_up(ready, caplog):
    """Half of what any parallel call costs cannot pay (issue 9: asking a process pool
    whether it is up took a lock, twice, on every tiny call); the DEBUG log still gets
    the estimate, and the decisions agree."""
    quiet, logged = _CountsReady(ready=ready), _CountsReady(ready=ready)
    tiny = _site(0.4 * quiet.call_cost / 10)  # 10 chunks: 0.4 of a call's cost
    assert not schedule._wants_parallel(tiny, quiet, 10)[0]
    assert getattr(quiet, "asked", 0) == 0 and not quiet.started
    with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
        parallel, why = schedule._wants_parallel(tiny, logged, 10)
    assert not parallel and logged.asked and "est." in str(why) and not logged.started
    heavier = _CountsReady(ready=ready)
    schedule._wants_parallel(_site(0.7 * heavier.call_cost / 10), heavier, 10)
    assert heavier.asked  # above half a call's cost: estimated as before

def _loop_timed_next(site, cpu_seconds, wall_seconds, n=10):
    """The call after a parallel run whose loss would send the site inline: it runs
    inline, timed."""
    site.calls += 1
    parallel, why = schedule._wants_parallel(site, _Pool(), n)
    assert not parallel and "timing a loop" in str(why)
    site.record_inline(cpu_seconds=cpu_seconds, n=n, wall_seconds=wall_seconds)


def test_two_lost_parallel_calls_in_a_row_send_the_call_site_inline_with_retries():
    site = _site(0.010)  # a loop: 100 ms for 10 chunks
    site.record_parallel(wall=5.0, cpu_seconds=0.2, n=10, first_on_workers=True)  # no verdict
    assert site.losses == 0
    site.record_parallel(wall=0.150, cpu_seconds=0.2, n=10, first_on_workers=False)  # lost once
    assert site.losses == 1 and not site.time_a_loop
    site.record_parallel(wall=0.060, cpu_seconds=0.12, n=10, first_on_workers=False)  # won
    assert site.losses == 0
    site.record_parallel(wall=0.110, cpu_seconds=0.2, n=10, first_on_workers=False)
    site.record_parallel(wall=0.110, cpu_seconds=0.2, n=10, first_on_workers=False)
    assert site.losses == 1 and site.time_a_loop  # a second loss: a loop timed next decides
    _loop_timed_next(site, 0.1, 0.1)  # and agrees
    assert site.losses == 2
    decisions = []
    for _ in range(2 * schedule.RETRY_EVERY):
        site.calls += 1
        decisions.append(schedule._wants_parallel(site, _Pool(), 10)[0])
    assert sum(decisions) == 2  # inline, but a parallel try every RETRY_EVERY calls


def test_a_site_goes_inline_only_when_a_loop_timed_right_after_agrees():
    """The machine's speed moves between calls (the small ensemble's serial gradient took
    18 ms, then 31 ms a call later): before a loss sends a call site inline, the parallel
    run is judged against a loop timed on the next call, not only against loops timed
    at another speed."""
    site = schedule._Site()
    for _ in range(3):  # loops timed while the machine ran fast: 100 ms
        site.record_inline(cpu_seconds=0.10, n=10, wall_seconds=0.10)
    site.record_parallel(wall=0.13, cpu_seconds=0.2, n=10, first_on_workers=False)
    site.record_parallel(wall=0.13, cpu_seconds=0.2, n=10, first_on_workers=False)
    assert site.losses == 1 and site.time_a_loop  # not yet two
    _loop_timed_next(site, 0.17, 0.18)  # the machine slowed down: that loop took 180 ms
    assert site.losses == 0 and site.suspect is None  # 130 ms in parallel won
    site.record_parallel(wall=0.30, cpu_seconds=0.2, n=10, first_on_workers=False)
    site.record_parallel(wall=0.30, cpu_seconds=0.2, n=10, first_on_workers=False)
    site.record_parallel(wall=0.10, cpu_seconds=0.2, n=10, first_on_workers=False)  # "always": won
    assert site.losses == 0 and site.suspect is None  # nothing left to judge
    site.record_parallel(wall=0.30, cpu_seconds=0.2, n=10, first_on_workers=False)
    site.record_parallel(wall=0.30, cpu_seconds=0.2, n=10, first_on_workers=False)
    _loop_timed_next(site, 0.17, 0.18)  # slower than the loop timed right after it: lost
    assert site.losses == 2
    site.calls += 1
    assert not schedule._wants_parallel(site, _Pool(), 10)[0]


def test_an_unclear_gain_is_judged_against_a_timed_loop():
    site = _site(0.010, inline=False)  # from chunk 0 of a first call
    site.record_parallel(wall=0.11, cpu_seconds=0.2, n=10, first_on_workers=False)  # 1.8x: clear
    assert not site.time_a_loop and site.losses == 0
    site.record_parallel(wall=0.17, cpu_seconds=0.2, n=10, first_on_workers=False)  # 1.2x: unclear
    assert site.time_a_loop and site.chunk_seconds == pytest.approx(0.02)
    _loop_timed_next(site, 0.15, 0.15)  # the loop: 15 ms a chunk, 150 ms in all
    site.record_parallel(wall=0.17, cpu_seconds=0.2, n=10, first_on_workers=False)
    assert site.losses == 1  # 170 ms in parallel against a 150 ms loop


def test_a_parallel_run_is_judged_against_the_loops_wall_clock():
    """Other jobs on the machine slow a loop and a parallel run alike: the loop's wall
    clock is the yardstick, not its CPU time (against which a busy spell counted every
    parallel run as lost and sent a 1.3x gain inline)."""
    site = schedule._Site()
    for _ in range(3):  # 10 ms of CPU a chunk, 20 ms of wall clock: a busy machine
        site.record_inline(cpu_seconds=0.10, n=10, wall_seconds=0.20)
    site.record_parallel(wall=0.15, cpu_seconds=0.2, n=10, first_on_workers=False)
    assert site.losses == 0
    site.record_parallel(wall=0.25, cpu_seconds=0.2, n=10, first_on_workers=False)
    assert site.losses == 1
    assert site.chunk_seconds == pytest.approx(0.01)  # deciding still goes by CPU time
    while site.parallel_runs % schedule.RECHECK_EVERY:  # a loop timed in a busy spell is
        site.record_parallel(wall=0.15, cpu_seconds=0.2, n=10, first_on_workers=False)
    assert site.time_a_loop  # timed again now and then


def test_chunks_report_cpu_time_not_waiting_time():
    busy = schedule._Timed(lambda i: sum(range(200_000)))
    idle = schedule._Timed(lambda i: time.sleep(0.05))
    assert busy([0])[0][1] > 0 and idle([0])[0][1] < 0.01


def test_cheap_chunks_travel_in_batches_and_every_worker_gets_some():
    assert schedule._tasks(16, 2, chunk_seconds=1e-4, dispatch_cost=1e-3) == 8  # 2 tasks
    assert schedule._tasks(16, 2, chunk_seconds=1.0, dispatch_cost=1e-3) == 2  # <= 4 a worker
    assert schedule._tasks(4, 2, chunk_seconds=1.0, dispatch_cost=1e-3) == 1
    # the small ensemble's 16 chunks of 1.3 ms: 2 tasks on processes (1.25x; 8 tasks,
    # what the dispatch cost alone gave, 1.05x); on threads one a chunk, unless the
    # results are small (a task holds its chunks' results until its last chunk ends)
    assert schedule._tasks(16, 2, chunk_seconds=1.3e-3, dispatch_cost=5e-4) == 8
    assert schedule._tasks(16, 2, chunk_seconds=1.3e-3, dispatch_cost=5e-5, shares_memory=True) == 1
    small = schedule._SMALL_RESULTS.set(True)
    try:
        assert schedule._tasks(16, 2, chunk_seconds=1.3e-3, dispatch_cost=5e-5, shares_memory=True) == 8
    finally:
        schedule._SMALL_RESULTS.reset(small)


def _burn(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        np.sqrt(np.arange(100.0))


def _busy_pid(i):
    _burn(0.03)
    return os.getpid()


def test_the_first_call_of_a_call_site_sends_heavy_work_to_the_workers(processes, monkeypatch):
    """No earlier call has taught the schedule anything: chunk 0 runs inline, timed, and
    the rest of the same call goes to the (started) process pool."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    schedule.forget()
    ex = processes
    ex.map(abs, [1, 2])  # the pool is up, as after a first call
    pids = ad.pmap(_busy_pid, list(range(8)), executor=ex, chunk_size=1)
    # the caller runs a share of the rest too, beside the workers
    assert pids[0] == os.getpid() and set(pids[1:]) - {os.getpid()}


def _slower_in(parent, i):
    _burn(0.02 if os.getpid() == parent else 0.004)
    return os.getpid()


def test_the_caller_takes_fewer_chunks_where_they_run_slower_in_it(processes):
    """The caller's share follows the paces the runs showed: chunks 5x slower in the
    caller than on a worker leave it far fewer than an even share, the same results."""
    schedule.forget()
    n, parent = 12, os.getpid()
    counts = []
    for _ in range(4):
        pids = ad.pmap(functools.partial(_slower_in, parent), list(range(n)), executor=processes, chunk_size=1,
                       dispatch="always")
        counts.append(pids.count(parent))
    parties = schedule._parties(processes)
    assert counts[0] == n // parties, counts  # an even share until a run has shown the paces
    # balanced at 20 ms against 4 ms a chunk: 2 of 12 for the caller beside one worker
    assert 1 <= counts[-1] <= n // parties - 2, counts


def test_tiny_work_stays_inline_on_its_first_call(processes, monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    schedule.forget()
    pids = ad.pmap(lambda i: os.getpid(), list(range(8)), executor=processes, chunk_size=1)
    assert set(pids) == {os.getpid()}


def test_each_phase_logs_where_it_ran_and_why(caplog, monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    schedule.forget()
    models = [np.full(3, float(i)) for i in range(4)]

    def loss(w):
        return np.sum(w ** 2)

    with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
        ad.gradient(lambda ms: ad.psum(loss, ms, executor="serial"), models)
        ad.psum(loss, models, executor="serial", dispatch="always")
    lines = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert len(lines) == 2, lines  # scalar f: one forward phase carries the gradients
    assert lines[0].startswith("psum forward of test_each_phase_logs_where_it_ran_and_why.<locals>.loss (test_schedule.py:")
    assert "called at test_schedule.py:" in lines[0] and "4 chunks" in lines[0] and "inline" in lines[0]
    assert "4 chunks on serial:1" in lines[1] and "dispatch='always'" in lines[1]


def test_results_do_not_depend_on_where_chunks_ran():
    models = [np.array([0.1 * i, -0.2, 0.3]) for i in range(9)]
    x = np.array([1.0, 0.5, -2.0])

    def grad(executor, dispatch):
        return ad.gradient(lambda x: ad.psum(lambda w, x: np.sum(np.sin(w * x)) ** 2, models, x,
                                             executor=executor, chunk_size=2, dispatch=dispatch), x)[0]

    inline = grad("serial", "auto").tobytes()
    threads = executors.resolve("threads", n_workers=2)
    assert grad(threads, "always").tobytes() == inline
    assert grad(threads, "auto").tobytes() == inline
    with executors.config(dispatch="always"):
        assert grad(threads, None).tobytes() == inline


def test_dispatch_choices_are_checked(monkeypatch):
    with pytest.raises(ValueError, match="psum: dispatch='sometimes' is not valid: use one of 'auto', 'always'"):
        ad.psum(np.sin, [1.0], dispatch="sometimes")
    with pytest.raises(ValueError, match="dispatch='sometimes' is not valid"):
        with executors.config(dispatch="sometimes"):
            pass
    monkeypatch.setenv("ADRULES_DISPATCH", "bogus")
    with pytest.raises(ValueError, match="ADRULES_DISPATCH='bogus' is not valid: use one of 'auto', 'always'"):
        ad.psum(np.sin, [1.0])


def test_one_slow_inline_run_does_not_move_the_estimate():
    site = schedule._Site()
    for cpu in (0.010, 0.011, 0.080, 0.010):  # the third run was slowed down 8x
        site.record_inline(cpu_seconds=cpu, n=10, wall_seconds=cpu)
        assert site.chunk_seconds <= 0.0011
    site.record_inline(cpu_seconds=0.09, n=10, wall_seconds=0.09)  # the work itself grew: two runs say so
    site.record_inline(cpu_seconds=0.09, n=10, wall_seconds=0.09)
    assert site.chunk_seconds == pytest.approx(0.009)


def _stamped(i):
    """Where element ``i`` ran (process, thread) and when (a first call's chunk 0 runs
    ~3x longer)."""
    start = time.time()
    _burn(0.06 if i == 0 else 0.02)
    return os.getpid(), threading.current_thread().name, start, time.time()


def test_a_first_call_sends_the_next_chunks_to_the_workers_while_chunk_0_runs(processes, monkeypatch):
    """Workers idle while chunk 0 was timed cost a heavy first call up to a third: as soon
    as chunk 0's time so far shows the rest would gain, the rest goes to the workers."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    schedule.forget()
    processes.map(abs, [1, 2])  # the pool is up
    out = ad.pmap(_stamped, list(range(8)), executor=processes, chunk_size=1)
    (pid0, _, _, end0), (pid1, _, start1, _) = out[0], out[1]
    assert pid0 == os.getpid() and pid1 != os.getpid() and start1 < end0
    assert all(pid != os.getpid() for pid, _, _, _ in out[1:])  # the rest: 14 ms of work


def _stamped_heavy_0(i):
    start = time.time()
    _burn(1.0 if i == 0 else 0.005)
    return os.getpid(), start, time.time()


def test_a_first_call_on_dask_sends_the_rest_while_chunk_0_runs(monkeypatch):
    """The probe's map runs from a helper thread: on a Dask client too."""
    pytest.importorskip("distributed")
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    with executors.DaskExecutor(n_workers=2, silence_logs=logging.CRITICAL) as ex:
        ex.map(abs, [1, 2])  # up
        schedule.forget()
        out = ad.pmap(_stamped_heavy_0, list(range(8)), executor=ex, chunk_size=1)
    (pid0, _, end0), rest = out[0], out[1:]
    assert pid0 == os.getpid()
    assert all(pid != os.getpid() and start < end0 for pid, start, _ in rest)


def _long_gradient_after_a_failing_chunk_0(i):
    """Chunk 0 fails after 0.3 s; the others differentiate 10 s of small operations."""
    if i == 0:
        _burn(0.3)
        raise ValueError("chunk 0 failed")
    def f(w):
        h, end = w, time.monotonic() + 10.0
        while time.monotonic() < end:
            h = np.tanh(h * w + 0.1 * (h @ w))
        return np.sum(h)
    return ad.gradient(f, np.ones(3))[0]


@pytest.mark.parametrize("backend", ["processes", "dask"])
def test_a_first_call_whose_chunk_0_fails_stops_the_chunks_sent_meanwhile(backend, processes, monkeypatch):
    """The probe sent the other chunks while chunk 0 ran; chunk 0 failed: the call
    raises its error once they stopped, at their next operation, not after a chunk (10 s
    here; Ctrl-C on Dask waited as long), and the executor is free at once."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    if backend == "dask":
        pytest.importorskip("distributed")
        ex = executors.DaskExecutor(n_workers=2, silence_logs=logging.CRITICAL)
    else:
        ex = processes
    try:
        ex.map(abs, [1, 2])  # up
        schedule.forget()
        t0 = time.monotonic()
        with pytest.raises(ValueError, match="chunk 0 failed"):
            ad.pmap(_long_gradient_after_a_failing_chunk_0, list(range(4)), executor=ex, chunk_size=1)
        assert ex.map(abs, [-1, -2]) == [1, 2]
        assert time.monotonic() - t0 < 4.0
    finally:
        if backend == "dask":
            ex.close()


def test_a_first_call_on_threads_runs_one_chunk_per_worker_to_time_them(monkeypatch):
    """Not chunk 0 inline: a cold chunk in the calling thread costs ~2x one on a pool
    thread. Tiny work pays one round trip to the pool on its first call only."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    main = threading.current_thread().name
    with executors.ThreadExecutor(2) as ex:
        schedule.forget()
        heavy = ad.pmap(_stamped, list(range(8)), executor=ex, chunk_size=1)
        assert all(name != main for _, name, _, _ in heavy)

        def tiny(i):
            return threading.current_thread().name

        first = ad.pmap(tiny, list(range(8)), executor=ex, chunk_size=1)
        assert main not in first[:2] and set(first[2:]) == {main}
        assert set(ad.pmap(tiny, list(range(8)), executor=ex, chunk_size=1)) == {main}


class _FailsAt:
    """Element 0 heavy, the rest light; the elements in ``bad`` raise (picklable)."""

    def __init__(self, bad):
        self.bad = bad

    def __call__(self, i):
        _burn(0.05 if i == 0 else 0.005)
        if i in self.bad:
            raise ValueError(f"element {i} is bad")
        return i


@pytest.mark.parametrize("backend", ["threads", "processes"])
@pytest.mark.parametrize("bad, raised", [({0, 1}, 0), ({1}, 1), ({1, 5}, 1), ({5}, 5)])
def test_a_first_call_raises_the_first_failing_element_and_stays_usable(bad, raised, backend,
                                                                          processes, monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    ex = processes if backend == "processes" else executors.ThreadExecutor(2)
    ex.map(abs, [1, 2])  # up
    schedule.forget()
    # side by side, the first to fail wins, as in any map: on threads chunks 0 and 1; on
    # processes each worker's one task (chunks 1-4 and 5-7)
    if backend == "threads" and raised < 2:
        first = "[01]"
    elif backend == "processes" and bad == {1, 5}:
        first = "[15]"
    else:
        first = raised
    with pytest.raises(ValueError, match=f"element {first} is bad"):
        ad.pmap(_FailsAt(bad), list(range(8)), executor=ex, chunk_size=1)
    assert ex.map(abs, [-1, -2]) == [1, 2]


def test_a_probed_first_call_gives_the_bits_of_a_serial_one(monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    rng = np.random.default_rng(0)
    models = [rng.standard_normal(40) for _ in range(7)]
    x = rng.standard_normal(40)

    def loss(w, x):
        _burn(0.06)  # heavy enough for the probe on processes (Dask's: the test above)
        return np.sum(np.tanh(w * x)) ** 2 + np.sum(np.sin(w)) * np.sum(x ** 3)

    def grads(executor):
        schedule.forget()
        return ad.value_and_gradient(
            lambda ms, x: ad.psum(loss, ms, x, executor=executor, chunk_size=1), models, x)

    (v0, (gm0, gx0)) = grads("serial")
    pytest.importorskip("distributed")
    with executors.ThreadExecutor(2) as ex, executors.ProcessExecutor(2) as pex, \
            executors.DaskExecutor(n_workers=2, silence_logs=logging.CRITICAL) as dex:
        pex.map(abs, [1, 2])  # up
        for executor in (ex, pex, dex):
            v, (gm, gx) = grads(executor)
            assert v.tobytes() == v0.tobytes() and gx.tobytes() == gx0.tobytes()
            assert all(a.tobytes() == b.tobytes() for a, b in zip(gm, gm0))
    np.testing.assert_allclose(gx0, ad.gradient(lambda x: sum(loss(w, x) for w in models), x)[0],
                               rtol=1e-12)


def test_the_log_says_where_a_first_call_ran(caplog, processes, monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    processes.map(abs, [1, 2])  # up
    schedule.forget()
    with caplog.at_level(logging.DEBUG, logger="adrules.schedule"), executors.ThreadExecutor(2) as ex:
        ad.pmap(_stamped, list(range(6)), executor=processes, chunk_size=1)
        ad.pmap(_stamped, list(range(5)), executor=ex, chunk_size=1)
    probe, threads = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert "6 chunks, chunk 0 inline, the other 5 chunks on processes:2" in probe, probe
    assert "while it ran" in probe, probe
    assert "5 chunks, chunks 0-1 on threads:2, then 3 chunks on threads:2" in threads, threads


def test_the_first_contact_with_worker_processes_counts_on_a_first_call():
    """A one-off call of ~35 ms of work ran slower on 2 fresh-to-it processes than
    inline (unpickling f, running it cold): a call site's first call counts that in;
    heavy work still goes, and a call site called again shares it among its calls."""
    pool = _Pool()
    pool.shares_memory, pool.call_cost, pool.dispatch_cost = False, 1e-3, 5e-4
    first = _site(2.2e-3)
    first.calls = 1
    assert not schedule._wants_parallel(first, pool, 16)[0]  # 35 ms
    heavy = _site(0.050)
    heavy.calls = 1
    assert schedule._wants_parallel(heavy, pool, 8)[0]  # 400 ms
    second = _site(2.2e-3)
    second.calls = 2
    assert schedule._wants_parallel(second, pool, 16)[0]
    threads = _Pool()  # shares memory: no first contact to pay
    threads.call_cost, threads.dispatch_cost = 1e-3, 5e-4
    assert schedule._wants_parallel(first, threads, 16)[0]


def _burn_and_name(i, seconds):
    if seconds:
        _burn(seconds)
    return threading.current_thread().name


def _learnt(site, chunk_seconds, losses=0):
    """``site`` as after inline runs of ``chunk_seconds`` a chunk and ``losses`` lost
    parallel runs (what earlier calls taught it, without their timing's noise)."""
    site.chunk_seconds, site.measured_inline, site.inline_runs = chunk_seconds, True, [chunk_seconds] * 3
    site.losses, site.time_a_loop = losses, False


def test_work_that_grew_goes_to_the_workers_in_the_same_call(caplog, monkeypatch):
    """The same f on a few rows, then on the real data: the call site had learnt light
    work and lost in parallel twice (inline, retrying every 20 calls); chunk 0 of the
    heavy call shows the work grew, and the rest of that call goes to the pool."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    main = threading.current_thread().name
    with executors.ThreadExecutor(2) as ex:
        schedule.forget()
        ad.pmap(_burn_and_name, list(range(8)), 0.0, executor=ex, chunk_size=1)
        site, = schedule._sites.values()
        _learnt(site, 1e-3, losses=2)  # above what one pass takes (see the next test)
        with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
            names = ad.pmap(_burn_and_name, list(range(8)), 0.02, executor=ex, chunk_size=1)
    line = caplog.records[-1].getMessage()
    assert names[0] == main and main not in names[1:], line
    assert "the work grew), then 7 chunks on threads:2" in line, line
    assert site.chunk_seconds > 0.015  # what it learnt of the light work is gone


def test_work_that_grew_inside_a_one_pass_is_decided_anew_on_the_next_call(caplog, monkeypatch):
    """Tiny scalar psums run in one pass, which cannot stop half-way: a heavy call there
    runs inline once, and the next call times its chunk 0 alone, sees the work grew and
    sends the rest to the pool (not at once: a garbage collection in a tiny run looks the
    same, and must not send the next call to the workers)."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)

    def loss(w, seconds):
        if seconds:
            _burn(seconds)
        return w * w

    xs = [float(i) for i in range(8)]
    with executors.ThreadExecutor(2) as ex:
        schedule.forget()
        ad.gradient(lambda xs: ad.psum(loss, xs, 0.0, executor=ex, chunk_size=1), xs)
        site, = schedule._sites.values()
        _learnt(site, 1e-5)
        with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
            for _ in range(2):
                g, = ad.gradient(lambda xs: ad.psum(loss, xs, 0.02, executor=ex, chunk_size=1), xs)
    once, next_call = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert "8 chunks, inline" in once, once
    assert "the work grew), then 7 chunks on threads:2" in next_call, next_call
    assert g == [2.0 * x for x in xs]


def test_one_slow_one_pass_does_not_send_the_next_call_to_the_workers(caplog, monkeypatch):
    """A tiny one pass slowed down once (a garbage collection) is no change of work: the
    next call times chunk 0 alone, finds it tiny, and stays inline."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    slow_once = [0.02]

    def loss(w):
        if slow_once:
            _burn(slow_once.pop())
        return w * w

    xs = [float(i) for i in range(8)]
    with executors.ThreadExecutor(2) as ex:
        schedule.forget()
        ad.gradient(lambda xs: ad.psum(loss, xs, executor=ex, chunk_size=1), xs)
        site, = schedule._sites.values()
        _learnt(site, 1e-5)
        slow_once.append(0.02)
        with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
            for _ in range(3):
                ad.gradient(lambda xs: ad.psum(loss, xs, executor=ex, chunk_size=1), xs)
    lines = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert all("8 chunks, inline" in line for line in lines), lines
    assert site.chunk_seconds < 1e-3


def test_work_that_shrank_after_parallel_runs_goes_inline_on_the_next_call(monkeypatch):
    """Heavy calls taught the call site to go parallel; tiny work after them must not pay
    a dispatch on every call: the workers' clocks show the change, the next call is inline."""
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    main = threading.current_thread().name
    with executors.ThreadExecutor(2) as ex:
        schedule.forget()
        for _ in range(3):
            ad.pmap(_burn_and_name, list(range(8)), 0.01, executor=ex, chunk_size=1)
        ad.pmap(_burn_and_name, list(range(8)), 0.0, executor=ex, chunk_size=1)  # on the stale estimate
        names = ad.pmap(_burn_and_name, list(range(8)), 0.0, executor=ex, chunk_size=1)
    assert set(names) == {main}


def test_a_parallel_run_of_changed_work_is_no_verdict_on_the_loop_before():
    site = _site(0.010)  # a loop of 10 ms chunks
    site.record_parallel(wall=0.5, cpu_seconds=0.8, n=10, first_on_workers=False)  # 80 ms chunks
    assert site.losses == 0 and site.chunk_seconds == pytest.approx(0.08) and not site.measured_inline
    site = _site(0.010)
    site.record_parallel(wall=0.01, cpu_seconds=0.001, n=10, first_on_workers=False)  # 0.1 ms chunks
    assert site.losses == 0 and site.chunk_seconds == pytest.approx(1e-4)
    assert not schedule._wants_parallel(site, _Pool(), 10)[0]


def test_results_too_big_to_bring_back_keep_work_inline_on_processes_not_on_threads():
    """A dense gradient of a 95 MB shared argument from each of 8 chunks took 2.9 s on 2
    processes against 0.59 s inline, and the schedule chose processes: it counted the
    work, not bringing the results back."""
    processes = _Pool()
    processes.shares_memory, processes.bytes_per_second = False, 3e8
    heavy = _site(0.05)  # 8 chunks of 50 ms: parallel, with small results
    assert schedule._wants_parallel(heavy, processes, 8)[0]
    heavy.result_bytes = 95 * 2**20
    assert not schedule._wants_parallel(heavy, processes, 8)[0]
    assert schedule._wants_parallel(heavy, _Pool(), 8)[0]  # threads: nothing to bring back


def test_a_gradient_of_a_big_shared_argument_stays_inline_on_processes(caplog):
    A = np.random.default_rng(0).random((1_250_000, 4))  # 38 MB: its gradient is that big too
    ws = [np.full(4, 0.1 * i) for i in range(8)]

    def loss(w, A):
        return np.sum(A @ w) * 1e-6

    ex = executors.ProcessExecutor(2)
    try:
        ex.start()
        while not ex.ready():
            time.sleep(0.01)
        with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
            for _ in range(2):  # the first call (chunk 0 timed alone), then the estimate's
                (g,) = ad.gradient(lambda A: ad.psum(loss, ws, A, executor=ex, chunk_size=1), A)
    finally:
        ex.close()
    np.testing.assert_allclose(g, np.broadcast_to(sum(ws) * 1e-6, A.shape))
    lines = [r.getMessage() for r in caplog.records if "psum forward" in r.getMessage()]
    assert len(lines) == 2 and all(" on processes:2" not in line.split("(est.")[0] for line in lines), lines
