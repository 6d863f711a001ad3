"""The cluster DaskExecutor starts is secured (TLS with credentials made for it, no HTTP
route unless asked), and Dask's TLS settings pass through (real LocalClusters over TLS;
the intruder is a real process of another user id)."""

import json
import os
import pathlib
import shutil
import subprocess
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

import adrules as ad
import executors


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")


def test_local_cluster_over_tls_gives_the_serial_answer():
    pytest.importorskip("distributed")
    models = [np.array([0.5, -1.0]), np.array([2.0, 0.1]), np.array([-0.3, 0.7])]
    x = np.array([1.0, -2.0])

    def total(x, executor):
        return ad.psum(lambda w, x: np.sum(np.tanh(w * x)) ** 2, models, x, executor=executor, chunk_size=1)

    want = ad.value_and_gradient(lambda x: total(x, "serial"), x)
    with executors.DaskExecutor(n_workers=1, security=True) as ex:
        assert ex.client.scheduler.address.startswith("tls://")
        got = ad.value_and_gradient(lambda x: total(x, ex), x)
    assert np.asarray(got[0]).tobytes() == np.asarray(want[0]).tobytes()
    assert got[1][0].tobytes() == want[1][0].tobytes()


# ------------------------------------------------ the cluster DaskExecutor starts itself

@pytest.fixture(scope="module")
def default_cluster():
    """A DaskExecutor as a user makes it, its own 1-worker cluster: shared by the tests
    below that only look at it and reach it (a start is most of such a test's time)."""
    pytest.importorskip("distributed")
    with executors.DaskExecutor(n_workers=1) as ex:
        yield ex


@pytest.fixture(scope="module")
def open_cluster():
    """The same, started unsecured (``security=False``): Dask's own default."""
    pytest.importorskip("distributed")
    with executors.DaskExecutor(n_workers=1, security=False) as ex:
        yield ex


def _http_ports(ex):
    return [ex._cluster.scheduler.http_server.port,
            *ex.client.run(lambda dask_worker: dask_worker.http_server.port).values()]


def _servers(ex):
    workers = ex.client.scheduler_info()["workers"]
    return [*workers, *(w["nanny"] for w in workers.values())]


def _as_another_user(ex, tmp_path):
    """What the intruder script reached, run as user nobody."""
    scheduler = ex.client.scheduler.address
    targets = {"scheduler": scheduler, "servers": [scheduler, *_servers(ex)], "http": _http_ports(ex),
               "tls": scheduler.startswith("tls://")}
    env = dict(os.environ, HOME=str(tmp_path), DASK_DISTRIBUTED__COMM__TIMEOUTS__CONNECT="5s",
               PYTHONDONTWRITEBYTECODE="1")
    r = subprocess.run(_as_nobody(sys.executable, str(INTRUDER), json.dumps(targets)),
                       capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


INTRUDER = pathlib.Path(__file__).with_name("_dask_intruder.py")


def _intruder_module():
    import importlib.util

    spec = importlib.util.spec_from_file_location("_dask_intruder", INTRUDER)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _as_nobody(*args):
    return ["setpriv", "--reuid", "nobody", "--regid", "nogroup", "--clear-groups", *args]


def _nobody_cannot_run_python():
    """Why no process of user nobody can run this interpreter with distributed, or None."""
    if not (hasattr(os, "geteuid") and os.geteuid() == 0 and shutil.which("setpriv")):
        return "runs a process as user nobody: needs root and setpriv (util-linux)"
    r = subprocess.run(_as_nobody(sys.executable, "-c", "import distributed"), capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, HOME="/tmp"), cwd="/")
    if r.returncode != 0:
        return f"user nobody cannot run {sys.executable} with distributed: {r.stderr.strip()[-200:]}"
    return None


