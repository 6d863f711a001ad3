"""Reverse-mode gradients against their primals.

Targets: gradient of ``np.sum(x**2)`` <= 15 us at n=100 and <= 3x the primal at
n=1e6; small ensemble (32 MLPs 16-64-1, batch 256) gradient <= 4x its forward; page
faults per gradient of 8 heavy models (16-512-1, batch 4096) no more than autograd's.
Measured with glibc malloc as users have it (no MALLOC_* tuning).
"""

import adrules as ad

from . import common


class SumOfSquares:
    """``np.sum(x ** 2)``: the fixed cost of a gradient (small n) and the cost per element
    of the pullbacks (large n)."""

    params = [100, 10_000, 1_000_000]
    param_names = ["n"]

    def setup(self, n):
        self.x = common.vector(n)

    def time_primal(self, n):
        common.sum_sq_power(self.x)

    def time_gradient(self, n):
        ad.gradient(common.sum_sq_power, self.x)

    def time_value_and_gradient(self, n):
        ad.value_and_gradient(common.sum_sq_power, self.x)


class SumOfSquaresRatio:
    """gradient / primal time: the median of per-round ratios, the two timed in alternation."""

    params = [100, 1_000_000]
    param_names = ["n"]
    unit = "ratio"

    def setup(self, n):
        self.x = common.vector(n)

    def track_gradient_over_primal(self, n):
        return common.interleaved_speedups({
            "primal": lambda: common.sum_sq_power(self.x),
            "gradient": lambda: ad.gradient(common.sum_sq_power, self.x),
        }, over="gradient", repeat=7, budget=0.02)["primal"]  # gradient's time / primal's


class SmallEnsembleSerial:
    """32 MLPs 16-64-1 on a batch of 256, differentiated as a plain Python loop."""

    def setup(self):
        self.models, self.x, self.y = common.ensemble(common.SMALL)
        x, y = self.x, self.y
        self.total = lambda models: common.ensemble_loss(models, x, y)

    def time_forward(self):
        self.total(self.models)

    def time_gradient(self):
        ad.gradient(self.total, self.models)

    def time_handwritten_gradient(self):
        common.handwritten_ensemble_gradient(self.models, self.x, self.y)


class SmallEnsembleRatio:
    """gradient / forward time of the small ensemble (serial loop): the median of per-round
    ratios, the two timed in alternation."""

    unit = "ratio"

    def setup(self):
        models, x, y = common.ensemble(common.SMALL)
        self.forward = lambda: common.ensemble_loss(models, x, y)
        self.gradient = lambda: ad.gradient(lambda ms: common.ensemble_loss(ms, x, y), models)

    def track_gradient_over_forward(self):
        return common.interleaved_speedups({"forward": self.forward, "gradient": self.gradient},
                                           over="gradient", repeat=7, budget=0.05)["forward"]


def _page_faults(lib):
    """Minor page faults of one gradient (or forward pass) of 8 heavy models in a fresh
    process: see ``page_faults.py``."""
    import os
    import sys

    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    import page_faults

    return page_faults.in_fresh_process(lib, common.quick_or(8, 2))["faults"]  # a quick pass: 2 models


class HeavyPageFaults:
    """Minor page faults per gradient of the heavy ensemble's first 8 models, and of their
    forward pass, each in a fresh process: every fresh big allocation is paid in page
    faults, which load on a shared machine does not change."""

    unit = "page faults"
    timeout = 600

    def track_gradient_faults(self):
        return _page_faults("adrules")

    def track_forward_faults(self):
        return _page_faults("forward")


class AutogradHeavyPageFaults:
    """The same count for HIPS autograd's gradient, the peer the target is set against;
    skipped (not failed) where autograd is not installed."""

    unit = "page faults"
    timeout = 600

    def setup(self):
        try:
            import autograd  # noqa: F401
        except ImportError:
            raise NotImplementedError("autograd is not installed: pip install -e '.[bench]'")

    def track_gradient_faults(self):
        return _page_faults("autograd")
