"""A user's own primitive with a hand-written gradient, autograd's ``define_gradient``
example: ``logsumexp`` marked a primitive and given its gradient (autograd: ``@primitive``
and ``defvjp``; adrules: ``@ad.primitive`` and ``@ad.rrule.register``), then
differentiated again and again, as a training loop does.

Workloads: ``example``, the example's own ``sum(logsumexp(y ** 2))`` at n = 10; ``loop``,
the primitive called in a Python loop over the 20 rows of a matrix inside the loss.
Target: adrules' gradient time no more than autograd's
(``UserRuleRatio.track_adrules_over_autograd`` <= 1.0, the median of per-round ratios,
the two timed in alternation). autograd is installed with the bench extra; without it
these benchmarks are skipped.
"""

import numpy as np

import adrules as ad

from . import common


@ad.primitive
def logsumexp(x):
    max_x = np.max(x)
    return max_x + np.log(np.sum(np.exp(x - max_x)))


@ad.rrule.register(logsumexp)
def logsumexp_rrule(x):
    ans = logsumexp(x)

    def logsumexp_pullback(g):  # the example's gradient, written for a rule
        return ad.NoTangent(), np.full(x.shape, g) * np.exp(x - np.full(x.shape, ans))

    return ans, logsumexp_pullback


def _losses(np_, lse):
    """{workload: (loss, argument)} over either library's NumPy and primitive."""
    rng = np.random.default_rng(0)

    def example(y):
        return np_.sum(lse(y ** 2))

    def loop(rows):
        total = 0.0
        for row in rows:
            total = total + lse(row ** 2)
        return total

    return {"example": (example, rng.normal(size=10)), "loop": (loop, rng.normal(size=(20, 10)))}


WORKLOADS = list(_losses(np, logsumexp))


def _autograd_logsumexp():
    try:
        import autograd.numpy as anp
        from autograd.extend import defvjp, primitive
    except ImportError:
        raise NotImplementedError("autograd is not installed: pip install -e '.[bench]'")

    @primitive
    def logsumexp(x):
        max_x = anp.max(x)
        return max_x + anp.log(anp.sum(anp.exp(x - max_x)))

    def logsumexp_vjp(ans, x):
        x_shape = x.shape
        return lambda g: anp.full(x_shape, g) * anp.exp(x - anp.full(x_shape, ans))

    defvjp(logsumexp, logsumexp_vjp)
    return anp, logsumexp


def _callables(workload):
    """``{"adrules": fn, "autograd": fn}``: each library's gradient of ``workload``."""
    anp, their_lse = _autograd_logsumexp()
    import autograd

    ours, x = _losses(np, logsumexp)[workload]
    theirs, _ = _losses(anp, their_lse)[workload]
    ours_grad, theirs_grad = ad.grad(ours), autograd.grad(theirs)
    return {"adrules": lambda: ours_grad(x), "autograd": lambda: theirs_grad(x)}


class UserRuleGradients:
    """Seconds per gradient of each workload, with each library."""

    params = [WORKLOADS, ["adrules", "autograd"]]
    param_names = ["workload", "library"]

    def setup(self, workload, library):
        self.fn = _callables(workload)[library]
        self.fn()

    def time_gradient(self, workload, library):
        self.fn()


class UserRuleRatio:
    """adrules' gradient time over autograd's on the same workload: the median of
    per-round ratios, the two timed in alternation (target <= 1.0)."""

    params = [WORKLOADS]
    param_names = ["workload"]
    unit = "ratio"

    def setup(self, workload):
        self.fns = _callables(workload)

    def track_adrules_over_autograd(self, workload):
        return common.interleaved_speedups(self.fns, over="adrules", repeat=15, budget=0.05)["autograd"]
