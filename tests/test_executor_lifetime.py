"""When executors end: with the process that made them (a multiprocessing or joblib worker
runs no atexit hook), when closed from another thread mid-map, and what settings they
refuse. Real processes, real scripts."""

import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import adrules as ad
import executors

NESTED = textwrap.dedent('''
    import sys, time
    import numpy as np
    import adrules as ad

    def total(seed):
        xs = [np.full(3, float(seed + i)) for i in range(4)]
        return float(ad.psum(lambda w: np.sum(w ** 2), xs, executor="processes", dispatch="always"))

    if __name__ == "__main__":
        t0 = time.perf_counter()
        if sys.argv[1] == "joblib":
            from joblib import Parallel, delayed
            got = Parallel(n_jobs=2)(delayed(total)(s) for s in range(2))
        else:
            from concurrent.futures import ProcessPoolExecutor
            with ProcessPoolExecutor(2) as pool:
                got = list(pool.map(total, range(2)))
        print("RESULT", got, round(time.perf_counter() - t0, 1))
''')


@pytest.mark.parametrize("outer", ["joblib", "futures"])
def test_executors_made_inside_a_multiprocessing_worker_close_with_it(tmp_path, outer):
    """Their workers used to keep the outer worker from exiting until they idled out (300 s)."""
    script = tmp_path / "nested.py"
    script.write_text(NESTED)
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, str(script), outer], capture_output=True, text=True, timeout=200)
    assert r.returncode == 0, r.stderr[-3000:]
    expected = [sum(3 * (s + i) ** 2 for i in range(4)) for s in range(2)]
    assert f"RESULT {[float(v) for v in expected]}" in r.stdout, r.stdout
    assert time.perf_counter() - t0 < 90  # seconds of work and start-up, not an idle timeout


@pytest.mark.parametrize("bad", [0, -1, 0.0, "60", True, None])
def test_a_process_executor_refuses_an_idle_timeout_that_is_not_a_positive_number(bad):
    with pytest.raises(ValueError, match=r"ProcessExecutor: idle_timeout must be a positive number of "
                                         r"seconds .*got " + repr(bad).replace("(", r"\(")):
        executors.ProcessExecutor(2, idle_timeout=bad)


def _slow(x):
    time.sleep(0.05)
    return x


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_close_from_another_thread_mid_map_gives_a_clear_error_and_the_executor_works_after(backend):
    ex = executors.ThreadExecutor(2) if backend == "threads" else executors.ProcessExecutor(2)
    ex.map(abs, [1, 2])  # up
    closer = threading.Timer(0.2, ex.close)
    closer.start()
    try:  # the map may also get to finish: close() waits for what runs
        assert ex.map(_slow, range(200)) == list(range(200))
    except executors.WorkerError as e:
        assert "executor was closed (close() from another thread) while this map was running" in str(e)
    closer.join()
    assert ex.map(abs, [-3, -4]) == [3, 4]  # a later map starts afresh
    ex.close()


def _exits_at_3(w):
    if w == 3.0:
        import os

        os._exit(1)  # the worker process dies (a segfault would do the same)
    return w * w


def test_a_worker_death_names_the_element_it_was_running():
    with executors.ProcessExecutor(2) as ex:
        with pytest.raises(executors.WorkerError, match="died while this map") as info:
            ad.psum(_exits_at_3, [float(i) for i in range(8)], executor=ex, chunk_size=1, dispatch="always")
        assert "psum: the worker died running f over element 3" in info.value.__notes__
        assert ad.psum(lambda w: w * w, [1.0, 2.0], executor=ex, dispatch="always") == 5.0


def _fails_fast_or_waits(i):
    if i == 1:
        raise ValueError("element 1 is bad")
    deadline = time.monotonic() + 30.0  # stops early once the map raised: close() needs not wait
    while time.monotonic() < deadline and not executors.abandoned():
        time.sleep(0.01)
    return i


def test_an_error_on_processes_is_raised_as_soon_as_it_arrives():
    """The caller ran a share of the chunks itself, and reported an error only after it."""
    with executors.ProcessExecutor(2) as ex:
        ex.map(abs, [1, 2])
        t0 = time.perf_counter()
        with pytest.raises(ValueError, match="element 1 is bad"):
            ad.pmap(_fails_fast_or_waits, list(range(4)), executor=ex, chunk_size=1, dispatch="always")
        assert time.perf_counter() - t0 < 15.0  # element 0's 30 s were not waited for (a busy machine: seconds)
