"""psum / pmap: values and gradients on every backend, against independent computations.

The reference for every gradient is the same loss written as a plain Python loop and
differentiated by the tracer without psum (plus finite differences via check_grads on
small cases); bitwise identity is checked across backends and worker counts.
"""

import dataclasses
import os
import signal
import threading
import time

import numpy as np
import pytest

import adrules as ad
import executors


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")
from adrules.testing import check_grads
from adrules.tracer import TracerError

# ---- workloads ---------------------------------------------------------------


def mlp(params, x):
    hidden = np.tanh(x @ params["w1"] + params["b1"])
    return hidden @ params["w2"]


def loss(params, x, y):
    return np.mean((mlp(params, x) - y) ** 2)


def make_models(n, rng, n_in=3, n_hidden=5):
    return [{"w1": rng.normal(size=(n_in, n_hidden)), "b1": rng.normal(size=n_hidden),
             "w2": rng.normal(size=n_hidden)} for _ in range(n)]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(42)
    return make_models(7, rng), rng.normal(size=(8, 3)), rng.normal(size=8)


def loop_total(models, x, y):
    total = 0.0
    for m in models:
        total = total + loss(m, x, y)
    return total


@dataclasses.dataclass
class Linear:
    w: np.ndarray
    b: float

    def __call__(self, x):
        return np.sum(np.tanh(x * self.w + self.b))


# ---- backends -------------------------------------------------------------------

BACKENDS = [("serial", 1), ("threads", 1), ("threads", 2), ("processes", 1), ("processes", 2)]


@pytest.fixture(scope="module")
def pools():
    made = {(name, n): executors.resolve(name, n_workers=n) for name, n in BACKENDS}
    yield made


@pytest.fixture(scope="module")
def dask_pool():
    pytest.importorskip("distributed")
    ex = executors.DaskExecutor(n_workers=2)
    yield ex
    ex.close()


def _bits(tree):
    return [np.asarray(leaf).tobytes() for leaf in ad.pytrees.flatten(tree)[0]
            if not isinstance(leaf, ad.NoTangent)]


def _psum_value_and_grad(models, x, y, executor, chunk_size=3):
    return ad.value_and_gradient(
        lambda ms, x: ad.psum(loss, ms, x, y, executor=executor, chunk_size=chunk_size), models, x)


def _assert_close_tree(a, b, rtol=1e-12, atol=1e-12):
    la, lb = ad.pytrees.flatten(a)[0], ad.pytrees.flatten(b)[0]
    assert len(la) == len(lb)
    for u, v in zip(la, lb):
        np.testing.assert_allclose(u, v, rtol=rtol, atol=atol)


# ---- value and gradient -------------------------------------------------------------


def test_value_matches_a_plain_sum(data, pools):
    models, x, y = data
    expected = sum(loss(m, x, y) for m in models)
    for ex in pools.values():
        assert np.isclose(ad.psum(loss, models, x, y, executor=ex, chunk_size=3), expected, rtol=1e-13)


def test_gradient_matches_the_traced_loop_on_every_backend(data, pools):
    models, x, y = data
    v0, (gm0, gx0) = ad.value_and_gradient(lambda ms, x: loop_total(ms, x, y), models, x)
    for key, ex in pools.items():
        v, (gm, gx) = _psum_value_and_grad(models, x, y, ex)
        assert np.isclose(v, v0, rtol=1e-13), key
        _assert_close_tree(gm, gm0)
        _assert_close_tree(gx, gx0)


def test_gradient_matches_finite_differences():
    rng = np.random.default_rng(1)
    models, x, y = make_models(3, rng, n_in=2, n_hidden=2), rng.normal(size=(4, 2)), rng.normal(size=4)
    check_grads(lambda ms, x: ad.psum(loss, ms, x, y, executor="threads", chunk_size=2),
                models, x, modes=("rev",), order=1)


def test_bitwise_identical_across_backends_and_worker_counts(data, pools, dask_pool):
    models, x, y = data
    reference = _bits(_psum_value_and_grad(models, x, y, "serial"))
    for key, ex in list(pools.items()) + [("dask", dask_pool)]:
        assert _bits(_psum_value_and_grad(models, x, y, ex)) == reference, key


def _loss_and_outputs(params, x, y):
    return loss(params, x, y), mlp(params, x)


