"""One contract, every backend: serial (the reference), threads, processes, dask, and
the joblib executor under joblib's loky, threading and dask backends.

Real thread pools, real loky processes and a real dask LocalCluster; no mocks.
"""

from __future__ import annotations

import collections
import logging
import math
import os
import pickle
import random
import signal
import subprocess
import sys
import threading
import time
import warnings

import numpy as np
import psutil
import pytest
import threadpoolctl

import executors
from executors import (
    ProcessExecutor,
    SerialExecutor,
    ThreadExecutor,
    WorkerError,
    chunk_ranges,
    tree_sum,
)

# another LocalCluster on this machine (e.g. a parallel test run) holds the scheduler's
# default HTTP port; distributed then picks a free port and warns
pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")

BACKENDS = ["serial", "threads-1", "threads-2", "processes-1", "processes-2", "dask-2",
            "joblib-loky", "joblib-threading", "joblib-dask"]


# ----------------------------------------------------------------- fixtures


@pytest.fixture(scope="module")
def dask_executor():
    pytest.importorskip("distributed")  # the dask extra; every dask-2 case goes through here
    ex = executors.DaskExecutor(n_workers=2, silence_logs=logging.CRITICAL)
    yield ex
    ex.close()


@pytest.fixture(scope="module")
def local_pools():
    pools = {
        "serial": SerialExecutor(),
        "threads-1": ThreadExecutor(1),
        "threads-2": ThreadExecutor(2),
        "processes-1": ProcessExecutor(1),
        "processes-2": ProcessExecutor(2),
    }
    yield pools
    for ex in pools.values():
        ex.close()


@pytest.fixture(params=BACKENDS)
def ex(request, local_pools):
    if request.param.startswith("dask"):
        return request.getfixturevalue("dask_executor")
    if request.param.startswith("joblib-"):
        return _joblib_under(request, request.param.split("-", 1)[1])
    return local_pools[request.param]


def _joblib_under(request, backend):
    """Enter ``joblib.parallel_config(backend=...)`` for the rest of the test."""
    import joblib

    kwargs = {"client": request.getfixturevalue("loopback_dask_client")} if backend == "dask" else {}
    cfg = joblib.parallel_config(backend=backend, **kwargs)
    cfg.__enter__()
    request.addfinalizer(lambda: cfg.__exit__(None, None, None))
    return executors.JoblibExecutor(n_jobs=2)


# ------------------------------------------------------- module-level helpers
# (defined at module level so process/dask workers import them by reference)


class CustomError(Exception):
    pass


class TwoArgError(Exception):
    """Does not survive pickling: unpickling calls TwoArgError(message)."""

    def __init__(self, a, b):
        super().__init__(f"{a}/{b}")


def explode_on_load():
    raise ImportError("module missing on the worker")


class FailsToUnpickle:
    """Pickles fine in the parent, fails to unpickle (like a module missing on a worker)."""

    def __reduce__(self):
        return (explode_on_load, ())


def raise_two_arg(x):
    if x == 1:
        raise TwoArgError("left", "right")
    return x


class LockedError(Exception):
    """Cannot be pickled at all: it holds a lock."""

    def __init__(self, message):
        super().__init__(message)
        self.lock, self.code = threading.Lock(), 42


def raise_locked(x):
    if x == 1:
        e = LockedError("locked out")
        e.__notes__ = ["raised where the user said"]  # (add_note: Python >= 3.11)
        raise e
    return x


def raise_locked_with_a_reason(x):
    e = LockedError("locked out")
    e.reason, e.message = "the user's reason", "the user's message"
    raise e


def exit_at_3(x):
    if x == 3:
        sys.exit(3)  # argparse and library code call it too
    return x


def raise_base_at_1(x, kind):
    if x == 1:
        raise kind("from f")
    return x


def square(x):
    return x * x


def scrambled(x, seed):
    """Finish in a scrambled order: later items are often faster."""
    time.sleep(random.Random(seed * 1000 + x).random() * 0.01)
    return (x, x * x)


def fail_at(x, bad):
    if x == bad:
        raise CustomError(f"bad item {x}")
    return x


def blas_threads(_):
    return sorted(
        {i["num_threads"] for i in threadpoolctl.threadpool_info() if i["user_api"] == "blas"}
    )


def worker_view(_):
    return (executors.in_worker(), executors.current_chunk_size(), executors.resolve().name)


