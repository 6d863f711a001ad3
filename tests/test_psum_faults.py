"""Bad input and faults around psum: what cannot be sent is named before any work runs,
values that do not combine name their elements, a worker that died while idle is
replaced, and a LocalCluster we start is reachable from this machine only."""

import os
import pickle
import signal
import sys
import threading
import time
import urllib.request

import numpy as np
import pytest

import adrules as ad
import executors
from adrules._psum import schedule, to_workers


@pytest.fixture(scope="module")
def processes():
    return executors.resolve("processes", n_workers=2)


@pytest.fixture(scope="module")
def dask_ex():
    pytest.importorskip("distributed")
    ex = executors.DaskExecutor(n_workers=1)
    yield ex
    ex.close()


@pytest.fixture(params=["processes", "dask"])
def remote(request):
    return request.getfixturevalue("processes" if request.param == "processes" else "dask_ex")


@pytest.fixture(autouse=True)
def fresh_call_sites():
    schedule.forget()
    to_workers._checked.clear()


def _models():
    return [np.full(3, float(i)) for i in range(4)]


def test_an_unpicklable_capture_of_f_is_named_before_any_work(remote):
    lock, calls = threading.Lock(), []

    def locked_loss(w):
        calls.append(1)  # chunk 0 would run inline, here, if the check came late
        with lock:
            return np.sum(w ** 2)

    with pytest.raises(TypeError, match=r"psum: f \(test_an_unpicklable_capture_of_f_is_named_before_any_work"
                                        r"\.<locals>\.locked_loss \(test_psum_faults\.py:\d+\)\) cannot be sent "
                                        r"to the '(processes|dask)' executor's worker processes \(its captured "
                                        r"variable 'lock', a lock, cannot be pickled\)") as info:
        ad.gradient(lambda ms: ad.psum(locked_loss, ms, executor=remote), _models())
    assert isinstance(info.value, pickle.PicklingError) and calls == []
    assert "executor='threads'" in str(info.value)


@ad.primitive
def _guarded_square(w):
    return w * w


def test_a_rule_that_cannot_be_sent_is_named_on_the_worker_that_needs_it(processes):
    """Users' rules go with the work (a worker would otherwise use another or none); one
    that does not pickle arrives as a rule that raises, naming it, only where it is used."""
    lock = threading.Lock()

    @ad.rrule.register(_guarded_square)
    def guarded_rrule(w):
        with lock:
            return _guarded_square(w), lambda g: (ad.NoTangent(), 2 * g * w)

    loss = lambda ms: ad.psum(lambda w: np.sum(_guarded_square(w)), ms, executor=processes,  # noqa: E731
                              dispatch="always")
    with pytest.raises(TypeError, match=r"the rule registered for .*_guarded_square could not be "
                                        r"sent to this worker process \(TypeError: cannot pickle "
                                        r"'_thread.lock' object\)"):
        ad.gradient(loss, _models())
    assert processes.map(abs, [-1, 2]) == [1, 2]  # usable afterwards; other rules still travel
    (g,) = ad.gradient(lambda ms: ad.psum(lambda w: np.sum(np.sin(w)), ms, executor=processes,
                                          dispatch="always"), _models())
    np.testing.assert_allclose(g, [np.cos(m) for m in _models()])


class _Holder:
    pass


def test_a_traced_value_hidden_in_a_captured_object_gets_only_advice_that_works(remote):
    """A traced value inside an object f captures cannot be sent, and threads would not
    take it either (psum cannot see into the object): the error says to pass it as a
    shared argument, not to switch to threads or serial."""
    def total(w):
        holder = _Holder()
        holder.w = w
        return ad.psum(lambda x: np.sum(np.sin(holder.w * x)), [0.1, 0.2], executor=remote)

    with pytest.raises(TypeError, match=r"captured variable 'holder', a _Holder.*shared argument") as info:
        ad.gradient(total, np.ones(2))
    assert "executor='threads'" not in str(info.value) and ".." not in str(info.value)


