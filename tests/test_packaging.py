"""What a user installs: one version everywhere, the licence and the typing markers ship."""

import importlib.metadata
import subprocess
import sys
import zipfile
from pathlib import Path

import adrules
import executors

ROOT = Path(__file__).resolve().parents[1]


def test_one_version_for_the_distribution_and_both_packages():
    dist = importlib.metadata.version("adrules")
    assert adrules.__version__ == dist
    assert executors.__version__ == dist


def test_wheel_ships_py_typed_and_license(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(tmp_path), str(ROOT)],
        capture_output=True, text=True, timeout=300,
    )
    assert r.returncode == 0, r.stderr
    (wheel,) = tmp_path.glob("adrules-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "adrules/py.typed" in names and "executors/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") or n.endswith(".dist-info/LICENSE") for n in names)
    assert wheel.name.startswith(f"adrules-{adrules.__version__}-")
