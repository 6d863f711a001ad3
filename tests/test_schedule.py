"""Where chunk work runs: the decision logic (fed with timings, so no clock is involved)
and the guarantee that results never depend on it."""

import numpy as np

import adrules as ad
import executors
from adrules import schedule


def test_a_confirmed_loss_sends_the_call_site_inline_and_retries_later():
    est = schedule._Estimate(chunk_seconds=0.010)  # serial: 10 ms a chunk, 100 ms for 10
    assert est.wants_parallel()
    est.record(True, 0.500, 10)            # first parallel run: warm-up, no verdict
    assert est.state == "parallel"
    est.record(True, 0.060, 10)            # parallel pays
    assert est.state == "parallel"
    est.record(True, 0.150, 10)            # looks slower: check with a serial run
    assert est.state == "verify-serial" and not est.wants_parallel()
    est.record(False, 0.200, 10)           # fresh serial estimate: 20 ms a chunk
    assert est.chunk_seconds == 0.020 and est.state == "verify-parallel" and est.wants_parallel()
    est.record(True, 0.150, 10)            # 150 ms < 200 ms serial: parallel still pays
    assert est.state == "parallel"
    est.record(True, 0.300, 10)
    est.record(False, 0.200, 10)
    est.record(True, 0.300, 10)            # slower twice, around a serial run: lost
    assert est.state == "lost"
    decisions = [est.wants_parallel() for _ in range(2 * schedule.RETRY_EVERY)]
    assert sum(decisions) == 2             # a parallel try every RETRY_EVERY calls


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