def test_f_returning_a_loss_and_an_array_differentiates_on_every_backend(data, pools, dask_pool):
    """``f`` returning ``(loss, outputs)`` (a container with an array in it, as the README
    allows): the gradient of the summed loss and a pullback of both parts, against the
    same written as a loop, and the same bits everywhere. np.shape of such a value raised
    NumPy's "inhomogeneous shape" error under gradient."""
    models, x, y = data
    v = np.linspace(-1.0, 1.0, len(y))
    g_loop = ad.gradient(lambda ms: loop_total(ms, x, y), models)[0]
    g_both = ad.gradient(lambda ms: 1.5 * loop_total(ms, x, y) + sum(v @ mlp(m, x) for m in ms),
                         models)[0]
    bits = None
    for key, ex in list(pools.items()) + [("dask", dask_pool)]:
        total = lambda ms: ad.psum(_loss_and_outputs, ms, x, y, executor=ex, chunk_size=3)
        _assert_close_tree(ad.gradient(lambda ms: total(ms)[0], models)[0], g_loop)
        (value, outputs), back = ad.pullback(total, models)
        np.testing.assert_allclose(outputs, sum(mlp(m, x) for m in models), rtol=1e-13)
        g = back((1.5, v))[0]
        _assert_close_tree(g, g_both)
        bits = bits or _bits(g)
        assert _bits(g) == bits, key


def test_f_returning_a_loss_and_an_array_in_one_pass():
    """The same on tiny work, which the schedule runs in one pass once it has seen it."""
    xs = [0.5, -1.0, 2.0]
    f = lambda t: (t ** 2, t * np.array([1.0, 3.0]))
    for _ in range(4):
        (s, arr), back = ad.pullback(lambda xs: ad.psum(f, xs, executor="serial", dispatch="auto"), xs)
        assert s == sum(t ** 2 for t in xs) and np.allclose(arr, [sum(xs), 3.0 * sum(xs)])
        assert np.allclose(back((2.0, np.array([1.0, -1.0])))[0], [4.0 * t + 1.0 - 3.0 for t in xs])


def test_strided_arrays_give_the_same_bits_on_every_backend(pools, dask_pool):
    """Arrays that are neither C- nor F-contiguous reach a worker as contiguous copies
    (pickling makes them so), and NumPy's loops, hence the bits, depend on the layout:
    a strided ``X @ w`` is not BLAS's. psum runs inline chunks on the same layout. A
    shared argument above the memory-mapping threshold (1 MiB), columns as elements, a
    strided cotangent (np.broadcast_to) and a strided tangent."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(600, 512))[:, ::2]  # 1.2 MB, strided
    M = rng.normal(size=(256, 8))
    ws = [M[:, j] for j in range(6)]  # columns: strided elements
    f = lambda w, X: np.sum(np.tanh(X @ w))  # noqa: E731
    rows = lambda w, X: X @ w  # noqa: E731
    ybar = np.broadcast_to(1.25, (600,))
    dws = [M[::-1, j] for j in range(6)]  # reversed columns: strided tangents
    results = {}
    for key, ex in list(pools.items()) + [("dask", dask_pool)]:
        value, grads = ad.value_and_gradient(lambda ws, X: ad.psum(f, ws, X, executor=ex, chunk_size=2), ws, X)
        out, back = ad.pullback(lambda ws: ad.psum(rows, ws, X, executor=ex, chunk_size=2), ws)
        _, dy = ad.jvp(lambda ws: ad.psum(rows, ws, X, executor=ex, chunk_size=2), (ws,), (dws,))
        results[key] = _bits((value, grads, out, back(ybar), dy))
    reference = results.pop(("serial", 1))
    assert all(bits == reference for bits in results.values()), [k for k, b in results.items() if b != reference]
    # and the values are right: against the same sums written as loops
    np.testing.assert_allclose(ad.psum(f, ws, X, executor="serial"), sum(f(w, X) for w in ws), rtol=1e-12)


def test_a_psum_inside_f_given_the_outer_executor_runs_on_every_backend(data, pools, dask_pool):
    """An ensemble of ensembles: f runs a psum of its own on the executor it captured.
    Sent to workers with f, the executor arrives as the serial one (inside chunk work
    every map runs inline); the gradient is the nested loop's."""
    models, x, y = data
    groups = [models[:3], models[3:5], models[5:]]
    expected = ad.value_and_gradient(lambda gs, x: sum(loop_total(g, x, y) for g in gs), groups, x)
    for ex in [*pools.values(), dask_pool]:
        def group_loss(g, x):
            return ad.psum(loss, g, x, y, executor=ex, chunk_size=1)
        got = ad.value_and_gradient(lambda gs, x: ad.psum(group_loss, gs, x, executor=ex, chunk_size=1),
                                    groups, x)
        _assert_close_tree(got, expected)


