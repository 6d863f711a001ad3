"""Smoke-run every script in examples/ and examples/ported/ as a subprocess: each ends
with its own self-check against an independent computation (the ported programs: their
gradients against finite differences), so exit code 0 means the example's claims hold.

A script that needs an optional package says so on a line ``# requires: NAME``; it is
skipped when NAME is not installed.
"""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

import _load  # noqa: E402  (tests/_load.py, which conftest.py loads)

EXAMPLES = pathlib.Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(p.name for p in EXAMPLES.glob("*.py"))
PORTED = sorted(f"ported/{p.name}" for p in EXAMPLES.glob("ported/*.py"))  # from autograd and JAX
TIMEOUT = 180  # seconds on a quiet machine (a hang guard; stretched on a busy one)


def test_examples_found():
    assert "ensemble.py" in SCRIPTS
    assert len(PORTED) >= 8


def _missing_requirements(path):
    needed = re.findall(r"^# requires: *([\w.]+)", path.read_text(), flags=re.MULTILINE)
    return [name for name in needed if importlib.util.find_spec(name) is None]


@pytest.mark.parametrize("name", SCRIPTS + PORTED)
def test_example_runs(name):
    path = EXAMPLES / name
    missing = _missing_requirements(path)
    if missing:
        pytest.skip(f"{name} needs {', '.join(missing)}")
    env = dict(os.environ)
    env.pop("ADRULES_EXECUTOR", None)  # each example chooses its executors itself
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(EXAMPLES.parent), env.get("PYTHONPATH")]))
    timeout = _load.bound(TIMEOUT)
    try:
        proc = subprocess.run([sys.executable, str(path)], cwd=EXAMPLES.parent, env=env,
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{name} did not finish in {timeout:.0f} s\n--- stdout ---\n{e.stdout}\n"
                    f"--- stderr ---\n{e.stderr}")
    assert proc.returncode == 0, (f"{name} exited with {proc.returncode}\n--- stdout ---\n"
                                  f"{proc.stdout}\n--- stderr ---\n{proc.stderr}")
    if name == "ensemble.py":  # the demo's promise: the cores, both figures per backend, a verdict
        assert re.search(r"^cores this process may use: \d+", proc.stdout, re.M), proc.stdout
        for backend in ("serial", "threads", "processes"):
            assert re.search(rf"^{backend}\b.* \d+ ms +\d+ ms +[\d.]+x  yes$", proc.stdout, re.M), proc.stdout
        assert re.search(r"^verdict: ", proc.stdout, re.M), proc.stdout