def test_an_unpicklable_shared_argument_is_named(remote):
    with pytest.raises(TypeError, match=r"psum: shared argument 1 of psum\(f, xs, \*shared\) \(a lock\)"):
        ad.psum(lambda w, a, b: np.sum(w) * a, _models(), 2.0, threading.Lock(), executor=remote)


def test_an_unpicklable_element_is_named(remote):
    xs = [np.ones(2), (i for i in range(3)), np.ones(2)]
    with pytest.raises(TypeError, match=r"pmap: element 1 of xs \(a generator\)"):
        ad.pmap(lambda x: x, xs, executor=remote)


def test_threads_need_nothing_pickled():
    lock = threading.Lock()
    assert ad.psum(lambda w, l: np.sum(w), _models(), lock, executor="threads") == 18.0


def test_values_that_do_not_add_name_their_elements():
    with pytest.raises(ValueError, match=r"psum: f's value at element 1 \(shape \(4,\)\) does not add to "
                                         r"the sum of elements 0\.\.0 \(shape \(3,\)\)"):
        ad.psum(lambda w: w * 2, [np.ones(3), np.ones(4)], executor="serial", chunk_size=2)
    with pytest.raises(ValueError, match=r"psum: the sum of f over elements 2\.\.3 \(shape \(4,\)\) does not "
                                         r"add to the sum over the elements before them \(shape \(3,\)\)"):
        ad.psum(lambda w: w * 2, [np.ones(3)] * 2 + [np.ones(4)] * 2, executor="threads", chunk_size=2)


def test_a_worker_that_died_while_idle_is_replaced(processes):
    for _ in range(3):
        assert processes.map(abs, [-1, -2, -3, -4]) == [1, 2, 3, 4]
        os.kill(processes.worker_pids()[0], signal.SIGKILL)
        time.sleep(0.05)
        assert processes.map(abs, [-1, -2, -3, -4]) == [1, 2, 3, 4]


def _listening(pids):
    import psutil

    return {(c.laddr.ip, c.laddr.port) for c in psutil.net_connections(kind="inet")
            if c.status == psutil.CONN_LISTEN and c.pid in pids}


@pytest.mark.parametrize("dashboard", [False, True])
def test_a_local_cluster_listens_on_loopback_only(dashboard):
    pytest.importorskip("distributed")
    psutil = pytest.importorskip("psutil")
    me = psutil.Process()
    before = _listening({me.pid})
    with executors.DaskExecutor(n_workers=1, dashboard=dashboard) as ex:
        pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
        opened = _listening(pids) - before
        assert opened and {ip for ip, _ in opened} == {"127.0.0.1"}, opened
        link = ex.client.dashboard_link
        assert link.startswith("http://127.0.0.1:")
        try:
            status = urllib.request.urlopen(link, timeout=10).status
        except urllib.error.HTTPError as e:
            status = e.code
        assert (status == 200) == dashboard


def _slow_unless_first(w, folder):
    # element 0 fails at once; every other element marks that it started, then works
    # for 0.2 s: what starts after the failure is work whose result nobody reads
    if w[0] == 0.0:
        raise ValueError("element 0 is bad")
    open(os.path.join(folder, f"{int(w[0])}"), "w").close()
    time.sleep(0.2)
    return np.sum(w ** 2)


@pytest.mark.parametrize("backend", ["threads", "processes", "dask"])
def test_a_map_that_raised_stops_the_work_left_on_the_workers(backend, tmp_path, request):
    # the rest went on: a script waited at exit for work whose results nobody reads
    # (processes: 14 of 15 elements started after the error; the rest of each task on
    # threads), and on Dask the next call waited behind it
    ex = request.getfixturevalue("dask_ex") if backend == "dask" else executors.resolve(backend, 2)
    xs = [np.array([float(i), 1.0]) for i in range(32)]  # in tasks of 4 chunks
    ad.psum(np.sum, xs[1:3], executor=ex, dispatch="always")  # workers up
    with pytest.raises(ValueError, match="element 0 is bad"):
        ad.psum(_slow_unless_first, xs, str(tmp_path), executor=ex, chunk_size=1, dispatch="always")
    time.sleep(32 * 0.2 / ex.n_workers + 0.5)  # every element would have run by now
    started = len(os.listdir(tmp_path))
    # those already running when the error came: one a worker (and one to spare)
    assert started <= ex.n_workers + 1, f"{started} of 31 elements ran, the error notwithstanding"
    assert executors.abandoned() is False  # the caller's context never sees a flag
    assert ad.psum(np.sum, xs[1:3], executor=ex, dispatch="always") == 5.0  # still usable


