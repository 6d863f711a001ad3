"""Public surface of ``executors``: exports, lazy dask import, runnable docstrings."""

from __future__ import annotations

import doctest
import importlib
import importlib.util
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import executors

ROOT = Path(__file__).resolve().parents[1]

PUBLIC = [
    "Executor",
    "as_worker",
    "SerialExecutor",
    "ThreadExecutor",
    "ProcessExecutor",
    "DaskExecutor",
    "JoblibExecutor",
    "config",
    "resolve",
    "resolve_dispatch",
    "register_backend",
    "current_chunk_size",
    "chunk_ranges",
    "tree_sum",
    "TreeSum",
    "neumaier_sum",
    "in_worker",
    "abandoned",
    "abandoned_test",
    "Abandoned",
    "WhereRaised",
    "where_raised",
    "mark_raised",
    "user_frames",
    "hide_frames_of",
    "warn",
    "WorkerError",
    "RemoteError",
    "SerializationError",
    "MapTimeoutError",
    "GlobalRandomWarning",
]

MODULES = [
    "executors",
    "executors.base",
    "executors.local",
    pytest.param(
        "executors.dask",
        marks=pytest.mark.skipif(
            importlib.util.find_spec("distributed") is None,
            reason='its examples need the optional "distributed" package: pip install -e ".[dask]"',
        ),
    ),
    "executors.joblib_backend",
    "executors.config",
    "executors.reduce",
    "executors._context",
    "executors._abandon",
    "executors._tracebacks",
]


def test_exports_exactly():
    assert sorted(executors.__all__) == sorted(PUBLIC)
    for name in PUBLIC:
        assert getattr(executors, name) is not None


def _run(code):
    return subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


def test_import_does_not_import_distributed_or_loky():
    r = _run(
        "import sys, executors\n"
        "assert 'distributed' not in sys.modules, 'distributed imported'\n"
        "assert 'loky' not in sys.modules, 'loky imported'\n"
        "assert 'joblib' not in sys.modules, 'joblib imported'\n"
        "executors.resolve('serial').map(abs, [-1])\n"
        "assert 'distributed' not in sys.modules\n"
        "print('ok')"
    )
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr


def test_dask_executor_without_distributed_gives_install_hint():
    r = _run(
        "import sys\n"
        "sys.modules['distributed'] = None  # simulate: not installed\n"
        "import executors\n"
        "cls = executors.DaskExecutor\n"
        "try:\n"
        "    cls()\n"
        "except ImportError as e:\n"
        "    print(e)\n"
    )
    assert r.returncode == 0, r.stderr
    assert 'pip install "adrules[dask]"' in r.stdout


def test_every_public_name_has_a_docstring_with_an_example():
    for name in PUBLIC:
        obj = getattr(executors, name)
        doc = inspect.getdoc(obj) or ""
        assert ">>>" in doc, f"{name} has no example"


@pytest.mark.parametrize("modname", MODULES)
def test_docstring_examples_run(modname):
    mod = importlib.import_module(modname)
    finder = doctest.DocTestFinder()
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    tests = finder.find(mod, modname, globs={"executors": executors, **vars(mod)})
    for t in tests:
        runner.run(t)
    res = runner.summarize(verbose=False)
    assert res.failed == 0
    assert res.attempted > 0
