"""Configuration: precedence arg > config context > ADRULES_EXECUTOR > default."""

from __future__ import annotations

import asyncio
import os
import re
import subprocess
import sys
import textwrap
import threading

import pytest

import executors
from executors import (
    ProcessExecutor,
    SerialExecutor,
    ThreadExecutor,
    config,
    current_chunk_size,
    resolve,
)
from executors.base import usable_cpu_count

ENV = "ADRULES_EXECUTOR"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.fixture(autouse=True)
def no_env(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)


def test_builtin_default_is_threads_with_usable_cpus():
    ex = resolve()
    assert isinstance(ex, ThreadExecutor)
    assert ex.n_workers == usable_cpu_count()


def test_env_var_name_and_count(monkeypatch):
    monkeypatch.setenv(ENV, "serial")
    assert isinstance(resolve(), SerialExecutor)
    monkeypatch.setenv(ENV, "threads:3")
    ex = resolve()
    assert (ex.name, ex.n_workers) == ("threads", 3)
    monkeypatch.setenv(ENV, " Processes:2 ")
    ex = resolve()
    assert isinstance(ex, ProcessExecutor) and ex.n_workers == 2
    monkeypatch.setenv(ENV, "")
    assert resolve().name == "threads"


@pytest.mark.parametrize(
    "value", ["proceses:x", "proceses", "threads:0", "threads:-1", "threads:x", "threads:2:3", ":4"]
)
def test_malformed_env_var(monkeypatch, value):
    monkeypatch.setenv(ENV, value)
    with pytest.raises(ValueError) as info:
        resolve()
    msg = str(info.value)
    assert ENV in msg and repr(value) in msg
    for form in ("NAME:N", "'serial'", "'threads'", "'processes'", "'dask'"):
        assert form in msg


def test_env_var_read_at_resolve_time(monkeypatch):
    assert resolve().name == "threads"
    monkeypatch.setenv(ENV, "serial")
    assert resolve().name == "serial"


def test_precedence_arg_over_context_over_env_over_default(monkeypatch):
    assert resolve().name == "threads"  # default
    monkeypatch.setenv(ENV, "serial")
    assert resolve().name == "serial"  # env > default
    with config(executor="threads", n_workers=2):
        assert (resolve().name, resolve().n_workers) == ("threads", 2)  # context > env
        assert resolve("serial").name == "serial"  # argument > context
        assert resolve(n_workers=3).n_workers == 3  # argument n_workers > context
    assert resolve().name == "serial"


def test_env_count_applies_only_to_the_env_name(monkeypatch):
    monkeypatch.setenv(ENV, "threads:3")
    with config(executor="threads"):
        assert resolve().n_workers == usable_cpu_count()
    with config(n_workers=2):  # env chooses the executor, context the count
        assert (resolve().name, resolve().n_workers) == ("threads", 2)
    assert resolve().n_workers == 3


def test_context_n_workers_applies_to_a_per_call_name():
    with config(n_workers=2):
        assert resolve("threads").n_workers == 2


def test_instances_are_used_as_is():
    mine = ThreadExecutor(1)
    try:
        assert resolve(mine) is mine
        with config(executor=mine):
            assert resolve() is mine
            with config(n_workers=4):  # an instance ignores a context count
                assert resolve() is mine
        with pytest.raises(ValueError, match="n_workers"):
            resolve(mine, n_workers=2)
        with pytest.raises(ValueError, match="n_workers"):
            with config(executor=mine, n_workers=2):
                pass
    finally:
        mine.close()


def test_a_name_carries_its_worker_count_everywhere_as_in_the_variable():
    # 'threads:2' worked only in ADRULES_EXECUTOR: per call and in config it was unknown
    assert resolve("threads:2") is resolve("threads", 2)
    with config(executor="threads:2"):
        assert resolve().n_workers == 2
        with config(executor="serial"):
            assert resolve().name == "serial"
    assert resolve("threads:2", n_workers=2).n_workers == 2
    with pytest.raises(ValueError, match=r"executor='threads:2' and n_workers=3 disagree"):
        resolve("threads:2", n_workers=3)
    for bad in ("threads:0", "threads:x", "thread:2"):
        with pytest.raises(ValueError, match=r"is not a known executor: .*NAME:N"):
            resolve(bad)


