"""psum as a user's script meets it: the first gradient call in a fresh process, and the
steady state after it, per backend, side by side.

    python asv_benchmarks/first_call.py [--repeat 3] [--workload heavy|small|deep|both]

Each measurement is a fresh ``python`` process with nothing tuned (no MALLOC_*
variables; BLAS on one thread, as every figure of this project): it builds the ensemble,
makes its executor (a process pool is started and waited for first: "pool already
started"), times the first gradient of ``psum(loss, models, x, y)`` — a call site the
schedule has never seen — then the median of five more calls. Backends alternate across
repeats so load from other jobs hits them alike; the table gives medians over repeats
and speed-ups over the serial psum, and how many cores two busy processes got.

Beside them, the gradient of the plain Python loop ``sum(loss(m, x, y) for m in models)``
with BLAS as NumPy comes (as many threads as cores): what a user compares psum with.
psum pins BLAS to one thread inside chunk work on every backend, serial included (the
same bits everywhere), so where BLAS calls dominate, the loop runs faster than the
serial psum, and psum's gain over the loop is smaller than over the serial psum.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
BACKENDS = ["serial", "threads:2", "processes:2"]
LOOP = "loop, BLAS default"


def one(backend, workload):
    """Runs in the fresh process: print {"first": s, "steady": s}."""
    sys.path.insert(0, HERE)
    from benchmarks import common

    import adrules as ad
    import executors

    spec = {"heavy": common.HEAVY, "small": common.SMALL, "deep": common.DEEP}[workload]
    models, x, y = common.ensemble(spec)
    loss = common.member_loss(spec)
    if backend == LOOP:
        def step():
            return ad.gradient(lambda ms: sum(loss(m, x, y) for m in ms), models)
    else:
        name, _, n = backend.partition(":")
        ex = executors.resolve(name, int(n) if n else None)
        if not ex.ready():
            ex.start(preload=("adrules",))
            while not ex.ready():
                time.sleep(0.01)

        def step():
            return ad.gradient(lambda ms: ad.psum(loss, ms, x, y, executor=ex), models)

    t0 = time.perf_counter()
    step()
    first = time.perf_counter() - t0
    steady = []
    for _ in range(5):
        t0 = time.perf_counter()
        step()
        steady.append(time.perf_counter() - t0)
    print(json.dumps({"first": first, "steady": statistics.median(steady)}))


_BLAS_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def measure(backend, workload):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MALLOC_", "ADRULES_"))}
    if backend == LOOP:  # BLAS as it comes: none of its variables
        env = {k: v for k, v in env.items() if k not in _BLAS_VARIABLES}
    else:
        env.update(dict.fromkeys(_BLAS_VARIABLES, "1"))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--one", backend, workload],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--workload", choices=["heavy", "small", "deep", "both"], default="both",
                        help="both: heavy and small; deep: BLAS-bound (common.DEEP)")
    parser.add_argument("--one", nargs=2, metavar=("BACKEND", "WORKLOAD"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        return one(*args.one)
    sys.path.insert(0, HERE)
    from benchmarks.common import available_cores

    workloads = ["heavy", "small"] if args.workload == "both" else [args.workload]
    cores = [available_cores()]
    for workload in workloads:
        runs = {b: [] for b in [*BACKENDS, LOOP]}
        for _ in range(args.repeat):
            for backend in runs:
                runs[backend].append(measure(backend, workload))
        cores.append(available_cores())
        first = {b: statistics.median(r["first"] for r in rs) for b, rs in runs.items()}
        steady = {b: statistics.median(r["steady"] for r in rs) for b, rs in runs.items()}
        print(f"\n{workload} ensemble gradient, fresh process each, medians of {args.repeat}; "
              "speed-ups over the serial psum and over the loop")
        print(f"{'':18s} {'first call':>12s} {'/serial':>8s} {'/loop':>6s} "
              f"{'steady':>10s} {'/serial':>8s} {'/loop':>6s}")
        for backend in runs:
            print(f"{'psum ' + backend if backend != LOOP else backend:18s} "
                  f"{first[backend] * 1e3:9.1f} ms {first['serial'] / first[backend]:7.2f}x "
                  f"{first[LOOP] / first[backend]:5.2f}x {steady[backend] * 1e3:7.1f} ms "
                  f"{steady['serial'] / steady[backend]:7.2f}x {steady[LOOP] / steady[backend]:5.2f}x")
    print(f"\ncores two busy processes got during the run: {', '.join(f'{c:.2f}' for c in cores)}")


if __name__ == "__main__":
    main()