def test_an_executor_pickles_as_the_serial_one_and_copies_as_itself(pools):
    import copy
    import pickle

    ex = pools[("processes", 2)]
    assert type(pickle.loads(pickle.dumps(ex))) is executors.SerialExecutor
    assert copy.copy(ex) is ex and copy.deepcopy({"ex": ex})["ex"] is ex


def test_chunk_size_changes_only_rounding(data):
    models, x, y = data
    _, g1 = _psum_value_and_grad(models, x, y, "serial", chunk_size=1)
    _, g7 = _psum_value_and_grad(models, x, y, "serial", chunk_size=7)
    _assert_close_tree(g1, g7)


def test_config_context_chooses_backend_and_chunks(data):
    models, x, y = data
    reference = _bits(_psum_value_and_grad(models, x, y, "serial", chunk_size=2))
    with executors.config(executor="processes", n_workers=2, chunk_size=2):
        got = ad.value_and_gradient(lambda ms, x: ad.psum(loss, ms, x, y), models, x)
    assert _bits(got) == reference


def test_empty_ensemble():
    assert ad.psum(loss, [], np.ones((2, 3)), np.ones(2), executor="serial") == 0.0


# ---- what can be differentiated ---------------------------------------------------


def test_self_slot_of_a_callable_model(pools):
    xs = [np.array([0.1, 0.2]), np.array([0.3, -0.4]), np.array([1.0, 2.0])]
    model = Linear(np.array([0.5, -1.5]), 0.3)

    def through_psum(m):
        return ad.psum(m, xs, executor=pools[("processes", 2)], chunk_size=2)

    def through_loop(m):
        return m(xs[0]) + m(xs[1]) + m(xs[2])

    got, = ad.gradient(through_psum, model)
    want, = ad.gradient(through_loop, model)
    assert isinstance(got, Linear)
    np.testing.assert_allclose(got.w, want.w, rtol=1e-13)
    assert np.isclose(got.b, want.b, rtol=1e-13)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_closure_over_a_traced_value_keeps_its_gradient(data, backend):
    models, x, y = data
    via_closure, = ad.gradient(lambda x: ad.psum(lambda m: loss(m, x, y), models, executor=backend), x)
    via_shared, = ad.gradient(lambda x: ad.psum(loss, models, x, y, executor=backend), x)
    np.testing.assert_allclose(via_closure, via_shared, rtol=1e-13)


def test_traced_value_inside_a_captured_container_is_lifted(data):
    models, x, y = data
    box = {}

    def via_box(m):
        return loss(m, box["x"], y)

    def total(x):
        box["x"] = x
        return ad.psum(via_box, models, executor="threads")

    want, = ad.gradient(lambda x: loop_total(models, x, y), x)
    np.testing.assert_allclose(ad.gradient(total, x)[0], want, rtol=1e-12)


_HIDDEN = {}


def _reads_a_global(m, y):
    return loss(m, _HIDDEN["x"], y)


# (on processes a module global is not shipped at all: f sees the worker's own module,
# the README's "pass data as shared arguments, not through globals")
@pytest.mark.parametrize("backend", ["serial", "threads"])
def test_traced_value_hidden_from_psum_raises_with_the_explicit_form(data, backend):
    models, x, y = data

    def total(x):
        _HIDDEN["x"] = x
        try:
            return ad.psum(_reads_a_global, models, y, executor=backend, chunk_size=7)
        finally:
            _HIDDEN.clear()

    with pytest.raises(TracerError, match=r"psum\(loss, models, x\)"):
        ad.gradient(total, x)