def nested_map(x):
    inner = executors.resolve()
    return (inner.name, inner.map(lambda y, x: y + x, range(3), shared=(x,)))


def chunk_work(r, xs, mat):
    """A chunk of a 'psum': a left fold in index order plus BLAS work."""
    acc = 0.0
    for i in r:
        acc += xs[i] * math.sin(xs[i])
    v = mat @ np.full(mat.shape[1], xs[r.start])
    return np.array([acc, float(v.sum())])


def kill_once(x, marker):
    """SIGKILL the worker process on the first attempt at item 1."""
    if x == 1 and not os.path.exists(marker):
        with open(marker, "w"):
            pass
        os.kill(os.getpid(), signal.SIGKILL)
    return x * 10


def pid_of(_):
    return os.getpid()


def sleepy(x, seconds):
    time.sleep(seconds)
    return x


@pytest.fixture
def ctrl_c_raises():
    """Python's own SIGINT handler for the test: a shell that starts a job in the
    background (``.ci/run &``) makes it ignore SIGINT, and Python keeps that."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


def interrupt_main_after(seconds):
    """Deliver a real SIGINT to the main thread (like Ctrl-C) after a delay."""
    main = threading.main_thread().ident
    t = threading.Timer(seconds, signal.pthread_kill, args=(main, signal.SIGINT))
    t.start()
    return t


def loky_children():
    """loky's worker processes. Its resource tracker is left out: one per interpreter,
    started with the first pool and kept for the interpreter's life by design."""
    out = set()
    for p in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(p.cmdline())
            if "loky" in cmdline and "resource_tracker" not in cmdline:
                out.add(p.pid)
        except psutil.Error:
            pass
    return out


def gone(pid):
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# ------------------------------------------------------------ the contract


