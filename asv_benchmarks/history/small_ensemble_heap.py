"""The small ensemble's gradient over its forward pass, with and without SciPy imported first.

    python asv_benchmarks/history/small_ensemble_heap.py [--rounds 3]

Each case runs in a fresh process (BLAS on one thread, glibc malloc as users have it) and
prints the ratio (``SmallEnsembleRatio``'s measurement: the median of interleaved rounds),
then the minor page faults and ``brk`` calls of one steady-state gradient. Importing
SciPy first changes nothing the gradient computes; it changes where glibc's heap ends, and
with it whether the memory a gradient frees at its end is given back to the kernel (and
faulted in again by the next gradient). asv's benchmark process has SciPy imported by
other benchmark modules.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
BENCHMARKS = os.path.join(os.path.dirname(HERE), "benchmarks")

CASE = r"""
import sys, resource
{prelude}
sys.path.insert(0, {benchmarks!r})
import common, adrules as ad
models, x, y = common.ensemble(common.SMALL)
forward = lambda: common.ensemble_loss(models, x, y)
gradient = lambda: ad.gradient(lambda ms: common.ensemble_loss(ms, x, y), models)
ratio = common.interleaved_speedups({{"forward": forward, "gradient": gradient}}, over="gradient",
                                    repeat=7, budget=0.05)["forward"]
gradient()
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(10):
    gradient()
faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 10
print(f"{{ratio:.2f}} {{faults:.0f}}")
"""


def run(prelude: str) -> tuple[float, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    out = subprocess.run([sys.executable, "-c", CASE.format(prelude=prelude, benchmarks=BENCHMARKS)],
                         env=env, check=True, capture_output=True, text=True).stdout.split()
    return float(out[0]), float(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    cases = {"plain script": "", "scipy.special imported first": "import scipy.special"}
    print(f"{os.cpu_count()} cores; gradient / forward, and minor page faults per gradient")
    for r in range(args.rounds):
        for name, prelude in cases.items():
            ratio, faults = run(prelude)
            print(f"round {r + 1}  {name:30s} {ratio:5.2f}x  {faults:6.0f} faults")


if __name__ == "__main__":
    main()
