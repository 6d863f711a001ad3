"""The gradient of an ensemble loss, sum(loss(m, x, y) for m in models), on every backend.

psum runs the forward map and the pullback of the sum on the executor you choose; the
value and the gradients are bitwise identical whichever the backend. Each backend runs in
a fresh Python process, as your script would meet it: the first call (starting the
executor's workers included), then the steady state (the median of later calls).

    python examples/ensemble.py            # serial, threads, processes, dask (if installed)
"""

import hashlib
import importlib.util
import json
import math
import os
import statistics
import subprocess
import sys
import time

import numpy as np

import adrules as ad
import executors


def mlp_loss(params, x, y):
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return np.mean((hidden @ params["w2"] - y) ** 2)


def make_ensemble(n_models=32, n_in=16, n_hidden=256, batch=2048, seed=0):
    rng = np.random.default_rng(seed)
    models = [{"w1": rng.normal(size=(n_in, n_hidden)) / np.sqrt(n_in), "b1": np.zeros(n_hidden),
               "w2": rng.normal(size=n_hidden) / np.sqrt(n_hidden)} for _ in range(n_models)]
    return models, rng.normal(size=(batch, n_in)), rng.normal(size=batch)


def usable_cores():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1


def measure(backend, workers):
    """Seconds of the first call (the executor made on the spot), the median of five later
    calls, and a digest of the result's bits; run in a fresh process by main()."""
    models, x, y = make_ensemble()
    ad.gradient(lambda ms: sum(mlp_loss(m, x, y) for m in ms), models[:2])  # tracer warmed, no psum
    start = time.perf_counter()
    make = {"serial": executors.SerialExecutor, "threads": executors.ThreadExecutor,
            "processes": executors.ProcessExecutor, "dask": executors.DaskExecutor}[backend]
    with make() if backend == "serial" else make(n_workers=workers) as ex:
        gradient = lambda: ad.value_and_gradient(lambda ms: ad.psum(mlp_loss, ms, x, y, executor=ex), models)  # noqa: E731
        value, (grads,) = gradient()
        first = time.perf_counter() - start
        times = []
        for _ in range(7):  # two warm-up calls, then five timed
            t0 = time.perf_counter()
            gradient()
            times.append(time.perf_counter() - t0)
    bits = np.asarray(value).tobytes() + b"".join(g[k].tobytes() for g in grads for k in sorted(g))
    return {"first": first, "steady": statistics.median(times[2:]), "digest": hashlib.sha256(bits).hexdigest()}


def main():
    cores = usable_cores()
    workers = min(max(cores, 2), 8)
    backends = ["serial", "threads", "processes"] + (["dask"] if importlib.util.find_spec("distributed") else [])
    print(f"cores this process may use: {cores} (load average {os.getloadavg()[0]:.1f})\n"
          f"32 MLPs 16-256-1, batch 2048; each backend in a fresh process, its first call starting its workers")
    print(f"{'backend':<14}{'first call':>12}{'steady':>10}{'steady speed-up':>17}  bitwise = serial")
    runs = {}
    for name in backends:
        out = subprocess.run([sys.executable, __file__, name, str(workers)], capture_output=True, text=True)
        if out.returncode:
            raise SystemExit(f"{name} failed:\n{out.stderr}")
        r = runs[name] = json.loads(out.stdout.splitlines()[-1])
        same = r["digest"] == runs["serial"]["digest"]
        label = name if name == "serial" else f"{name} x{workers}"
        print(f"{label:<14}{r['first'] * 1e3:>9.0f} ms{r['steady'] * 1e3:>7.0f} ms"
              f"{runs['serial']['steady'] / r['steady']:>16.2f}x  {'yes' if same else 'NO'}")
        if not same:
            raise SystemExit(f"{name} differs from serial: determinism is broken")
    serial = runs["serial"]
    gains = {name: serial["steady"] / runs[name]["steady"] for name in backends[1:]}
    wins = [f"{name} x{workers} {gain:.1f}x ({ahead(runs[name], serial)})"
            for name, gain in sorted(gains.items(), key=lambda kv: -kv[1]) if gain >= 1.1]
    print("verdict: " + (f"faster than serial once running: {', '.join(wins)}" if wins else
                         f"on {cores} core(s) no backend gains 10% over serial on this work: keep serial"))


def ahead(run, serial):
    """From which call on the backend's total time, its first call included, is below serial's."""
    extra, saved = run["first"] - serial["first"], serial["steady"] - run["steady"]
    return "ahead from the first call" if extra <= 0 else f"ahead in total from call {1 + math.ceil(extra / saved)}"

if __name__ == "__main__":
    if len(sys.argv) == 3:
        print(json.dumps(measure(sys.argv[1], int(sys.argv[2]))))
    else:
        main()