def _bad_at_20(w):
    if w[0] == 20.0:
        raise ValueError("bad element")
    return np.sum(w ** 2)


@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
def test_an_error_names_the_element_and_its_chunk_on_every_backend(backend):
    # the executor's note named the task ("item 5 of 8"), a batch of chunks the user never made
    xs = [np.array([float(i), 1.0]) for i in range(32)]
    with pytest.raises(ValueError, match="bad element") as info:
        ad.psum(_bad_at_20, xs, executor=executors.resolve(backend, 2), dispatch="always")
    assert info.value.__notes__ == [
        "psum/pmap: raised by f at element 20",
        f"executors: raised by chunk 10 of 16 in a map on the {backend!r} executor"]
    assert executors.where_raised(info.value).index == 10


def _exits_at_20(w):
    if w[0] == 20:
        sys.exit(4)  # argparse and library code call it too
    return np.sum(w ** 2)


@pytest.mark.parametrize("backend", ["serial", "threads", "processes", "dask"])
def test_sys_exit_in_f_names_the_element_and_its_chunk_on_every_backend(backend, request):
    # the notes of an Exception named them, SystemExit's only the task ("item 5 of 8")
    ex = request.getfixturevalue("dask_ex") if backend == "dask" else executors.resolve(backend, 2)
    xs = [np.array([float(i), 1.0]) for i in range(32)]
    with pytest.raises(SystemExit) as info:
        ad.psum(_exits_at_20, xs, executor=ex, dispatch="always")
    assert info.value.code == 4
    assert info.value.__notes__ == [
        "psum/pmap: raised by f at element 20",
        f"executors: raised by chunk 10 of 16 in a map on the {backend!r} executor"]


class _LockedError(Exception):
    def __init__(self, message):
        super().__init__(message)
        self.lock = threading.Lock()  # cannot be pickled back from a worker


def _locked_at_20(w):
    if w[0] == 20.0:
        raise _LockedError("locked out")
    return np.sum(w ** 2)


@pytest.mark.parametrize("backend", ["processes", "dask"])
def test_an_exception_that_cannot_be_pickled_back_still_names_the_element_and_its_chunk(backend, request):
    # where it was raised travels with the stand-in that comes back instead
    ex = request.getfixturevalue("dask_ex") if backend == "dask" else executors.resolve(backend, 2)
    xs = [np.array([float(i), 1.0]) for i in range(32)]
    with pytest.raises(executors.RemoteError, match="locked out") as info:
        ad.psum(_locked_at_20, xs, executor=ex, dispatch="always")
    assert info.value.__notes__ == [
        "psum/pmap: raised by f at element 20",
        f"executors: raised by chunk 10 of 16 in a map on the {backend!r} executor"]
    where = executors.where_raised(info.value)
    assert (where.index, where.count, where.executor, where.unit) == (10, 16, backend, "chunk")


@ad.primitive
def _doubled(x):
    return 2.0 * x


@ad.rrule.register(_doubled)
def _doubled_rrule(x):
    def doubled_pullback(g):
        if np.any(x > 5):
            raise ArithmeticError("pullback failed")
        return ad.NoTangent(), 2.0 * g
    return 2.0 * x, doubled_pullback


@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
@pytest.mark.parametrize("scalar", [True, False])
def test_an_error_in_a_pullback_names_the_chunk_s_elements(backend, scalar):
    """A rule's pullback that raised was named by its chunk only."""
    ws = [np.full(2, float(i)) for i in range(8)]
    ex = executors.resolve(backend, 2)
    with pytest.raises(ArithmeticError, match="pullback failed") as info:
        if scalar:  # the gradients come with the value, from the forward map
            ad.gradient(lambda ms: ad.psum(lambda w: np.sum(_doubled(w)), ms, executor=ex,
                                           dispatch="always", chunk_size=2), ws)
        else:  # a pullback map of its own
            y, back = ad.pullback(lambda ms: ad.pmap(_doubled, ms, executor=ex, dispatch="always",
                                                     chunk_size=2), ws)
            back([np.ones(2)] * 8)
    assert info.value.__notes__[0] == "psum/pmap: raised by the pullback of f over elements 6..7"
    assert info.value.__notes__[1].startswith("executors: raised by chunk 3 of 4")