def test_array_valued_f_pullback(data, pools):
    models, x, y = data
    rng = np.random.default_rng(3)
    ybar = rng.normal(size=8)
    _, back0 = ad.pullback(lambda ms, x: sum(mlp(m, x) for m in ms), models, x)
    want = back0(ybar)
    reference = None
    for key, ex in pools.items():
        _, back = ad.pullback(lambda ms, x: ad.psum(mlp, ms, x, executor=ex, chunk_size=3), models, x)
        got = back(ybar)
        _assert_close_tree(got, want, rtol=1e-12, atol=1e-12)
        reference = reference or _bits(got)
        assert _bits(got) == reference, key


def test_pmap_feeds_further_numpy_code(data, pools):
    models, x, y = data

    def via_pmap(ms, x):
        losses = ad.pmap(loss, ms, x, y, executor=pools[("threads", 2)], chunk_size=2)
        return np.sum(np.stack(losses) ** 2)

    def via_loop(ms, x):
        return np.sum(np.stack([loss(m, x, y) for m in ms]) ** 2)

    _assert_close_tree(ad.gradient(via_pmap, models, x), ad.gradient(via_loop, models, x))


def test_psum_inside_a_bigger_loss(data):
    models, x, y = data

    def big(ms, x):
        return np.log(1.0 + ad.psum(loss, ms, x, y, executor="processes", chunk_size=2)) + np.sum(x ** 2)

    def plain(ms, x):
        return np.log(1.0 + loop_total(ms, x, y)) + np.sum(x ** 2)

    _assert_close_tree(ad.gradient(big, models, x), ad.gradient(plain, models, x))


def test_vectorized_mode_matches_elementwise(pools):
    rng = np.random.default_rng(5)
    xs, w = rng.normal(size=(50, 3)), rng.normal(size=3)

    def one(x, w):
        return np.tanh(x @ w) ** 2

    def chunk(xs, w):
        return np.tanh(xs @ w) ** 2

    want, = ad.gradient(lambda w: ad.psum(one, xs, w, executor="serial"), w)
    for ex in pools.values():
        got, = ad.gradient(lambda w: ad.psum(chunk, xs, w, executor=ex, vectorized=True, chunk_size=8), w)
        np.testing.assert_allclose(got, want, rtol=1e-12)


def test_vectorized_values_of_several_numbers_or_containers_add_per_element(pools):
    """One row per element, summed over axis 0 only, leaf by leaf (np.sum of the whole
    value added an element's vector into one number, and a dict's or a tuple's leaves)."""
    X, w = np.arange(14.0).reshape(7, 2), np.array([1.0, -0.5])
    pair = lambda c, w: np.stack([c @ w, 2 * (c @ w)], axis=1)  # noqa: E731
    both = lambda c, w: ((c @ w) ** 2, {"abs": np.abs(c @ w)})  # noqa: E731
    each = [x @ w for x in X]
    for ex in pools.values():
        np.testing.assert_allclose(ad.psum(pair, X, w, executor=ex, vectorized=True, chunk_size=3),
                                   [sum(each), 2 * sum(each)])
        loss, metrics = ad.psum(both, X, w, executor=ex, vectorized=True, chunk_size=3)
        assert np.isclose(loss, sum(v ** 2 for v in each)) and np.isclose(metrics["abs"], sum(map(abs, each)))
        rows = ad.pmap(both, X, w, executor=ex, vectorized=True, chunk_size=3)
        assert len(rows) == 7 and all(np.isclose(r[1]["abs"], abs(v)) for r, v in zip(rows, each))
        g, = ad.gradient(lambda w: ad.psum(both, X, w, executor=ex, vectorized=True, chunk_size=3)[0], w)
        np.testing.assert_allclose(g, sum(2 * (x @ w) * x for x in X))
        jac, = ad.jacobian(lambda w: ad.psum(pair, X, w, executor=ex, vectorized=True, chunk_size=3), w)
        np.testing.assert_allclose(jac, [X.sum(0), 2 * X.sum(0)])


@pytest.mark.parametrize("f", [lambda c, w: (c @ w)[:1], lambda c, w: {"a": np.sum(c @ w)}],
                         ids=["one-row", "chunk-total"])
