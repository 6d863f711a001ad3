"""Tests that need an optional extra skip, with the install command as the reason, when
it is missing; .ci/run installs every extra, so there they all run."""

import importlib.util
import logging

import pytest

_NEEDS_DASK = 'needs the optional "distributed" package: pip install -e ".[dask]"'


def _load_test_helpers(*names):
    """Helper modules of the tests (``tests/_*.py``) importable by name from any test file:
    pytest's importlib mode imports test files by path, not as a package."""
    import pathlib
    import sys

    for name in names:
        if name not in sys.modules:
            path = pathlib.Path(__file__).parent / "tests" / f"{name}.py"
            spec = importlib.util.spec_from_file_location(name, path)
            sys.modules[name] = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(sys.modules[name])


_load_test_helpers("_complex_checks", "_complex_fd", "_load")


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("distributed") is not None:
        return
    # executors/dask.py itself imports without distributed; only its examples need it
    for item in items:
        if item.nodeid.startswith("executors/dask.py::"):
            item.add_marker(pytest.mark.skip(reason=_NEEDS_DASK))


@pytest.fixture(scope="session")
def loopback_dask_client():
    """A real distributed LocalCluster (loopback only, no dashboard) for tests that hand a
    client to another library, such as joblib's dask backend; one per test session."""
    distributed = pytest.importorskip("distributed", reason=_NEEDS_DASK)
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
        dashboard_address="127.0.0.1:0", worker_dashboard_address="127.0.0.1:0",
        scheduler_kwargs={"dashboard": False},
        silence_logs=logging.CRITICAL,
    )
    client = distributed.Client(cluster, set_as_default=False)
    yield client
    client.close()
    cluster.close()
