"""Gradients of programs with complex values, against HIPS autograd's on the same programs.

Target: a complex gradient no slower than autograd's (``ComplexGradientRatio.
track_adrules_over_autograd`` <= 1.0, the median of per-round ratios, the two timed in
alternation). Each workload is one real loss written once over a NumPy namespace and run
with plain NumPy (adrules) and with ``autograd.numpy``, differentiated with respect to
the same arguments: a real ``x`` and a complex ``z``. (The two return conjugate gradients
for ``z``: autograd's is ∂f/∂x - i ∂f/∂y, adrules' ∂f/∂x + i ∂f/∂y; the work is the same.)
autograd is installed with the bench extra; without it these benchmarks are skipped.
"""

import numpy as np

import adrules as ad

from . import common


def _workloads(np_):
    """{name: loss(x, z)}: real scalars of a real x and a complex z."""
    return {
        # the phase-and-modulus program: complex intermediates from a real x
        "sum(abs(exp(1j*x)*z)**2)": lambda x, z: np_.sum(np_.abs(np_.exp(1j * x) * z) ** 2),
        # holomorphic steps, then the real part
        "real(sum(sin(z)*exp(z)/(2+z*z)))": lambda x, z: np_.real(
            np_.sum(np_.sin(z) * np_.exp(z * x) / (2.0 + z * z))),
        # the non-holomorphic ones: conj, abs, angle, imag
        "abs, angle, conj, imag": lambda x, z: np_.sum(np_.abs(z - x) + np_.angle(z + 3.0) * x
                                                       + np_.imag(np_.conj(z) * z * (1 + 0.5j) * x)),
    }


NAMES = list(_workloads(np))
SIZES = [100, 10_000]


def _arguments(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.uniform(-1.0, 1.0, size=n), rng.normal(size=n) + 1j * rng.normal(size=n)


def _callables(name, n):
    """``{"adrules": fn, "autograd": fn}``: each library's gradient of workload ``name``."""
    try:
        import autograd
        import autograd.numpy as anp
    except ImportError:
        raise NotImplementedError("autograd is not installed: pip install -e '.[bench]'")
    x, z = _arguments(n)
    ours_grad = ad.grad(_workloads(np)[name], argnums=(0, 1))
    theirs_grad = autograd.grad(_workloads(anp)[name], argnum=(0, 1))
    return {"adrules": lambda: ours_grad(x, z), "autograd": lambda: theirs_grad(x, z)}


class ComplexGradients:
    """Seconds per gradient of each workload, with each library."""

    params = [NAMES, SIZES, ["adrules", "autograd"]]
    param_names = ["program", "n", "library"]

    def setup(self, program, n, library):
        common.pin_blas()
        self.fn = _callables(program, n)[library]
        self.fn()

    def time_gradient(self, program, n, library):
        self.fn()


class ComplexGradientRatio:
    """adrules' gradient time over autograd's on the same program: the median of per-round
    ratios, the two timed in alternation (target <= 1.0)."""

    params = [NAMES, SIZES]
    param_names = ["program", "n"]
    unit = "ratio"

    def setup(self, program, n):
        common.pin_blas()
        self.fns = _callables(program, n)

    def track_adrules_over_autograd(self, program, n):
        return common.interleaved_speedups(self.fns, over="adrules", repeat=9, budget=0.05)["autograd"]