class TestContract:
    """Every backend must give the serial executor's answers."""

    def test_item_order_with_scrambled_completion(self, ex):
        items = list(range(37))
        out = ex.map(scrambled, items, shared=(5,))
        assert out == [(x, x * x) for x in items]

    def test_lambdas_and_closures(self, ex):
        k = 7
        assert ex.map(lambda x: x * k, range(5)) == [0, 7, 14, 21, 28]

    def test_shared_arguments(self, ex):
        w = np.arange(6.0)
        out = ex.map(lambda i, w, b: float(w[i] * b), range(6), shared=(w, 2.5))
        assert out == [float(v * 2.5) for v in w]

    def test_empty_and_generator_items(self, ex):
        assert ex.map(square, []) == []
        assert ex.map(square, (x for x in range(4))) == [0, 1, 4, 9]

    def test_shared_must_be_a_tuple(self, ex):
        with pytest.raises(TypeError, match="shared"):
            ex.map(square, [1], shared=np.ones(3))

    def test_on_done_in_parent_once_per_item(self, ex):
        seen = []
        main = threading.get_ident()

        def on_done(i):
            seen.append((i, threading.get_ident(), os.getpid()))

        out = ex.map(scrambled, range(12), shared=(1,), on_done=on_done)
        assert out == [(x, x * x) for x in range(12)]
        assert sorted(i for i, _, _ in seen) == list(range(12))
        assert {(t, p) for _, t, p in seen} == {(main, os.getpid())}

    def test_exception_type_message_and_index(self, ex):
        with pytest.raises(CustomError, match="bad item 3") as info:
            ex.map(fail_at, range(8), shared=(3,))
        notes = getattr(info.value, "__notes__", [])
        assert any("item 3 of 8" in n and repr(ex.name) in n for n in notes), notes
        # the pool survives
        assert ex.map(square, range(5)) == [0, 1, 4, 9, 16]

    def test_builtin_exception_after_error(self, ex):
        with pytest.raises(ZeroDivisionError):
            ex.map(lambda x: 1 / (x - 2), range(4))
        assert ex.map(square, [3]) == [9]

    def test_worker_context(self, ex):
        assert not executors.in_worker()
        with executors.config(chunk_size=7):
            out = ex.map(worker_view, range(3))
        assert out == [(True, 7, "serial")] * 3
        assert ex.map(worker_view, range(2)) == [(True, None, "serial")] * 2
        assert not executors.in_worker()

    def test_nested_map_runs_serially_inside_workers(self, ex):
        out = ex.map(nested_map, range(4))
        assert out == [("serial", [x, x + 1, x + 2]) for x in range(4)]

    def test_blas_pinned_inside_chunk_work_and_restored(self, ex):
        before = blas_threads(None)
        out = ex.map(blas_threads, range(3))
        assert out == [[1]] * 3
        assert blas_threads(None) == before

    def test_identity_of_results(self, ex):
        obj = {"a": [1, 2]}
        (res,) = ex.map(lambda i, o: o, [0], shared=(obj,))
        assert res == obj
        assert (res is obj) == ex.shares_memory

    def test_closures_can_be_returned(self, ex):
        fns = ex.map(lambda k: (lambda x: x + k), range(3))
        assert [f(10) for f in fns] == [10, 11, 12]

    def test_bitwise_identical_chunked_sum(self, ex):
        rng = np.random.default_rng(0)
        xs = (rng.standard_normal(1000) * 10.0 ** rng.integers(-8, 8, 1000)).tolist()
        mat = rng.standard_normal((64, 64))
        chunks = chunk_ranges(len(xs), 37)
        ref = tree_sum(SerialExecutor().map(chunk_work, chunks, shared=(xs, mat)))
        got = tree_sum(ex.map(chunk_work, chunks, shared=(xs, mat)))
        assert got.tobytes() == ref.tobytes()
        # and it is not a tautology: another association gives other bits
        parts = SerialExecutor().map(chunk_work, chunks, shared=(xs, mat))
        left = parts[0]
        for p in parts[1:]:
            left = left + p
        assert left.tobytes() != ref.tobytes()

    def test_mutated_shared_array_is_resent(self, ex):
        w = np.arange(10_000, dtype=float)  # large enough to be content-hashed/scattered
        assert ex.map(lambda i, w: float(w[i]), [0, 1], shared=(w,)) == [0.0, 1.0]
        w[0] = 42.0
        assert ex.map(lambda i, w: float(w[i]), [0, 1], shared=(w,)) == [42.0, 1.0]

    def test_concurrent_maps_from_two_threads(self, ex):
        barrier = threading.Barrier(2)
        results = {}

        def caller(tag):
            barrier.wait()
            results[tag] = ex.map(lambda x, t: (t, x * x), range(20), shared=(tag,))

        threads = [threading.Thread(target=caller, args=(t,)) for t in ("a", "b")]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert results == {t: [(t, x * x) for x in range(20)] for t in ("a", "b")}

    def test_capability_flags(self, ex):
        assert ex.name in ("serial", "threads", "processes", "dask", "joblib")
        threads = ex.name == "joblib" and ex.backend_name == "ThreadingBackend"
        assert ex.shares_memory == (ex.name in ("serial", "threads") or threads)
        assert ex.n_workers >= 1
        per_call, per_task, per_byte = overhead = ex.overhead()  # measured once, on the workers
        assert overhead is ex.overhead() and min(overhead) >= 0
        assert overhead == (0, 0, 0) if ex.name == "serial" else per_call + per_task > 0
        if ex.shares_memory:
            assert per_byte == 0
        elif ex.name in ("processes", "dask"):
            # a measurement is medians of three timed maps: on a busy machine a MiB's cost can
            # drown in one's noise, not in three more
            assert per_byte > 0 or any(executors.base._measure(ex)[2] > 0 for _ in range(3))


# ------------------------------------------------------- local backends only


def test_threads_run_concurrently():
    """Each task waits for the other at a barrier: one after the other, the first would
    wait out the timeout alone (BrokenBarrierError). Timing the two tasks against the sum
    of their sleeps failed on a busy machine."""
    barrier = threading.Barrier(2, timeout=30)
    with ThreadExecutor(2) as ex:
        assert ex.map(lambda i: (barrier.wait(), i)[1], [0, 1]) == [0, 1]


def test_thread_nested_map_on_the_same_pool_does_not_deadlock():
    with ThreadExecutor(1) as ex:
        out = ex.map(lambda x: ex.map(lambda y: x * y, range(3)), range(3))
    assert out == [[x * y for y in range(3)] for x in range(3)]


def test_thread_executor_reopens_after_close():
    ex = ThreadExecutor(2)
    assert ex.map(square, [2]) == [4]
    ex.close()
    assert ex.map(square, [3]) == [9]
    ex.close()


def test_context_manager_closes():
    with ProcessExecutor(1) as ex:
        pids = ex.map(pid_of, range(2))
    assert all(gone(p) for p in pids)


