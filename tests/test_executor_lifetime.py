"""When executors end: with the process that made them (a multiprocessing or joblib worker
runs no atexit hook), when closed from another thread mid-map, and what settings they
refuse. Real processes, real scripts."""

import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
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


@pytest.mark.parametrize("bad", [0, -1, 0.0, "60", True, None, 1e-3, 0.01, 1e10, float("nan"), -math.inf])
def test_a_process_executor_refuses_an_idle_timeout_it_cannot_keep(bad):
    """1e-3 and 0.01 were accepted, and every call failed: the workers exited before their
    first task ("killed ... for lack of memory"); 1e10 failed in the worker's poll."""
    with pytest.raises(ValueError, match=r"ProcessExecutor: idle_timeout must be a number of seconds from 1 "
                                         r"to 2,000,000 .*or math.inf for never; got " + re.escape(repr(bad))):
        executors.ProcessExecutor(2, idle_timeout=bad)


def test_a_process_executor_with_an_infinite_idle_timeout_keeps_its_workers():
    """It was accepted, and every call failed: "cannot convert float infinity to integer"."""
    with executors.ProcessExecutor(1, idle_timeout=math.inf) as ex:
        assert ex.map(abs, [-1, -2]) == [1, 2]
        assert ex.map(abs, [-3]) == [3]


def _slow(x):
    time.sleep(0.05)
    return x


@pytest.mark.parametrize("backend", ["threads", "processes", "dask"])
def test_close_from_another_thread_mid_map_gives_a_clear_error_and_the_executor_works_after(backend):
    """On Dask it raised distributed's own ClosedClientError."""
    if backend == "dask":
        pytest.importorskip("distributed")
    ex = {"threads": executors.ThreadExecutor, "processes": executors.ProcessExecutor,
          "dask": lambda n: executors.DaskExecutor(n_workers=n)}[backend](2)
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


_LEAVES_A_STOP_FLAG_AND_STARTS_DASK = '''
import executors


def fails(x):
    raise ValueError("a failed map sets its stop flag")


if __name__ == "__main__":
    try:
        executors.ProcessExecutor(1).map(fails, [1])
    except ValueError:
        pass
    with executors.DaskExecutor(n_workers=1) as ex:
        print(ex.map(abs, [-1]))
'''


def test_folders_of_killed_processes_are_removed_at_the_next_start(tmp_path):
    """SIGTERM or SIGKILL left executors-dask-* in the temporary folder and executors-stop-*
    in shared memory behind, for good."""
    pytest.importorskip("distributed")
    ended = subprocess.Popen([sys.executable, "-c", "pass"])
    ended.wait()
    stop_root = "/dev/shm" if os.path.isdir("/dev/shm") else tempfile.gettempdir()
    stale = [os.path.join(stop_root, f"executors-stop-{ended.pid}-left"),
             os.path.join(tempfile.gettempdir(), f"executors-dask-{ended.pid}-left")]
    in_use = os.path.join(tempfile.gettempdir(), f"executors-dask-{os.getpid()}-in-use")
    try:
        for folder in [*stale, in_use]:
            os.makedirs(os.path.join(folder, "inside"))
        script = tmp_path / "script.py"
        script.write_text(_LEAVES_A_STOP_FLAG_AND_STARTS_DASK)
        r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                           cwd=tmp_path)
        assert r.stdout.strip() == "[1]", r.stderr
        assert not [f for f in stale if os.path.exists(f)]
        assert os.path.isdir(in_use)  # its process runs: kept
    finally:
        for folder in [*stale, in_use]:
            shutil.rmtree(folder, ignore_errors=True)
