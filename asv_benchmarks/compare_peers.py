"""adrules against its peers on the same workloads, medians side by side.

    python asv_benchmarks/compare_peers.py            # full run (~5 minutes on 2 cores)
    python asv_benchmarks/compare_peers.py --quick    # a short run (fewer, shorter samples)

Peers are used when importable and skipped cleanly otherwise: HIPS autograd, PyTorch
(eager), JAX (``jit(grad(f))``, float64). "hand-written NumPy" is backprop written by
hand (``benchmarks.common.mlp_loss_and_grad``): the floor a tape should approach.

Workloads (the asv suite's, from ``benchmarks/common.py``):

* sum of squares three ways (``np.sum(x**2)``, ``np.sum(x*x)``, ``x @ x``) at n = 100,
  1e4, 1e6: gradient time, ratio to NumPy's primal;
* the marginal gradient cost per op of a 50-op elementwise chain on 10 floats
  (``(t(50) - t(1)) / 49``), ratio to a bare NumPy op;
* small (32 MLPs 16-64-1, batch 256) and heavy (16-512-1, batch 4096) ensembles
  serially: gradient time, ratio to NumPy's forward;
* the parallel ensembles: adrules ``psum`` on 2 processes / 2 threads against its
  serial psum; peers and hand-written NumPy as a user would parallelise them by hand
  (per-model gradients on a loky process pool or a thread pool, one task per worker)
  against their own serial loop.

Method: within each workload the libraries are timed in alternation (round robin over
``repeat`` rounds, each sample ``number`` calls sized to about ``budget`` seconds, one
warm-up call first), and medians are reported, so machine noise hits all alike. BLAS is
pinned to one thread (threadpoolctl, OMP_NUM_THREADS=1, torch.set_num_threads(1), XLA
single-threaded); glibc malloc is left as users have it, so every fresh big allocation
pays its page faults. ``--malloc-env`` adds a second, labelled column: adrules' times from
a second run of this script with ``MALLOC_ENV`` of common.py set (no heap trimming, no
per-array mmap) in every process. Page faults per gradient of 8 heavy models are counted
for adrules, autograd and the forward pass, each in a fresh process (``page_faults.py``).

Writes the Markdown table to ``asv_benchmarks/peers_latest.md`` and prints it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from benchmarks import common  # noqa: E402
from benchmarks.common import ensemble_loss, handwritten_ensemble_gradient, mlp_loss  # noqa: E402

# ---------------------------------------------------------------------------
# libraries
# ---------------------------------------------------------------------------

LIBS = ["adrules", "autograd", "torch", "jax"]


def load_peers():
    peers, versions = {}, {}
    import numpy
    import adrules

    versions["numpy"] = numpy.__version__
    versions["adrules"] = getattr(adrules, "__version__", "?")
    try:
        import autograd
        import autograd.numpy as anp
        from importlib.metadata import version

        peers["autograd"] = (autograd, anp)
        versions["autograd"] = version("autograd")
    except ImportError:
        pass
    try:
        import torch

        torch.set_num_threads(1)
        peers["torch"] = torch
        versions["torch"] = torch.__version__
    except ImportError:
        pass
    try:
        import jax

        jax.config.update("jax_enable_x64", True)
        jax.config.update("jax_platforms", "cpu")
        import jax.numpy as jnp

        peers["jax"] = (jax, jnp)
        versions["jax"] = jax.__version__
    except ImportError:
        pass
    return peers, versions


# ---------------------------------------------------------------------------
# per-library gradient callables (each returns a zero-argument function to time)
# ---------------------------------------------------------------------------


def grad_fns(peers, f, wrt, data=()):
    """``{lib: () -> gradient of f(wrt, *data, xp) w.r.t. wrt}`` for every library;
    ``data`` is converted to each library's arrays once, outside the timed call."""
    import numpy as np

    import adrules as ad

    fns = {"adrules": lambda: ad.gradient(lambda w: f(w, *data, np), wrt)}
    if "autograd" in peers:
        autograd, anp = peers["autograd"]
        autograd_grad = autograd.grad(lambda w: f(w, *data, anp))
        fns["autograd"] = lambda: autograd_grad(wrt)
    if "torch" in peers:
        torch = peers["torch"]
        tdata = [_to_torch(torch, a) for a in data]

        def torch_grad():
            leaf = _to_torch(torch, wrt, requires_grad=True)
            return torch.autograd.grad(f(leaf, *tdata, torch), _torch_leaves(leaf))

        fns["torch"] = torch_grad
    if "jax" in peers:
        jax, jnp = peers["jax"]
        jwrt = jax.tree_util.tree_map(jnp.asarray, wrt)
        jdata = [jax.tree_util.tree_map(jnp.asarray, a) for a in data]
        jax_grad = jax.jit(jax.grad(lambda w, *d: f(w, *d, jnp)))
        fns["jax"] = lambda: jax.block_until_ready(jax_grad(jwrt, *jdata))
    return fns