THREADS_AT_EXIT = """
import threading, time
import executors

def pool_threads():
    return sum(t.name.startswith("executors-thread") for t in threading.enumerate())

kept = executors.ThreadExecutor(8)
assert kept.map(abs, [-1, -2]) == [1, 2]
print("started", pool_threads())             # as many as the map needed
dropped = executors.ThreadExecutor(2)
assert dropped.map(abs, [-1, -2, -3]) == [1, 2, 3]
del dropped                                   # never closed: its threads stop
release = threading.Event()
stuck = executors.ThreadExecutor(2)
try:
    stuck.map(lambda x: release.wait(60) if x else x, [0, 1], timeout=2.0)
except executors.MapTimeoutError as e:
    print("running", e.running)
threading.Timer(1.0, release.set).start()     # the stuck task ends a second after the script
print("end", time.time())
"""


def test_pool_threads_start_as_maps_need_them_and_python_exits_once_their_tasks_are_done(tmp_path):
    """Neither a ThreadExecutor left open nor one dropped unclosed keeps Python from
    exiting; a task still running (left behind by a timeout) is waited for."""
    script = tmp_path / "threads_at_exit.py"
    script.write_text(THREADS_AT_EXIT)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    words = out.stdout.split()
    assert words[:4] == ["started", "2", "running", "[1]"]
    assert time.time() - float(words[-1]) > 0.9  # the stuck task was waited for


FORKED_CHILD = """
import os, sys, traceback, warnings
import executors

warnings.simplefilter("ignore", DeprecationWarning)  # (3.12+: a fork with threads running)
ex = executors.ThreadExecutor(2)
for fork in range(20):                               # a fork may catch a pool thread mid-wake-up
    assert ex.map(abs, [-1, -2]) == [1, 2]           # the pool's threads started
    pid = os.fork()
    if pid == 0:                                     # only the forking thread came along
        code = 1
        try:
            code = 0 if ex.map(abs, [-3, -4, -5], timeout=10) == [3, 4, 5] else 2
        except BaseException:
            traceback.print_exc()
            sys.stderr.flush()
        finally:
            os._exit(code)
    _, status = os.waitpid(pid, 0)
    if status:
        sys.exit(f"the child forked after map {fork} failed (wait status {status})")
print("parent", ex.map(abs, [-6]), flush=True)
"""


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork: POSIX only")
def test_a_thread_executor_used_before_a_fork_runs_maps_in_the_child(tmp_path):
    """A child forked after the pool's threads started (multiprocessing's "fork" start
    method, a user's os.fork) has none of them: its maps run on threads of its own and a
    queue of its own. Twenty forks, so that one catches a pool thread waking up: the child
    must not keep a queue whose lock no thread of its own will release."""
    script = tmp_path / "forked_child.py"
    script.write_text(FORKED_CHILD)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    out = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split("\n")[0] == "parent [6]", (out.stdout, out.stderr)


def test_serial_cancels_nothing_but_stops_at_error():
    calls = []

    def fn(x):
        calls.append(x)
        if x == 2:
            raise ValueError("stop")
        return x

    with pytest.raises(ValueError):
        SerialExecutor().map(fn, range(6))
    assert calls == [0, 1, 2]


def test_threads_cancel_pending_tasks_after_an_error():
    started = []

    def fn(x):
        started.append(x)
        if x == 0:
            raise ValueError("first")
        time.sleep(0.05)
        return x

    with ThreadExecutor(1) as ex:
        with pytest.raises(ValueError):
            ex.map(fn, range(50))
    assert len(started) < 50


# ----------------------------------------------------------- worker death


def test_process_worker_killed_raises_worker_error_and_recovers(tmp_path):
    marker = str(tmp_path / "killed")
    before = loky_children()
    ex = ProcessExecutor(2)
    try:
        ex.map(square, range(2))
        t = time.perf_counter()
        with pytest.raises(WorkerError, match="died") as info:
            ex.map(kill_once, range(4), shared=(marker,))
        assert time.perf_counter() - t < 20
        assert "unfinished items" in str(info.value)
        assert os.path.exists(marker)
        # next call works, with fresh workers
        assert ex.map(kill_once, range(4), shared=(marker,)) == [0, 10, 20, 30]
        pids = ex.map(pid_of, range(4))
    finally:
        ex.close()
    assert all(gone(p) for p in pids)
    leaked = {p for p in loky_children() - before if not gone(p)}
    assert not leaked