def test_a_vectorized_f_without_one_row_per_element_is_named(f):
    X, w = np.arange(14.0).reshape(7, 2), np.array([1.0, -0.5])
    for call in (ad.psum, ad.pmap):
        with pytest.raises(ValueError, match=r"vectorized=True\): f returned .* for the chunk of "
                                             r"elements 0..2 \(3 rows of xs\); it must return one "
                                             r"value per element"):
            call(f, X, w, vectorized=True, chunk_size=3, executor="serial")


def test_vectorized_mode_differentiates_with_respect_to_xs(pools, dask_pool):
    """The array of rows itself differentiated (its check once refused a traced array):
    the gradient against the closed form on every backend, the Hessian against the
    same sum written without psum."""
    rng = np.random.default_rng(6)
    X, w = rng.normal(size=(20, 3)), rng.normal(size=3)
    rows = lambda X, w: np.tanh(X @ w)  # noqa: E731
    slope = 1.0 - np.tanh(X @ w) ** 2
    for key, ex in list(pools.items()) + [("dask", dask_pool)]:
        gX, gw = ad.gradient(lambda X, w: ad.psum(rows, X, w, executor=ex, vectorized=True, chunk_size=6), X, w)
        np.testing.assert_allclose(gX, np.outer(slope, w), rtol=1e-12, err_msg=str(key))
        np.testing.assert_allclose(gw, X.T @ slope, rtol=1e-12, err_msg=str(key))
    X4 = X[:4]
    h = ad.hessian(lambda X: ad.psum(rows, X, w, executor="threads", vectorized=True, chunk_size=3), X4)
    np.testing.assert_allclose(h, ad.hessian(lambda X: np.sum(np.tanh(X @ w)), X4), rtol=1e-12, atol=1e-14)


def test_second_order_through_psum(data):
    models, x, y = data
    x0 = x[:2]
    h_psum = ad.hessian(lambda x: ad.psum(loss, models, x, y[:2], executor="threads", chunk_size=3), x0)
    h_loop = ad.hessian(lambda x: loop_total(models, x, y[:2]), x0)
    np.testing.assert_allclose(h_psum, h_loop, rtol=1e-10, atol=1e-12)


def test_forward_mode_through_psum(data, pools):
    models, x, y = data
    v = np.random.default_rng(9).normal(size=x.shape)
    want = ad.jvp(lambda x: loop_total(models, x, y), (x,), (v,))
    for ex in pools.values():
        got = ad.jvp(lambda x: ad.psum(loss, models, x, y, executor=ex, chunk_size=3), (x,), (v,))
        np.testing.assert_allclose(got, want, rtol=1e-12)


# ---- faults ---------------------------------------------------------------------------


def _fails_at_5(m, x, y):
    if m["index"] == 5:
        raise ValueError("bad model")
    return loss(m, x, y)


@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
def test_exception_in_f_reaches_the_caller_with_the_element(data, pools, backend):
    models, x, y = data
    tagged = [dict(m, index=i) for i, m in enumerate(models)]
    ex = pools[(backend, 2 if backend != "serial" else 1)]
    with pytest.raises(ValueError, match="bad model") as info:
        ad.gradient(lambda x: ad.psum(_fails_at_5, tagged, x, y, executor=ex, chunk_size=2), x)
    assert any("element 5" in note for note in getattr(info.value, "__notes__", [])), info.value
    # the pool is usable afterwards
    assert np.isclose(ad.psum(loss, models, x, y, executor=ex), sum(loss(m, x, y) for m in models))


def _kill_once(m, x, y, marker, parent_pid):
    time.sleep(0.02)  # enough work that psum dispatches to the pool rather than running inline
    # the last element: on a worker also when the calling thread runs the first share
    if m["index"] == 6 and os.getpid() != parent_pid and not os.path.exists(marker):
        open(marker, "w").close()
        os.kill(os.getpid(), signal.SIGKILL)
    return loss(m, x, y)


def test_worker_killed_mid_psum_gives_an_error_or_the_right_answer(data, pools, tmp_path):
    models, x, y = data
    tagged = [dict(m, index=i) for i, m in enumerate(models)]
    ex = pools[("processes", 2)]
    marker = str(tmp_path / "killed")
    expected = sum(loss(m, x, y) for m in models)
    t0 = time.perf_counter()
    try:
        got = ad.psum(_kill_once, tagged, x, y, marker, os.getpid(), executor=ex, chunk_size=1)
        assert np.isclose(got, expected)
    except executors.WorkerError:
        pass
    assert time.perf_counter() - t0 < 30
    assert os.path.exists(marker), "the worker was never killed: the test did not test anything"
    assert np.isclose(ad.psum(loss, models, x, y, executor=ex, chunk_size=1), expected)


