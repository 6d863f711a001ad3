"""Large shared arrays reach ProcessExecutor workers by memory map (executors/_shm.py).

Real loky workers; what the workers see is asked of the workers themselves.
"""

from __future__ import annotations

import mmap
import pickle
import os
import subprocess
import sys

import numpy as np
import pytest

import adrules as ad
import executors
from executors import ProcessExecutor

MB = 2**20


@pytest.fixture(scope="module")
def ex():
    with ProcessExecutor(2, max_nbytes=MB) as ex:
        yield ex


def what_the_worker_sees(i, data):
    a = data["x"] if isinstance(data, dict) else data
    return {
        "type": type(a).__name__,
        "writeable": a.flags.writeable,
        "mapped": isinstance(a.base, mmap.mmap),
        "file": getattr(a, "filename", None),
        "value": float(a.flat[i]),
        "pid": os.getpid(),
    }


def write_into(i, a):
    a[0] = 1.0
    return i


def test_worker_sees_a_read_only_memory_map_of_a_file_in_the_store(ex):
    x = np.arange(MB // 8 * 3, dtype=np.float64)  # 3 MiB
    seen = ex.map(what_the_worker_sees, [5, 7], shared=({"x": x},))  # nested in a dict
    for s, i in zip(seen, [5, 7]):
        assert s["type"] == "memmap" and not s["writeable"] and s["mapped"], s
        assert os.path.dirname(s["file"]) == ex._arrays.directory
        assert s["value"] == float(i)
    if os.path.isdir("/dev/shm"):
        assert ex._arrays.directory.startswith("/dev/shm/")


def test_small_arrays_and_max_nbytes_none_travel_by_pickle(ex):
    small = np.arange(100.0)
    assert ex.map(what_the_worker_sees, [1], shared=(small,))[0]["type"] == "ndarray"
    with ProcessExecutor(1, max_nbytes=None) as plain:
        big = np.arange(MB // 8 * 2, dtype=np.float64)
        seen = plain.map(what_the_worker_sees, [3], shared=(big,))[0]
        assert seen["type"] == "ndarray" and seen["writeable"] and seen["value"] == 3.0


def test_sent_once_per_content_and_a_mutated_array_is_resent(ex):
    x = np.zeros(MB // 8 * 2)
    writes = ex._arrays.writes
    for _ in range(3):
        assert [s["value"] for s in ex.map(what_the_worker_sees, [0, 1], shared=(x,))] == [0.0, 0.0]
    assert ex._arrays.writes == writes + 1
    first = ex.map(what_the_worker_sees, [0], shared=(x,))[0]["file"]
    x[1] = 42.0  # changed in place: same object, new content
    seen = ex.map(what_the_worker_sees, [0, 1], shared=(x,))
    assert [s["value"] for s in seen] == [0.0, 42.0]
    assert ex._arrays.writes == writes + 2
    assert seen[0]["file"] != first and not os.path.exists(first)  # the stale file is gone
    x[-1] = -0.0  # a change only in the bits (0.0 == -0.0) counts too
    assert ex.map(lambda i, a: np.signbit(a[-1]), [0], shared=(x,)) == [True]


def test_fortran_ordered_and_strided_arrays(ex):
    f = np.asfortranarray(np.arange(600 * 500, dtype=np.float64).reshape(600, 500))
    strided = np.arange(MB // 4 * 3, dtype=np.float64)[::2]
    out = ex.map(lambda i, f, s: (float(f[i, 3]), float(s[i]), f.flags.f_contiguous),
                 [1, 2], shared=(f, strided))
    assert out == [(f[1, 3], strided[1], True), (f[2, 3], strided[2], True)]
    f[2, 3] = -1.0
    assert ex.map(lambda i, f: float(f[i, 3]), [2], shared=(f,)) == [-1.0]


def test_workers_cannot_write_into_shared_arrays(ex):
    x = np.zeros(MB // 8 * 2)
    with pytest.raises(ValueError, match="read-only"):
        ex.map(write_into, [0], shared=(x,))
    assert ex.map(abs, [-1]) == [1]


def test_old_files_are_evicted_and_all_removed_on_close():
    ex = ProcessExecutor(1, max_nbytes=MB)
    arrays = [np.full(MB // 8 * 2, float(k)) for k in range(7)]
    for k, a in enumerate(arrays):
        assert ex.map(lambda i, a: float(a[0]), [0], shared=(a,)) == [float(k)]
        assert len(os.listdir(ex._arrays.directory)) <= ex._arrays.max_files
    folder = ex._arrays.directory
    ex.close()
    assert not os.path.exists(folder)
    # and the executor works again after close, with a fresh folder
    assert ex.map(lambda i, a: float(a[1]), [0], shared=(arrays[3],)) == [3.0]
    ex.close()


def test_files_removed_at_interpreter_exit_when_not_closed():
    code = (
        "import numpy as np, executors\n"
        "ex = executors.ProcessExecutor(1)\n"
        "ex.map(lambda i, a: float(a[i]), [0], shared=(np.ones(400_000),))\n"
        "print(ex._arrays.directory)\n"  # no close(): the interpreter exits
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    folder = r.stdout.strip()
    assert folder and not os.path.exists(folder)


def test_a_script_on_the_named_process_executor_exits_quietly(tmp_path):
    """psum on executor="processes" (the cached executor closed at exit) with a shared
    array big enough for the store: at exit the store's finalizer and the executor's close
    both ran, and the second unregistration of the folder made loky's resource tracker
    print a KeyError traceback after the script's output. Run as a user runs it."""
    script = tmp_path / "script.py"
    script.write_text(
        "import numpy as np, adrules as ad, executors\n"
        "if __name__ == '__main__':\n"
        "    X = np.random.default_rng(0).normal(size=(400, 400))  # 1.28 MB: memory-mapped\n"
        "    ws = [np.full(400, float(i)) for i in range(4)]\n"
        "    total = ad.psum(lambda w, X: np.sum(X @ w), ws, X, executor='processes', dispatch='always')\n"
        "    print(np.isclose(total, sum(np.sum(X @ w) for w in ws), rtol=1e-12))\n"
        "    print(executors.resolve('processes')._arrays.directory)\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    ok, folder = r.stdout.split()
    assert ok == "True"
    assert folder != "None" and not os.path.exists(folder)
    assert "Traceback" not in r.stderr and "KeyError" not in r.stderr, r.stderr


def chunk_loss(w, X, y):
    return np.mean((np.tanh(X @ w) - y) ** 2)


def test_psum_gradient_with_a_large_shared_array_bitwise_equal_to_serial(ex):
    rng = np.random.default_rng(3)
    X = rng.standard_normal((4000, 40))  # 1.2 MiB: memory-mapped
    y = rng.standard_normal(4000)
    ws = [rng.standard_normal(40) for _ in range(6)]

    def grads(executor):
        return ad.value_and_gradient(
            lambda ws, X: ad.psum(chunk_loss, ws, X, y, executor=executor, chunk_size=2,
                                  dispatch="always"), ws, X)

    ref = grads("serial")
    writes = ex._arrays.writes
    got = grads(ex)
    assert ex._arrays.writes > writes  # X really went by memory map
    flat = lambda t: [np.asarray(v).tobytes() for v in ad.pytrees.flatten(t)[0]]  # noqa: E731
    assert flat(got) == flat(ref)
    # against an independent loop too, so the reference is the right number
    loop = ad.value_and_gradient(lambda ws, X: sum(chunk_loss(w, X, y) for w in ws), ws, X)
    np.testing.assert_allclose(got[1][1], loop[1][1], rtol=1e-12, atol=1e-14)


def test_workers_exit_and_files_go_soon_after_the_parent_is_killed():
    import signal
    import time

    code = (
        "import os, signal, sys, numpy as np, executors\n"
        "ex = executors.ProcessExecutor(2)\n"  # the default idle timeout: 300 s
        "ex.map(lambda i, a: float(a[i]), [0, 1], shared=(np.ones(400_000),))\n"
        "print(ex._arrays.directory, *ex.worker_pids(), flush=True)\n"
        "os.kill(os.getpid(), signal.SIGKILL)\n"  # no close, no atexit: loky's tracker cleans up
    )
    # not subprocess.run(capture_output=True): the orphaned workers and tracker hold the
    # pipes open until they exit
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True)
    folder, *pids = p.stdout.readline().split()
    assert p.wait(timeout=120) == -signal.SIGKILL
    killed = time.monotonic()
    p.stdout.close()
    assert folder and len(pids) == 2

    def alive(pid):  # an exited worker stays a zombie until PID 1 reaps it (seconds here)
        if not os.path.isdir("/proc"):  # then: whether it can be signalled
            try:
                os.kill(int(pid), 0)
            except ProcessLookupError:
                return False
            return True
        try:
            with open(f"/proc/{pid}/stat") as f:
                return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
        except FileNotFoundError:
            return False

    # before workers watched their parent: idle timeout + 30 s (33 s with a 2 s timeout)
    deadline = killed + 15
    while (os.path.exists(folder) or any(map(alive, pids))) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not [pid for pid in pids if alive(pid)], "orphaned workers still running"
    assert not os.path.exists(folder)


def test_a_worker_that_starts_after_its_parent_died_ends_too():
    """A worker still importing when its parent is killed reaches the initializer as an
    orphan already (its parent pid is init's): the parent's pid, given by the parent,
    is what it watches. Seen in the test above, one run in three under load."""
    import time

    code = ("import time\nfrom executors import _remote\n"
            "_remote.init_process_worker(parent_pid=-1)\n"  # no process has this pid
            "time.sleep(30)\n")
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-c", code], timeout=60, capture_output=True, text=True)
    assert (p.returncode, p.stderr) == (1, "") and time.monotonic() - t0 < 20


def test_a_read_only_map_of_a_file_is_not_copied(ex, tmp_path):
    path = str(tmp_path / "train.npy")
    np.save(path, np.arange(MB // 8 * 2, dtype=np.float64).reshape(-1, 4))
    a = np.load(path, mmap_mode="r")
    writes = ex._arrays.writes
    seen = ex.map(what_the_worker_sees, [5, 9], shared=(a,))
    assert [s["file"] for s in seen] == [os.path.realpath(path)] * 2
    assert [s["value"] for s in seen] == [5.0, 9.0] and not seen[0]["writeable"]
    assert ex._arrays.writes == writes  # nothing written
    # a slice of it, or a copy-on-write map, goes through the store like any array
    assert ex.map(what_the_worker_sees, [0], shared=(a[1:],))[0]["value"] == 4.0
    c = np.load(path, mmap_mode="c")
    c[0, 0] = -7.0  # private to this process: the file still holds 0
    assert ex.map(what_the_worker_sees, [0], shared=(c,))[0]["value"] == -7.0
    assert ex._arrays.writes == writes + 2


def _column_sum(w, d):
    return np.sum(d[0][:, 0] * w) + np.sum(d[1])


def test_a_file_replaced_under_the_same_name_is_read_anew(ex, tmp_path):
    """A new checkpoint written over the old one (os.replace): the workers, which cache
    what they were sent, kept reading the old file: half the gradient was 200000, half
    400000, with no error."""
    path = str(tmp_path / "ckpt.npy")
    y = np.ones(1000)

    def grad(executor, X):
        return ad.gradient(lambda ws: ad.psum(_column_sum, ws, (X, y), executor=executor, dispatch="always",
                                              chunk_size=1), [float(i) for i in range(8)])[0]

    np.save(path, np.ones((200_000, 2)))  # 3.2 MB: a reference to the file goes to the workers
    old = np.load(path, mmap_mode="r")
    assert grad(ex, old) == [200_000.0] * 8
    np.save(path + ".tmp.npy", np.full((200_000, 2), 2.0))
    os.replace(path + ".tmp.npy", path)
    new = np.load(path, mmap_mode="r")
    assert grad("serial", new) == [400_000.0] * 8
    writes = ex._arrays.writes
    assert grad(ex, new) == [400_000.0] * 8
    assert ex._arrays.writes == writes  # the new file itself, not a copy
    # the map opened before holds the old file, which no name leads to: it goes by copy
    assert grad(ex, old) == grad("serial", old) == [200_000.0] * 8
    assert ex._arrays.writes == writes + 1
    # rewritten in place (same file, same size): the maps of it, ours too, read the new bytes
    np.save(path, np.full((200_000, 2), 3.0))
    assert grad("serial", new) == [600_000.0] * 8
    assert grad(ex, new) == [600_000.0] * 8


def test_a_worker_refuses_a_file_replaced_while_the_map_ran(tmp_path):
    """The reference names the file by its identity: a worker that opens the name after a
    replacement gets another file, and says so rather than read it."""
    from executors import _shm

    path = str(tmp_path / "ckpt.npy")
    np.save(path, np.zeros(MB // 8 * 2))
    store, paths = _shm.ArrayStore(MB), []
    try:
        sent = _shm.dumps_sharing_arrays((np.load(path, mmap_mode="r"),), store, paths)
        assert store.writes == 0 and paths == []  # a reference to the file, no copy
        assert pickle.loads(sent)[0][5] == 0.0  # what a worker does with it
        np.save(path + ".tmp.npy", np.ones(MB // 8 * 2))
        os.replace(path + ".tmp.npy", path)
        with pytest.raises(_shm.SharedFileChanged, match=r"ckpt\.npy, memory-mapped in a shared argument, "
                                                          r"was replaced or rewritten while the map was running"):
            pickle.loads(sent)
        os.unlink(path)
        with pytest.raises(_shm.SharedFileChanged, match="was removed while the map was running"):
            pickle.loads(sent)
    finally:
        store.close()