def _to_torch(torch, a, requires_grad=False):
    if isinstance(a, list):
        return [_to_torch(torch, v, requires_grad) for v in a]
    if isinstance(a, dict):
        return {k: _to_torch(torch, v, requires_grad) for k, v in a.items()}
    t = torch.from_numpy(a)
    return t.requires_grad_() if requires_grad else t


def _torch_leaves(t):
    if isinstance(t, list):
        return [leaf for v in t for leaf in _torch_leaves(v)]
    if isinstance(t, dict):
        return [leaf for v in t.values() for leaf in _torch_leaves(v)]
    return [t]


# ---------------------------------------------------------------------------
# hand-parallel per-model gradients (what users write without psum)
# ---------------------------------------------------------------------------


def autograd_chunk_grads(models, x, y):
    import autograd
    import autograd.numpy as anp

    g = autograd.grad(lambda p: mlp_loss(p, x, y, anp))
    return [g(p) for p in models]


def torch_chunk_grads(models, x, y):
    import torch

    xt, yt = torch.from_numpy(x), torch.from_numpy(y)
    out = []
    for p in models:
        pt = {k: torch.from_numpy(v).requires_grad_() for k, v in p.items()}
        loss = mlp_loss(pt, xt, yt, torch)
        out.append(dict(zip(pt, torch.autograd.grad(loss, list(pt.values())))))
    return out


def handwritten_chunk_grads(models, x, y):
    return handwritten_ensemble_gradient(models, x, y)


