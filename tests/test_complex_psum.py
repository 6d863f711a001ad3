"""psum and pmap with complex values: complex elements of xs, complex shared arguments,
complex sums and mapped values. Gradients (ChainRules' convention: ∂L/∂x + i ∂L/∂y for
z = x + iy), jvps along complex directions and hvps are compared with central finite
differences along the real and the imaginary directions of every element; then each
result is bitwise identical on serial, threads, processes and a Dask LocalCluster for a
fixed chunk_size, and complex64 stays complex64 wherever the chunks ran.
"""

import numpy as np
import pytest

import adrules as ad
import executors
from adrules.registry import ComplexRuleError

CHUNK = 2

@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")


# ---- the programs: each a real loss L(xs, z) around a psum or pmap on ``executor`` --------------


def real_f(x, z):  # a real value of complex x and z
    return np.sum(np.abs(x * z) ** 2) + np.sum(np.real(np.exp(1j * x) * np.conj(z)))


def complex_f(x, z):  # a complex value, neither holomorphic nor antiholomorphic in (x, z)
    return np.sum(np.conj(x) * z * np.exp(1j * np.imag(x)) + np.sin(x) * np.abs(z))


def mapped_f(x, z):  # a complex array per element
    return x * np.conj(z) + np.tanh(x) / (2.0 + z)


def phase_f(x, z):  # real x, complex intermediates
    return np.abs(np.sum(np.exp(1j * x) * z)) ** 2 + np.angle(np.sum(x * z))


def loss_real_psum(xs, z, executor):
    return ad.psum(real_f, xs, z, executor=executor, chunk_size=CHUNK)


def loss_complex_psum(xs, z, executor):
    s = ad.psum(complex_f, xs, z, executor=executor, chunk_size=CHUNK)
    return np.abs(s) ** 2 + np.imag(s) * 0.5


def loss_pmap(xs, z, executor):
    vs = ad.pmap(mapped_f, xs, z, executor=executor, chunk_size=CHUNK)
    total = 0.0
    for k, v in enumerate(vs):
        total = total + np.sum(np.abs(v) ** 2) * (k + 1) + np.sum(np.real(v) * np.imag(v))
    return total


def loss_real_elements(xs, z, executor):
    return ad.psum(phase_f, xs, z, executor=executor, chunk_size=CHUNK)


PROGRAMS = {"real psum of complex": loss_real_psum, "complex psum": loss_complex_psum,
            "pmap of complex": loss_pmap, "real elements": loss_real_elements}


def _data(name, dtype=np.complex128):
    rng = np.random.default_rng(3)
    z = (rng.normal(size=3) + 1j * rng.normal(size=3)).astype(dtype)
    if name == "real elements":
        return rng.normal(size=(5, 3)).astype(np.finfo(dtype).dtype), z
    return (rng.normal(size=(5, 3)) + 1j * rng.normal(size=(5, 3))).astype(dtype) * 0.7, z


def _direction(args, seed):
    rng = np.random.default_rng(seed)
    out = []
    for a in args:
        d = rng.normal(size=a.shape)
        out.append(d + 1j * rng.normal(size=a.shape) if np.iscomplexobj(a) else d)
    return tuple(out)


# ---- finite differences ---------------------------------------------------------------------------


def fd_gradient(L, args, h=1e-6):
    """∂L/∂x + i ∂L/∂y of every element of every argument, by central differences."""
    out = []
    for i, a in enumerate(args):
        g = np.zeros(a.shape, dtype=a.dtype)
        steps = (1.0, 1j) if np.iscomplexobj(a) else (1.0,)
        for idx in np.ndindex(a.shape):
            for step in steps:
                e = np.zeros(a.shape, dtype=a.dtype)
                e[idx] = step * h
                plus = list(args); plus[i] = a + e
                minus = list(args); minus[i] = a - e
                g[idx] += step * (L(*plus) - L(*minus)) / (2 * h)
        out.append(g)
    return tuple(out)


def fd_directional(L, args, direction, h=1e-6):
    plus = [a + h * d for a, d in zip(args, direction)]
    minus = [a - h * d for a, d in zip(args, direction)]
    return (L(*plus) - L(*minus)) / (2 * h)


def _bits(tree):
    return [(np.asarray(leaf).dtype.str, np.asarray(leaf).tobytes())
            for leaf in ad.pytrees.flatten(tree)[0] if not isinstance(leaf, ad.NoTangent)]


