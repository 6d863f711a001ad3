"""Where chunk work runs: the decision logic (fed with timings, so no clock is involved)
and the guarantee that results never depend on it."""

import numpy as np

import adrules as ad
import executors
from adrules import schedule


class _Pool:
    n_workers, dispatch_cost = 2, 1e-3


def test_tiny_chunks_run_inline_and_big_ones_in_parallel():
    assert not schedule._Estimate(chunk_seconds=1e-4).wants_parallel(_Pool())
    assert schedule._Estimate(chunk_seconds=1e-2).wants_parallel(_Pool())
    one_worker = type("One", (), {"n_workers": 1, "dispatch_cost": 1e-3})()
    assert not schedule._Estimate(chunk_seconds=1.0).wants_parallel(one_worker)


def test_the_estimate_follows_the_last_call():
    est = schedule._Estimate(chunk_seconds=5e-3)  # a cold first chunk looked expensive
    assert est.wants_parallel(_Pool())
    est.record(True, wall_seconds=2e-3, cpu_seconds=1e-4, n_chunks=10)  # the chunks were tiny
    assert est.chunk_seconds == 1e-5 and not est.wants_parallel(_Pool())


def test_two_lost_parallel_calls_in_a_row_send_the_call_site_inline_with_retries():
    est = schedule._Estimate(chunk_seconds=0.010)
    est.record(True, wall_seconds=0.150, cpu_seconds=0.100, n_chunks=10)  # lost once
    assert est.wants_parallel(_Pool())
    est.record(True, wall_seconds=0.060, cpu_seconds=0.100, n_chunks=10)  # won: forgiven
    assert est.losses == 0
    for _ in range(2):
        est.record(True, wall_seconds=0.150, cpu_seconds=0.100, n_chunks=10)
    decisions = [est.wants_parallel(_Pool()) for _ in range(2 * schedule.RETRY_EVERY)]
    assert sum(decisions) == 2  # inline, but a parallel try every RETRY_EVERY calls


def test_chunks_report_cpu_time_not_waiting_time():
    import time
    busy, idle = schedule._Timed(lambda i: sum(range(200_000))), schedule._Timed(lambda i: time.sleep(0.05))
    assert busy(0)[1] > 0 and idle(0)[1] < 0.01


def test_results_do_not_depend_on_where_chunks_ran(monkeypatch):
    models = [np.array([0.1 * i, -0.2, 0.3]) for i in range(9)]
    x = np.array([1.0, 0.5, -2.0])

    def grad(executor):
        return ad.gradient(lambda x: ad.psum(lambda w, x: np.sum(np.sin(w * x)) ** 2, models, x,
                                             executor=executor, chunk_size=2), x)[0]

    inline = grad("serial").tobytes()
    monkeypatch.setattr(schedule, "DISPATCH_FACTOR", 0)  # everything on the pool
    assert grad(executors.resolve("threads", n_workers=2)).tobytes() == inline
    monkeypatch.setattr(schedule, "DISPATCH_FACTOR", 1e9)  # everything inline
    assert grad(executors.resolve("threads", n_workers=2)).tobytes() == inline
