"""Dask's TLS settings pass through DaskExecutor (a real LocalCluster over TLS)."""

import numpy as np
import pytest

import adrules as ad
import executors


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")


def test_local_cluster_over_tls_gives_the_serial_answer():
    pytest.importorskip("distributed")
    models = [np.array([0.5, -1.0]), np.array([2.0, 0.1]), np.array([-0.3, 0.7])]
    x = np.array([1.0, -2.0])

    def total(x, executor):
        return ad.psum(lambda w, x: np.sum(np.tanh(w * x)) ** 2, models, x, executor=executor, chunk_size=1)

    want = ad.value_and_gradient(lambda x: total(x, "serial"), x)
    with executors.DaskExecutor(n_workers=1, security=True) as ex:
        assert ex.client.scheduler.address.startswith("tls://")
        got = ad.value_and_gradient(lambda x: total(x, ex), x)
    assert np.asarray(got[0]).tobytes() == np.asarray(want[0]).tobytes()
    assert got[1][0].tobytes() == want[1][0].tobytes()