def test_another_user_cannot_reach_the_default_cluster(tmp_path, default_cluster, open_cluster):
    """A process of another user id connected to the default cluster's scheduler and ran
    os.getuid() on a worker (0), and read /health and /info/... with dashboard=False. The
    same intruder, against the same cluster started unsecured, shows the attack works."""
    pytest.importorskip("distributed")
    why_not = _nobody_cannot_run_python()
    if why_not is not None:
        pytest.skip(why_not)
    os.chmod(tmp_path, 0o777)  # the intruder's home
    seen = _as_another_user(open_cluster, tmp_path)
    assert seen["uid"] != os.getuid()
    assert seen["scheduler"]["tcp"] == [os.getuid()], seen  # it ran code as us
    assert "Worker" in seen["servers"].values() and "Nanny" in seen["servers"].values(), seen
    ex = default_cluster
    seen = _as_another_user(ex, tmp_path)
    assert ex.map(abs, [-3]) == [3]  # we still can
    # the bare connection gets through with the cluster's own certificate
    intruder = _intruder_module()
    address = ex.client.scheduler.address
    ours = intruder.past_tls([address], str(tmp_path), ex._cluster.security)
    assert ours[f"{address} own certificate"] == "accepted", ours
    assert seen["uid"] != os.getuid()
    assert all(isinstance(v, str) and v.endswith("Error") for v in seen["scheduler"].values()), seen
    assert all(v.endswith("Error") for v in seen["servers"].values()), seen
    assert "accepted" not in seen["past_tls"].values(), seen
    assert set(seen["http"].values()) == {404}, seen
    assert (len(seen["servers"]), len(seen["past_tls"]), len(seen["http"])) == (6, 6, 8)


def test_the_default_cluster_speaks_tls_only_and_serves_no_http_route(default_cluster, open_cluster):
    ex = default_cluster
    addresses = [ex.client.scheduler.address, *_servers(ex)]
    assert all(a.startswith("tls://127.0.0.1:") for a in addresses), addresses
    for port in _http_ports(ex):
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10)
        assert info.value.code == 404
    with executors.DaskExecutor(n_workers=1, dashboard=True) as ex:  # asked for: served
        for port in _http_ports(ex):
            assert urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=10).read() == b"ok"
    assert open_cluster.client.scheduler.address.startswith("tcp://127.0.0.1:")


def test_bad_security_arguments_are_named():
    distributed = pytest.importorskip("distributed")
    with pytest.raises(TypeError, match=r"DaskExecutor\(security=\.\.\.\) must be None or True .*got str"):
        executors.DaskExecutor(n_workers=1, security="tls")
    with pytest.raises(TypeError, match=r"temporary credentials \(security=True\) only apply to the "
                                        r"LocalCluster DaskExecutor starts itself"):
        executors.DaskExecutor("tls://127.0.0.1:1", security=True)
    assert distributed  # (the errors come before any connection)


def test_without_cryptography_the_error_says_what_to_install():
    code = ("import sys; sys.modules['cryptography'] = None\n"
            "import executors\n"
            "try:\n"
            "    executors.DaskExecutor(n_workers=1)\n"
            "except ImportError as e:\n"
            "    print(e)\n")
    pytest.importorskip("distributed")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert "pip install cryptography (or pass security=False" in r.stdout, (r.stdout, r.stderr)


def test_the_workers_scratch_space_is_this_user_s_alone_and_goes_at_close():
    """Dask's default scratch folder, /tmp/dask-scratch-space, is shared by every user: its
    maker can swap other users' worker folders (spilled data, unpickled by the workers)."""
    pytest.importorskip("distributed")
    ex = executors.DaskExecutor(n_workers=1)
    try:
        (folder,) = ex.client.run(lambda dask_worker: dask_worker.local_directory).values()
        mine = folder
        while not os.path.basename(mine).startswith("executors-dask-"):
            assert mine != os.path.dirname(mine), f"{folder} is not in a folder of this executor's"
            mine = os.path.dirname(mine)
        st = os.stat(mine)
        assert st.st_uid == os.getuid() and st.st_mode & 0o777 == 0o700
    finally:
        ex.close()
    assert not os.path.exists(mine)
