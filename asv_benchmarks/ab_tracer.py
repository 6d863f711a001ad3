"""The tracer at a git revision against the working tree, timed in alternation in one process.

This machine's speed moves by up to 2x within minutes (the 50-op chain's cost per op
measured 5.3 and 10.2 µs for the same code), so two runs minutes apart cannot show a 10%
change. Here both versions run side by side: ``adrules`` at REV is exported (``git
archive``) into a temporary directory as the package ``adrules_at_rev`` and imported
beside the working tree's ``adrules``; every round times each workload with both, in
alternating order, and the table gives the medians and the median of per-round ratios.

    python asv_benchmarks/ab_tracer.py            # HEAD~1 against the working tree
    python asv_benchmarks/ab_tracer.py main --rounds 21

Only the tracer's workloads (no psum): both versions share the working tree's
``executors``.
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import timeit

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


def export(rev: str, into: str) -> None:
    """``adrules`` at ``rev`` as the package ``adrules_at_rev`` under ``into``."""
    blob = subprocess.run(["git", "-C", ROOT, "archive", "--format=tar", rev, "adrules"],
                          check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(blob)) as tar:
        if sys.version_info >= (3, 12):
            tar.extractall(into, filter="data")
        else:  # our own repository's files: nothing to filter
            tar.extractall(into)
    os.rename(os.path.join(into, "adrules"), os.path.join(into, "adrules_at_rev"))


def workloads(ad, np, common):
    """name -> (callable, calls per sample)."""
    x10 = common.vector(10)
    xs = [float(v) for v in x10]
    big = np.random.default_rng(0).standard_normal(1_000_000)
    c1, c50 = common.chain(1), common.chain(50)
    models, x, y = common.ensemble(common.SMALL)
    heavy, hx, hy = common.ensemble(common.HEAVY)
    x100 = common.vector(100)
    return {
        "np.sum(x ** 2), n=100": (lambda: ad.gradient(common.sum_sq_power, x100), 500),
        "50-op chain, 10 floats": (lambda: ad.gradient(c50, x10), 100),
        "1-op chain, 10 floats": (lambda: ad.gradient(c1, x10), 500),
        "jvp of the 50-op chain": (lambda: ad.jvp(c50, (x10,), (x10,)), 100),
        "loop over 10 numbers": (lambda: ad.gradient(lambda v: sum(common.cheap_scalar(u) for u in v), xs), 300),
        "np.sum(x * x), n=1e6": (lambda: ad.gradient(lambda v: np.sum(v * v), big), 5),
        "x @ x, n=1e6": (lambda: ad.gradient(lambda v: v @ v, big), 5),
        "one small MLP (16-64-1, batch 256)": (lambda: ad.gradient(lambda p: common.mlp_loss(p, x, y), models[0]),
                                               50),
        "small ensemble (32 MLPs), gradient": (lambda: ad.gradient(
            lambda ms: common.ensemble_loss(ms, x, y), models), 5),
        "heavy ensemble (first 8 MLPs), gradient": (lambda: ad.gradient(
            lambda ms: common.ensemble_loss(ms, hx, hy), heavy[:8]), 1),
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("rev", nargs="?", default="HEAD~1", help="git revision to compare against")
    parser.add_argument("--rounds", type=int, default=11, help="rounds (each times both versions)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        export(args.rev, tmp)
        sys.path[:0] = [tmp, ROOT, os.path.join(HERE, "benchmarks")]
        import numpy as np

        import adrules
        import adrules_at_rev
        import common

        both = {"rev": workloads(adrules_at_rev, np, common), "tree": workloads(adrules, np, common)}
        times = {name: {"rev": [], "tree": []} for name in both["tree"]}
        for r in range(args.rounds):
            for name in times:
                for side in ("rev", "tree") if r % 2 else ("tree", "rev"):
                    fn, number = both[side][name]
                    fn()
                    times[name][side].append(min(timeit.repeat(fn, number=number, repeat=3)) / number)
    print(f"adrules at {args.rev} (rev) against the working tree (tree), {args.rounds} rounds, "
          f"{os.cpu_count()} cores")
    print(f"{'workload':38s} {'rev':>10s} {'tree':>10s}  tree/rev (range)")
    for name, t in times.items():
        ratios = [b / a for a, b in zip(t["rev"], t["tree"])]
        print(f"{name:38s} {_us(statistics.median(t['rev'])):>10s} {_us(statistics.median(t['tree'])):>10s}"
              f"  {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")
    per_op = {side: [(a - b) / 49 for a, b in zip(times["50-op chain, 10 floats"][side],
                                                  times["1-op chain, 10 floats"][side])]
              for side in ("rev", "tree")}
    ratios = [b / a for a, b in zip(per_op["rev"], per_op["tree"])]
    print(f"marginal cost per elementwise op (per round: (50-op - 1-op) / 49): rev "
          f"{_us(statistics.median(per_op['rev']))}, tree {_us(statistics.median(per_op['tree']))}, "
          f"tree/rev {statistics.median(ratios):.2f}x ({min(ratios):.2f}-{max(ratios):.2f})")


def _us(seconds: float) -> str:
    return f"{seconds * 1e6:.1f} µs" if seconds < 1e-3 else f"{seconds * 1e3:.2f} ms"


if __name__ == "__main__":
    main()
