"""Where chunk work runs: the policy (``policy.decide``, fed with figures, so no clock
is involved), the runner driven by a clock the tests move (no busy loops), one path for
every call, the log, and real pools for what depends on them (a cold process pool)."""

import logging
import os
import sys
import time

import numpy as np
import pytest

import adrules as ad
import executors
from adrules._psum import policy, schedule
from adrules._psum.policy import GROUP_SECONDS


@pytest.fixture(autouse=True)
def fresh(monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH", raising=False)
    monkeypatch.setattr(policy, "free_cores", float)  # a quiet machine: every worker a core
    schedule.forget()
    yield
    schedule.forget()


class TickingClock:
    """CPU and wall clocks that move only when a chunk 'works' (``work(seconds)``): wall
    time at the pace of ``speedup`` chunks side by side while a pool's map runs."""

    def __init__(self):
        self.cpu_now = self.wall_now = 0.0
        self.speedup = 1.0

    def cpu(self):
        return self.cpu_now

    def wall(self):
        return self.wall_now

    def work(self, seconds):
        self.cpu_now += seconds
        self.wall_now += seconds / self.speedup


class FakePool(executors.SerialExecutor):
    """Runs its maps in the calling thread, but counts as ``n_workers`` workers with a
    fixed overhead, up or not as the test says, whose maps take that overhead, then run
    their chunks ``speedup`` times faster than inline on ``clock``; records the chunks
    each map got."""

    name = "fake"

    def __init__(self, n_workers=2, per_call=1e-3, per_task=1e-4, ready_after=0, clock=None, speedup=1.9):
        self.n_workers, self.clock, self.speedup = n_workers, clock, speedup
        self._fixed = (per_call, per_task, 0.0)
        self.ready_after, self.asked, self.starts = ready_after, 0, 0
        self.maps = []  # [[chunks of task 0], [chunks of task 1], ...] per map

    def overhead(self):
        return self._fixed

    def ready(self):
        self.asked += 1
        return self.asked > self.ready_after

    def start(self, preload=()):
        self.starts += 1

    def started(self):  # up from the first look (ready_after=0), or once started
        return self.starts > 0 or self.ready_after == 0

    def _map(self, fn, items, shared, on_done, results):
        self.maps.append([[start + k for k in range(len(chunk))] for chunk, start, _ in items])
        if self.clock is not None:  # the map's overhead passes, then its chunks run side by side
            self.clock.wall_now += self._fixed[0] + self._fixed[1] * len(items)
            self.clock.speedup = self.speedup
        try:
            super()._map(fn, items, shared, on_done, results)
        finally:
            if self.clock is not None:
                self.clock.speedup = 1.0


def _site(seconds, speedup=None, calls=0):
    site = policy.Site()
    site.seconds, site.calls = seconds, calls
    if speedup is not None:
        site.speedup, site.speedup_at = speedup, seconds
    return site


# ------------------------------------------------------------------ the policy


def test_tiny_work_runs_inline_and_heavy_work_in_parallel():
    pool = FakePool()
    assert policy.decide(_site(1e-5), pool, 10)[0] == "inline"  # 0.1 ms in all
    assert policy.decide(_site(1e-2), pool, 16)[0] == "parallel"
    assert policy.decide(_site(1.0), FakePool(n_workers=1), 16)[0] == "inline"
    assert policy.decide(_site(1.0), pool, 1)[0] == "inline"  # one chunk


def test_break_even_is_work_over_workers_plus_overhead_with_a_margin():
    # 4 chunks of 30 ms on a backend costing 12 ms a map: 120 ms inline against 60 + 12 +
    # 4 x 2 = 80 ms on two workers: 1.5x, parallel; at 10 ms a chunk, 40 against 40: inline
    dask_like = FakePool(per_call=12e-3, per_task=2e-3)
    where, why = policy.decide(_site(0.030), dask_like, 4)
    assert where == "parallel" and policy.explain(why) == "est. 120 ms inline vs 80 ms on fake"
    assert policy.decide(_site(0.010), dask_like, 4)[0] == "inline"
    assert policy.parallel_seconds(dask_like, 0.030, 4) == pytest.approx(0.080)


def test_no_estimate_yet_runs_one_chunk_first():
    assert policy.decide(policy.Site(), FakePool(), 10)[0] == "a group inline first"


def test_workers_still_starting_are_started_and_chunks_run_inline_meanwhile():
    pool = FakePool(ready_after=10)
    where, why = policy.decide(_site(1.0), pool, 8)
    assert where == "a group inline first" and "workers starting" in policy.explain(why)
    assert pool.starts == 1


def test_workers_not_started_are_started_only_for_work_that_gains_on_them_at_the_prior_cost():
    # a pool not started, expected to cost 20 ms a map and 5 ms a task until measured: 16
    # chunks of 0.5 ms (8 ms inline) cannot gain on it, 16 chunks of 10 ms can
    cold = FakePool(ready_after=10)
    cold.prior_overhead = (20e-3, 5e-3, 0.0)
    where, why = policy.decide(_site(0.5e-3), cold, 16, cores=2)
    assert where == "inline" and cold.starts == 0
    assert policy.explain(why) == "est. 8 ms inline vs 34 ms on fake once started (2 cores free): not started"
    # with the other cores busy (a loaded machine), 2 workers would share one: no gain
    assert policy.decide(_site(10e-3), cold, 16, cores=1)[0] == "inline" and cold.starts == 0
    where, why = policy.decide(_site(10e-3), cold, 16, cores=2)
    assert where == "a group inline first" and "workers starting" in policy.explain(why)
    assert cold.starts == 1
    # once started (by psum or by the user), the measured overhead decides
    assert policy.decide(_site(0.5e-3), cold, 16, cores=1)[0] == "a group inline first"  # still starting


def test_workers_start_once_the_calls_run_inline_would_have_gained_what_starting_them_costs():
    """Rent until the rent paid equals the price: a pool whose start is expected to cost
    100 ms, 8 chunks of 7.5 ms a call (60 ms inline, 30 ms on two workers: 30 ms forgone
    a call). Three calls run inline; the fourth starts it. A call deciding again (a group
    that stopped early) counts once; calls that cannot gain add nothing."""
    cold = FakePool(ready_after=10)
    cold.prior_overhead, cold.prior_start_cost = (0.0, 0.0, 0.0), 0.1
    site = _site(7.5e-3)
    for forgone in (0.03, 0.06, 0.09):
        site.calls += 1  # (schedule.run counts each call)
        where, why = policy.decide(site, cold, 8, cores=2)
        assert where == "inline" and cold.starts == 0 and site.forgone == pytest.approx(forgone)
    assert policy.explain(why) == ("est. 60 ms inline vs 30 ms on fake once started; 90 ms gained by now "
                                   "against 100 ms its start costs: not started")
    assert policy.decide(site, cold, 4, cores=2)[0] == "inline"  # the same call again: counted
    assert site.forgone == pytest.approx(0.09) and cold.starts == 0
    site.calls += 1
    assert policy.decide(site, cold, 8, cores=1)[0] == "inline"  # other work on a core: no gain
    assert site.forgone == pytest.approx(0.09) and cold.starts == 0
    site.calls += 1
    where, why = policy.decide(site, cold, 8, cores=2)
    assert where == "a group inline first" and "workers starting" in policy.explain(why)
    assert cold.starts == 1


def test_a_long_loop_loses_under_a_tenth_to_parallel_runs_that_do_not_pay():
    """A backend the model favours (1 ms a map) that runs chunks at half the inline speed:
    the site goes inline once it measured that, and retries rarely enough that the loop
    takes less than 10% longer than inline throughout."""
    pool = FakePool(clock=TickingClock(), speedup=0.5)
    clock, n_calls, chunk = pool.clock, 400, 0.01
    for _ in range(n_calls):
        _run(pool, chunk)
    assert 2 <= len(pool.maps) <= 1 + n_calls // policy.RETRY_CALLS  # it did retry
    assert clock.wall_now < 1.10 * n_calls * 8 * chunk


def test_a_parallel_run_that_did_not_pay_sends_the_site_inline_until_it_is_retried():
    pool = FakePool()
    assert policy.decide(_site(1e-2, speedup=1.1), pool, 16)[0] == "inline"
    assert policy.decide(_site(1e-2, speedup=1.9), pool, 16)[0] == "parallel"
    retried = _site(1e-2, speedup=1.1, calls=policy.RETRY_CALLS)
    assert policy.decide(retried, pool, 16)[0] == "parallel"  # the model again
    grown = _site(1e-2, speedup=1.1)
    grown.seconds = 5e-2  # the work grew 5x since: the speed-up measured on other work
    assert policy.decide(grown, pool, 16)[0] == "parallel"


def test_asking_the_serial_executor_to_start_workers_says_it_has_none():
    with pytest.raises(ValueError, match=r"SerialExecutor\.start: the serial executor has no workers to start.*"
                                         r'executors\.resolve\("processes:2"\)\.start\(\)'):
        executors.resolve("serial").start()


def test_dispatch_always_sends_every_chunk_and_its_choices_are_checked(monkeypatch):
    assert policy.decide(policy.Site(), FakePool(n_workers=1), 1, dispatch="always")[0] \
        == "parallel"
    with pytest.raises(ValueError, match="psum: dispatch='sometimes' is not valid: use one of 'auto', 'always'"):
        ad.psum(np.sin, [1.0], dispatch="sometimes")
    monkeypatch.setenv("ADRULES_DISPATCH", "bogus")
    with pytest.raises(ValueError, match="ADRULES_DISPATCH='bogus' is not valid: use one of 'auto', 'always'"):
        ad.psum(np.sin, [1.0])


def test_cheap_chunks_travel_in_batches_and_every_worker_gets_as_many():
    sizes = [len(b) for b in policy.batches(16, 2, t=1e-4, per_task=1e-4)]  # 10 chunks a task
    assert sizes == [8, 8]
    sizes = [len(b) for b in policy.batches(13, 2, t=1e-3, per_task=2e-4)]
    assert sum(sizes) == 13 and len(sizes) % 2 == 0 and max(sizes) - min(sizes) <= 1
    assert [len(b) for b in policy.batches(3, 8, t=1e-6, per_task=1.0)] == [1, 1, 1]
    assert [len(b) for b in policy.batches(16, 2, t=1e-6, per_task=1.0, one_each=True)] == [1] * 16
    assert policy.group_size(1e-4) == 50 and policy.group_size(0.1) == 1  # 5 ms a tape


def test_a_group_stops_once_its_time_ran_out_and_runs_one_item_at_least(monkeypatch):
    """The group contract (policy.py): every chunk function, jacobian's columns too."""
    reads = iter(np.arange(100) * 0.6 * GROUP_SECONDS)  # each read of the clock: 0.6 budgets on
    now = [0.0]
    monkeypatch.setattr(policy, "_group_clock", lambda: now.__setitem__(0, next(reads)) or now[0])
    monkeypatch.setattr(policy, "_group_cpu", lambda: now[0])  # CPU time as the wall clock's
    assert schedule.PerItem(lambda x, k: k * x)(list(range(5)), 10) == [0, 10]  # reads at 0, 0.6, 1.2
    reads = iter(np.arange(100) * 2.0 * GROUP_SECONDS)
    assert schedule.PerItem(abs)([-3, -4]) == [3]  # heavier than the budget: one item


# ------------------------------------------------------- the runner, on a clock


def _run(pool, seconds, n=8, **kw):
    """A call of ``n`` chunks of ``seconds`` each; returns the chunks it ran inline."""
    clock, maps = pool.clock, len(pool.maps)
    pool.seconds = seconds
    if not hasattr(pool, "chunk"):  # one function: a call site is the same function's calls
        def chunk(group):  # as the chunk runner does: a group stops once it took GROUP_SECONDS
            out, t0 = [], clock.cpu()
            for i in group:
                if out and clock.cpu() - t0 > GROUP_SECONDS:
                    break
                clock.work(pool.seconds)
                out.append(i * i)
            return out
        pool.chunk = chunk
    got = schedule.run(pool, pool.chunk, list(range(n)), key="test", clock=clock, **kw)
    assert got == [i * i for i in range(n)]
    mapped = {c for m in pool.maps[maps:] for task in m for c in task}
    return [i for i in range(n) if i not in mapped]


def test_a_first_call_times_chunk_0_inline_and_sends_heavy_rest_to_the_workers():
    pool = FakePool(clock=TickingClock())
    assert _run(pool, 0.1) == [0]
    assert pool.maps == [[[k] for k in range(1, 8)]]  # one chunk a task: 0.1 s outweighs 1e-4 s
    assert _run(pool, 0.1) == []  # the next call: every chunk to the workers at once
    assert pool.maps[-1] == [[k] for k in range(8)]


def test_tiny_work_runs_inline_on_its_first_call_and_every_call():
    pool = FakePool(clock=TickingClock())
    for _ in range(3):
        assert _run(pool, 1e-6) == list(range(8))
    assert pool.maps == []


def test_a_cold_pool_gets_the_chunks_left_once_its_workers_are_up():
    pool = FakePool(ready_after=3, clock=TickingClock())  # up at the 4th look, after chunk 3
    assert _run(pool, 0.5) == [0, 1, 2, 3]  # inline while the workers start
    assert pool.maps == [[[k] for k in range(4, 8)]] and pool.starts >= 1


def test_work_that_grew_goes_to_the_workers_in_the_same_call():
    pool = FakePool(clock=TickingClock())
    _run(pool, 1e-6)  # a smoke test on a few rows
    # the real run: the group sized for tiny work stops after chunk 0, the rest goes out
    assert _run(pool, 0.2) == [0]
    assert pool.maps == [[[k] for k in range(1, 8)]]


def test_work_that_shrank_goes_inline_on_the_next_call():
    pool = FakePool(clock=TickingClock())
    _run(pool, 0.2)
    _run(pool, 1e-6)  # decided from the last call: sent out, measured tiny there
    assert _run(pool, 1e-6) == list(range(8))


def test_results_keep_their_order_and_reach_on_result_in_chunk_order():
    pool = FakePool(clock=TickingClock())
    clock, seen = pool.clock, []
    schedule.run(pool, lambda group: [clock.work(0.1) or i for i in group], list(range(6)), key="order",
                 clock=clock,
                 on_result=lambda i, r: seen.append((i, r)) or -r)
    assert seen == [(i, i) for i in range(6)]


# ---------------------------------------------------------- one path, every call


def test_call_3_runs_no_library_function_that_call_1_did_not(monkeypatch):
    """On the serial executor every call runs the same code: one-time set-up on call 1
    is fine, a different path later is not."""
    # Calls 2 and 3 run their 8 chunks in one group, as on an idle machine. A group's length
    # follows wall time and the CPU time measured: on a busy machine a group stops early (its
    # untouched elements then get zero cotangents, a path call 1's one-chunk groups never
    # take), which says how busy the machine was, not which code the calls run.
    monkeypatch.setattr(policy, "GROUP_SECONDS", 1e9)
    models = [np.full(3, 0.1 * i) for i in range(8)]
    x = np.array([0.5, -1.0, 2.0])

    def loss(w, x):
        return np.sum(np.tanh(w * x) ** 2)

    own = tuple(os.path.dirname(m.__file__) + os.sep for m in (ad, executors))

    def called(fn):
        seen = set()

        def profile(frame, event, arg):
            if event == "call" and frame.f_code.co_filename.startswith(own):
                seen.add((frame.f_code.co_filename, frame.f_code.co_name, frame.f_code.co_firstlineno))

        sys.setprofile(profile)
        try:
            fn()
        finally:
            sys.setprofile(None)
        return seen

    call = lambda: ad.gradient(lambda ms: ad.psum(loss, ms, x, executor="serial"), models)  # noqa: E731
    first, _, third = called(call), called(call), called(call)
    assert third <= first, sorted(third - first)


# ------------------------------------------------------------------ the log


def test_each_phase_logs_where_it_ran_and_why(caplog):
    models = [np.full(3, float(i)) for i in range(4)]

    def loss(w):
        return np.sum(w ** 2)

    with caplog.at_level(logging.DEBUG, logger="adrules.schedule"):
        ad.gradient(lambda ms: ad.psum(loss, ms, executor="serial"), models)
        ad.psum(loss, models, executor="serial", dispatch="always")
    lines = [r.getMessage() for r in caplog.records if r.name == "adrules.schedule"]
    assert len(lines) == 2, lines  # scalar f: one forward phase carries the gradients
    assert lines[0].startswith("psum forward of test_each_phase_logs_where_it_ran_and_why.<locals>.loss (test_schedule.py:")
    assert "called at test_schedule.py:" in lines[0] and "4 chunks, inline (serial has 1 worker)" in lines[0]
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


# ------------------------------------------------------------ real process pools


def _heavy(i):
    a, t0 = np.full((120, 120), 0.01), time.thread_time()
    while time.thread_time() - t0 < 0.25:  # a heavy chunk: 0.25 s of CPU
        a = np.tanh(a @ a)
    return os.getpid()


def test_a_process_pool_not_started_yet_takes_the_chunks_left_once_its_workers_are_up():
    with executors.ProcessExecutor(2) as ex:
        assert not ex.ready()
        pids = ad.pmap(_heavy, list(range(16)), executor=ex, chunk_size=1)
    assert pids[0] == os.getpid()  # chunk 0 timed inline while the workers start
    assert pids[-1] != os.getpid()  # the last chunks on the workers, once up
    inline = [p == os.getpid() for p in pids]
    assert inline == sorted(inline, reverse=True)  # inline first, then the workers


def test_tiny_work_starts_no_workers_and_start_starts_them_at_once():
    with executors.ProcessExecutor(2) as ex:
        for _ in range(3):
            assert ad.psum(lambda x: x * x, [1.0, 2.0, 3.0], executor=ex) == 14.0
        assert not ex.started() and not ex.ready()
        ex.start()
        assert ex.started()
        deadline = time.monotonic() + 60
        while not ex.ready() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert ex.ready()
