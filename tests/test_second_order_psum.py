"""Second derivatives through psum/pmap run their chunks on the executor (issue 14, part 1).

hvp (forward-over-reverse), hessian, gradient of a gradient, jvp of a jvp and gradient
of a jvp of a loss containing psum: each is compared with the same loss written as a
plain loop and differentiated without psum, and with finite differences of that loop's
gradient; results are bitwise identical across backends and worker counts; and the
chunk work is seen running inside executor workers, not in the calling thread.
"""
import threading

import numpy as np
import pytest

import adrules as ad
import executors


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")


def loss(m, x):
    return np.sum(np.tanh(m["w"] @ x + m["b"]) ** 2) * m["n"]


def values(m, x):  # array-valued: psum of arrays, pullback needs ȳ per chunk
    return np.tanh(m["w"] @ x + m["b"]) ** 2


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    models = [{"w": rng.normal(size=(3, 3)), "b": rng.normal(size=3), "n": 2} for _ in range(5)]
    return models, rng.normal(size=3), rng.normal(size=3)


def psum_via(executor):
    def total(f, ms, *shared, kind="sum"):
        run = ad.pmap if kind == "map" else ad.psum
        return run(f, ms, *shared, executor=executor, chunk_size=2)
    return total


def loop(f, ms, *shared, kind="sum"):
    if kind == "map":
        return [f(m, *shared) for m in ms]
    total = 0.0
    for m in ms:
        total = total + f(m, *shared)
    return total


def _direction(models):
    return [{"w": np.full((3, 3), 0.3), "b": np.linspace(-1, 1, 3), "n": 0} for _ in models]


# each case: S (a psum-like total) -> the second-order result
CASES = {
    "hvp wrt shared": lambda S, ms, x, v: ad.hvp(lambda x: S(loss, ms, x), x, v),
    "hvp wrt elements": lambda S, ms, x, v: ad.hvp(lambda ms: S(loss, ms, x), ms, _direction(ms)),
    "hvp wrt array elements": lambda S, ms, x, v: ad.hvp(
        lambda X: S(lambda row, x: np.sum(np.sin(row * x) ** 2), X, x), np.stack([m["b"] for m in ms]),
        np.ones((len(ms), 3))),
    "hvp, array-valued sum": lambda S, ms, x, v: ad.hvp(lambda x: np.sum(np.sin(S(values, ms, x))), x, v),
    "hvp through pmap": lambda S, ms, x, v: ad.hvp(
        lambda x: np.sum(np.stack(S(loss, ms, x, kind="map")) ** 2), x, v),
    "hvp, f captures x": lambda S, ms, x, v: ad.hvp(lambda x: S(lambda m: loss(m, x), ms), x, v),
    "hessian": lambda S, ms, x, v: ad.hessian(lambda x: S(loss, ms, x), x, executor="serial"),
    "gradient of a gradient": lambda S, ms, x, v: ad.gradient(
        lambda x: np.sum(ad.gradient(lambda x: S(loss, ms, x), x)[0] ** 2), x)[0],
    "gradient of a gradient wrt elements": lambda S, ms, x, v: ad.gradient(
        lambda ms: np.sum(ad.gradient(lambda x: S(loss, ms, x), x)[0] ** 2), ms)[0],
    "jvp of a jvp": lambda S, ms, x, v: ad.jvp(
        lambda x: ad.jvp(lambda x: S(loss, ms, x), (x,), (v,))[1], (x,), (v,))[1],
    "gradient of a jvp": lambda S, ms, x, v: ad.gradient(
        lambda x: ad.jvp(lambda x: S(loss, ms, x), (x,), (v,))[1], x)[0],
    # the tangents traced, the primals not: they went to worker processes and failed to pickle
    "gradient of a jvp wrt its direction": lambda S, ms, x, v: ad.gradient(
        lambda v: ad.jvp(lambda x: S(loss, ms, x), (x,), (v,))[1], v)[0],
    "jvp of a jvp along its direction": lambda S, ms, x, v: ad.jvp(
        lambda v: ad.jvp(lambda x: S(loss, ms, x), (x,), (v,))[1], (v,), (x,))[1],
}


def _leaves(tree):
    return [np.asarray(leaf, dtype=float) for leaf in ad.pytrees.flatten(tree)[0]
            if not isinstance(leaf, (ad.NoTangent, ad.ZeroTangent, int))]


def _bits(tree):
    return [leaf.tobytes() for leaf in _leaves(tree)]


