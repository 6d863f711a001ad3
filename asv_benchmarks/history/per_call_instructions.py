"""One workload's gradient calls counted in instructions by callgrind, from warm-up on.

    valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file=/dev/null \\
        python asv_benchmarks/history/per_call_instructions.py WORKLOAD N     # and 3N

(PYTHONHASHSEED=0, BLAS on one thread, ``PYTHONPATH`` at the checkout to count.) The
script runs three warm-up calls uninstrumented, then turns counting on (``callgrind_control
-i on``) for N calls: (the count at 3N - the count at N) / 2N is one call. Instruction
counts do not move with the load of a shared machine, as times do; psum's counts still
move a little, as its schedule reads the clock. Workloads: ``sumsq`` (``np.sum(x ** 2)``,
n = 100), ``chain`` (the 50-op chain on 10 floats), ``small`` and ``heavy`` (the small
ensemble's gradient, the heavy ensemble's first 8 models), ``psum`` (the small ensemble's
psum gradient on the serial executor, steady state), ``chunks`` (psum's per-chunk cost: 64
floats through a trivial ``@primitive``, a chunk each, every chunk a task on the serial
executor, ``dispatch="always"``: divide a call by 64).
"""

from __future__ import annotations

import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import common  # noqa: E402

import adrules as ad  # noqa: E402


def workload(name):
    if name == "sumsq":
        x = common.vector(100)
        return lambda: ad.gradient(common.sum_sq_power, x)
    if name == "chain":
        x, chained = common.vector(10), common.chain(50)
        return lambda: ad.gradient(chained, x)
    if name in ("small", "heavy"):
        models, x, y = common.ensemble(common.SMALL if name == "small" else common.HEAVY)
        models = models if name == "small" else models[:8]
        return lambda: ad.gradient(lambda ms: common.ensemble_loss(ms, x, y), models)
    if name == "psum":
        models, x, y = common.ensemble(common.SMALL)
        loss = common.member_loss(common.SMALL)
        return lambda: ad.gradient(lambda ms: ad.psum(loss, ms, x, y, executor="serial"), models)
    if name == "chunks":
        xs = [float(i) for i in range(64)]
        return lambda: ad.gradient(lambda xs: ad.psum(_times_one, xs, executor="serial", chunk_size=1,
                                                      dispatch="always"), xs)
    raise SystemExit(f"unknown workload {name!r}: sumsq, chain, small, heavy, psum or chunks")


@ad.primitive
def _times_one(x):
    return x * 1.0


@ad.rrule.register(_times_one)
def _times_one_rrule(x):
    return _times_one(x), lambda g: (ad.NoTangent(), g * 1.0)


def main() -> None:
    name, n = sys.argv[1], int(sys.argv[2])
    fn = workload(name)
    for _ in range(3):
        fn()
    me = str(os.getpid())
    subprocess.run(["callgrind_control", "-i", "on", me], check=True, capture_output=True)
    for _ in range(n):
        fn()
    subprocess.run(["callgrind_control", "-i", "off", me], check=True, capture_output=True)


if __name__ == "__main__":
    main()
