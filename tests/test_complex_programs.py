"""Random programs with complex values: a real array ``x``, a complex array ``z`` and a
complex number ``w`` go through compositions of complex-valued steps (holomorphic and
not: ``conj``, ``abs``, ``angle``, ``real``, ``imag``), complex intermediates made from
real values (``1j * x``, ``x.astype(complex)``), indexing and sums, to a real scalar.

Against central finite differences along the real and the imaginary direction of every
input element: the gradient (ChainRules' convention, ∂L/∂x + i ∂L/∂y), the jvp along a
random complex direction (which must also equal Re <∇L, v>), and the hvp along it (L as a
function of the real and imaginary parts: the derivative of the gradient along v).

Every step maps values of modulus at most about 1.2 to values of about that size, away
from branch cuts, poles and zeros of ``abs`` (and of ``std``: a constant is appended),
so the programs are smooth where they run. Reductions, products, linear algebra and
transforms mix the elements: the matrices are fixed (``_M``) or ``2I`` plus a small
matrix of the running value (``_A``), well conditioned.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import adrules as ad

# ---- steps on the running value u (real or complex, shape (n,)) ---------------------------------
def _M(n):
    """A fixed complex n x n matrix of norm below 1."""
    k = np.arange(n)
    return 0.9 / n * np.exp(0.7j * np.outer(k, k + 1))


def _A(u):
    """2I plus a small complex matrix of u: well conditioned."""
    return 2.0 * np.eye(u.shape[0]) + 0.3 * u[:, None] * _M(u.shape[0])


STEPS = {
    # holomorphic
    "sin": lambda u: 0.5 * np.sin(u), "cos": lambda u: 0.5 * np.cos(u), "tanh": lambda u: np.tanh(0.5 * u),
    "exp": lambda u: 0.5 * np.exp(0.4 * u), "log": lambda u: np.log(2.5 + u),
    "sqrt": lambda u: np.sqrt(2.5 + u) - 1.0, "power": lambda u: 0.3 * (1.5 + u) ** 1.5,
    "square": lambda u: 0.5 * u * u, "cube": lambda u: 0.4 * u ** 3, "reciprocal": lambda u: 1.0 / (2.5 + u),
    "rotate": lambda u: (0.6 + 0.8j) * u - 0.1j,
    # neither holomorphic nor real-valued, or real-valued of complex
    "conj": np.conj, "conj_method": lambda u: u.conj(), "real": np.real, "imag": np.imag,
    "real_attr": lambda u: u.real + 0.5j * u.imag, "abs": lambda u: 0.3 * np.abs(u + 2.0 + 1.0j),
    "angle": lambda u: np.angle(u + 2.5 + 0.3j), "abs2": lambda u: 0.5 * u * np.conj(u),
    "to_complex": lambda u: np.real(u).astype(np.complex128) * (0.6 - 0.8j) + 0.3j * np.imag(u),
    # indexing, sums
    "reverse": lambda u: u[::-1], "gather": lambda u: u[np.arange(u.shape[0])[::-1] % u.shape[0]] * 0.5 + u[0] * 0.5,
    "mean_mix": lambda u: 0.7 * u + (0.3 / u.shape[0]) * np.sum(u),
    # reductions, where
    "prod": lambda u: 0.7 * u + 0.3 * np.prod(1.0 + 0.15 * u),
    "cumsum": lambda u: np.cumsum(u) / u.shape[0], "mean": lambda u: 0.6 * u + 0.4 * np.mean(u),
    "var_std": lambda u: u * (0.8 + 0.2 * np.var(u)) + 0.2 * np.std(np.append(u, 2.0)),
    "where": lambda u: np.where(np.arange(u.shape[0]) % 2 == 0, u, 0.8 * np.conj(u)),
    # products, linear algebra
    "matmul": lambda u: u @ _M(u.shape[0]), "einsum": lambda u: np.einsum("ij,j->i", _M(u.shape[0]), u),
    "dot": lambda u: np.dot(_M(u.shape[0]), u) + 0.2 * u,
    "inv": lambda u: np.sum(np.linalg.inv(_A(u)), axis=1), "solve": lambda u: 1.5 * np.linalg.solve(_A(u), u),
    "det": lambda u: u * (0.5 + 0.5 * np.linalg.det(_A(u)) / 2.0 ** u.shape[0]),
    # transforms
    "fft": lambda u: np.fft.fft(u) / u.shape[0], "ifft": lambda u: np.fft.ifft(u),
    "rfft": lambda u: np.fft.irfft(np.fft.rfft(np.real(u)) * (0.8 + 0.3j), u.shape[0]) + 1j * np.imag(u),
}

# steps that bring in z (complex array) or w (complex number)
MIXES = {
    "times_z": lambda u, z, w: u * z, "plus_conj_z": lambda u, z, w: 0.5 * (u + np.conj(z)),
    "over_z": lambda u, z, w: u / (2.5 + z), "times_w": lambda u, z, w: w * u,
    "abs_z": lambda u, z, w: u * 0.5 * np.abs(z + 2.0), "imag_w": lambda u, z, w: u + 0.3 * np.imag(w * z),
}

STARTS = {
    "z": lambda x, z, w: z, "x": lambda x, z, w: x, "x_times_z": lambda x, z, w: x * z,
    "1j_x": lambda x, z, w: 1j * x + 0.2 * z, "astype": lambda x, z, w: x.astype(np.complex128) * w,
    "exp_1j_x": lambda x, z, w: np.exp(1j * x) * 0.8,
}


@st.composite
def programs(draw):
    n = draw(st.integers(1, 4), label="n")
    start = draw(st.sampled_from(sorted(STARTS)), label="start")
    length = draw(st.integers(1, 4), label="length")
    steps = [draw(st.sampled_from(sorted(STEPS)), label="step") for _ in range(length)]
    mixes = [draw(st.one_of(st.none(), st.sampled_from(sorted(MIXES))), label="mix") for _ in steps]
    seed = draw(st.integers(0, 2 ** 16), label="seed")
    return n, start, steps, mixes, seed


def _run(start, steps, mixes):
    def program(x, z, w):
        u = STARTS[start](x, z, w)
        for step, mix in zip(steps, mixes):
            u = STEPS[step](u)
            if mix is not None:
                u = MIXES[mix](u, z, w)
        # a real scalar, nonlinear in both parts of the last value
        return np.sum(np.real(u * (0.7 - 0.4j)) + 0.3 * np.abs(u + 3.0) ** 2 + np.imag(u) ** 2)

    return program


def _inputs(n, rng):
    x = rng.uniform(-0.8, 0.8, size=n)
    z = rng.uniform(-0.6, 0.6, size=n) + 1j * rng.uniform(-0.6, 0.6, size=n)
    w = np.complex128(rng.uniform(0.4, 0.8) * np.exp(1j * rng.uniform(-np.pi, np.pi)))
    return x, z, w


def _direction(args, rng):
    return tuple(np.asarray(rng.normal(size=np.shape(a)) + (1j * rng.normal(size=np.shape(a)) if np.iscomplexobj(a) else 0),
                            dtype=np.result_type(a))[()] for a in args)


def fd_gradient(L, args, h=1e-6):
    """∂L/∂x + i ∂L/∂y for every element of every argument, by central differences."""
    out = []
    for i, a in enumerate(args):
        a = np.asarray(a)
        g = np.zeros(a.shape, dtype=a.dtype)
        for idx in np.ndindex(a.shape):
            for step in ((1.0, 1j) if np.iscomplexobj(a) else (1.0,)):
                e = np.zeros(a.shape, dtype=a.dtype)
                e[idx] = step * h
                plus, minus = list(args), list(args)
                plus[i], minus[i] = (a + e)[()], (a - e)[()]
                g[idx] += step * (L(*plus) - L(*minus)) / (2 * h)
        out.append(g[()])
    return tuple(out)


@settings(max_examples=30, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(programs())
def test_complex_programs_against_finite_differences(program):
    _check(*program)


@pytest.mark.parametrize("step", sorted(STEPS))
def test_each_step_once(step):
    """Every step, in a short program of its own (the random ones may miss some)."""
    _check(3, "1j_x", [step, "sin"], [None, "times_z"], 39)


def _check(n, start, steps, mixes, seed):
    rng = np.random.default_rng(seed)
    args = _inputs(n, rng)
    L = _run(start, steps, mixes)
    where = f"{start} -> " + " -> ".join(s if m is None else f"{s}, {m}" for s, m in zip(steps, mixes))

    value, grads = ad.value_and_gradient(L, *args)
    assert np.isrealobj(value), where
    for g, want, a in zip(grads, fd_gradient(L, args), args):
        assert np.iscomplexobj(g) == np.iscomplexobj(a), where
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-7, err_msg=where)

    v = _direction(args, rng)
    _, dy = ad.jvp(L, args, v)
    h = 1e-6
    fd = (L(*[a + h * d for a, d in zip(args, v)]) - L(*[a - h * d for a, d in zip(args, v)])) / (2 * h)
    np.testing.assert_allclose(dy, fd, rtol=1e-6, atol=1e-7, err_msg=where)
    inner = sum(np.sum(np.real(np.conj(g) * d)) for g, d in zip(grads, v))  # Re <∇L, v>
    np.testing.assert_allclose(dy, inner, rtol=1e-10, atol=1e-12, err_msg=where)

    hv = ad.hvp(lambda p: L(*p), args, v)
    h = 1e-5
    plus = ad.gradient(L, *[a + h * d for a, d in zip(args, v)])
    minus = ad.gradient(L, *[a - h * d for a, d in zip(args, v)])
    for got, p, m in zip(hv, plus, minus):
        np.testing.assert_allclose(got, (p - m) / (2 * h), rtol=1e-5, atol=1e-6, err_msg=where)
