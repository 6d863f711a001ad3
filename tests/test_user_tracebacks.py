"""What a user reads when ``f`` fails inside psum, or draws from NumPy's global random
state: ``python script.py`` in a subprocess, on every backend (real loky processes, a
real Dask LocalCluster).

A traceback names the user's file and line on every backend (not cloudpickle's
``<dynamic-code>``), shows the source line, and leaves out the library's frames below
the user's psum call but the ``psum`` frame itself (``ADRULES_FULL_TRACEBACK=1`` keeps
them); the element it names is the one whose ``f`` raised. Warnings point at the line
that called psum.
"""

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ["serial", "threads", "processes", "dask"]

FAILING = textwrap.dedent('''
    import sys
    import numpy as np, adrules as ad, executors

    def loss(w, x):
        y = w * x
        raise ValueError(f"boom at element {w:.0f}")

    def executor(name):
        if name == "dask":
            return executors.DaskExecutor(n_workers=2)
        return executors.resolve(name, 2)

    if __name__ == "__main__":
        ex = executor(sys.argv[1])
        try:
            ad.gradient(lambda ws: ad.psum(loss, ws, 1.0, executor=ex, dispatch="always", chunk_size=1), [0.0, 1.0, 2.0])
        finally:
            ex.close()
''')
PSUM_LINE = 17  # the line of the psum call, in FAILING


def run(tmp_path, text, *args, env_extra=None, name="script.py"):
    script = tmp_path / name
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env.update(env_extra or {})
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return script, subprocess.run([sys.executable, str(script), *args], cwd=tmp_path, env=env,
                                  capture_output=True, text=True, timeout=240)


def frames(text):
    """``(file, line, function)`` of each frame printed in ``text``."""
    return re.findall(r'File "([^"]+)", line (\d+), in (\S+)', text)


def library(path):
    return any(f"{os.sep}{p}{os.sep}" in path for p in ("adrules", "executors", "loky", "concurrent", "distributed"))


def needs(backend):
    if backend == "dask":
        pytest.importorskip("distributed", reason='needs the optional "distributed" package')


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_traceback_names_the_users_file_and_line_and_hides_the_library(tmp_path, backend):
    needs(backend)
    script, out = run(tmp_path, FAILING, backend)
    assert out.returncode == 1, out.stderr
    err = out.stderr
    assert "<dynamic-code>" not in err
    shown = frames(err)
    raised = [f for f in shown if f[2] == "loss"]
    assert raised and all(f[:2] == (str(script), "7") for f in raised), shown  # file and line
    assert 'raise ValueError(f"boom at element {w:.0f}")' in err  # and the source line
    # below the user's psum call, nothing of the library but the psum frame itself
    call = max(k for k, f in enumerate(shown) if f[2] == "<lambda>" and f[0] == str(script))
    assert shown[call][1] == str(PSUM_LINE)
    below = [f for f in shown[call + 1:] if library(f[0])]
    assert [f[2] for f in below] == ["psum"], shown
    shown_lines = [line for line in err.splitlines() if not re.match(r"\d{4}-\d\d-\d\d |distributed\.", line)]
    assert len(shown_lines) < 40, err  # it was 78 to 98 lines (a loaded Dask may log besides)


@pytest.mark.parametrize("backend", ["threads", "processes"])
def test_the_full_traceback_on_request(tmp_path, backend):
    _, out = run(tmp_path, FAILING, backend, env_extra={"ADRULES_FULL_TRACEBACK": "1"})
    names = [f[2] for f in frames(out.stderr)]
    assert "_over_chunk" in names and "loss" in names, out.stderr


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_element_named_is_the_one_whose_f_raised(tmp_path, backend):
    """Every element raises, naming itself: whichever chunk's error is reported, its
    message, its traceback and both notes name the same element."""
    needs(backend)
    _, out = run(tmp_path, FAILING, backend)
    err = out.stderr
    said = set(re.findall(r"boom at element (\d+)", err))
    assert len(said) == 1, err
    if sys.version_info < (3, 11):
        return  # the notes are kept in __notes__, which Python 3.10 does not print
    noted = set(re.findall(r"raised by f at element (\d+)", err))
    chunk = set(re.findall(r"raised by chunk (\d+) of 3", err))
    assert said == noted == chunk, err


PROGRESS = textwrap.dedent('''
    import sys
    sys.modules["tqdm"] = None  # as if tqdm were not installed
    import warnings
    import numpy as np, adrules as ad

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        ad.gradient(lambda ws: ad.psum(lambda w: w * w, ws, executor="threads", progress=True), [1.0, 2.0])
    for w in seen:
        print(w.category.__name__, w.filename, w.lineno, w.message)
''')


def test_the_progress_warning_points_at_the_users_call(tmp_path):
    script, out = run(tmp_path, PROGRESS)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if "tqdm" in line]
    assert lines and all(line.startswith(f"UserWarning {script} 9 ") for line in lines), out.stdout


RANDOM = textwrap.dedent('''
    import sys, warnings
    import numpy as np, adrules as ad, executors

    def global_draws(w, x):
        return w * x + np.random.normal()

    def seeds_then_draws(w, x):
        np.random.seed(int(w))
        return w * x + np.random.normal()

    def seeds_a_generator(w, x):
        return w * x + np.random.default_rng([2026, int(w)]).normal()

    def draws_a_lot(w, x):
        return w * x + np.random.normal(size=100_000).sum()

    if __name__ == "__main__":
        name = sys.argv[1]
        ex = executors.DaskExecutor(n_workers=2) if name == "dask" else executors.resolve(name, 2)
        ws = [float(k) for k in range(8)]
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            for _ in range(2):  # warned once per call site
                ad.gradient(lambda ws: ad.psum(global_draws, ws, 2.0, executor=ex, dispatch="always"), ws)
                ad.psum(seeds_then_draws, ws, 2.0, executor=ex, dispatch="always")
                ad.psum(seeds_a_generator, ws, 2.0, executor=ex, dispatch="always")
                ad.psum(draws_a_lot, ws, 2.0, executor=ex, dispatch="always")
                ex.map(lambda i: np.random.rand(), range(4))
                ex.map(lambda i: np.random.default_rng(i).random(), range(4))
        ex.close()
        for w in seen:
            print(w.category.__name__, w.filename, w.lineno)
''')


@pytest.mark.parametrize("backend", ["processes", "dask"])
def test_drawing_from_the_global_random_state_on_worker_processes_warns_once_per_call_site(tmp_path, backend):
    """Warned: draws from the state a worker had (few or many); not warned: a generator
    seeded per element, or the global state seeded in f (draws that depend on the element
    only)."""
    needs(backend)
    script, out = run(tmp_path, RANDOM, backend)
    assert out.returncode == 0, out.stderr
    warned = [line.split() for line in out.stdout.splitlines() if line.startswith("GlobalRandomWarning")]
    # the lines of the calls of global_draws, draws_a_lot and the first ex.map, once each
    assert warned == [["GlobalRandomWarning", str(script), str(line)] for line in (25, 28, 29)], out.stdout
    assert out.stdout.count("Warning") == 3, out.stdout


def test_threads_are_not_checked_for_global_random_draws(tmp_path):
    """Every thread shares the global state: a draw cannot be told from another thread's."""
    _, out = run(tmp_path, RANDOM, "threads")
    assert out.returncode == 0, out.stderr
    assert "GlobalRandomWarning" not in out.stdout, out.stdout
