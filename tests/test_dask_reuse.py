"""Shared data on Dask: sent once and reused across gradient steps (or afresh, on request),
with the same bits either way; and when the cluster starts (or starts again after close)."""

import time

import numpy as np
import pytest

import adrules as ad
import executors
from adrules._psum import schedule


def _fit(w, data):
    return np.mean((data[:, :3] @ w - data[:, 3]) ** 2)


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    monkeypatch.setenv("ADRULES_DISPATCH", "always")


def test_unchanged_shared_data_is_sent_once_and_a_changed_array_again():
    pytest.importorskip("distributed")
    rng = np.random.default_rng(0)
    data, models = rng.normal(size=(4096, 4)), [rng.normal(size=3) for _ in range(4)]
    want = ad.gradient(lambda ms: ad.psum(_fit, ms, data, executor="serial", chunk_size=2), models)[0]
    # fresh: a second executor on the same cluster (no second cluster to start), sending
    # the data afresh with every call
    with executors.DaskExecutor(n_workers=2) as ex, executors.DaskExecutor(ex.client, reuse_shared=False) as fresh:
        for step in range(3):
            got = ad.gradient(lambda ms: ad.psum(_fit, ms, data, executor=ex, chunk_size=2), models)[0]
            assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
            if step == 0:  # the data set, and the work's code if big (users' rules go with it)
                sent = ex._n_scatters
                assert sent >= 1
        assert ex._n_scatters == sent  # three steps, one transfer of the data set
        data[0, 0] += 1.0  # changed in place: must be sent again, never used stale
        got = ad.gradient(lambda ms: ad.psum(_fit, ms, data, executor=ex, chunk_size=2), models)[0]
        want = ad.gradient(lambda ms: ad.psum(_fit, ms, data, executor="serial", chunk_size=2), models)[0]
        assert ex._n_scatters == sent + 1 and all(a.tobytes() == b.tobytes() for a, b in zip(got, want))
        got = ad.gradient(lambda ms: ad.psum(_fit, ms, data, executor=fresh, chunk_size=2), models)[0]
        assert all(a.tobytes() == b.tobytes() for a, b in zip(got, want))


def test_a_closed_dask_executor_starts_afresh_on_the_next_map_as_the_pools_do():
    # it raised "this DaskExecutor is closed", also when reached by name
    # (executors.resolve("dask") caches it) after the user closed it
    pytest.importorskip("distributed")
    models = [np.full(3, float(i)) for i in range(4)]
    want = ad.psum(lambda w: np.sum(w * w), models, executor="serial")
    ex = executors.DaskExecutor(n_workers=1)
    try:
        assert ad.psum(lambda w: np.sum(w * w), models, executor=ex) == want
        first = ex.client
        ex.close()
        ex.close()
        assert not ex.ready() and ex.n_workers == 1
        assert ad.psum(lambda w: np.sum(w * w), models, executor=ex) == want
        assert ex.ready() and ex.client is not first and ex.client.status == "running"
        assert first.status == "closed"
    finally:
        ex.close()


def test_a_dask_executor_chosen_by_name_starts_its_cluster_only_for_work_or_when_asked(monkeypatch):
    # resolve("dask") started a LocalCluster (seconds, worker processes) for any psum, also one
    # of work far too small to gain on it
    pytest.importorskip("distributed")
    monkeypatch.delenv("ADRULES_DISPATCH")
    xs = [float(i) for i in range(8)]
    ex = executors.resolve("dask:2")
    try:
        assert not ex.started() and not ex.ready() and ex.n_workers == 2
        for _ in range(3):  # measured inline, then decided: not worth a cluster
            assert ad.psum(lambda x: x * x, xs, executor=ex) == sum(x * x for x in xs)
        assert not ex.started()
        ex.start()  # returns at once; the cluster starts in the background
        assert ex.started()
        assert ex.map(abs, [-1, -2]) == [1, 2]  # waits for it
        assert ex.ready() and ex.client.status == "running"
    finally:
        ex.close()


def test_a_cluster_that_fails_to_start_in_the_background_raises_its_error_at_the_next_map():
    pytest.importorskip("distributed")
    ex = executors.DaskExecutor(n_workers=1, start=False, memory_limit="lots")  # Dask cannot parse it
    try:
        ex.start()
        deadline = time.monotonic() + 60
        while not ex.ready() and time.monotonic() < deadline:  # ready: a map would not wait
            time.sleep(0.05)
        assert ex.started() and ex.ready()
        with pytest.raises(ValueError, match="Could not interpret 'lots' as a byte unit"):
            ex.map(abs, [-1])
        assert not ex.started()  # raised once; the next start tries again
    finally:
        ex.close()