def test_a_name_is_taken_in_any_case_as_in_the_variable():
    """executor="THREADS" was refused while ADRULES_EXECUTOR=Processes was accepted."""
    assert resolve("THREADS") is resolve("threads")
    assert resolve("Threads:2") is resolve("threads", 2)
    with config(executor="Serial"):
        assert resolve().name == "serial"


def test_bad_names_and_values():
    with pytest.raises(ValueError, match="'proceses'"):
        resolve("proceses")
    with pytest.raises(ValueError, match="'proceses'"):
        with config(executor="proceses"):
            pass
    with pytest.raises(TypeError):
        resolve(3)
    for bad in (0, -1, 1.5, True, "2"):
        with pytest.raises(ValueError, match="n_workers"):
            resolve("threads", n_workers=bad)
        with pytest.raises(ValueError, match="chunk_size"):
            with config(chunk_size=bad):
                pass


def test_named_executors_are_cached_per_name_and_count():
    a = resolve("threads", 2)
    assert resolve("threads", 2) is a
    assert resolve("threads", 1) is not a
    with config(executor="threads", n_workers=2):
        assert resolve() is a
    assert resolve("serial") is resolve("serial")


def test_nesting_overrides_only_what_is_given():
    with config(executor="serial", chunk_size=8) as outer:
        assert (outer.executor, outer.chunk_size) == ("serial", 8)
        with config(chunk_size=2):
            assert resolve().name == "serial"
            assert current_chunk_size() == 2
        with config(executor="threads", n_workers=1):
            assert current_chunk_size() == 8
            assert resolve().name == "threads"
        assert current_chunk_size() == 8
        assert resolve().name == "serial"
    assert current_chunk_size() is None


def test_config_restored_after_exception():
    with pytest.raises(RuntimeError):
        with config(chunk_size=5):
            raise RuntimeError
    assert current_chunk_size() is None


def test_contextvars_isolate_threads():
    barrier = threading.Barrier(3)
    seen = {}

    def worker(name, size):
        with config(executor=name, chunk_size=size):
            barrier.wait()  # all three threads inside their own config at once
            seen[name] = (resolve().name, current_chunk_size())
            barrier.wait()

    threads = [
        threading.Thread(target=worker, args=("serial", 3)),
        threading.Thread(target=worker, args=("threads", 4)),
    ]
    for t in threads:
        t.start()
    barrier.wait()
    seen["main"] = (resolve().name, current_chunk_size())
    barrier.wait()
    for t in threads:
        t.join()
    assert seen == {"serial": ("serial", 3), "threads": ("threads", 4), "main": ("threads", None)}


def test_contextvars_isolate_asyncio_tasks():
    async def task(size):
        with config(chunk_size=size):
            await asyncio.sleep(0.01)
            return current_chunk_size()

    async def main():
        return await asyncio.gather(task(1), task(2), task(3))

    assert asyncio.run(main()) == [1, 2, 3]


def test_resolve_inside_a_worker_is_serial():
    with config(executor="threads", n_workers=2):
        out = resolve().map(lambda _: (resolve().name, resolve("processes").name), range(3))
    assert out == [("serial", "serial")] * 3


def test_worker_threads_see_the_callers_chunk_size():
    ex = resolve("threads", 2)
    with config(chunk_size=11):
        assert ex.map(lambda _: current_chunk_size(), range(4)) == [11] * 4


def test_in_worker_flag():
    assert not executors.in_worker()
    assert SerialExecutor().map(lambda _: executors.in_worker(), [0]) == [True]
    assert not executors.in_worker()


