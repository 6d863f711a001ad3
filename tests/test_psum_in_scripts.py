"""psum as a user's first script meets it: ``python script.py``, rules registered in
``__main__``, the executor chosen by environment variable, every chunk dispatched.

Each script checks its gradients, jvps and Hessian-vector products against hand-derived
formulas and prints the bits of its results, so the test can also check they are
identical on every backend.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

USER_RULES = textwrap.dedent('''
    import os
    import numpy as np
    import adrules as ad

    @ad.primitive
    def sq(x):
        return x * x

    @ad.rrule.register(sq)
    def sq_rrule(x):
        return sq(x), lambda g: (ad.NoTangent(), 2 * g * x)

    @ad.frule.register(sq)
    def sq_frule(tangents, x):
        return sq(x), 2 * x * tangents[1]

    @ad.primitive
    def softplus(x):
        return np.logaddexp(0.0, x)

    ad.scalar_rule(softplus, lambda x, y: 1 / (1 + np.exp(-x)))

    @ad.primitive
    def step(x):
        return np.floor(x)

    ad.non_differentiable(step)

    def f(w, x):
        return np.sum(sq(w) * x) + np.sum(softplus(w)) + np.sum(step(w) * w)

    def where(w, x):
        return float(os.getpid())

    if __name__ == "__main__":
        rng = np.random.default_rng(0)
        ws, x = [rng.normal(size=5) for _ in range(6)], rng.normal(size=5)
        total = lambda ws, x: ad.psum(f, ws, x, chunk_size=1)
        value, (g_ws, g_x) = ad.value_and_gradient(total, ws, x)
        want_ws = [2 * w * x + 1 / (1 + np.exp(-w)) + np.floor(w) for w in ws]
        assert all(np.allclose(g, want) for g, want in zip(g_ws, want_ws)), (g_ws, want_ws)
        assert np.allclose(g_x, sum(w * w for w in ws))
        ones = [np.ones(5)] * len(ws)
        _, dy = ad.jvp(lambda ws: total(ws, x), (ws,), (ones,))
        assert np.isclose(dy, sum(np.sum(g) for g in want_ws)), dy
        vs = [np.linspace(-1.0, 1.0, 5)] * len(ws)  # second order: each chunk's hvp on a worker
        hv = ad.hvp(lambda ws: total(ws, x), ws, vs)
        s = [1 / (1 + np.exp(-w)) for w in ws]
        want_hv = [(2 * x + si * (1 - si)) * v for si, v in zip(s, vs)]
        assert all(np.allclose(h, want) for h, want in zip(hv, want_hv)), (hv, want_hv)
        elsewhere = bool(set(ad.pmap(where, ws, x, chunk_size=1)) - {os.getpid()})
        print("ELSEWHERE", elsewhere)
        print("BITS", np.float64(value).tobytes().hex(), np.concatenate(g_ws + [g_x]).tobytes().hex(),
              np.float64(dy).tobytes().hex(), np.concatenate(hv).tobytes().hex())
''')


def run_script(tmp_path, text, env_extra, timeout=240):
    script = tmp_path / "script.py"
    script.write_text(text)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env.update(env_extra)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    return subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout)


def _lines(result, tag):
    return [line.split(" ", 1)[1] for line in result.stdout.splitlines() if line.startswith(tag + " ")]


@pytest.fixture(scope="module")
def serial_bits(tmp_path_factory):
    r = run_script(tmp_path_factory.mktemp("serial"), USER_RULES, {"ADRULES_EXECUTOR": "serial"})
    assert r.returncode == 0, r.stderr
    return _lines(r, "BITS")


@pytest.mark.parametrize("backend", ["processes:2", "dask:2"])
def test_rules_registered_in_main_reach_the_workers(tmp_path, backend, serial_bits):
    if backend.startswith("dask"):
        pytest.importorskip("distributed")
    r = run_script(tmp_path, USER_RULES, {"ADRULES_EXECUTOR": backend, "ADRULES_DISPATCH": "always"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert _lines(r, "ELSEWHERE") == ["True"]  # chunks really ran in worker processes
    assert _lines(r, "BITS") == serial_bits


OVERRIDES = textwrap.dedent('''
    import os
    import numpy as np
    import adrules as ad
    from ops import scaled  # a primitive; its rules are registered by rules.py, imported here only
    import rules  # noqa: F401

    def loss(w, x):
        return np.sum(np.clip(x * w, -1.0, 1.0)) + np.sum(np.sin(scaled(x @ w)))

    def where(w, x):
        return float(os.getpid())

    if __name__ == "__main__":
        @ad.rrule.register(np.clip)  # straight-through: NumPy's own rule replaced, in __main__
        def clip_ste(x, lo, hi):
            return np.clip(x, lo, hi), lambda g: (ad.NoTangent(), g, ad.NoTangent(), ad.NoTangent())

        @ad.frule.register(np.clip)
        def clip_ste_frule(tangents, x, lo, hi):
            return np.clip(x, lo, hi), tangents[1]

        x = np.array([0.5, 2.0, -3.0])
        ws = [np.ones(3), 2 * np.ones(3), -np.ones(3)]
        (g,) = ad.gradient(lambda ws: ad.psum(loss, ws, x, chunk_size=1), ws)
        want = [x + np.cos(2.0 * (x @ w)) * 3.0 * x for w in ws]  # clip passes g; the rule: scaled. = 3
        assert all(np.allclose(a, b) for a, b in zip(g, want)), (g, want)
        v = [np.ones(3)] * 3
        _, dy = ad.jvp(lambda ws: ad.psum(loss, ws, x, chunk_size=1), (ws,), (v,))
        assert np.isclose(dy, sum(np.sum(b) for b in want)), dy
        print("ELSEWHERE", bool(set(ad.pmap(where, ws, x, chunk_size=1)) - {os.getpid()}))
''')

OPS = "import adrules as ad\n\n@ad.primitive\ndef scaled(y):\n    return 2.0 * y\n"
# the rule says 3 y, not NumPy's 2 y: a worker that lacks it gives another number
RULES = textwrap.dedent('''
    import adrules as ad
    from ops import scaled

    @ad.rrule.register(scaled)
    def scaled_rrule(y):
        return scaled(y), lambda g: (ad.NoTangent(), 3.0 * g)

    @ad.frule.register(scaled)
    def scaled_frule(tangents, y):
        return scaled(y), 3.0 * tangents[1]
''')


@pytest.mark.parametrize("backend", ["processes:2", "dask:2"])
def test_rules_replacing_numpy_s_or_registered_by_another_module_reach_the_workers(tmp_path, backend):
    """A straight-through np.clip registered in __main__, and rules for ops.scaled that only
    rules.py registers (a worker imports ops, never rules): workers used NumPy's own rule,
    or none, and the gradient was silently other than in the parent."""
    if backend.startswith("dask"):
        pytest.importorskip("distributed")
    (tmp_path / "ops.py").write_text(OPS)
    (tmp_path / "rules.py").write_text(RULES)
    env = {"ADRULES_EXECUTOR": backend, "ADRULES_DISPATCH": "always",
           "PYTHONPATH": str(tmp_path) + os.pathsep + os.environ.get("PYTHONPATH", "")}
    r = run_script(tmp_path, OVERRIDES, env)
    assert r.returncode == 0, r.stderr[-3000:]
    assert _lines(r, "ELSEWHERE") == ["True"]


CLOSE_AFTER_FAILURE = textwrap.dedent('''
    import time
    import executors

    def boom(x):
        if x == 1:
            raise ValueError("boom")
        time.sleep(0.05)
        return x

    if __name__ == "__main__":
        for _ in range(3):
            ex = executors.ProcessExecutor(2)
            ex.map(abs, [1, 2])
            try:
                ex.map(boom, range(20))
            except ValueError:
                pass
            ex.close()
        print("CLOSED")
''')


def test_close_right_after_a_failed_map_is_quiet(tmp_path):
    r = run_script(tmp_path, CLOSE_AFTER_FAILURE, {})
    assert r.returncode == 0 and "CLOSED" in r.stdout, r.stderr
    assert "Traceback" not in r.stderr and "InvalidStateError" not in r.stderr, r.stderr


MAIN_CLASSES = textwrap.dedent('''
    import dataclasses
    import os
    import numpy as np
    import adrules as ad

    @dataclasses.dataclass
    class Linear:
        w: np.ndarray
        b: float

    class Score:  # returned by pmap from the workers: its class exists only in this script
        def __init__(self, v, pid):
            self.v, self.pid = v, pid

    class Affine:  # a registered container with static data, defined only in this script
        def __init__(self, w, b, tag):
            self.w, self.b, self.tag = w, b, tag

    ad.register_node(Affine, lambda m: ((m.w, m.b), m.tag), lambda tag, c: Affine(c[0], c[1], tag))

    def loss(m, x):
        return np.sum((x @ m.w + m.b) ** 2)

    if __name__ == "__main__":
        rng = np.random.default_rng(1)
        ms = [Linear(rng.normal(size=3), float(i)) for i in range(4)]
        x = rng.normal(size=(5, 3))
        (g,) = ad.gradient(lambda ms: ad.psum(loss, ms, x, chunk_size=1), ms)
        for m, gm in zip(ms, g):
            r = x @ m.w + m.b
            assert np.allclose(gm.w, 2 * x.T @ r) and np.isclose(gm.b, 2 * np.sum(r)), (gm, m)
        affines = [Affine(m.w, m.b, f"m{i}") for i, m in enumerate(ms)]
        (g,) = ad.gradient(lambda ms: ad.psum(loss, ms, x, chunk_size=1), affines)
        for m, gm in zip(affines, g):
            r = x @ m.w + m.b
            assert type(gm) is Affine and gm.tag == m.tag, gm
            assert np.allclose(gm.w, 2 * x.T @ r) and np.isclose(gm.b, 2 * np.sum(r)), (gm, m)
        scores = ad.pmap(lambda m: Score(float(np.sum(m.w)), os.getpid()), ms, chunk_size=1)
        assert [type(s) for s in scores] == [Score] * 4, scores
        assert all(np.isclose(s.v, np.sum(m.w)) for s, m in zip(scores, ms))
        print("ELSEWHERE", bool({s.pid for s in scores} - {os.getpid()}))
''')


@pytest.mark.parametrize("backend", ["processes:2", "dask:2"])
def test_models_and_results_of_classes_defined_in_main_travel(tmp_path, backend):
    """Plain data (arrays in dicts, lists, tuples) crosses by the C pickler; anything else,
    as a dataclass model or a result class defined in the script, still by cloudpickle,
    which sends such classes by value (the C pickler would name ``__main__.Linear``, which
    a worker's ``__main__`` does not have). A class registered with ``register_node`` in
    the script carries its registration with it (``pytrees._NodeTravel``)."""
    if backend.startswith("dask"):
        pytest.importorskip("distributed")
    r = run_script(tmp_path, MAIN_CLASSES, {"ADRULES_EXECUTOR": backend, "ADRULES_DISPATCH": "always"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert _lines(r, "ELSEWHERE") == ["True"]


TINY_ON_THREADS = textwrap.dedent('''
    import threading
    import adrules as ad

    def tiny(i):
        return threading.current_thread().name

    if __name__ == "__main__":
        main = threading.current_thread().name
        for call in range(3):
            names = ad.pmap(tiny, list(range(8)), chunk_size=1)
            print("INLINE", call, sum(name == main for name in names))
''')


def test_tiny_work_in_a_fresh_script_stays_on_the_calling_thread(tmp_path):
    """Every call, the first included, times chunk 0 inline and runs the rest inline too.
    The first map in a process scans the loaded BLAS libraries (1 ms): not timed as the
    chunk's work, which would have sent the rest to the pool."""
    r = run_script(tmp_path, TINY_ON_THREADS, {"ADRULES_EXECUTOR": "threads:2"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert _lines(r, "INLINE") == ["0 8", "1 8", "2 8"]


UNLOADABLE = textwrap.dedent('''
    import importlib.util
    import sys
    import numpy as np
    import adrules as ad

    def loss(w):
        return np.sum(np.clip(w, -0.5, 0.5) ** 2)

    if __name__ == "__main__":
        # a rules module loaded from a path of the script's own: workers cannot import it
        spec = importlib.util.spec_from_file_location("myrules", "plugins/myrules.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["myrules"] = module
        spec.loader.exec_module(module)
        try:
            ad.gradient(lambda ms: ad.psum(loss, ms, chunk_size=1), [np.ones(3), np.ones(3)])
        except TypeError as e:
            print("ERROR", str(e).splitlines()[0])
''')

STRAIGHT_THROUGH = textwrap.dedent('''
    import numpy as np
    import adrules as ad

    @ad.rrule.register(np.clip)
    def clip_ste(x, lo, hi):
        return np.clip(x, lo, hi), lambda g: (ad.NoTangent(), g, ad.NoTangent(), ad.NoTangent())
''')


def test_a_rule_the_workers_cannot_load_is_named_not_replaced_by_numpy_s(tmp_path):
    """Its module was importable here only: the worker dropped it and used NumPy's own
    rule, silently (another gradient than serial's)."""
    (tmp_path / "plugins").mkdir()
    (tmp_path / "plugins" / "myrules.py").write_text(STRAIGHT_THROUGH)
    r = run_script(tmp_path, UNLOADABLE, {"ADRULES_EXECUTOR": "processes:2", "ADRULES_DISPATCH": "always"})
    assert r.returncode == 0, r.stderr[-3000:]
    assert _lines(r, "ERROR") == [
        "the rule registered for numpy.clip could not be loaded on this worker process "
        "(ModuleNotFoundError: No module named 'myrules'): define it at module level in a module "
        "the workers can import (on their sys.path), make what it captures picklable, or use "
        "the 'serial' or 'threads' executor."]


THREADS_THEN_DASK = textwrap.dedent('''
    import numpy as np
    import adrules as ad

    def f(w, x):
        return np.sum(np.tanh(x @ w))

    if __name__ == "__main__":
        x, ws = np.ones((4096, 3)), [np.full(3, 0.1 * i) for i in range(8)]
        for name in ("threads:2", "dask:2"):  # the data scattered to the cluster
            ad.gradient(lambda ws: ad.psum(f, ws, x, executor=name, dispatch="always"), ws)
        print("DONE")
''')


def test_a_script_that_chose_dask_after_another_backend_exits_cleanly(tmp_path):
    """The executors are closed before Dask's own exit hooks, whichever came first."""
    pytest.importorskip("distributed")
    r = run_script(tmp_path, THREADS_THEN_DASK, {})
    assert r.returncode == 0, r.stderr[-3000:]
    assert "DONE" in r.stdout
    assert "lose scattered data" not in r.stderr and "ERROR" not in r.stderr, r.stderr[-2000:]


FAILING_ON_DASK = textwrap.dedent('''
    import numpy as np
    import adrules as ad

    def f(x):
        if x == 3.0:  # element 2 alone: which of two failing chunks ends first is a race
            raise ValueError("x too big")
        return x * x

    if __name__ == "__main__":
        try:
            ad.psum(f, [1.0, 2.0, 3.0, 4.0], dispatch="always", chunk_size=1)
        except ValueError as e:
            print("CAUGHT", e, "|", " ".join(getattr(e, "__notes__", [])))
        print("AFTER", ad.psum(f, [1.0, 2.0], dispatch="always", chunk_size=1))
''')


def test_an_error_on_a_dask_worker_is_reported_once_to_the_caller_not_logged_by_the_worker(tmp_path):
    pytest.importorskip("distributed")
    r = run_script(tmp_path, FAILING_ON_DASK, {"ADRULES_EXECUTOR": "dask:2"})
    assert r.returncode == 0, r.stderr
    (caught,) = _lines(r, "CAUGHT")
    assert caught.startswith("x too big |") and "element 2" in caught, caught
    assert _lines(r, "AFTER") == ["5.0"]
    assert "Compute Failed" not in r.stderr, r.stderr  # 20 lines a failed task, before


CTRL_C_ON_THREADS = textwrap.dedent('''
    import signal
    import time
    signal.signal(signal.SIGINT, signal.default_int_handler)  # as in a terminal
    import numpy as np
    import adrules as ad

    def slow(w, x):  # 8 s of small traced operations
        h, end = x, time.monotonic() + 8.0
        while time.monotonic() < end:
            h = np.tanh(h * w)
        return np.sum(h)

    if __name__ == "__main__":
        print("started", flush=True)
        ad.gradient(lambda ws: ad.psum(slow, ws, np.ones(3), chunk_size=1), [np.ones(3)] * 4)
''')


def test_ctrl_c_stops_a_psum_on_threads_mid_chunk(tmp_path):
    """The chunks running on the pool's threads stop at their next traced operation, so
    the script ends at once: before, it waited at exit for them (a thread cannot be
    killed), here 8 s more, in general as long as a chunk takes."""
    import signal
    import time

    script = tmp_path / "script.py"
    script.write_text(CTRL_C_ON_THREADS)
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env.update(ADRULES_EXECUTOR="threads:2", ADRULES_DISPATCH="always",
               PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    proc = subprocess.Popen([sys.executable, str(script)], cwd=tmp_path, env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout.readline() == "started\n"
        time.sleep(1.0)  # the chunks are running on the threads
        proc.send_signal(signal.SIGINT)
        t0 = time.monotonic()
        _, err = proc.communicate(timeout=60)
        waited = time.monotonic() - t0
    finally:
        proc.kill()
    assert proc.returncode != 0 and err.rstrip().endswith("KeyboardInterrupt"), err[-2000:]
    assert waited < 3.0, f"the script took {waited:.1f} s to end after Ctrl-C"