@pytest.mark.parametrize("case", list(CASES))
def test_matches_the_loop_differentiated_without_psum(case, data):
    models, x, v = data
    expected = CASES[case](loop, models, x, v)
    got = CASES[case](psum_via("threads"), models, x, v)
    for a, b in zip(_leaves(got), _leaves(expected), strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_hvp_matches_finite_differences_of_the_loop_gradient(data):
    models, x, v = data
    grad = lambda x: ad.gradient(lambda x: loop(loss, models, x), x)[0]  # noqa: E731
    eps = 1e-6
    fd = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    got = ad.hvp(lambda x: ad.psum(loss, models, x, executor="threads", chunk_size=2), x, v)
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-7)


@pytest.fixture(scope="module")
def pools():
    return [executors.resolve(name, n_workers=n)
            for name, n in [("serial", 1), ("threads", 1), ("threads", 2), ("processes", 2)]]


@pytest.mark.parametrize("case", ["hvp wrt shared", "hvp wrt elements", "hvp wrt array elements",
                                  "hvp, array-valued sum",
                                  "gradient of a gradient", "jvp of a jvp", "gradient of a jvp",
                                  "gradient of a jvp wrt its direction", "jvp of a jvp along its direction"])
def test_bitwise_identical_across_backends_and_worker_counts(case, data, pools):
    models, x, v = data
    results = [CASES[case](psum_via(ex), models, x, v) for ex in pools]
    for ex, r in zip(pools, results):
        assert _bits(r) == _bits(results[0]), f"{ex.name}:{ex.n_workers}"


def test_bitwise_identical_on_dask(data, loopback_dask_client):
    models, x, v = data
    dask = executors.DaskExecutor(client=loopback_dask_client)
    serial = CASES["hvp wrt elements"](psum_via("serial"), models, x, v)
    assert _bits(CASES["hvp wrt elements"](psum_via(dask), models, x, v)) == _bits(serial)


def test_hvp_chunks_run_on_the_executor_workers(data):
    models, x, v = data
    seen = []

    def spy(m, x):
        seen.append((executors.in_worker(), threading.current_thread() is threading.main_thread()))
        return loss(m, x)

    ex = executors.ThreadExecutor(2)
    try:
        ad.hvp(lambda x: ad.psum(spy, models, x, executor=ex, chunk_size=2), x, v)
    finally:
        ex.close()
    assert seen and all(in_worker and not main for in_worker, main in seen), seen


def test_gradient_of_gradient_runs_both_passes_on_the_executor(data):
    models, x, _ = data
    seen = []

    def spy(m, x):
        seen.append(threading.current_thread() is threading.main_thread())
        return loss(m, x)

    ex = executors.ThreadExecutor(2)
    try:
        ad.gradient(lambda x: np.sum(ad.gradient(
            lambda x: ad.psum(spy, models, x, executor=ex, chunk_size=2), x)[0] ** 2), x)
    finally:
        ex.close()
    assert seen and not any(seen)


def test_hessian_rows_on_the_executor_do_not_nest_pools(data):
    """hessian's columns run on its executor; each column's psum runs in that worker
    (executors.resolve gives a serial executor inside chunk work), never a pool in a pool."""
    models, x, _ = data
    seen = []

    def spy(m, x):
        seen.append((executors.in_worker(), threading.current_thread().name))
        return loss(m, x)

    ex = executors.ThreadExecutor(2)
    try:
        h = ad.hessian(lambda x: ad.psum(spy, models, x, executor=ex, chunk_size=2), x,
                       executor=ex, chunk_size=1)
    finally:
        ex.close()
    expected = ad.hessian(lambda x: loop(loss, models, x), x, executor="serial")
    np.testing.assert_allclose(h, expected, rtol=1e-12, atol=1e-12)
    assert all(in_worker for in_worker, _ in seen)
    assert len({name for _, name in seen}) <= 2  # the hessian pool's two threads, no others


def test_an_error_in_f_under_hvp_names_the_users_element(data):
    models, x, v = data

    def failing(m, x):
        if m is models[3] or (isinstance(m, dict) and m["n"] == -1):
            raise ValueError("bad model")
        return loss(m, x)

    models = [dict(m) for m in models]
    models[3]["n"] = -1
    with pytest.raises(ValueError, match="bad model") as info:
        ad.hvp(lambda x: ad.psum(failing, models, x, executor="threads", chunk_size=2), x, v)
    notes = [n for n in getattr(info.value, "__notes__", []) if "raised by f" in n]
    assert notes == ["psum/pmap: raised by f at element 3"], notes