@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
def test_an_error_in_chunks_run_inline_names_the_chunk_among_all(backend):
    # tiny work runs inline: the note named its item among the chunks of one inline
    # sub-run ("item 4 of 15") "on the 'serial' executor", then "item 0 of 1"
    xs = [np.array([float(i), 1.0]) for i in range(32)]
    ex = executors.resolve(backend, 2)
    notes = []
    for _ in range(3):
        with pytest.raises(ValueError, match="bad element") as info:
            ad.psum(_bad_at_20, xs, executor=ex)
        notes.append(info.value.__notes__)
    assert all(n[0] == "psum/pmap: raised by f at element 20" for n in notes)
    for n in notes:
        assert n[1] in ("executors: raised by chunk 10 of 16, run inline",
                        "executors: raised while the call's 16 chunks ran inline, in one pass",
                        f"executors: raised by chunk 10 of 16 in a map on the {backend!r} executor"), n


@pytest.mark.parametrize("f, why", [
    (lambda w: print(w), r"f returned None: is its return statement missing\?"),
    (lambda w: (np.sum(w), None), r"f's value holds None"),
    (lambda w: {"loss": np.sum(w), "tag": "run"}, r"f's value holds a string"),
    (lambda w: {"a": np.sum(w)} if w[0] < 1 else {"b": np.sum(w)}, r"the same structure"),
])
@pytest.mark.parametrize("chunk_size", [1, 2])
def test_values_that_cannot_be_summed_say_why(f, why, chunk_size):
    # None gave "every element must give a value of the same shape" (both were None), and
    # strings were joined: 'runrunrun'
    with pytest.raises((TypeError, ValueError), match=why):
        ad.psum(f, [np.full(2, float(i)) for i in range(4)], executor="serial", chunk_size=chunk_size)


@pytest.mark.parametrize("backend", ["serial", "threads", "processes"])
def test_the_gradient_of_a_psum_over_no_elements_is_zero(backend):
    # the pullback read the first chunk of none: IndexError
    x = np.ones((2, 3))
    total = lambda ms, x: ad.psum(lambda w, x: np.sum((x @ w) ** 2), ms, x, executor=backend)  # noqa: E731
    assert total([], x) == 0.0
    g_models, g_x = ad.gradient(total, [], x)
    assert g_models == [] and g_x.shape == x.shape and not g_x.any()
    assert not ad.hvp(lambda x: total([], x), x, x).any()


@pytest.mark.parametrize("f, why", [
    (lambda w: None, r"f returned None: is its return statement missing\?"),
    (lambda w: (np.sum(w), None), r"f's value holds None"),
    (lambda w: {"loss": np.sum(w), "tag": "run"}, r"f's value holds a string"),
])
def test_values_that_cannot_be_summed_say_why_in_forward_mode_and_for_one_element(f, why):
    # jvp and hvp raised Python's "unsupported operand type(s) for +", and a psum of one
    # element returned the None or the string
    xs = [np.array([1.0, 2.0]), np.array([0.5, 0.1])]
    with pytest.raises(TypeError, match=why):
        ad.jvp(lambda ws: ad.psum(f, ws, executor="serial"), (xs,), (xs,))
    with pytest.raises(TypeError, match=why):
        ad.psum(f, xs[:1], executor="serial")
    with pytest.raises(TypeError, match=why):
        ad.gradient(lambda ws: ad.psum(f, ws, executor="serial"), xs[:1])


def _with_a_lock(w):
    return {"loss": np.sum(w), "lock": threading.Lock()}


