"""Page faults and time per gradient of the heavy ensemble's first ``n`` models, each
library in a fresh process (glibc's malloc thresholds move with a process's history, so a
fault count is only comparable between processes that did the same thing before).

    python asv_benchmarks/page_faults.py [n_models]       # adrules, autograd, forward

Prints one line per library: median minor page faults and seconds per call over 5 calls
after 2 warm-up calls, and the tracemalloc peak of one more call.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

LIBS = ("adrules", "autograd", "forward")


def measure(lib, n_models=8, repeat=5):
    """``{"faults", "seconds", "peak_mb"}`` per call of ``lib``'s gradient (or the forward)."""
    import resource
    import time
    import tracemalloc

    import numpy as np

    from benchmarks import common

    models, x, y = common.ensemble(common.HEAVY)
    models = models[:n_models]
    if lib == "adrules":
        import adrules as ad

        def fn():
            return ad.gradient(lambda ms: common.ensemble_loss(ms, x, y), models)
    elif lib == "autograd":
        import autograd
        import autograd.numpy as anp

        grad = autograd.grad(lambda ms: common.ensemble_loss(ms, x, y, anp))

        def fn():
            return grad(models)
    else:
        def fn():
            return common.ensemble_loss(models, x, y)
    fn()
    fn()
    faults, seconds = [], []
    for _ in range(repeat):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        fn()
        seconds.append(time.perf_counter() - t0)
        faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return {"faults": float(np.median(faults)), "seconds": float(np.median(seconds)),
            "peak_mb": peak / 2 ** 20}


def in_fresh_process(lib, n_models=8):
    """``measure(lib, n_models)`` run in a new interpreter with this one's environment."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", lib, str(n_models)],
                         capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main(argv):
    if argv[:1] == ["--child"]:
        from benchmarks import common

        common.pin_blas()
        print(json.dumps(measure(argv[1], int(argv[2]))))
        return 0
    n_models = int(argv[0]) if argv else 8
    for lib in LIBS:
        try:
            r = in_fresh_process(lib, n_models)
        except subprocess.CalledProcessError as e:
            print(f"{lib:<9} failed: {e.stderr.strip().splitlines()[-1:]}")
            continue
        print(f"{lib:<9} {r['faults']:>8.0f} faults  {r['seconds'] * 1e3:8.1f} ms  "
              f"peak {r['peak_mb']:6.0f} MiB   ({n_models} heavy models)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