def test_hvp_of_a_container_checks_the_direction_structure():
    f = lambda p: p["a"] ** 2 * p["b"]  # noqa: E731
    with pytest.raises(TypeError, match="v has structure"):
        ad.hvp(f, {"a": 1.0, "b": 2.0}, {"a": 1.0})
    with pytest.raises(TypeError, match=r"shape \(2,\) but x has shape \(\) at leaf 0"):
        ad.hvp(f, {"a": 1.0, "b": 2.0}, {"a": np.ones(2), "b": 0.0})


# ---- containers as f's value (first order; the second-order path relies on them) ----------

def test_pmap_of_tuples_is_differentiated_through_every_field():
    xs = [1.0, 2.0, 3.0]

    def total(w, run):
        return sum(a * b for a, b in run(lambda x, w: (x * w, x * w * w), xs, w))

    serial = lambda f, xs, w: [f(x, w) for x in xs]  # noqa: E731
    threads = lambda f, xs, w: ad.pmap(f, xs, w, executor="threads", chunk_size=2)  # noqa: E731
    assert ad.gradient(lambda w: total(w, threads), 2.0) == ad.gradient(lambda w: total(w, serial), 2.0)
    assert ad.gradient(lambda w: total(w, threads), 2.0)[0] == pytest.approx(3 * 4 * 14)
    _, dy = ad.jvp(lambda w: total(w, threads), (2.0,), (1.0,))
    assert dy == pytest.approx(3 * 4 * 14)


def test_psum_of_tuples_and_dicts_sums_field_by_field():
    xs = np.arange(1.0, 6.0)
    got = ad.psum(lambda x: (x, {"sq": x * x}), list(xs), executor="threads", chunk_size=2)
    assert got[0] == pytest.approx(np.sum(xs)) and got[1]["sq"] == pytest.approx(np.sum(xs ** 2))
    g = ad.gradient(lambda w: (lambda t: t[0] * t[1]["sq"])(
        ad.psum(lambda x, w: (x * w, {"sq": (x * w) ** 2}), list(xs), w, executor="threads", chunk_size=2)), 2.0)[0]
    # (Σx·w)(Σx·w²) = 15·55·w³  ->  3·15·55·w²
    assert g == pytest.approx(3 * 15 * 55 * 4)


def test_psum_of_containers_of_different_structure_says_so():
    with pytest.raises(ValueError, match="does not add"):
        ad.psum(lambda x: (x,) if x < 2 else (x, x), [1.0, 2.0, 3.0], executor="serial")


class Settings:
    """A shared argument that is neither array nor container: data for f, no tangent."""

    def __init__(self, scale):
        self.scale = scale


def scaled_loss(m, x, settings, pool):
    assert isinstance(pool, executors.Executor)
    return loss(m, x) * settings.scale


@pytest.mark.parametrize("name", ["serial", "threads"])
def test_forward_mode_takes_a_shared_object_that_is_not_an_array(name, data):
    models, x, v = data
    settings, pool = Settings(1.5), executors.SerialExecutor()
    total = lambda x: ad.psum(scaled_loss, models, x, settings, pool, executor=name, chunk_size=2)  # noqa: E731
    plain = lambda x: loop(scaled_loss, models, x, settings, pool)  # noqa: E731
    grad = lambda x: ad.gradient(plain, x)[0]  # noqa: E731
    eps = 1e-6
    fd_jvp = (plain(x + eps * v) - plain(x - eps * v)) / (2 * eps)
    fd_hvp = (grad(x + eps * v) - grad(x - eps * v)) / (2 * eps)
    y, dy = ad.jvp(total, (x,), (v,))
    np.testing.assert_allclose([y, dy], [plain(x), fd_jvp], rtol=1e-6)
    np.testing.assert_allclose(ad.hvp(total, x, v), fd_hvp, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(ad.hessian(total, x) @ v, fd_hvp, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("mode", ["gradient", "jvp"])
def test_an_object_inside_a_shared_container_is_named_as_the_user_passed_it(mode, data):
    """Both modes named psum's internals: "pullback(chunks_fn): leaf 1 of argument 0",
    "jvp(chunk): leaf 1 of argument 1"."""
    models, x, v = data
    total = lambda x: ad.psum(lambda m, p: scaled_loss(m, p[0], p[1], executors.SerialExecutor()),  # noqa: E731
                              models, (x, Settings(1.5)), executor="serial")
    with pytest.raises(TypeError, match=r"^psum: leaf 1 of shared argument 0 is a Settings, which is neither"):
        ad.gradient(total, x) if mode == "gradient" else ad.jvp(total, (x,), (v,))