def test_a_value_of_f_that_cannot_come_back_from_a_worker_is_named_as_f_s(processes):
    # "could not pickle the result of item 0 (a list) ... build them inside fn": a list
    # and an fn the user never made
    with pytest.raises(executors.base.SerializationError,
                       match=r"^f's value in chunks? [0-9.]+ could not be pickled .*_thread.lock.*'threads' executor"):
        ad.pmap(_with_a_lock, [np.ones(2)] * 4, executor=processes, dispatch="always")


def test_a_generator_as_xs_is_refused_with_the_fix_and_a_range_is_taken():
    with pytest.raises(TypeError, match=r"got generator, which can be gone through once only: pass list\(xs\)"):
        ad.psum(lambda x: x * x, (float(i) for i in range(3)))
    assert ad.psum(lambda x: x * x, range(4), executor="serial") == 14


def _traced_for(seconds):
    """A function whose gradient takes ``seconds`` of small traced operations."""
    def f(w):
        h, end = w, time.monotonic() + seconds
        while time.monotonic() < end:
            h = np.tanh(h * w + 0.1 * (h @ w))
        return np.sum(h)
    return f


def test_a_gradient_in_a_task_of_a_map_that_failed_stops_at_its_next_operation():
    """A thread cannot be killed: a differentiation running on the pool when its map
    raised would run on to its end (and close(), or a script's exit, wait for it). It
    stops at its next traced operation instead, in forward and reverse mode alike."""
    long = _traced_for(10.0)

    def item(i):
        if i == 0:
            time.sleep(0.3)  # the other items are well under way
            raise ValueError("item 0 failed")
        if i == 1:
            return ad.gradient(long, np.ones(3))
        return ad.jvp(long, (np.ones(3),), (np.ones(3),))

    t0 = time.monotonic()
    ex = executors.ThreadExecutor(3)
    with pytest.raises(ValueError, match="item 0 failed"):
        ex.map(item, [0, 1, 2])
    ex.close()  # waits for the tasks still running
    assert time.monotonic() - t0 < 3.0
    # in this thread, outside any map, a differentiation runs to its end
    assert np.all(np.isfinite(ad.gradient(_traced_for(0.05), np.ones(3))[0]))


def _stuck_on_element_1(i, w):
    if i == 1:
        time.sleep(120)  # far past every bound below: a call that waited for it fails
    return (i + 1) * np.sum(w ** 2)


def _weighted_square(i, w):
    return (i + 1) * np.sum(w ** 2)


@pytest.mark.parametrize("kind", ["psum-gradient", "pmap"])
def test_dask_a_stuck_element_times_out_and_its_worker_gets_no_new_work(kind, dask_ex):
    """Dask cannot stop a running task: the worker running the stuck element is
    restarted, so the next call does not wait behind it (on the only worker here)."""
    w = np.array([0.5, -1.0, 2.0])
    fn = ad.psum if kind == "psum-gradient" else ad.pmap

    def call(f, timeout):
        def total(w):
            out = fn(f, [0, 1, 2, 3], w, executor=dask_ex, chunk_size=1, timeout=timeout,
                     dispatch="always")  # (as a timeout does) on the cluster, not inline
            return out if fn is ad.psum else sum(out)
        return ad.value_and_gradient(total, w) if kind == "psum-gradient" else (total(w), None)

    call(_weighted_square, None)  # the worker up (restarted by an earlier test, perhaps)
    t0 = time.monotonic()
    with pytest.raises(executors.MapTimeoutError) as info:
        call(_stuck_on_element_1, 2.0)
    assert time.monotonic() - t0 < 15
    name = fn.__name__
    assert str(info.value).startswith(f"{name} on the 'dask' executor passed its timeout of 2 s (still running: "
                                      "elements 1; not started: elements 2..3). Dask cannot stop a running task: "
                                      "the workers running these were restarted.")
    assert info.value.running == [1] and info.value.not_started == [2, 3]
    t0 = time.monotonic()
    value, grad = call(_weighted_square, None)
    assert time.monotonic() - t0 < 40  # a restart, not the stuck task's 120 s
    assert float(value) == pytest.approx(10 * float(np.sum(w ** 2)))  # sum of (i + 1) |w|^2, i < 4
    if grad is not None:
        np.testing.assert_allclose(grad[0], 20 * w)
