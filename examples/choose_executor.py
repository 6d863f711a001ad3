"""Choosing where psum runs: per call, per block of code, or for the whole program.

Precedence: per-call ``executor=`` > ``executors.config(...)`` block > the
``ADRULES_EXECUTOR`` environment variable > the default ("threads"). Whatever the
choice, the gradients are bitwise identical for a given ``chunk_size``; the script
checks that, and re-runs itself with ``ADRULES_EXECUTOR=processes:2`` to show the
environment variable.

    python examples/choose_executor.py
    ADRULES_EXECUTOR=processes:2 python examples/choose_executor.py   # the whole program
"""

import hashlib
import os
import subprocess
import sys

import numpy as np

import adrules as ad
import executors

CHUNK = 4  # the summation order depends on chunk_size only: keep it fixed to compare bits


def loss(w, x, y):
    return np.mean((np.tanh(x @ w) - y) ** 2)


def data(seed=0):
    rng = np.random.default_rng(seed)
    x, y = rng.normal(size=(20000, 8)), rng.normal(size=20000)
    return [rng.normal(size=8) / 3 for _ in range(16)], x, y


def ensemble_gradient(models, x, y, **psum_options):
    total = lambda ms: ad.psum(loss, ms, x, y, **psum_options)  # noqa: E731
    return ad.gradient(total, models)[0]


def digest(grads):
    return hashlib.sha256(b"".join(g.tobytes() for g in grads)).hexdigest()[:16]


def child():
    """Run by the parent with ADRULES_EXECUTOR set: no argument or context names an executor."""
    models, x, y = data()
    with executors.config(chunk_size=CHUNK):  # sets only the chunk size; the variable picks the backend
        ex = executors.resolve()
        print(f"{ex.name}:{ex.n_workers} {digest(ensemble_gradient(models, x, y))}")


def main():
    models, x, y = data()
    results = {}
    for name in ("serial", "threads", "processes"):  # per call
        results[f'executor="{name}"'] = ensemble_gradient(models, x, y, executor=name, chunk_size=CHUNK)

    with executors.config(executor="threads", n_workers=2, chunk_size=CHUNK):  # per block
        print("inside config(...):", executors.resolve().name, executors.resolve().n_workers, "workers")
        results["config(threads, 2)"] = ensemble_gradient(models, x, y)
        # a per-call argument beats the block
        results["config + per-call serial"] = ensemble_gradient(models, x, y, executor="serial")
        assert executors.resolve("serial").name == "serial"

    env = dict(os.environ, ADRULES_EXECUTOR="processes:2")  # the whole program
    out = subprocess.run([sys.executable, __file__, "--child"], env=env, capture_output=True,
                         text=True, check=True).stdout.split()
    resolved, child_digest = out[-2], out[-1]
    print("ADRULES_EXECUTOR=processes:2 -> resolve() gives", resolved)

    reference = digest(results['executor="serial"'])
    for label, grads in results.items():
        print(f"{label:<26} gradient digest {digest(grads)}")
    print(f"{'ADRULES_EXECUTOR':<26} gradient digest {child_digest}")

    # self-check: every route gives the same bits ...
    assert resolved == "processes:2", resolved
    assert all(digest(g) == reference for g in results.values()), "executors disagree"
    assert child_digest == reference, "the ADRULES_EXECUTOR run disagrees"
    # ... and they are right: the hand-derived gradient of mean((tanh(x @ w) - y)^2)
    for w, g in zip(models, results['executor="processes"']):
        t = np.tanh(x @ w)
        np.testing.assert_allclose(g, 2 / len(y) * x.T @ ((t - y) * (1 - t ** 2)), rtol=1e-10, atol=1e-14)
    print("all bitwise identical, and equal to the hand-derived gradient")


if __name__ == "__main__":
    child() if sys.argv[1:] == ["--child"] else main()
