"""SciPy's rules arrive with SciPy's own import: from any thread, at any time, whatever
else looked SciPy up first. Each case runs in a fresh interpreter, bounded in time (a
deadlock in the import system shows as a timeout)."""

import subprocess
import sys

import pytest


def _run(code, timeout=60, stderr=None):
    try:
        r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"hung for {timeout} s (deadlock):\n{code}")
    assert r.returncode == 0, r.stderr
    if stderr is not None:
        stderr.append(r.stderr)
    return r.stdout


# Two threads, as users hit it. Python 3.11's own module locks sometimes let one of two
# threads importing scipy for the first time see it half initialised (an ImportError or
# AttributeError in that thread, with or without adrules, and scipy broken in that
# process): the test asks for no hang, and for the rules whenever both imports worked.
@pytest.mark.parametrize("modules", [("scipy.stats", "scipy.special"), ("scipy.signal", "scipy.linalg")])
def test_scipy_imported_from_two_threads_after_adrules_does_not_deadlock(modules):
    code = ("import importlib, threading, adrules, numpy as np\n"
            f"modules = {modules!r}\n"
            "b, failed = threading.Barrier(len(modules)), []\n"
            "def imp(m):\n"
            "    b.wait()\n"
            "    try: importlib.import_module(m)\n"
            "    except (ImportError, AttributeError, KeyError): failed.append(m)\n"
            "ts = [threading.Thread(target=imp, args=(m,)) for m in modules]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "if failed: print('python-import-race'); raise SystemExit\n"
            "import scipy.stats as st, scipy.special as sp\n"
            "print(adrules.gradient(lambda x: st.norm.logpdf(x, 0.0, 1.0), 2.0)[0],"
            " adrules.gradient(sp.expit, 0.0)[0])")
    stderr = []
    out = _run(code, timeout=40, stderr=stderr).split()
    assert out in (["-2.0", "0.25"], ["python-import-race"]), stderr


def test_a_spec_lookup_before_the_import_does_not_stop_the_rules_from_loading():
    code = ("import importlib.util, adrules, numpy as np\n"
            "assert importlib.util.find_spec('scipy.stats') is not None\n"
            "assert importlib.util.find_spec('scipy.special') is not None\n"
            "import scipy.stats as st, scipy.special as sp\n"
            "print(adrules.gradient(lambda x: st.norm.logpdf(x, 0.0, 1.0), 2.0)[0],"
            " adrules.gradient(sp.expit, 0.0)[0])")
    assert _run(code).split() == ["-2.0", "0.25"]


def test_the_finder_leaves_once_the_rules_are_in():
    # the finders left wait for SciPy modules not imported yet (scipy.special may import some
    # of the others itself, depending on SciPy's version)
    code = ("import sys, adrules\n"
            "import scipy.special\n"
            "waiting = [f.name for f in sys.meta_path if type(f).__name__ == '_LoadAfter']\n"
            "print('scipy.special' in waiting, all(n not in sys.modules for n in waiting), len(waiting) > 0)")
    assert _run(code).strip() == "False True True"


def test_cloudpickle_sends_scipy_methods_by_name_so_they_load_where_adrules_is_absent(tmp_path):
    pytest.importorskip("cloudpickle")
    sent = tmp_path / "sent.pkl"
    _run("import cloudpickle, adrules, numpy as np, scipy.stats as st, scipy.special as sp\n"
         "fs = [st.norm.logpdf, st.gamma.logpdf, st.erlang.logpdf, st.multivariate_normal.logpdf,"
         " sp.logsumexp]\n"
         "assert adrules.gradient(lambda x: st.norm.logpdf(x, 0.0, 1.0), 2.0)[0] == -2.0\n"
         "blobs = [cloudpickle.dumps(f) for f in fs]\n"
         "assert not any(b'adrules' in b for b in blobs), 'adrules code inside the pickle'\n"
         f"open({str(sent)!r}, 'wb').write(cloudpickle.dumps(blobs))")
    out = _run("import sys; sys.modules['adrules'] = None  # as if not installed\n"
               "import pickle, numpy as np, scipy.stats as st, scipy.special as sp\n"
               f"blobs = pickle.loads(open({str(sent)!r}, 'rb').read())\n"
               "norm, gamma, erlang, mvn, lse = [pickle.loads(b) for b in blobs]\n"
               "pairs = [(norm(2.0), st.norm.logpdf(2.0)), (gamma(1.5, 2.0), st.gamma.logpdf(1.5, 2.0)),"
               " (erlang(1.5, 2), st.erlang.logpdf(1.5, 2)),"
               " (mvn(np.zeros(2)), st.multivariate_normal.logpdf(np.zeros(2))),"
               " (lse([1.0, 2.0]), sp.logsumexp([1.0, 2.0]))]\n"
               "print(*[bool(np.all(a == b)) for a, b in pairs])")
    assert out.split() == ["True"] * 5
