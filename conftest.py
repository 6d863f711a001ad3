"""Tests that need an optional extra skip, with the install command as the reason, when
it is missing; .ci/run installs every extra, so there they all run."""

import importlib.util

import pytest

_NEEDS_DASK = 'needs the optional "distributed" package: pip install -e ".[dask]"'


def pytest_collection_modifyitems(config, items):
    if importlib.util.find_spec("distributed") is not None:
        return
    # executors/dask.py itself imports without distributed; only its examples need it
    for item in items:
        if item.nodeid.startswith("executors/dask.py::"):
            item.add_marker(pytest.mark.skip(reason=_NEEDS_DASK))
