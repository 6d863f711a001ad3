"""An ensemble's gradient steps on a Dask cluster, bitwise identical to a serial run.

``executors.DaskExecutor(n_workers=2)`` starts a ``LocalCluster`` (shut down when the
``with`` block ends); ``DaskExecutor(client=...)`` uses a ``distributed.Client`` you
already have and leaves it open. The training data are psum's shared arguments: the
executor sends them to every worker once and reuses them while they do not change, so
each step ships only the models. Needs the optional ``distributed`` package.

    pip install "adrules[dask]"
    python examples/dask_ensemble.py
"""
# requires: distributed

import time

import numpy as np

import adrules as ad
import executors

CHUNK, STEPS, LEARNING_RATE = 4, 3, 0.1
# This ensemble (~80 ms of work a step) is small for a cluster: "auto" keeps a step inline
# when its estimate says dispatching would not pay, which on a busy machine it sometimes
# does. The example is about what happens on the cluster, so it always dispatches.
DISPATCH = "always"


def mlp_loss(params, x, y):
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return np.mean((hidden @ params["w2"] - y) ** 2)


def make_ensemble(seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(4096, 8)), rng.normal(size=4096)  # 288 KiB: scattered, not inlined
    models = [{"w1": rng.normal(size=(8, 64)) / 3, "b1": np.zeros(64),
               "w2": rng.normal(size=64) / 8} for _ in range(16)]
    return models, x, y


def train(models, x, y, executor):
    """STEPS of gradient descent; returns the losses and the final models."""
    losses = []
    for _ in range(STEPS):
        total = lambda ms: ad.psum(mlp_loss, ms, x, y, executor=executor, chunk_size=CHUNK,  # noqa: E731
                                   dispatch=DISPATCH)
        loss, (grads,) = ad.value_and_gradient(total, models)
        losses.append(loss)
        models = [{k: m[k] - LEARNING_RATE * g[k] for k in m} for m, g in zip(models, grads)]
    return losses, models


def data_on_cluster(client):
    """Keys of the data the workers hold, leaving out task results ("executors-<token>-<i>")."""
    held = {key for keys in client.has_what().values() for key in keys}
    return sorted(key for key in held if not key.startswith("executors-"))


def main():
    try:
        import distributed
    except ImportError:
        raise SystemExit('dask_ensemble.py needs the optional package "distributed": '
                         'pip install "adrules[dask]"') from None

    models, x, y = make_ensemble()
    t0 = time.perf_counter()
    with executors.DaskExecutor(n_workers=2) as ex:
        print(f"LocalCluster with {ex.n_workers} workers started in {time.perf_counter() - t0:.1f} s")
        t1 = time.perf_counter()
        with distributed.get_task_stream(client=ex.client) as tasks:
            losses, trained = train(models, x, y, ex)
        print(f"{STEPS} steps in {time.perf_counter() - t1:.2f} s ({len(tasks.data)} chunk tasks "
              f"ran on the cluster), losses " + ", ".join(f"{v:.4f}" for v in losses))
        shared_keys = data_on_cluster(ex.client)
        print(f"data held on the workers after {STEPS} steps: {shared_keys} (x, y sent once)")

        # your own Client (here connected by address to the cluster started above, with its
        # TLS credentials: DaskExecutor secures the cluster it starts)
        with distributed.Client(ex.client.scheduler.address, security=ex.client.security,
                                set_as_default=False) as client:
            with executors.DaskExecutor(client=client) as mine:
                losses_mine, trained_mine = train(models, x, y, mine)
            print(f"DaskExecutor(client=...) closed; your client is still {client.status!r}")
            assert client.status == "running"
    print(f"cluster shut down: client {ex.client.status!r}")

    losses_serial, trained_serial = train(models, x, y, "serial")

    def as_bytes(losses, ms):
        return np.asarray(losses).tobytes() + b"".join(m[k].tobytes() for m in ms for k in sorted(m))

    # self-checks: bitwise identical to serial, data scattered once, gradients right
    assert as_bytes(losses, trained) == as_bytes(losses_serial, trained_serial), "dask != serial"
    assert as_bytes(losses_mine, trained_mine) == as_bytes(losses_serial, trained_serial)
    assert len(tasks.data) > 0, "no chunk ran on the cluster"
    assert len(shared_keys) == 1, f"the unchanged training data was sent more than once: {shared_keys}"
    plain = ad.gradient(lambda ms: sum(mlp_loss(m, x, y) for m in ms), models)[0]  # no psum
    step = [{k: m[k] - LEARNING_RATE * g[k] for k in m} for m, g in zip(models, plain)]
    np.testing.assert_allclose(losses_serial[1], sum(mlp_loss(m, x, y) for m in step), rtol=1e-12)
    assert losses[-1] < losses[0]
    print("bitwise identical to the serial run, and to a plain-loop gradient step")


if __name__ == "__main__":  # needed: the cluster's worker processes re-import this file
    main()
