"""Forward mode and second order: jvp per-op cost against reverse, Jacobians of a
100 -> 100 tanh layer both ways, the Hessian of a 50-parameter loss on 1 and 2 workers."""

import numpy as np

import adrules as ad

from . import common


class JvpChain:
    """jvp of an ``n_ops``-long elementwise chain on 10 floats, against its gradient:
    ``(t(50) - t(1)) / 49`` is the per-op cost of each mode."""

    params = [1, 50]
    param_names = ["n_ops"]

    def setup(self, n_ops):
        self.x = common.vector(10)
        self.v = np.ones(10)
        self.f = common.chain(n_ops)

    def time_jvp(self, n_ops):
        ad.jvp(self.f, (self.x,), (self.v,))

    def time_gradient(self, n_ops):
        ad.gradient(self.f, self.x)


class JvpMarginalOpCost:
    """Marginal microseconds per op, forward and reverse: the median of per-round
    differences, the two chains timed in alternation."""

    unit = "us"

    def setup(self):
        self.x, self.v = common.vector(10), np.ones(10)
        self.short, self.long = common.chain(1), common.chain(50)

    def track_jvp_marginal_op_us(self):
        return common.interleaved_differences({
            "short": lambda: ad.jvp(self.short, (self.x,), (self.v,)),
            "long": lambda: ad.jvp(self.long, (self.x,), (self.v,)),
        }, minus="short", repeat=9, budget=0.02)["long"] / 49 * 1e6


class TanhLayerJacobian:
    """Jacobian of ``x -> tanh(W x + b)``, 100 -> 100, by columns (fwd) and rows (rev)."""

    params = ["fwd", "rev"]
    param_names = ["mode"]

    def setup(self, mode):
        w, b, self.x = common.tanh_layer(100, 100)
        self.f = common.tanh_layer_fn(w, b)

    def time_jacobian(self, mode):
        ad.jacobian(self.f, self.x, mode=mode, executor="serial")


class Hessian:
    """Hessian of a 50-parameter loss (forward-over-reverse), serially and on 2 workers."""

    params = ["serial", "threads", "processes"]
    param_names = ["backend"]

    def setup(self, backend):
        self.x = common.vector(50)
        self.ex = common.make_executor(backend, 1 if backend == "serial" else 2)
        ad.hessian(common.quartic_loss, self.x, executor=self.ex)  # warm the workers

    def teardown(self, backend):
        common.close_executor(self)

    def time_hessian(self, backend):
        ad.hessian(common.quartic_loss, self.x, executor=self.ex)

    def time_hvp(self, backend):
        ad.hvp(common.quartic_loss, self.x, np.ones(50))
