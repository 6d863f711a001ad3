"""A script that starts a Dask LocalCluster at its top level, without
``if __name__ == "__main__":``, gets one short error naming the guard, raised before
any worker starts (each spawned worker imports the script and would start a cluster of
its own: Dask's answer was hundreds of lines ending in "Nanny failed to start").

The scripts run as users run them, ``python script.py`` in a subprocess. The guarded
form is run by the README's and docs' Dask blocks (tests/test_readme.py) and by
examples/dask_ensemble.py (tests/test_examples.py).
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("distributed")

ROOT = Path(__file__).resolve().parents[1]

HEAD = textwrap.dedent("""\
    import numpy as np
    import adrules as ad
    import executors

    def loss(w, x):
        return np.sum(np.tanh(x @ w) ** 2)

    x, models = np.ones((20, 3)), [np.ones(3), np.zeros(3)]
""")

UNGUARDED = {
    # the README's Dask block with its guard taken away
    "executor": HEAD + textwrap.dedent("""\
        with executors.DaskExecutor(n_workers=2) as ex:
            print(ad.gradient(lambda ms: ad.psum(loss, ms, x, executor=ex), models))
    """),
    # the executor named: psum starts it, inside a gradient
    "by name": HEAD + textwrap.dedent("""\
        print(ad.gradient(lambda ms: ad.psum(loss, ms, x, executor="dask", dispatch="always"), models))
    """),
}


def _run(code, tmp_path):
    (tmp_path / "train.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, "train.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("form", list(UNGUARDED))
def test_a_script_without_the_main_guard_gets_one_short_error(form, tmp_path):
    proc = _run(UNGUARDED[form], tmp_path)
    assert proc.returncode == 1 and proc.stdout == ""
    lines = proc.stderr.rstrip().splitlines()
    assert lines[-1].startswith("RuntimeError: DaskExecutor: train.py, line ")
    assert 'outside `if __name__ == "__main__":`' in lines[-1] and "Put the script's work under" in lines[-1]
    assert "Nanny" not in proc.stderr and proc.stderr.count("Traceback") == 1
    # the executor form is the README's; by name, adrules' gradient frames come on top
    assert len(lines) <= (15 if form == "executor" else 25), proc.stderr
