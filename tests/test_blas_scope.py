"""What psum promises about BLAS threads (docs/design.md, "BLAS threads"): chunk work runs
with BLAS on one thread; the calling process is never pinned for chunks that run in worker
processes; where chunks run in this process, the pin lasts while they run and is undone
after; and the libraries offer no per-thread setting, which is why that is the limit."""

import ctypes
import threading
import time

import numpy as np
import pytest
import threadpoolctl

import adrules as ad
import executors


def _blas_threads():
    return [lib.num_threads for lib in threadpoolctl.ThreadpoolController().lib_controllers
            if lib.user_api == "blas"]


@pytest.fixture
def many_blas_threads():
    """BLAS on two threads in this process (whatever the environment set), restored after."""
    with threadpoolctl.threadpool_limits(2, user_api="blas"):
        if max(_blas_threads(), default=1) < 2:
            pytest.skip("this BLAS cannot be set to two threads")
        yield


def _waits(w):
    time.sleep(0.05)  # keeps the chunk running while the caller's process is looked at
    return np.sum(w)


def _seen_while(run):
    """The BLAS thread counts another thread of this process sees while ``run()`` runs."""
    seen, done = [], threading.Event()

    def look():
        while not done.is_set():
            seen.append(tuple(_blas_threads()))
            time.sleep(0.005)

    watcher = threading.Thread(target=look)
    watcher.start()
    try:
        run()
    finally:
        done.set()
        watcher.join()
    return set(seen)


def test_chunks_on_worker_processes_never_pin_the_calling_process(many_blas_threads):
    before = tuple(_blas_threads())
    xs = [np.ones(3) * i for i in range(8)]
    with executors.ProcessExecutor(2) as ex:
        ex.map(abs, [1, 2])  # up
        seen = _seen_while(lambda: ad.gradient(
            lambda xs: ad.psum(_waits, xs, executor=ex, dispatch="always"), xs))
        in_chunks = ad.pmap(lambda w: _blas_threads(), xs[:2], executor=ex, dispatch="always")
    assert seen == {before}
    assert all(set(counts) == {1} for counts in in_chunks)  # the workers' own BLAS: one thread


def test_chunks_in_this_process_pin_while_they_run_and_restore_after(many_blas_threads):
    before = tuple(_blas_threads())
    xs = [np.ones(3) * i for i in range(8)]
    in_chunks = ad.pmap(lambda w: _blas_threads(), xs, executor="threads", dispatch="always")
    assert in_chunks == [[1] * len(before)] * len(xs)
    # one count per process: a thread beside the psum sees the pin too (the documented limit)
    seen = _seen_while(lambda: ad.psum(_waits, xs, executor=executors.ThreadExecutor(2), dispatch="always"))
    assert tuple([1] * len(before)) in seen
    assert tuple(_blas_threads()) == before


def test_openblas_has_no_thread_count_of_its_own_per_thread(many_blas_threads):
    """``openblas_set_num_threads_local``, where an OpenBLAS has it, sets the one count
    of the process in NumPy's pthreads builds: nothing to scope the pin with."""
    libs = [lib for lib in threadpoolctl.ThreadpoolController().lib_controllers
            if lib.internal_api == "openblas"]
    if not libs:
        pytest.skip("this NumPy's BLAS is not OpenBLAS")
    try:
        set_local = ctypes.CDLL(libs[0].filepath).openblas_set_num_threads_local
    except AttributeError:
        pytest.skip("this OpenBLAS has no openblas_set_num_threads_local")
    set_local.restype, set_local.argtypes = ctypes.c_int, [ctypes.c_int]
    seen, pinned, release = [], threading.Event(), threading.Event()

    def pin_here():
        previous = set_local(1)
        pinned.set()
        release.wait(10)
        set_local(previous)

    t = threading.Thread(target=pin_here)
    t.start()
    pinned.wait(10)
    seen.append(libs[0].num_threads)
    release.set()
    t.join()
    assert seen == [1]  # another thread's "local" setting reached this one