def keep_heap_memory(_):
    """Allocate and free 640 MiB in 16 MiB arrays: below the workers' mmap threshold, so
    glibc keeps the pages in the heap (WORKER_MALLOC_ENV), as heavy chunk work does."""
    arrays = [np.ones(2 * 2**20) for _ in range(40)]
    del arrays
    return os.getpid()


def pid_after_a_leak_check(_):
    time.sleep(1.2)  # loky checks a worker's memory at most once a second, after a task
    return os.getpid()


def test_heap_kept_by_heavy_work_does_not_restart_process_workers():
    """loky restarts a worker that grew by more than its leak allowance (300 MB by
    default), with a warning, between tasks; the heap the workers keep on purpose must
    not count as a leak."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # loky's "A worker was restarted ..." UserWarning
        with ProcessExecutor(1) as ex:
            first = ex.map(pid_of, [0])  # loky takes its reference size after a first task
            assert ex.map(keep_heap_memory, [0]) == first
            later = [ex.map(pid_after_a_leak_check, [0])[0] for _ in range(2)]
    assert later == first * 2


def page_faults_of_reused_temporaries(_):
    """Minor page faults of 40 allocate-and-free rounds of a 1 MiB array, after a first
    round: none where glibc keeps freed memory, 256 a round where it hands it back."""
    import resource

    np.ones(2**17).sum()
    before = resource.getrusage(resource.RUSAGE_THREAD).ru_minflt
    for _ in range(40):
        np.ones(2**17).sum()
    return resource.getrusage(resource.RUSAGE_THREAD).ru_minflt - before


@pytest.mark.parametrize("backend", ["processes", "dask"])
def test_workers_keep_freed_memory_for_the_next_temporaries(backend, local_pools, request):
    """Array work on workers must not fault every temporary in afresh (Dask's own
    default trims the heap: a chunk of 200x200 matrices took 8,000 faults and twice the
    time of one on a loky worker)."""
    if not hasattr(__import__("resource"), "RUSAGE_THREAD"):
        pytest.skip("RUSAGE_THREAD is Linux only")
    ex = request.getfixturevalue("dask_executor") if backend == "dask" else local_pools["processes-2"]
    faults = ex.map(page_faults_of_reused_temporaries, [0, 1])
    assert all(f < 40 * 256 // 4 for f in faults), faults


def malloc_environment(_=None):
    import os
    return {k: os.environ.get(k) for k in ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_")}


def test_dask_workers_keep_their_heap_settings_after_another_cluster_started(loopback_dask_client):
    """A nanny of any LocalCluster (here the user's own, with Dask's defaults) writes its
    trim threshold into this process's environment, where later nannies read it over their
    configuration: our workers handed freed memory back at every temporary."""
    from executors.local import WORKER_MALLOC_ENV

    assert loopback_dask_client.run(malloc_environment)  # the other cluster is up
    with executors.DaskExecutor(n_workers=1, silence_logs=logging.CRITICAL) as ex:
        assert ex.map(malloc_environment, [0]) == [WORKER_MALLOC_ENV]


def test_dask_worker_killed_mid_map_is_recomputed(dask_executor, tmp_path):
    marker = str(tmp_path / "killed")
    t = time.perf_counter()
    try:
        out = dask_executor.map(kill_once, range(4), shared=(marker,))
    except WorkerError:  # also allowed by the contract: a clear error, no hang
        out = None
    assert time.perf_counter() - t < 60
    assert os.path.exists(marker)
    if out is not None:
        assert out == [0, 10, 20, 30]
    assert dask_executor.map(square, range(4)) == [0, 1, 4, 9]


# --------------------------------------------------------- KeyboardInterrupt


def test_keyboard_interrupt_threads(ctrl_c_raises):
    release = threading.Event()
    with ThreadExecutor(2) as ex:
        ex.map(square, [1])
        timer = interrupt_main_after(0.3)
        t = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            ex.map(lambda x: release.wait(10), range(20))
        timer.join()
        assert time.perf_counter() - t < 5
        release.set()
        assert ex.map(square, range(4)) == [0, 1, 4, 9]


def test_keyboard_interrupt_processes_terminates_and_recreates_pool(ctrl_c_raises):
    before = loky_children()
    ex = ProcessExecutor(2)
    try:
        old = set(ex.map(pid_of, range(4)))
        timer = interrupt_main_after(0.3)
        t = time.perf_counter()
        with pytest.raises(KeyboardInterrupt):
            ex.map(sleepy, range(8), shared=(5.0,))
        timer.join()
        assert time.perf_counter() - t < 5
        assert all(gone(p) for p in old)
        assert ex.map(square, range(4)) == [0, 1, 4, 9]
    finally:
        ex.close()
    leaked = {p for p in loky_children() - before if not gone(p)}
    assert not leaked, [psutil.Process(p).cmdline() for p in leaked]


def test_keyboard_interrupt_dask(ctrl_c_raises, dask_executor):
    timer = interrupt_main_after(0.3)
    t = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        dask_executor.map(sleepy, range(6), shared=(1.0,))
    timer.join()
    assert time.perf_counter() - t < 5
    assert dask_executor.map(square, range(4)) == [0, 1, 4, 9]


# ----------------------------------------------------------- pickling errors


@pytest.fixture(params=["processes-1", "dask-2", "joblib-loky"])
def remote_ex(request, local_pools):
    if request.param.startswith("dask"):
        return request.getfixturevalue("dask_executor")
    if request.param.startswith("joblib-"):
        return _joblib_under(request, request.param.split("-", 1)[1])
    return local_pools[request.param]


def _is_pickling_error(exc):
    return isinstance(exc, (TypeError, pickle.PicklingError))


def test_unpicklable_fn_is_named(remote_ex):
    lock = threading.Lock()
    with pytest.raises((TypeError, pickle.PicklingError), match=r"\bfn\b") as info:
        remote_ex.map(lambda x: (lock, x), range(3))
    assert _is_pickling_error(info.value) and "lock" in str(info.value)
    assert remote_ex.map(square, [2]) == [4]


def test_unpicklable_item_is_named(remote_ex):
    items = [1, (x for x in range(3)), 3]
    with pytest.raises((TypeError, pickle.PicklingError), match="item 1") as info:
        remote_ex.map(lambda x: x, items)
    assert "generator" in str(info.value)
    assert remote_ex.map(square, [2]) == [4]


def test_unpicklable_shared_arg_is_named(remote_ex):
    with pytest.raises((TypeError, pickle.PicklingError), match="shared arg 1"):
        remote_ex.map(lambda x, a, b: x, range(3), shared=(1.0, threading.Lock()))
    assert remote_ex.map(square, [2]) == [4]


def test_unpicklable_result_is_named(remote_ex):
    with pytest.raises((TypeError, pickle.PicklingError), match="result of item 2"):
        remote_ex.map(lambda x: (y for y in range(x)) if x == 2 else x, range(4))
    assert remote_ex.map(square, [2]) == [4]


def test_unpickling_failure_on_the_worker_is_named(remote_ex):
    with pytest.raises((TypeError, pickle.PicklingError), match="unpickle item 1") as info:
        remote_ex.map(lambda x: x, [1, FailsToUnpickle(), 3])
    assert "module missing on the worker" in str(info.value)
    with pytest.raises((TypeError, pickle.PicklingError), match="unpickle shared arg 0"):
        remote_ex.map(lambda x, a: x, [1], shared=(FailsToUnpickle(),))
    assert remote_ex.map(square, [2]) == [4]


def test_unpicklable_exception_is_reported_not_a_broken_pool(remote_ex):
    from executors.base import RemoteError

    with pytest.raises(RemoteError, match="TwoArgError: left/right") as info:
        remote_ex.map(raise_two_arg, range(3))
    assert info.value.type_name.endswith("TwoArgError")
    assert any("item 1 of 3" in n for n in getattr(info.value, "__notes__", []))
    assert remote_ex.map(square, [2]) == [4]


def test_sys_exit_in_a_task_raises_system_exit_in_the_caller_and_keeps_the_workers(remote_ex):
    """On Dask the worker died of it, and 4 s later the map said "item 0 of 4 was lost"."""
    t = time.perf_counter()
    with pytest.raises(SystemExit) as info:
        remote_ex.map(exit_at_3, range(4))
    assert info.value.code == 3 and time.perf_counter() - t < 3
    assert any("item 3 of 4" in n for n in getattr(info.value, "__notes__", [])), info.value.__notes__
    assert remote_ex.map(square, [2]) == [4]


@pytest.mark.parametrize("kind", [KeyboardInterrupt, GeneratorExit, BaseException])
@pytest.mark.parametrize("name", ["processes-1", "dask-2"])
def test_a_base_exception_raised_by_f_comes_back_as_itself_and_keeps_the_workers(name, kind, local_pools,
                                                                                  request):
    """On processes it read "worker died (os._exit, crash)" and the worker was started
    again; on Dask a KeyboardInterrupt could close the worker and its nanny."""
    ex = request.getfixturevalue("dask_executor") if name == "dask-2" else local_pools[name]
    ex.map(square, [2])
    pids = sorted(ex.client.run(os.getpid).values()) if name == "dask-2" else ex.worker_pids()
    with pytest.raises(kind, match="from f") as info:
        ex.map(raise_base_at_1, range(3), shared=(kind,))
    assert type(info.value) is kind
    assert any("item 1 of 3" in n for n in getattr(info.value, "__notes__", [])), info.value
    assert ex.map(square, [2]) == [4]
    assert (sorted(ex.client.run(os.getpid).values()) if name == "dask-2" else ex.worker_pids()) == pids


def test_an_exception_that_cannot_be_pickled_comes_back_with_its_notes_and_plain_attributes(remote_ex):
    """On Dask it came back as a bare Exception (the stand-in was raised with the
    original as its context, which Dask's serializer then failed to pickle)."""
    from executors.base import RemoteError

    with pytest.raises(RemoteError, match="LockedError: locked out") as info:
        remote_ex.map(raise_locked, range(3))
    assert info.value.code == 42 and info.value.__context__ is None
    notes = getattr(info.value, "__notes__", [])
    assert "raised where the user said" in notes and any("item 1 of 3" in n for n in notes), notes
    assert remote_ex.map(square, [2]) == [4]


def test_an_exception_with_its_own_reason_attribute_keeps_the_remote_errors_message(remote_ex):
    """The user's ``reason`` replaced RemoteError's: the message said "could not be sent
    back from the worker: the user's reason"."""
    from executors.base import RemoteError

    with pytest.raises(RemoteError) as info:
        remote_ex.map(raise_locked_with_a_reason, range(1))
    assert "LockedError: locked out (the original exception could not be sent back" in str(info.value)
    assert "the user's" not in str(info.value) and "lock" in info.value.reason


def test_serial_and_threads_need_no_pickling(local_pools):
    lock = threading.Lock()
    for name in ("serial", "threads-2"):
        out = local_pools[name].map(lambda x, l: (x, l), range(2), shared=(lock,))
        assert out == [(0, lock), (1, lock)]


# ------------------------------------------------------------- dask specifics


def test_dask_shared_data_scattered_once_and_reused(dask_executor):
    w = np.random.default_rng(1).standard_normal(50_000)
    fn = lambda i, w: float(w[i])  # noqa: E731
    n0 = dask_executor._n_scatters
    assert dask_executor.map(fn, range(4), shared=(w,)) == [float(v) for v in w[:4]]
    assert dask_executor._n_scatters == n0 + 1
    assert dask_executor.map(fn, range(4), shared=(w,)) == [float(v) for v in w[:4]]
    assert dask_executor._n_scatters == n0 + 1  # reused, not re-sent
    w[2] = -1.0
    assert dask_executor.map(fn, range(4), shared=(w,))[2] == -1.0
    assert dask_executor._n_scatters == n0 + 2  # new content, re-sent


@pytest.mark.parametrize("backend", ["processes", "dask"])
def test_array_results_arrive_whole_and_writable(backend, local_pools, request):
    """Large array results travel apart from their pickled bytes and the parent builds the
    arrays on the memory they were received into (no second copy): each equals the
    worker's array bit for bit, views, dtypes, and empty and small arrays kept, and is the
    caller's to write into."""
    ex = request.getfixturevalue("dask_executor") if backend == "dask" else local_pools["processes-2"]

    def make(i):
        a = np.arange(300_000, dtype=np.float32) * (i + 1)
        return {"whole": a, "strided": a[::3], "fortran": np.asfortranarray(np.ones((300, 200)) * i),
                "small": np.full((4, 5), i), "empty": np.zeros((0, 3)), "scalar": float(i)}

    for i, r in enumerate(ex.map(make, range(3))):
        expected = make(i)
        for key in ("whole", "strided", "fortran", "small", "empty"):
            np.testing.assert_array_equal(r[key], expected[key])
            assert r[key].dtype == expected[key].dtype and r[key].shape == expected[key].shape
            assert r[key].flags.writeable, key
        assert r["fortran"].flags.f_contiguous
        for key in ("whole", "fortran"):  # built on the buffer received apart, not on pickled bytes
            root = r[key]
            while isinstance(root.base, np.ndarray):
                root = root.base
            assert root.dtype == np.uint8 and root.nbytes == r[key].nbytes, (key, type(r[key].base))
        r["whole"][0] = -1.0
        assert r["scalar"] == float(i)


def test_dask_explicit_scatter(dask_executor):
    w = np.arange(30_000.0)
    handle = dask_executor.scatter(w)
    n0 = dask_executor._n_scatters
    assert dask_executor.map(lambda i, w: float(w[i]), [5, 7], shared=(handle,)) == [5.0, 7.0]
    assert dask_executor._n_scatters == n0


def test_dask_uses_a_given_client_and_leaves_it_open(dask_executor):
    client = dask_executor.client
    with executors.DaskExecutor(client) as ex:
        assert ex.map(square, range(3)) == [0, 1, 4]
    assert client.status == "running"
    assert dask_executor.map(square, [5]) == [25]


def test_dask_rejects_cluster_kwargs_with_a_client(dask_executor):
    with pytest.raises(TypeError):
        executors.DaskExecutor(dask_executor.client, n_workers=3)


def test_dask_scheduler_address_string(dask_executor):
    address = dask_executor.client.scheduler.address
    # the cluster's TLS credentials: DaskExecutor secures the cluster it starts
    with executors.DaskExecutor(address, security=dask_executor.client.security) as ex:
        assert ex.map(square, range(3)) == [0, 1, 4]
    # our own client to that address was closed, the cluster still serves
    assert dask_executor.map(square, [6]) == [36]


def test_dask_security_is_passed_through():
    pytest.importorskip("cryptography")  # Security.temporary() makes a self-signed CA
    from distributed.security import Security

    with executors.DaskExecutor(
        n_workers=1, security=Security.temporary(), silence_logs=logging.CRITICAL
    ) as ex:
        assert ex.client.scheduler.address.startswith("tls://")
        assert ex.map(lambda x: x + 1, range(3)) == [1, 2, 3]


def test_loky_private_attributes():
    """executors.local reads two private loky attributes (loky has no public way to ask
    whether a pool is usable, or which processes are its workers); this fails if a loky
    release renames them."""
    from executors.local import _loky_pool_healthy, _loky_workers

    with executors.ProcessExecutor(2) as ex:
        ex.map(abs, [1, 2])
        pool = ex._pool
        workers = _loky_workers(pool)
        assert len(workers) == 2 and _loky_pool_healthy(pool)
        victim = next(iter(workers.values()))
        os.kill(victim.pid, signal.SIGKILL)
        victim.join(timeout=10)
        deadline = time.monotonic() + 10  # loky's manager thread notices the death on its own time
        while _loky_pool_healthy(pool) and time.monotonic() < deadline:
            time.sleep(0.01)
        assert not _loky_pool_healthy(pool)
        assert ex.map(abs, [-3]) == [3]  # and the executor replaced it


def test_a_reaped_worker_counts_as_dead():
    """loky's manager thread reaps a dead worker (waitpid) when it notices the death;
    a second waitpid learns nothing, so ``exitcode`` asked afterwards said "running"
    and the next map went to a pool about to break. The test reaps the worker itself,
    as the manager thread would (when the manager thread wins, the worker is reaped
    all the same)."""
    from executors.local import _has_exited, _loky_workers

    with executors.ProcessExecutor(1) as ex:
        ex.map(abs, [1])
        (worker,) = _loky_workers(ex._pool).values()
        os.kill(worker.pid, signal.SIGKILL)
        try:
            os.waitpid(worker.pid, 0)
        except ChildProcessError:
            pass  # loky's manager thread reaped it first
        assert _has_exited(worker)
        assert ex.map(abs, [-3]) == [3]


def test_dask_sends_big_items_without_dask_s_large_graph_warning(dask_executor):
    """Items reach the workers in the task graph, each once: Dask's advice for graphs
    over 10 MB ("load the data with Dask directly") is noise to a psum user with big
    models."""
    import warnings

    items = [np.full(800_000, float(i)) for i in range(3)]  # 19 MB in all
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sums = dask_executor.map(np.sum, items)
    assert sums == [np.sum(a) for a in items]
    assert not [w for w in caught if "large graph" in str(w.message)], [str(w.message) for w in caught]
