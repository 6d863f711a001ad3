"""Tracer overhead: what one traced elementwise op costs on top of NumPy.

Target: marginal gradient cost per traced op <= 5 us (``TracedChain.track_marginal_op_us``;
HIPS autograd 10-11 us, PyTorch eager 5.4-5.9 us, a bare NumPy op ~0.45 us).
"""

import numpy as np

import adrules as ad
from adrules import tracer

from . import common


class TracedChain:
    """Gradient of an ``n_ops``-long chain of elementwise ops on 10 floats."""

    params = [1, 50]
    param_names = ["n_ops"]

    def setup(self, n_ops):
        self.x = common.vector(10)
        self.f = common.chain(n_ops)

    def time_gradient(self, n_ops):
        ad.gradient(self.f, self.x)

    def time_primal(self, n_ops):
        self.f(self.x)


class MarginalOpCost:
    """``(t(50 ops) - t(1 op)) / 49`` for the gradient, in microseconds, both chains
    timed in alternation (the median of per-round differences) so machine noise hits
    them alike."""

    unit = "us"

    def setup(self):
        self.x = common.vector(10)
        self.short, self.long = common.chain(1), common.chain(50)

    def track_gradient_marginal_op_us(self):
        return common.interleaved_differences({
            "short": lambda: ad.gradient(self.short, self.x),
            "long": lambda: ad.gradient(self.long, self.x),
        }, minus="short", repeat=9, budget=0.02)["long"] / 49 * 1e6

    def track_numpy_marginal_op_us(self):
        return common.interleaved_differences({
            "short": lambda: self.short(self.x),
            "long": lambda: self.long(self.x),
        }, minus="short", repeat=9, budget=0.02)["long"] / 49 * 1e6


@ad.primitive
def softplus(x):
    return np.logaddexp(0.0, x)


ad.scalar_rule(softplus, lambda x, y: 1.0 / (1.0 + np.exp(-x)))


def plain_softplus(x):
    return np.logaddexp(0.0, x)


class PrimitiveDispatch:
    """A ``@primitive`` called with no traced argument, against the same plain function
    and a bare NumPy op, outside any differentiation (``tracing=False``) and while some
    differentiation is open elsewhere in the process (``tracing=True``: the slow path
    that has to look for traced arguments)."""

    params = [False, True]
    param_names = ["tracing"]

    def setup(self, tracing):
        self.x = common.vector(10)
        # TraceOpen, named tracing in commits before it was renamed (asv times old commits)
        trace_open = getattr(tracer, "TraceOpen", None) or getattr(tracer, "tracing", None)
        if tracing and trace_open is None:
            raise NotImplementedError("adrules.tracer.TraceOpen (internal) is gone: update this benchmark")
        self._open = trace_open() if tracing else None
        if self._open is not None:
            self._open.__enter__()

    def teardown(self, tracing):
        if getattr(self, "_open", None) is not None:
            self._open.__exit__(None, None, None)

    def time_numpy_op(self, tracing):
        np.sin(self.x)

    def time_plain_function(self, tracing):
        plain_softplus(self.x)

    def time_primitive_untraced(self, tracing):
        softplus(self.x)
