"""psum through ``executor="joblib"`` under joblib's loky, threading and dask backends.

The executor contract itself runs in tests/test_executors.py (the joblib-* params);
here: what a user of psum sees. Values and gradients must have the serial backend's
bits, errors name the element, and the executor works again after an error. Real
loky workers, a real LocalCluster; no mocks.
"""

from __future__ import annotations

import os
import subprocess
import sys

import joblib
import numpy as np
import pytest

import adrules as ad
import executors

pytestmark = pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")

JOBLIB_BACKENDS = ["loky", "threading", "dask"]


@pytest.fixture(params=JOBLIB_BACKENDS)
def joblib_config(request):
    """Kwargs of ``joblib.parallel_config`` for one joblib backend, 2 jobs."""
    kwargs = {"backend": request.param, "n_jobs": 2}
    if request.param == "dask":
        kwargs["client"] = request.getfixturevalue("loopback_dask_client")
    return kwargs


def loss(m, x, y):
    h = np.tanh(x @ m["w1"] + m["b1"])
    return np.mean((h @ m["w2"] - y) ** 2)


def fails_at_5(m, x, y):
    if m["index"] == 5:
        raise ValueError("bad model")
    return loss(m, x, y)


def where_it_ran(m, x, y):
    return ad.psum(loss, [m], x, y, executor="joblib", dispatch="always") * 0 + os.getpid()


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    models = [{"w1": rng.normal(size=(3, 5)), "b1": rng.normal(size=5), "w2": rng.normal(size=5)}
              for _ in range(9)]
    return models, rng.normal(size=(8, 3)), rng.normal(size=8)


def _bits(tree):
    return [np.asarray(leaf).tobytes() for leaf in ad.pytrees.flatten(tree)[0]
            if not isinstance(leaf, ad.NoTangent)]


def _value_and_grad(models, x, y, executor):
    return ad.value_and_gradient(
        lambda ms, x: ad.psum(loss, ms, x, y, executor=executor, chunk_size=2, dispatch="always"),
        models, x)


def test_psum_value_and_gradients_bitwise_equal_to_serial(data, joblib_config):
    models, x, y = data
    ref = _value_and_grad(models, x, y, "serial")
    with joblib.parallel_config(**joblib_config):
        ex = executors.resolve("joblib")
        assert ex.n_workers == 2
        got = _value_and_grad(models, x, y, "joblib")
        again = _value_and_grad(models, x, y, "joblib")  # second call: pool warm, same bits
    assert _bits(got) == _bits(ref) and _bits(again) == _bits(ref)
    # and the reference is the right number (an independent plain loop)
    plain = sum(loss(m, x, y) for m in models)
    assert np.isclose(plain, ref[0], rtol=1e-13)


def test_pmap_values_bitwise_equal_to_serial(data, joblib_config):
    models, x, y = data
    ref = ad.pmap(loss, models, x, y, executor="serial", chunk_size=2)
    with joblib.parallel_config(**joblib_config):
        got = ad.pmap(loss, models, x, y, executor="joblib", chunk_size=2, dispatch="always")
    assert [np.asarray(v).tobytes() for v in got] == [np.asarray(v).tobytes() for v in ref]


def test_error_in_f_names_the_element_and_the_executor_works_afterwards(data, joblib_config):
    models, x, y = data
    tagged = [dict(m, index=i) for i, m in enumerate(models)]
    with joblib.parallel_config(**joblib_config):
        with pytest.raises(ValueError, match="bad model") as info:
            ad.gradient(lambda x: ad.psum(fails_at_5, tagged, x, y, executor="joblib",
                                          chunk_size=2, dispatch="always"), x)
        notes = getattr(info.value, "__notes__", [])
        assert any("element 5" in n for n in notes), notes
        value = ad.psum(loss, models, x, y, executor="joblib", chunk_size=2, dispatch="always")
    assert np.isclose(value, sum(loss(m, x, y) for m in models), rtol=1e-13)


def test_joblibs_multiprocessing_backend_which_cannot_stream_results(tmp_path):
    """joblib's multiprocessing backend refuses ``return_as="generator"`` (joblib's raw
    ValueError before): its results are taken as a list once all are in. In a script of
    its own: that backend forks, which a test process full of other tests' threads must
    not do."""
    script = tmp_path / "script.py"
    script.write_text(
        "import joblib, numpy as np, adrules as ad\n"
        "def loss(w):\n"
        "    return np.sum(np.tanh(w) ** 2)\n"
        "if __name__ == '__main__':\n"
        "    ws = [np.linspace(-1.0, 1.0, 5) * k for k in range(6)]\n"
        "    total = lambda ex: ad.value_and_gradient(\n"
        "        lambda ws: ad.psum(loss, ws, executor=ex, chunk_size=2, dispatch='always'), ws)\n"
        "    bits = lambda r: [np.asarray(a).tobytes() for a in [r[0], *r[1][0]]]\n"
        "    with joblib.parallel_config(backend='multiprocessing', n_jobs=2):\n"
        "        print(bits(total('joblib')) == bits(total('serial')))\n")
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180,
                       cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-3000:]
    assert r.stdout.split() == ["True"]


def test_nested_psum_inside_a_joblib_task_runs_inline(data):
    models, x, y = data
    with joblib.parallel_config(backend="loky", n_jobs=2):
        pids = ad.pmap(where_it_ran, models[:4], x, y, executor="joblib", chunk_size=1,
                       dispatch="always")
    assert os.getpid() not in pids  # the outer map ran on loky workers, each inner one inline


def test_the_parallel_config_in_force_at_the_call_decides():
    ex = executors.JoblibExecutor(n_jobs=2)
    with joblib.parallel_config(backend="threading", n_jobs=3):
        assert (ex.backend_name, ex.n_workers, ex.shares_memory) == ("ThreadingBackend", 3, True)
    with joblib.parallel_config(backend="loky", n_jobs=-1):
        assert ex.n_workers == joblib.cpu_count() and not ex.shares_memory
    with joblib.parallel_config(backend="loky"):  # no n_jobs there: the executor's own
        assert ex.n_workers == 2


def test_adrules_executor_environment_variable_selects_joblib():
    code = (
        "import joblib, executors, adrules as ad\n"
        "ex = executors.resolve()\n"
        "with joblib.parallel_config(backend='threading'):\n"
        "    print(ex.name, ex.n_workers, ad.psum(lambda x: x * x, [1.0, 2.0, 3.0], dispatch='always'))\n"
    )
    env = dict(os.environ, ADRULES_EXECUTOR="joblib:3")
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["joblib", "3", "14.0"]


def test_n_jobs_is_checked():
    with pytest.raises(ValueError, match="n_jobs must be a positive integer"):
        executors.JoblibExecutor(n_jobs=0)
