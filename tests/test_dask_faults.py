"""Faults on a real Dask LocalCluster: a function whose module the workers cannot import."""

from __future__ import annotations

import sys

import numpy as np
import pytest

import adrules as ad
import executors

pytest.importorskip("distributed")


@pytest.fixture(autouse=True)
def always_dispatch(monkeypatch):
    """Tiny test work would otherwise run inline; send every chunk to the executor."""
    monkeypatch.setenv("ADRULES_DISPATCH", "always")


def _on_sys_path(folder):
    sys.path.insert(0, folder)


def test_f_from_a_module_the_workers_cannot_import_is_named(tmp_path, monkeypatch):
    """It said "could not unpickle shared arg 0 ... No module named ...": an argument the
    user never passed. The function is named, with the module and the fixes."""
    with executors.DaskExecutor(n_workers=1) as ex:
        ex.map(abs, [-1])  # workers started: the module's folder is not on their sys.path
        (tmp_path / "only_here_losses.py").write_text(
            "import numpy as np\n\ndef loss(w):\n    return np.sum(w ** 2)\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        import only_here_losses

        with pytest.raises(executors.SerializationError,
                           match=r"it refers to only_here_losses\.loss, and the workers cannot import module "
                                 r"'only_here_losses' \(ModuleNotFoundError.*\)\. Make 'only_here_losses' importable "
                                 r"where the workers run .*cloudpickle\.register_pickle_by_value\(only_here_losses\)"):
            ad.psum(only_here_losses.loss, [np.ones(3)] * 4, executor=ex)
        # a function added to the module in this process only: the workers' copy lacks it
        ex.client.run(_on_sys_path, str(tmp_path))  # the workers can import the module now
        exec("def added(w):\n    return np.sum(w)\n", only_here_losses.__dict__)
        with pytest.raises(executors.SerializationError,
                           match=r"it refers to only_here_losses\.added, which module 'only_here_losses' on the "
                                 r"workers does not define"):
            ad.psum(only_here_losses.added, [np.ones(3)] * 4, executor=ex)
        assert ad.psum(only_here_losses.loss, [np.ones(3)] * 4, executor=ex) == 12.0