def test_unpicklable_f_on_processes_names_it(data, pools):
    models, x, y = data
    lock = threading.Lock()

    def locked_loss(m, x, y):
        time.sleep(0.01)  # enough work that psum dispatches to the pool (tiny work runs inline)
        with lock:
            return loss(m, x, y)

    with pytest.raises(Exception, match="(?i)pickl"):
        ad.psum(locked_loss, models * 4, x, y, executor=pools[("processes", 2)], chunk_size=1)


def test_two_threads_computing_psum_gradients_at_once(data):
    models, x, y = data
    want = ad.gradient(lambda ms, x: loop_total(ms, x, y), models, x)
    barrier, results = threading.Barrier(2), [None, None]

    def work(i):
        barrier.wait()
        for _ in range(3):
            results[i] = ad.gradient(lambda ms, x: ad.psum(loss, ms, x, y, executor="threads"), models, x)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for r in results:
        _assert_close_tree(r, want)


def test_bad_arguments_are_named():
    with pytest.raises(TypeError, match="psum: f must be callable"):
        ad.psum(3.0, [1.0])
    with pytest.raises(TypeError, match="xs must be"):
        ad.psum(np.sin, 3.0)
    with pytest.raises(TypeError, match="vectorized=True"):
        ad.psum(np.sin, [1.0, 2.0], vectorized=True)
    for run in (ad.psum, ad.pmap):  # it said "len() of unsized object"
        with pytest.raises(TypeError, match=r"p(sum|map): xs is a 0-d array \(one value\).*pass \[x\]"):
            run(np.sin, np.array(1.0))
        with pytest.raises(TypeError, match=r"xs is a 0-d array"):  # differentiated too
            ad.gradient(lambda x: run(np.sin, x), np.array(1.0))
    with pytest.raises(TypeError, match=r"psum: vectorized must be True or False, got 'no'"):
        ad.psum(np.sin, np.ones(2), vectorized="no")


def test_progress_bar_runs(data):
    pytest.importorskip("tqdm")
    models, x, y = data
    got = ad.psum(loss, models, x, y, executor="threads", progress=True)
    assert np.isclose(got, sum(loss(m, x, y) for m in models))


def _pid(x):
    return float(os.getpid())


def test_chunks_really_run_on_the_backend(pools, dask_pool):
    pids = set(ad.pmap(_pid, list(range(6)), executor=dask_pool, chunk_size=1))
    assert os.getpid() not in pids and len(pids) >= 1
    pids = set(ad.pmap(_pid, list(range(6)), executor=pools[("processes", 2)], chunk_size=1))
    assert os.getpid() not in pids and len(pids) >= 1


def test_tiny_work_runs_inline_by_default(pools, monkeypatch):
    monkeypatch.delenv("ADRULES_DISPATCH")
    pids = set(ad.pmap(_pid, list(range(6)), executor=pools[("processes", 2)], chunk_size=1))
    assert pids == {os.getpid()}  # a loop is faster than dispatching microseconds of work


def _shape_by_element(w):
    return w[0] * (np.ones(3) if w[0] < 2 else np.ones(1))  # elements 2.. give shape (1,)


@pytest.mark.parametrize("chunk_size", [1, 2, 3, 4])
@pytest.mark.parametrize("differentiate", [False, True])
def test_values_of_different_shapes_are_refused_for_every_chunk_size(chunk_size, differentiate):
    """A sum that broadcast would depend on the chunks (and its gradient did fail for some
    chunk sizes only): one clear error naming the elements, whatever the chunk size."""
    xs = [np.array([float(i)]) for i in range(4)]

    def total(xs):
        return np.sum(ad.psum(_shape_by_element, xs, executor="serial", chunk_size=chunk_size))

    with pytest.raises(ValueError, match=r"psum: .*element.*\(shape \(1,\)\).* does not add to .*\(shape "
                                         r"\(3,\)\).*same shape \(psum does not broadcast"):
        ad.gradient(total, xs) if differentiate else total(xs)
