"""psum gradient time against worker count, per backend, on the heavy ensemble.

    python asv_benchmarks/scaling.py [--repeat 9] [--quick] [--no-dask] [--malloc-env]

Backends: serial, threads, processes, and dask (a ``LocalCluster``, one thread per worker
process) when ``distributed`` is importable; worker counts 1 and 2. Workload: the
gradient of ``psum(mlp_loss, models, x, y)`` over 32 MLPs 16-512-1 on a batch of 4096
(``benchmarks.common.HEAVY``). Hand-written NumPy backprop of the same models is timed
alongside, serially (the reference for the serial psum) and as one task of 16 models per
worker on 2 plain loky processes: that speed-up, with no AD and no chunking, is what this
machine allows for this work right now (the 2 vCPUs may share a physical core, and other
sessions share them), i.e. the ceiling for psum's.

Every executor is created and warmed first, then the configurations are timed in
alternation (one gradient each per round, ``--repeat`` rounds) and medians reported, so
noise hits all alike. The machine is shared: each round first measures how many cores
two busy processes actually get (``common.available_cores``), and the figure reports it,
since no speed-up can beat it. BLAS is pinned to one thread; glibc malloc is left as users
have it (``--malloc-env`` sets ``benchmarks.common.MALLOC_ENV`` in every process instead,
and the figure says so).

Writes ``asv_benchmarks/scaling.csv`` and ``asv_benchmarks/scaling.png`` (needs
matplotlib: ``pip install matplotlib``, or ``pip install -e '.[plot]'``).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
os.environ.setdefault("DASK_LOGGING__DISTRIBUTED", "warning")  # no INFO lines per worker

from benchmarks import common  # noqa: E402


def require_matplotlib():
    try:
        import matplotlib
    except ImportError:
        sys.exit("scaling.py: matplotlib is needed to draw scaling.png. Install it with\n"
                 "    pip install matplotlib        (or: pip install -e '.[plot]')\n"
                 "and run this script again.")
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def configurations(with_dask):
    configs = [("serial", 1), ("threads", 1), ("threads", 2), ("processes", 1), ("processes", 2)]
    if with_dask:
        configs += [("dask", 1), ("dask", 2)]
    return configs


def dask_available():
    try:
        import distributed  # noqa: F401
    except ImportError:
        return False
    return True


def measure(configs, repeat, spec):
    import adrules as ad

    models, x, y = common.ensemble(spec)
    member = common.member_loss(spec)
    executors_ = {}
    try:
        for backend, n in configs:
            print(f"  starting {backend} x{n}", flush=True)
            executors_[(backend, n)] = common.make_executor(backend, n)

        def gradient_on(ex):
            return lambda: ad.gradient(
                lambda ms: ad.psum(member, ms, x, y, executor=ex), models)

        fns = {key: gradient_on(ex) for key, ex in executors_.items()}
        fns[("hand-written", 1)] = lambda: common.handwritten_ensemble_gradient(models, x, y)
        # the machine's ceiling for this work: hand-written backprop, one task of 16 models
        # per worker on a plain loky pool (no AD, no chunking)
        import loky

        pool = loky.get_reusable_executor(max_workers=2, timeout=600)
        halves = [models[:len(models) // 2], models[len(models) // 2:]]
        fns[("hand-written", 2)] = lambda: [g for f in [
            pool.submit(common.handwritten_ensemble_gradient, h, x, y) for h in halves]
            for g in f.result()]
        samples = {key: [] for key in fns}
        cores = []
        for key, fn in fns.items():  # warm-up on the real workload
            fn()
        for r in range(repeat):
            cores.append(common.available_cores(2, 0.2))
            for key, fn in fns.items():
                t0 = time.perf_counter()
                fn()
                samples[key].append(time.perf_counter() - t0)
            print(f"  round {r + 1}/{repeat} ({cores[-1]:.2f} cores available): " + ", ".join(
                f"{b} x{n} {samples[(b, n)][-1]:.3f}s" for b, n in fns), flush=True)
        return samples, cores
    finally:
        for ex in executors_.values():
            ex.close()
        try:
            import loky

            loky.get_reusable_executor(max_workers=2).shutdown(wait=True)
        except Exception:  # best effort
            pass


def write_csv(path, samples, cores):
    import numpy as np

    serial = float(np.median(samples[("serial", 1)]))
    hand = float(np.median(samples[("hand-written", 1)]))
    hand_speedup = hand / float(np.median(samples[("hand-written", 2)]))
    rows = []
    for (backend, n), ts in samples.items():
        med = float(np.median(ts))
        rows.append({"backend": backend, "n_workers": n, "median_s": round(med, 4),
                     "min_s": round(min(ts), 4), "max_s": round(max(ts), 4), "repeats": len(ts),
                     "speedup_vs_own_serial": round(serial / med, 3) if backend != "hand-written"
                     else round(hand / med, 3),  # hand-written rows: vs hand-written serial
                     "ratio_to_handwritten": round(med / hand, 3),
                     "available_cores_median": round(float(np.median(cores)), 2),
                     "ceiling_speedup_handwritten_2proc": round(hand_speedup, 3)})
    with open(path, "w", newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return rows


def plot(plt, path, rows, title):
    fig, (ax_t, ax_s) = plt.subplots(1, 2, figsize=(10, 4.2))
    by_backend = {}
    for r in rows:
        by_backend.setdefault(r["backend"], []).append(r)
    serial = next(r for r in rows if r["backend"] == "serial")
    hand = next(r for r in rows if r["backend"] == "hand-written" and r["n_workers"] == 1)
    ceiling = rows[0]["ceiling_speedup_handwritten_2proc"]
    offsets = {"threads": -0.03, "processes": 0.0, "dask": 0.03}  # keep error bars apart
    for backend, rs in by_backend.items():
        if backend in ("serial", "hand-written"):
            continue
        rs = sorted(rs, key=lambda r: r["n_workers"])
        ns = [r["n_workers"] + offsets.get(backend, 0.0) for r in rs]
        ax_t.plot(ns, [r["median_s"] for r in rs], marker="o", label=f"psum, {backend}")
        ax_t.vlines(ns, [r["min_s"] for r in rs], [r["max_s"] for r in rs], alpha=0.3)
        ax_s.plot(ns, [r["speedup_vs_own_serial"] for r in rs], marker="o", label=backend)
    ax_t.axhline(serial["median_s"], color="k", ls="--", lw=1, label="psum, serial executor")
    ax_t.axhline(hand["median_s"], color="gray", ls=":", lw=1.5, label="hand-written NumPy (serial)")
    ax_t.set(xlabel="workers", ylabel="seconds per gradient (median)", xticks=[1, 2],
             title="psum gradient time")
    ax_t.set_ylim(bottom=0)
    ax_t.legend(fontsize=8)
    ax_s.plot([1, 2], [1, 2], color="k", ls=":", lw=1, label="ideal")
    ax_s.axhline(1.8, color="r", ls="--", lw=1, label="target on 2 processes (1.8x)")
    ax_s.plot([2], [ceiling], marker="*", ms=12, color="gray", ls="none",
              label="hand-written NumPy on 2 loky processes\n(this machine's ceiling, now)")
    ax_s.set(xlabel="workers", ylabel="speed-up over serial psum", xticks=[1, 2],
             title="speed-up")
    ax_s.set_ylim(bottom=0)
    ax_s.legend(fontsize=8)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=9, help="timed rounds (default 9)")
    parser.add_argument("--quick", action="store_true", help="3 rounds")
    parser.add_argument("--no-dask", action="store_true", help="leave the dask backend out")
    parser.add_argument("--malloc-env", action="store_true",
                        help="set the glibc MALLOC_* variables of common.MALLOC_ENV (a tuned figure, labelled)")
    parser.add_argument("--csv", default=os.path.join(HERE, "scaling.csv"))
    parser.add_argument("--png", default=os.path.join(HERE, "scaling.png"))
    args = parser.parse_args(argv)
    plt = require_matplotlib()  # fail before the measurement, not after it
    common.reexec_with_measurement_env(__file__, sys.argv[1:], args.malloc_env)
    common.pin_blas()

    with_dask = dask_available() and not args.no_dask
    if not with_dask and not args.no_dask:
        print("distributed is not importable: dask left out (pip install distributed)")
    repeat = 3 if args.quick else args.repeat
    spec = common.HEAVY
    print(f"heavy ensemble: {spec}; {repeat} rounds", flush=True)
    load_before = os.getloadavg()[0]
    samples, cores = measure(configurations(with_dask), repeat, spec)
    load_after = os.getloadavg()[0]
    rows = write_csv(args.csv, samples, cores)
    import numpy as np

    avail = f"{np.median(cores):.2f} (min {min(cores):.2f}, max {max(cores):.2f})"

    malloc = "tuned malloc (MALLOC_* set)" if common.malloc_env_is_set() else "malloc untuned"
    cpu = "?"
    try:
        with open("/proc/cpuinfo") as fh:
            cpu = next(line.split(":", 1)[1].strip() for line in fh if line.startswith("model name"))
    except (OSError, StopIteration):
        pass
    title = (f"heavy ensemble (32 MLPs 16-512-1, batch 4096) psum gradient; medians of {repeat}; "
             f"{cpu}, {os.cpu_count()} cores; BLAS 1 thread; {malloc};\n"
             f"{datetime.datetime.now():%Y-%m-%d %H:%M}; cores available to 2 busy processes, "
             f"median of rounds: {avail}; load average {load_before:.1f} -> {load_after:.1f}")
    plot(plt, args.png, rows, title)
    print()
    print("| backend | workers | median | min | max | speed-up vs own serial (psum: serial psum; hand-written: hand-written serial) | / hand-written serial |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['backend']} | {r['n_workers']} | {r['median_s']:.3f} s | {r['min_s']:.3f} s | "
              f"{r['max_s']:.3f} s | {r['speedup_vs_own_serial']:.2f}x | {r['ratio_to_handwritten']:.2f}x |")
    print(f"\ncores available to 2 busy processes (per round): {avail}; "
          f"1-min load average: {load_before:.1f} before, {load_after:.1f} after")
    print(f"written {args.csv} and {args.png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
