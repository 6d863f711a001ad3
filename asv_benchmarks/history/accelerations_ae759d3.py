"""What each acceleration of the old psum schedule gained on the workload it existed for,
measured on that code (commit ae759d3, before the schedule became one policy):

    git worktree add --detach /tmp/old ae759d3
    PYTHONPATH=/tmp/old python asv_benchmarks/history/accelerations_ae759d3.py [--quick]

Each figure is the median of per-round ratios, the variants timed in alternation in one
process (load from other jobs hits both alike). The default environment: BLAS pinned to
one thread (as every benchmark here), no MALLOC_* settings.

- caller's share (ProcessExecutor(caller_helps=True) against False): small ensemble,
  heavy ensemble and a ~10 ms training step, psum gradient on processes:2, steady state;
- chunk-0 probe (on against off): the heavy ensemble's first call on a started pool,
  threads:2 and processes:2;
- one pass over tiny chunks (on against off): 10 cheap scalars, gradient and value, on
  threads:2 and processes:2, microseconds over a plain loop;
- the socket lane: a round trip of a 2-item map on processes:2 against loky's own
  executor (submit and result), the cost the lane exists to cut.
"""

import os
import statistics
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "benchmarks"))
import common  # noqa: E402

common.pin_blas()

import adrules as ad  # noqa: E402
import executors  # noqa: E402
from adrules import schedule  # noqa: E402

QUICK = "--quick" in sys.argv
ROUNDS = 3 if QUICK else 9


def ratio_rounds(fns, over, rounds=ROUNDS):
    """Median over rounds of time(fn) / time(over), each round timing every fn once."""
    ratios = {k: [] for k in fns if k != over}
    for _ in range(rounds):
        times = {}
        for k, fn in fns.items():
            t0 = time.perf_counter()
            fn()
            times[k] = time.perf_counter() - t0
        for k in ratios:
            ratios[k].append(times[over] / times[k])
    return {k: statistics.median(v) for k, v in ratios.items()}


def step_loss(p, x, y):
    return common.mlp_loss(p, x, y)


def psum_gradient(spec, ex, n=None):
    models, x, y = common.ensemble(spec)
    loss = step_loss if spec["name"] == "step" else common.member_loss(spec)
    models = models if n is None else models[:n]
    return lambda: ad.gradient(lambda ms: ad.psum(loss, ms, x, y, executor=ex), models)


def caller_share():
    print("caller's share: psum gradient on processes:2, helping over not helping (x)")
    helps, alone = executors.ProcessExecutor(2), executors.ProcessExecutor(2, caller_helps=False)
    for ex in (helps, alone):
        ex.start(preload=("adrules",))
    step = dict(common.SMALL, name="step", n_models=16, batch=512)
    for name, spec, n in (("small ensemble", common.SMALL, None), ("training step", step, None),
                          ("heavy ensemble", common.HEAVY, 16 if QUICK else None)):
        a, b = psum_gradient(spec, helps, n), psum_gradient(spec, alone, n)
        s = psum_gradient(spec, "serial", n)
        for f in (a, b, s, a, b, s, a, b):  # past the call sites' first calls
            f()
        r = ratio_rounds({"helps": a, "alone": b, "serial": s}, over="alone")
        r2 = ratio_rounds({"helps": a, "alone": b, "serial": s}, over="serial")
        print(f"  {name:15s} helps/alone speed {r['helps']:.2f}x   "
              f"(over serial: helps {r2['helps']:.2f}x, alone {r2['alone']:.2f}x)")
    helps.close(), alone.close()


def probe():
    print("chunk-0 probe: heavy ensemble first call, started pool, probe on over off (x)")
    n = 16 if QUICK else None
    for backend in ("threads", "processes"):
        ex = executors.resolve(backend, 2)
        ex.start(preload=("adrules",))
        while not ex.ready():
            time.sleep(0.01)
        ex.map(abs, [-1, -2])
        call = psum_gradient(common.HEAVY, ex, n)
        serial = psum_gradient(common.HEAVY, "serial", n)
        start = schedule._Probe.start

        def first(with_probe):
            def run():
                schedule.forget()
                schedule._Probe.start = start if with_probe else classmethod(lambda cls, *a, **k: None)
                try:
                    call()
                finally:
                    schedule._Probe.start = start
            return run

        def serial_first():
            schedule.forget()
            serial()

        r = ratio_rounds({"on": first(True), "off": first(False), "serial": serial_first},
                         over="off", rounds=3 if QUICK else 5)
        r2 = ratio_rounds({"on": first(True), "off": first(False), "serial": serial_first},
                          over="serial", rounds=3 if QUICK else 5)
        print(f"  {backend:10s} on/off speed {r['on']:.2f}x   (over serial first call: "
              f"on {r2['on']:.2f}x, off {r2['off']:.2f}x)")


def one_pass():
    print("one pass over tiny chunks: 10 cheap scalars, us over a plain loop (on / off)")
    xs = [float(v) for v in common.vector(10)]
    for backend in ("threads", "processes"):
        ex = common.make_executor(backend, 2)
        out = {}
        for on in (True, False):
            schedule.ONE_PASS_CHUNKS = 32 if on else 0
            schedule.forget()
            grad = common.interleaved_differences({
                "loop": lambda: ad.gradient(lambda xs: sum(common.cheap_scalar(x) for x in xs), xs),
                "psum": lambda: ad.gradient(lambda xs: ad.psum(common.cheap_scalar, xs, executor=ex), xs),
            }, minus="loop", repeat=31, budget=0.005)["psum"]
            value = common.interleaved_differences({
                "loop": lambda: sum(common.cheap_scalar(x) for x in xs),
                "psum": lambda: ad.psum(common.cheap_scalar, xs, executor=ex),
            }, minus="loop", repeat=31, budget=0.005)["psum"]
            out[on] = (grad * 1e6, value * 1e6)
        schedule.ONE_PASS_CHUNKS = 32
        print(f"  {backend:10s} gradient {out[True][0]:.0f} / {out[False][0]:.0f} us, "
              f"value {out[True][1]:.0f} / {out[False][1]:.0f} us")
        ex.close()


def lane():
    print("socket lane: one map of 2 tiny items on processes:2, ms per call")
    from loky import ProcessPoolExecutor

    ex = executors.ProcessExecutor(2, caller_helps=False)
    ex.start()
    while not ex.ready():
        time.sleep(0.01)
    pool = ProcessPoolExecutor(2)
    list(pool.map(abs, [-1, -2]))

    def loky_map():
        futures = [pool.submit(abs, -i) for i in range(2)]
        return [f.result() for f in futures]

    t = common.interleaved_medians({"lane": lambda: ex.map(abs, [-1, -2]), "loky": loky_map},
                                   repeat=21, budget=0.05)
    print(f"  lane {t['lane'] * 1e3:.2f} ms, loky submit/result {t['loky'] * 1e3:.2f} ms")
    ex.close(), pool.shutdown()


PARTS = {"lane": lambda: lane(), "one_pass": lambda: one_pass(), "caller_share": lambda: caller_share(),
         "probe": lambda: probe()}

if __name__ == "__main__":
    print(f"cores: {len(os.sched_getaffinity(0))}, two busy processes got "
          f"{common.available_cores():.2f}")
    for part in [a for a in sys.argv[1:] if a in PARTS] or list(PARTS):
        PARTS[part]()