def test_the_variable_naming_a_backend_that_cannot_start_says_so_and_how_to_fix_it(tmp_path):
    # ADRULES_EXECUTOR=dask where distributed is not installed: a script run as users run it,
    # in which `import distributed` fails as it does without the package
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import sys
        sys.modules["distributed"] = None  # import distributed raises ImportError
        import adrules as ad
        print(ad.psum(lambda x: x * x, [1.0, 2.0, 3.0]))
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env.update(ADRULES_EXECUTOR="dask:2", PYTHONPATH=os.pathsep.join([ROOT, env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and proc.stdout == ""
    last = proc.stderr.rstrip().splitlines()[-1]
    assert last.startswith("ImportError: ADRULES_EXECUTOR='dask:2' chose the 'dask' executor, which cannot "
                           "start: ImportError: DaskExecutor needs the optional dependency \"distributed\""), last
    assert 'pip install "adrules[dask]"' in last and "set ADRULES_EXECUTOR to another executor" in last
    assert "or unset it (the default is 'threads')" in last


def test_the_variable_naming_processes_whose_workers_cannot_start_gets_an_error_not_a_hang(tmp_path):
    # every fresh interpreter of the workers fails to start (a sitecustomize raises in them only)
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""\
        import sys
        if "loky.backend.popen_loky_posix" in " ".join(getattr(sys, "orig_argv", [])):
            raise SystemExit("this worker cannot start")
    """), encoding="utf-8")
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import adrules as ad
        if __name__ == "__main__":
            print(ad.psum(lambda x: x * x, [1.0, 2.0, 3.0], dispatch="always"))
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env.update(ADRULES_EXECUTOR="processes:2",
               PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT, env.get("PYTHONPATH", "")]))
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and proc.stdout == ""
    assert "SystemExit: this worker cannot start" in proc.stderr  # what the workers said
    head = "executors.base.WorkerError: a worker process of the 'processes' executor died while starting: "
    assert head in proc.stderr, proc.stderr
    # the error's lines, from its head on (a worker still dying may write its own lines among them)
    error = proc.stderr[proc.stderr.rindex(head):]
    assert ("fix that, or use another executor (ADRULES_EXECUTOR='processes:2' names it: set the variable to "
            "'threads', or unset it)") in error, error


def test_processes_whose_workers_hang_while_starting_get_an_error_not_a_hang(tmp_path):
    # every fresh interpreter of the workers hangs at start (a sitecustomize sleeps in them only);
    # the script shortens the bound on starting (a minute on an idle machine) to a second
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""\
        import sys, time
        if "loky.backend.popen_loky_posix" in " ".join(getattr(sys, "orig_argv", [])):
            time.sleep(90)
    """), encoding="utf-8")
    (tmp_path / "train.py").write_text(textwrap.dedent("""\
        import time
        import adrules as ad
        import executors._lane
        executors._lane.START_SECONDS = 1.0
        if __name__ == "__main__":
            t0 = time.monotonic()
            try:
                ad.psum(lambda x: x * x, [1.0, 2.0, 3.0], dispatch="always")
            finally:
                print(f"{time.monotonic() - t0:.1f} s / {executors._lane.start_seconds(2):.1f} s", flush=True)
    """), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env.update(ADRULES_EXECUTOR="processes:2",
               PYTHONPATH=os.pathsep.join([str(tmp_path), ROOT, env.get("PYTHONPATH", "")]))
    # (the workers hold the script's output open: it ends once they are stopped)
    proc = subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=60)
    waited, bound = (float(w.split()[0]) for w in proc.stdout.split(" / "))
    assert proc.returncode == 1 and 1.0 <= waited < bound + 10, proc.stdout  # the bound, then the error
    # the error's line, wherever it is: the stopped workers' resource tracker may warn after it
    error = next((line for line in proc.stderr.splitlines() if line.startswith("executors.base.WorkerError")),
                 proc.stderr)
    assert re.fullmatch(
        r"executors\.base\.WorkerError: the worker processes of the 'processes' executor did not start within "
        r"\d+ s \(0 of 2 did; they were stopped\): one hangs while starting\. Its output above, if any, says why "
        r"\(a fresh interpreter waits as it starts or imports here: a sitecustomize, a module that blocks on "
        r"import\); fix that, or use another executor \(ADRULES_EXECUTOR='processes:2' names it: set the variable "
        r"to 'threads', or unset it\)", error), error