def split(models, n):
    k = -(-len(models) // n)
    return [models[i:i + k] for i in range(0, len(models), k)]


def hand_parallel(pool, chunk_fn, models, x, y, n_workers):
    futures = [pool.submit(chunk_fn, part, x, y) for part in split(models, n_workers)]
    return [g for f in futures for g in f.result()]


# ---------------------------------------------------------------------------
# the report
# ---------------------------------------------------------------------------


def fmt_time(t):
    if t is None:
        return "—"
    if t < 1e-3:
        return f"{t * 1e6:.1f} µs"
    if t < 1:
        return f"{t * 1e3:.2f} ms"
    return f"{t:.2f} s"


def fmt_ratio(r):
    return "—" if r is None else (f"{r:.2f}x" if r < 10 else f"{r:.0f}x")


def verdict(value, bound, at_most=True, unit=""):
    """'adrules target <= 15 µs: PASS (12.3 µs)'-style note for the ratios column."""
    if value is None:
        return f"adrules target {'≤' if at_most else '≥'} {bound}{unit}: not measured"
    ok = value <= bound if at_most else value >= bound
    shown = f"{value:.3g}{unit}"
    return f"**adrules target {'≤' if at_most else '≥'} {bound}{unit}: {'PASS' if ok else 'FAIL'}** ({shown})"


class Table:
    COLUMNS = ["adrules", "autograd", "torch", "jax", "hand-written NumPy"]

    def __init__(self):
        self.rows = []

    def add(self, workload, times, base_name, base, ratio_label, note=""):
        """``times``: {column: seconds or None}; ratios are time / base (or base / time
        for speed-ups when ``ratio_label`` starts with 'speed-up')."""
        ratios = []
        for col in self.COLUMNS:
            t = times.get(col)
            if t is None or base is None:
                continue
            b = base.get(col) if isinstance(base, dict) else base
            if b is None:
                continue
            r = (b / t) if ratio_label.startswith("speed-up") else (t / b)
            ratios.append(f"{_short(col)} {fmt_ratio(r)}")
        base_txt = fmt_time(base) if not isinstance(base, dict) else "own serial"
        text = f"{ratio_label} ({base_name} {base_txt}): " + ", ".join(ratios) if ratios else "—"
        if note:
            text += f" — {note}"
        self.rows.append([workload] + [fmt_time(times.get(c)) for c in self.COLUMNS] + [text])
        print(f"  {workload}: " + ", ".join(f"{c} {fmt_time(times.get(c))}" for c in self.COLUMNS
                                             if times.get(c) is not None), flush=True)

    def add_column(self, name, by_workload):
        """A second figure per row (``{workload: formatted time}``), before the ratios."""
        self.COLUMNS = [*self.COLUMNS, name]
        for row in self.rows:
            row.insert(len(row) - 1, by_workload.get(row[0], "—"))

    def markdown(self):
        head = ["workload", *self.COLUMNS, "ratios"]
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(lines)


def _short(col):
    return {"hand-written NumPy": "hand"}.get(col, col)


def timed(fns, repeat, budget):
    """Interleaved medians; a library whose warm-up raises is reported as missing."""
    ok, errors = {}, {}
    for name, fn in fns.items():
        try:
            fn()
        except Exception as e:  # report, do not abort the whole comparison
            errors[name] = f"{type(e).__name__}: {str(e).splitlines()[0][:120]}"
        else:
            ok[name] = fn
    times = common.interleaved_medians(ok, repeat=repeat, budget=budget) if ok else {}
    for name, err in errors.items():
        print(f"    {name} failed: {err}", flush=True)
    return times, errors


def tuned_run(quick):
    """adrules' times by workload from a run of this script with MALLOC_ENV set."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "tuned.json")
        subprocess.run([sys.executable, os.path.abspath(__file__), "--tuned-child", path,
                        *(["--quick"] if quick else [])], check=True)
        with open(path) as fh:
            return json.load(fh)


def machine_line():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores ({len(os.sched_getaffinity(0))} usable)"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short run: fewer, shorter samples")
    parser.add_argument("--malloc-env", action="store_true",
                        help="add a column of adrules' times with glibc's MALLOC_* variables set")
    parser.add_argument("--tuned-child", help=argparse.SUPPRESS)  # JSON path: the tuned run's times
    parser.add_argument("--output", default=os.path.join(HERE, "peers_latest.md"))
    args = parser.parse_args(argv)
    common.reexec_with_measurement_env(__file__, sys.argv[1:], bool(args.tuned_child))

    import adrules as ad
    import executors

    common.pin_blas()
    peers, versions = load_peers()
    repeat, budget = (3, 0.02) if args.quick else (15, 0.1)
    heavy_repeat = 3 if args.quick else 9
    started = time.perf_counter()
    load_before = os.getloadavg()[0]
    cores_before = common.available_cores(2, 0.3)
    table, errors = Table(), {}

    def record(workload, times, errs):
        for lib, err in errs.items():
            errors[f"{workload} / {lib}"] = err

    # -- sum of squares three ways ------------------------------------------------
    print("sum of squares", flush=True)
    for n in (100, 10_000, 1_000_000):
        x = common.vector(n)
        for label, f in common.SUM_OF_SQUARES.items():
            fns = grad_fns(peers, f, x)
            fns["hand-written NumPy"] = lambda x=x: 2.0 * x
            fns["primal"] = lambda f=f, x=x: f(x)
            times, errs = timed(fns, repeat, budget)
            record(f"{label} n={n:g}", times, errs)
            note = ""
            if label == "sum(x**2)" and n == 100 and times.get("adrules"):
                note = verdict(times["adrules"] * 1e6, 15, unit=" µs")
            elif label == "sum(x**2)" and n == 1_000_000 and times.get("adrules") and times.get("primal"):
                note = verdict(times["adrules"] / times["primal"], 3, unit="x primal")
            table.add(f"gradient of {label}, n={n:.0e}".replace("e+0", "e"), times, "NumPy primal",
                      times.get("primal"), "x primal", note=note)

    # -- marginal cost per op -------------------------------------------------------
    print("50-op chain", flush=True)
    x10 = common.vector(10)
    per_op = {}
    fns = {}
    for n_ops in (1, 50):
        for lib, fn in grad_fns(peers, lambda v, xp, k=n_ops: common.chain(k, xp)(v), x10).items():
            fns[(lib, n_ops)] = fn
        fns[("primal", n_ops)] = (lambda c: (lambda: c(x10)))(common.chain(n_ops))
    times, errs = timed(fns, repeat, budget / 2)
    for lib in ["primal", *LIBS]:
        if (lib, 1) in times and (lib, 50) in times:
            per_op[lib] = (times[(lib, 50)] - times[(lib, 1)]) / 49
    record("50-op chain", times, {f"{k[0]} n_ops={k[1]}": v for k, v in errs.items()})
    table.add("marginal gradient cost per elementwise op (50-op chain, 10 floats)", per_op,
              "bare NumPy op", per_op.get("primal"), "x NumPy op",
              note="; ".join(filter(None, [
                  verdict(per_op["adrules"] * 1e6 if "adrules" in per_op else None, 3.5, unit=" µs"),
                  "jax: jit fuses the chain" if "jax" in per_op else ""])))

    # -- ensembles, serial -----------------------------------------------------------
    for name, spec, rep in (("small", common.SMALL, repeat), ("heavy", common.HEAVY, heavy_repeat)):
        print(f"{name} ensemble, serial", flush=True)
        models, x, y = common.ensemble(spec)
        member = common.member_loss(spec)  # one per workload: see common.member_loss
        fns = grad_fns(peers, ensemble_loss, models, (x, y))
        fns["hand-written NumPy"] = lambda: common.handwritten_ensemble_gradient(models, x, y)
        fns["forward"] = lambda: common.ensemble_loss(models, x, y)
        fns["adrules psum serial"] = lambda: ad.gradient(
            lambda ms: ad.psum(member, ms, x, y, executor="serial"), models)
        times, errs = timed(fns, rep, budget if name == "small" else 0.0)
        record(f"{name} ensemble", times, errs)
        dims = f"{spec['n_models']} MLPs {spec['d_in']}-{spec['d_hidden']}-1, batch {spec['batch']}"
        fwd, adr, hand = times.get("forward"), times.get("adrules"), times.get("hand-written NumPy")
        table.add(f"{name} ensemble gradient, serial loop ({dims})", times, "NumPy forward", fwd,
                  "x forward", note=verdict(adr / fwd if adr and fwd else None,
                                            4 if name == "small" else 2.6, unit="x forward"))
        psum_t = {"adrules": times.get("adrules psum serial")}
        note = ""
        if name == "heavy":
            loop, ps = adr, psum_t["adrules"]
            note = "; ".join([
                verdict(ps / hand if ps and hand else None, 1.25, unit="x hand-written"),
                verdict(loop / ps if loop and ps else None, 1.1, unit="x psum (serial loop / psum)")])
        table.add(f"{name} ensemble gradient, adrules psum on the serial executor", psum_t,
                  "NumPy forward", fwd, "x forward", note=note)

    # -- page faults per gradient, 8 heavy models, fresh processes ------------------
    if not args.tuned_child:
        import page_faults

        print("page faults, 8 heavy models", flush=True)
        faults = {}
        for lib, col in (("adrules", "adrules"), ("autograd", "autograd"), ("forward", "forward")):
            if lib == "autograd" and "autograd" not in peers:
                continue
            faults[col] = page_faults.in_fresh_process(lib, 8)
        a, b = faults["adrules"]["faults"], faults.get("autograd", {}).get("faults")
        table.rows.append(["page faults per gradient, 8 heavy models (fresh process each)",
                           f"{a:.0f}", "—" if b is None else f"{b:.0f}", "—", "—", "—",
                           f"forward alone {faults['forward']['faults']:.0f}; "
                           + verdict(a / b if b else None, 1, unit="x autograd's")])
        print(f"  faults: " + ", ".join(f"{k} {v['faults']:.0f}" for k, v in faults.items()), flush=True)

    # -- ensembles, parallel on 2 workers ------------------------------------------
    import concurrent.futures

    import loky

    n_workers = 2
    proc_ex = executors.ProcessExecutor(n_workers)
    thread_ex = executors.ThreadExecutor(n_workers)
    loky_pool = loky.get_reusable_executor(max_workers=n_workers, timeout=600)
    thread_pool = concurrent.futures.ThreadPoolExecutor(n_workers)
    try:
        for name, spec, rep in (("small", common.SMALL, repeat), ("heavy", common.HEAVY, heavy_repeat)):
            print(f"{name} ensemble, {n_workers} workers", flush=True)
            models, x, y = common.ensemble(spec)
            member = common.member_loss(spec)

            def psum_grad(ex):
                return lambda: ad.gradient(
                    lambda ms: ad.psum(member, ms, x, y, executor=ex), models)

            fns = {"adrules serial": psum_grad("serial"), "adrules processes": psum_grad(proc_ex),
                   "adrules threads": psum_grad(thread_ex),
                   "hand serial": lambda: handwritten_chunk_grads(models, x, y),
                   "hand processes": lambda: hand_parallel(loky_pool, handwritten_chunk_grads,
                                                           models, x, y, n_workers),
                   "hand threads": lambda: hand_parallel(thread_pool, handwritten_chunk_grads,
                                                         models, x, y, n_workers)}
            if "autograd" in peers:
                fns.update({
                    "autograd serial": lambda: autograd_chunk_grads(models, x, y),
                    "autograd processes": lambda: hand_parallel(loky_pool, autograd_chunk_grads,
                                                                models, x, y, n_workers),
                    "autograd threads": lambda: hand_parallel(thread_pool, autograd_chunk_grads,
                                                              models, x, y, n_workers)})
            if "torch" in peers:
                fns.update({
                    "torch serial": lambda: torch_chunk_grads(models, x, y),
                    "torch processes": lambda: hand_parallel(loky_pool, torch_chunk_grads,
                                                             models, x, y, n_workers),
                    "torch threads": lambda: hand_parallel(thread_pool, torch_chunk_grads,
                                                           models, x, y, n_workers)})
            times, errs = timed(fns, rep, budget if name == "small" else 0.0)
            record(f"{name} ensemble parallel", times, errs)
            for kind in ("processes", "threads"):
                cols = {"adrules": times.get(f"adrules {kind}"),
                        "autograd": times.get(f"autograd {kind}"),
                        "torch": times.get(f"torch {kind}"),
                        "hand-written NumPy": times.get(f"hand {kind}")}
                base = {"adrules": times.get("adrules serial"),
                        "autograd": times.get("autograd serial"),
                        "torch": times.get("torch serial"),
                        "hand-written NumPy": times.get("hand serial")}
                speedup = (base["adrules"] / cols["adrules"]
                            if base["adrules"] and cols["adrules"] else None)
                note = ""
                if name == "heavy" and kind == "processes":
                    note = verdict(speedup, 1.8, at_most=False, unit="x")
                elif name == "small":  # "faster than serially": beyond noise, not a tie
                    note = verdict(speedup, 1.05, at_most=False, unit="x")
                table.add(f"{name} ensemble gradient on {n_workers} {kind} (adrules psum; peers: "
                          f"per-model gradients on a {'loky' if kind == 'processes' else 'thread'} pool)",
                          cols, "vs", base, "speed-up over own serial", note=note)
    finally:
        proc_ex.close()
        thread_ex.close()
        thread_pool.shutdown()
        loky_pool.shutdown(wait=True)

    elapsed = time.perf_counter() - started
    load_after = os.getloadavg()[0]
    cores_after = common.available_cores(2, 0.3)
    if args.tuned_child:
        with open(args.tuned_child, "w") as fh:
            json.dump({row[0]: row[1] for row in table.rows}, fh)
        return 0
    malloc = "glibc malloc untuned (the environment users have)"
    if args.malloc_env:
        tuned = tuned_run(args.quick)
        table.add_column("adrules, tuned malloc", tuned)
        malloc += ("; column 'adrules, tuned malloc': a second run with " +
                   ", ".join(f"{k}={v}" for k, v in common.MALLOC_ENV.items()))
    skipped = [lib for lib in ("autograd", "torch", "jax") if lib not in peers]
    header = [
        "# adrules vs peers",
        "",
        f"- date: {datetime.datetime.now().strftime('%Y-%m-%d %H:%M')}",
        f"- machine: {machine_line()}; Python {platform.python_version()}",
        "- versions: " + ", ".join(f"{k} {v}" for k, v in versions.items()),
        f"- run: {'--quick' if args.quick else 'full'}; medians of {repeat} interleaved samples "
        f"({heavy_repeat} for the heavy ensemble), {elapsed:.0f} s in all",
        f"- shared machine: 2 busy processes got {cores_before:.2f} cores before the run and "
        f"{cores_after:.2f} after (1-min load average {load_before:.1f} -> {load_after:.1f}); "
        "no parallel speed-up can beat that, and the parallel rows suffer most from it",
        "- BLAS/OpenMP pinned to 1 thread (threadpoolctl, OMP_NUM_THREADS=1, "
        "torch.set_num_threads(1), XLA single-threaded); " + malloc,
        "- jax column: jax.jit(jax.grad(f)), float64, compile excluded (warm-up call); XLA fuses "
        "the chain and drops dead code (the jitted gradient of sum(x**2) never computes the sum), "
        "so it can beat NumPy's primal",
        "- parallel rows: adrules psum (chunks of 2 models, its default of 16 chunks) vs its serial "
        "psum; peers and hand-written NumPy: one task of 16 models per worker on a loky process "
        "pool or a thread pool, vs the same per-model loop run serially",
    ]
    if skipped:
        header.append(f"- not importable, skipped: {', '.join(skipped)}")
    text = "\n".join(header) + "\n\n" + table.markdown() + "\n"
    if errors:
        text += "\nErrors (shown as —):\n\n" + "\n".join(f"- {k}: {v}" for k, v in errors.items()) + "\n"
    print()
    print(text)
    with open(args.output, "w") as fh:
        fh.write(text)
    print(f"written to {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
