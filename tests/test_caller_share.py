"""``map(..., caller_share=k)``: the calling thread runs items 0..k-1 while the workers run
the rest (ProcessExecutor), or the workers run them all (the other backends); and the
process pool's direct line to its workers (``executors._lane``)."""

import os
import time

import numpy as np
import pytest

import executors


@pytest.fixture(scope="module")
def processes():
    with executors.ProcessExecutor(2) as ex:
        yield ex


def _pid_of(x):
    return x, os.getpid()


def test_the_callers_share_runs_in_the_caller_and_the_rest_on_the_workers(processes):
    out = processes.map(_pid_of, range(7), caller_share=3)
    assert [x for x, _ in out] == list(range(7))
    assert {pid for _, pid in out[:3]} == {os.getpid()}
    assert os.getpid() not in {pid for _, pid in out[3:]}


def _slow_pid(x):
    time.sleep(0.05)  # long enough that every worker given a task is still busy with it
    return os.getpid()


def test_the_caller_takes_a_core_and_the_workers_the_others():
    cores = executors.base.usable_cpu_count()
    with executors.ProcessExecutor(cores + 1) as ex:
        assert ex.workers_beside_caller() == max(1, cores - 1)
        pids = ex.map(_slow_pid, range(2 * cores + 2), caller_share=1)
        assert len(set(pids[1:])) == ex.workers_beside_caller() and os.getpid() not in pids[1:]
    with executors.ProcessExecutor(2, caller_helps=False) as ex:
        assert ex.workers_beside_caller() == 2


@pytest.mark.parametrize("backend", ["serial", "threads"])
def test_other_backends_give_the_same_results(backend):
    ex = executors.resolve(backend, n_workers=2)
    assert ex.map(lambda x, k: x * k, range(6), shared=(3,), caller_share=2) == [0, 3, 6, 9, 12, 15]


def test_on_result_sees_every_item_in_order(processes):
    seen = []
    out = processes.map(lambda x: x * x, range(6), caller_share=2,
                        on_result=lambda i, r: seen.append((i, r)) or -r)
    assert seen == [(i, i * i) for i in range(6)] and out == [-i * i for i in range(6)]


def test_a_share_as_big_as_the_map_runs_it_all_inline(processes):
    assert {pid for _, pid in processes.map(_pid_of, range(3), caller_share=5)} == {os.getpid()}


@pytest.mark.parametrize("bad", [0, 4])
def test_an_error_names_its_item_in_the_callers_share_or_on_a_worker(processes, bad):
    def f(x):
        if x == bad:
            raise ValueError(f"bad {x}")
        return x

    with pytest.raises(ValueError, match=f"bad {bad}") as info:
        processes.map(f, range(6), caller_share=2)
    assert info.value.executors_item_index == bad
    assert any(f"item {bad} of 6" in n for n in info.value.__notes__)
    assert processes.map(f, [1, 2, 3]) == [1, 2, 3]  # and the pool is usable afterwards


def test_caller_share_must_be_a_non_negative_integer(processes):
    with pytest.raises(ValueError, match="caller_share must be a non-negative integer, got -1"):
        processes.map(abs, [1, 2], caller_share=-1)


def _fail_fast_or_slow(x):
    if x == 0:
        raise ValueError("item 0 fails at once")
    time.sleep(0.3)
    return "stale"


def test_the_reply_of_a_task_whose_map_raised_is_not_read_by_the_next_map(processes):
    """Item 1 is still running on a worker when item 0's error ends the map; its reply,
    when it comes, belongs to no one: the next map must read its own."""
    with pytest.raises(ValueError, match="fails at once"):
        processes.map(_fail_fast_or_slow, [0, 1])
    assert processes.map(abs, [-5, -6, -7]) == [5, 6, 7]


def test_big_items_and_results_cross_both_ways(processes):
    """Tasks and results larger than a socket's buffer: a worker is only written to while
    it waits to read, so neither side blocks on the other."""
    items = [np.full(2_000_000, float(i)) for i in range(4)]  # 16 MB each
    out = processes.map(lambda a: a * 2, items, caller_share=1)
    assert all(np.array_equal(o, 2 * a) for o, a in zip(out, items))


def test_a_script_that_never_closes_its_pool_exits_at_once(tmp_path):
    """Each worker serves its socket in one long loky task, and loky's exit handler
    waits for running tasks: the lanes are hung up first, or the script never ends."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(
        "import os, signal\n"
        "import executors\n"
        "def die(x):\n"
        "    if x == 1:\n"
        "        os.kill(os.getpid(), signal.SIGKILL)\n"
        "    return x\n"
        "ex = executors.ProcessExecutor(2)\n"
        "print(ex.map(abs, [-1, -2, -3], caller_share=1))\n"
        "try:\n"
        "    ex.map(die, [0, 1])\n"
        "except executors.WorkerError:\n"
        "    print('died')\n"
        "print(ex.map(abs, [-4, -5]))\n"  # on a second pool: loky's exit hook is registered again
    )
    t0 = time.monotonic()
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:3] == ["[1, 2, 3]", "died", "[4, 5]"]
    assert time.monotonic() - t0 < 30, "the script hung at exit"


def test_no_socket_folder_outlives_the_workers_start(tmp_path):
    """The lane's Unix socket lives in a private temporary folder. It goes once every
    worker has connected, so nothing is left in the temporary directory by an executor
    that is dropped without close() or by a parent that is killed."""
    import subprocess
    import sys

    script = tmp_path / "script.py"
    script.write_text(
        "import gc, glob, os, sys\n"
        "import executors\n"
        "ex = executors.ProcessExecutor(2)\n"
        "print(ex.map(abs, [-1, -2, -3]))\n"
        "print(len(glob.glob(os.path.join(sys.argv[1], 'executors-lane-*'))))\n"
        "del ex\n"
        "gc.collect()\n"
        "ex = executors.ProcessExecutor(2)\n"
        "ex.map(abs, [-1])\n"
        "os.kill(os.getpid(), 9)\n"
    )
    folder = tmp_path / "tmp"
    folder.mkdir()
    env = dict(os.environ, TMPDIR=str(folder))
    r = subprocess.run([sys.executable, str(script), str(folder)], capture_output=True,
                       text=True, timeout=120, env=env)
    assert r.returncode == -9, r.stderr
    assert r.stdout.split("\n")[:2] == ["[1, 2, 3]", "0"]
    assert not list(folder.glob("executors-lane-*"))