# ---- against finite differences (serial) ----------------------------------------------------------


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_gradient_matches_finite_differences(name):
    xs, z = _data(name)
    L = lambda xs, z: PROGRAMS[name](xs, z, "serial")  # noqa: E731
    got = ad.gradient(L, xs, z)
    for g, want, a in zip(got, fd_gradient(L, (xs, z)), (xs, z)):
        assert g.dtype == a.dtype
        np.testing.assert_allclose(g, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_jvp_along_complex_directions_matches_finite_differences(name):
    xs, z = _data(name)
    L = lambda xs, z: PROGRAMS[name](xs, z, "serial")  # noqa: E731
    v = _direction((xs, z), 11)
    y, dy = ad.jvp(L, (xs, z), v)
    assert np.isrealobj(dy)
    np.testing.assert_allclose(y, L(xs, z), rtol=1e-14)
    np.testing.assert_allclose(dy, fd_directional(L, (xs, z), v), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hvp_along_complex_directions_matches_finite_differences_of_the_gradient(name):
    # L as a function of (Re, Im) of its inputs: the hvp along v is the derivative of the
    # gradient (∂L/∂x + i ∂L/∂y) along v
    xs, z = _data(name)
    L = lambda xs, z: PROGRAMS[name](xs, z, "serial")  # noqa: E731
    v = _direction((xs, z), 12)
    got = ad.hvp(lambda p: L(*p), (xs, z), v)
    h = 1e-5
    plus = ad.gradient(L, *[a + h * d for a, d in zip((xs, z), v)])
    minus = ad.gradient(L, *[a - h * d for a, d in zip((xs, z), v)])
    for g, p, m in zip(got, plus, minus):
        np.testing.assert_allclose(g, (p - m) / (2 * h), rtol=1e-5, atol=1e-5)


# ---- bitwise identical on every backend -----------------------------------------------------------

BACKENDS = [("threads", 2), ("processes", 2)]


@pytest.fixture(scope="module")
def pools(loopback_dask_client):
    made = [executors.resolve(name, n_workers=n) for name, n in BACKENDS]
    made.append(executors.DaskExecutor(client=loopback_dask_client))
    yield made
    for ex in made:
        ex.close()


def _all_results(name, executor, dtype=np.complex128, order=1):
    xs, z = _data(name, dtype)
    L = lambda xs, z: PROGRAMS[name](xs, z, executor)  # noqa: E731
    v = _direction((xs, z), 13)
    v = tuple(d.astype(a.dtype) for d, a in zip(v, (xs, z)))
    if order == 2:
        return {"hvp": ad.hvp(lambda p: L(*p), (xs, z), v)}
    return {"gradient": ad.value_and_gradient(L, xs, z), "jvp": ad.jvp(L, (xs, z), v)}


def _assert_same_bits(name, pools, dtype=np.complex128, order=1):
    serial = _all_results(name, "serial", dtype, order)
    for ex in pools:
        got = _all_results(name, ex, dtype, order)
        for what in serial:
            assert _bits(got[what]) == _bits(serial[what]), f"{name}, {what} on {ex.name}"
    return serial


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_bitwise_identical_on_every_backend(name, pools):
    _assert_same_bits(name, pools)


@pytest.mark.parametrize("name", sorted(PROGRAMS))
def test_hvp_bitwise_identical_on_every_backend(name, pools):
    _assert_same_bits(name, pools, order=2)


# ---- complex64 stays complex64 ---------------------------------------------------------------------


def test_complex64_stays_complex64_wherever_chunks_run(pools):
    rng = np.random.default_rng(5)
    # big enough that the process backend returns the chunks' values out of band
    xs = (rng.normal(size=(4, 2**14)) + 1j * rng.normal(size=(4, 2**14))).astype(np.complex64)
    z = np.complex64(0.5 - 0.25j)
    serial_map = ad.pmap(lambda x, z: x * z, xs, z, executor="serial", chunk_size=CHUNK)
    serial_sum = ad.psum(lambda x, z: x * z, xs, z, executor="serial", chunk_size=CHUNK)
    for ex in ["serial", *pools]:
        values = ad.pmap(lambda x, z: x * z, xs, z, executor=ex, chunk_size=CHUNK)
        assert [v.dtype for v in values] == [np.complex64] * 4
        assert _bits(values) == _bits(serial_map)
        total = ad.psum(lambda x, z: x * z, xs, z, executor=ex, chunk_size=CHUNK)
        assert total.dtype == np.complex64 and _bits(total) == _bits(serial_sum)
        np.testing.assert_allclose(total, np.sum(xs * z, axis=0), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("name", ["complex psum", "pmap of complex"])
def test_complex64_gradients_keep_their_dtype_and_bits(name, pools):
    serial = _assert_same_bits(name, pools, np.complex64)
    xs, z = _data(name, np.complex64)
    assert [g.dtype for g in serial["gradient"][1]] == [xs.dtype, z.dtype]
    assert serial["jvp"][1].dtype == np.float32


def test_complex64_hvp_keeps_its_dtype_and_bits(pools):
    serial = _assert_same_bits("complex psum", pools, np.complex64, order=2)
    assert [h.dtype for h in serial["hvp"]] == [np.complex64, np.complex64]


# ---- the compensated sum's complex branch -----------------------------------------------------


def test_neumaier_sum_of_complex_arrays_is_exact_per_part_and_keeps_complex64():
    import math

    rng = np.random.default_rng(8)
    for dtype in (np.complex128, np.complex64):
        vals = [((rng.normal(size=4) + 1j * rng.normal(size=4)) * 10.0 ** rng.integers(-8, 8)).astype(dtype)
                for _ in range(60)]
        got = executors.neumaier_sum(vals)
        assert got.dtype == dtype
        assert got.tobytes() == executors.neumaier_sum(list(vals)).tobytes()
        for part in (np.real, np.imag):
            exact = np.array([math.fsum(float(part(v[i])) for v in vals) for i in range(4)])
            # within one rounding of the part's precision (the compensated sum is exact here)
            np.testing.assert_allclose(part(got), exact, rtol=2 * np.finfo(dtype).eps, atol=0)


# ---- other forms: a captured complex value, dict elements, vectorized f ------------------------


def _fd_tree(L, args, h=1e-6):
    """``fd_gradient`` over the float and complex leaves of container arguments."""
    leaves, tdef = ad.pytrees.flatten(list(args))
    grads = []
    for i, leaf in enumerate(leaves):
        def along(v, i=i):
            moved = list(leaves)
            moved[i] = v
            return L(*ad.pytrees.unflatten(tdef, moved))
        grads.append(fd_gradient(along, (np.asarray(leaf),), h)[0][()])
    return ad.pytrees.unflatten(tdef, grads)


def _forms():
    rng = np.random.default_rng(4)
    xs = rng.normal(size=(5, 3)) + 1j * rng.normal(size=(5, 3))
    ms = [{"a": rng.normal(size=2) + 1j * rng.normal(size=2), "b": float(rng.normal())} for _ in range(5)]
    z = rng.normal(size=3) + 1j * rng.normal(size=3)

    def captured(ex):  # f closes over the differentiated z: psum lifts it to a shared argument
        return lambda z: ad.psum(lambda x: np.sum(np.abs(x - z) ** 2 * np.real(x)), xs, executor=ex,
                                 chunk_size=CHUNK)

    def dicts(ex):  # container elements with complex leaves, a Python complex shared argument
        return lambda ms, w: ad.psum(lambda m, w: np.sum(np.real(m["a"] * w) * m["b"] + np.abs(m["a"] - w) ** 3),
                                     ms, w, executor=ex, chunk_size=CHUNK)

    def vectorized(ex):  # f takes a whole chunk and returns one (complex) value per row
        return lambda xs, w: np.abs(ad.psum(lambda x, w: np.sum(np.conj(x) * w * x[:, ::-1], axis=1), xs, w,
                                            executor=ex, chunk_size=CHUNK, vectorized=True)) ** 2

    return {"captured": (captured, (z,)), "dicts": (dicts, (ms, 0.3 - 0.8j)), "vectorized": (vectorized, (xs, z[0]))}


@pytest.mark.parametrize("form", ["captured", "dicts", "vectorized"])
def test_other_forms_match_finite_differences_and_every_backend(form, pools):
    make, args = _forms()[form]
    serial = ad.gradient(make("serial"), *args)
    for got, want in zip(ad.pytrees.flatten(list(serial))[0], ad.pytrees.flatten(_fd_tree(make("serial"), args))[0]):
        assert np.iscomplexobj(got) == np.iscomplexobj(want)
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    for ex in pools:
        assert _bits(ad.gradient(make(ex), *args)) == _bits(serial), f"{form} on {ex.name}"


def test_big_complex64_cotangents_come_back_from_workers_as_complex64(pools):
    # a shared argument's cotangent of 128 kB: processes send it back out of band
    rng = np.random.default_rng(6)
    z = (rng.normal(size=2**14) + 1j * rng.normal(size=2**14)).astype(np.complex64)
    xs = [np.float32(s) for s in rng.normal(size=4)]
    L = lambda z, ex: ad.psum(lambda x, z: np.sum(np.abs(z * x + 1.0) ** 2), xs, z, executor=ex,  # noqa: E731
                              chunk_size=CHUNK)
    serial = ad.gradient(lambda z: L(z, "serial"), z)[0]
    assert serial.dtype == np.complex64
    want = sum(2 * (z * x + 1.0) * x for x in xs)  # ∂/∂x + i ∂/∂y of |z x + 1|², x real
    np.testing.assert_allclose(serial, want, rtol=1e-5, atol=1e-4)
    for ex in pools:
        got = ad.gradient(lambda z: L(z, ex), z)[0]
        assert got.dtype == np.complex64 and got.tobytes() == serial.tobytes(), ex.name


def test_gradient_of_a_complex_psum_asks_for_a_real_loss():
    xs = [np.array([1 + 1j]), np.array([2 - 1j])]
    with pytest.raises(ad.tracer.TracerError, match="needs a real scalar"):
        ad.gradient(lambda xs: ad.psum(lambda z: np.sum(z * z), xs, executor="serial"), xs)
