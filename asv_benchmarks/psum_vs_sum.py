"""psum against the plain Python sum it replaces, for instruction counts (callgrind):
16 MLPs 8-32-1 at batch 128, and ten scalars; ``ad.value_and_gradient`` of each.

    python asv_benchmarks/psum_vs_sum.py WHAT N [EXECUTOR]

runs two warm-up calls, then N calls of WHAT (mlp_sum, mlp_psum, sc_sum, sc_psum,
sc1_psum: psum of one scalar, its fixed cost). Per-call instructions, deterministic
whatever the machine's load:

    c() { PYTHONHASHSEED=0 valgrind --tool=callgrind --callgrind-out-file=/dev/null \\
          python asv_benchmarks/psum_vs_sum.py $1 $2 2>&1 | awk '/Collected/ {print $4}'; }
    echo $(( ($(c mlp_psum 20) - $(c mlp_psum 0)) / 20 ))

``python asv_benchmarks/psum_vs_sum.py wall ROUNDS CALLS`` times instead, alternated in
one process: each round runs CALLS calls of every case in turn (psum on serial and on
threads, the plain sums), and the ratios of the medians are printed.

Set GS=1e9 to trace every call's chunks on one tape (under valgrind chunks take ~50x
longer, which changes the time-based grouping a native run gets).
"""
import os
import sys

import numpy as np

import adrules as ad

if os.environ.get("GS"):
    from adrules._psum import policy

    policy.GROUP_SECONDS = float(os.environ["GS"])

rng = np.random.default_rng(0)
models = [{"w1": rng.normal(size=(8, 32)) / 3, "b1": rng.normal(size=32) * .1,
           "w2": rng.normal(size=32) / 6, "b2": rng.normal(size=1) * .1} for _ in range(16)]
X, Y = rng.normal(size=(128, 8)), rng.normal(size=128)
scalars = [float(v) for v in rng.normal(size=10)]
EX = sys.argv[3] if len(sys.argv) > 3 and sys.argv[1] != "wall" else "serial"


def loss(p, x, y):
    h = np.tanh(x @ p["w1"] + p["b1"])
    return np.mean((h @ p["w2"] + p["b2"] - y) ** 2)


def sq(s):
    return s * s


cases = {
    "mlp_sum": (lambda ms: sum(loss(m, X, Y) for m in ms), models),
    "mlp_psum": (lambda ms: ad.psum(loss, ms, X, Y, executor=EX), models),
    "sc_sum": (lambda xs: sum(sq(s) for s in xs), scalars),
    "sc_psum": (lambda xs: ad.psum(sq, xs, executor=EX), scalars),
    "sc1_psum": (lambda xs: ad.psum(sq, xs[:1], executor=EX), scalars),
}

def wall(rounds, calls):
    import statistics
    import time

    timed = dict(cases)
    timed.pop("sc1_psum")
    timed["mlp_psum_threads"] = (lambda ms: ad.psum(loss, ms, X, Y, executor="threads"), models)
    timed["sc_psum_threads"] = (lambda xs: ad.psum(sq, xs, executor="threads"), scalars)
    for f, arg in timed.values():
        for _ in range(3):
            ad.value_and_gradient(f, arg)
    t = {k: [] for k in timed}
    for _ in range(rounds):
        for k, (f, arg) in timed.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                ad.value_and_gradient(f, arg)
            t[k].append((time.perf_counter() - t0) / calls)
    m = {k: statistics.median(v) for k, v in t.items()}
    print(f"load {os.getloadavg()[0]:.1f}, {os.cpu_count()} cores; medians of {rounds} rounds x {calls} calls")
    for k in ("mlp_psum", "mlp_psum_threads"):
        print(f"{k} / mlp_sum: {m[k] / m['mlp_sum']:.3f}")
    for k in ("sc_psum", "sc_psum_threads"):
        print(f"{k} - sc_sum: {(m[k] - m['sc_sum']) * 1e6:.0f} µs")


if __name__ == "__main__" and sys.argv[1] == "wall":
    wall(int(sys.argv[2]), int(sys.argv[3]))
elif __name__ == "__main__":
    f, arg = cases[sys.argv[1]]
    ad.value_and_gradient(f, arg)
    ad.value_and_gradient(f, arg)
    for _ in range(int(sys.argv[2])):
        ad.value_and_gradient(f, arg)
