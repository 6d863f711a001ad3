"""Where chunk work runs: the decision logic (fed with timings, so no clock is involved)
and the guarantee that results never depend on it."""

import numpy as np

import adrules as ad
import executors
from adrules import schedule


class _Pool:
    n_workers, dispatch_cost = 2, 1e-3


def _calibrated(chunk_seconds):
    est = schedule._Estimate(chunk_seconds)
    est.record(False, chunk_seconds * 10, chunk_seconds * 10, 10)  # one warm inline run
    return est


def test_tiny_work_runs_inline_and_big_work_in_parallel():
    assert not _calibrated(1e-4).wants_parallel(_Pool(), 10)   # 1 ms of work in all
    assert _calibrated(1e-3).wants_parallel(_Pool(), 16)       # 16 ms
    assert _calibrated(1e-2).wants_parallel(_Pool(), 2)
    one_worker = type("One", (), {"n_workers": 1, "dispatch_cost": 1e-3})()
    assert not _calibrated(1.0).wants_parallel(one_worker, 10)


def test_a_cold_first_estimate_is_checked_by_a_warm_inline_run():
    est = schedule._Estimate(chunk_seconds=5e-3)  # the probe: one cold chunk looked expensive
    assert not est.wants_parallel(_Pool(), 10)        # so the next call runs inline, timed
    est.record(False, wall_seconds=1e-3, cpu_seconds=1e-3, n_chunks=10)
    assert est.chunk_seconds == 1e-4 and not est.wants_parallel(_Pool(), 10)  # tiny after all


def test_two_lost_parallel_calls_in_a_row_send_the_call_site_inline_with_retries():
    est = _calibrated(0.010)                       # a loop: 100 ms for 10 chunks
    est.record(True, wall_seconds=5.0, cpu_seconds=0.200, n_chunks=10)    # cold pool: no verdict
    assert est.losses == 0
    est.record(True, wall_seconds=0.150, cpu_seconds=0.200, n_chunks=10)  # lost once
    assert est.wants_parallel(_Pool(), 10)
    est.record(True, wall_seconds=0.060, cpu_seconds=0.120, n_chunks=10)  # won: forgiven
    assert est.losses == 0
    for _ in range(2):  # contended chunks report more CPU than a loop needs: not a win
        est.record(True, wall_seconds=0.110, cpu_seconds=0.200, n_chunks=10)
    decisions = [est.wants_parallel(_Pool(), 10) for _ in range(2 * schedule.RETRY_EVERY)]
    assert sum(decisions) == 2  # inline, but a parallel try every RETRY_EVERY calls


def test_chunks_report_cpu_time_not_waiting_time():
    import time
    busy, idle = schedule._Timed(lambda i: sum(range(200_000))), schedule._Timed(lambda i: time.sleep(0.05))
    assert busy([0])[0][1] > 0 and idle([0])[0][1] < 0.01


def test_cheap_chunks_travel_in_batches_and_every_worker_gets_some():
    items = list(range(16))
    assert schedule._batches(items, 2, chunk_seconds=1e-4, dispatch_cost=1e-3) == [items[:8], items[8:]]
    assert schedule._batches(items, 2, chunk_seconds=1.0, dispatch_cost=1e-3) == [
        items[i:i + 2] for i in range(0, 16, 2)]  # heavy chunks: at most 4 tasks a worker
    assert schedule._batches(items[:4], 2, chunk_seconds=1.0, dispatch_cost=1e-3) == [[i] for i in range(4)]
    assert sum(schedule._batches(items, 4, chunk_seconds=5e-3, dispatch_cost=1e-2), []) == items


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
