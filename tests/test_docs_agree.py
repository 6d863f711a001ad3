"""The docs agree with each other and with what measured them: one source for the
performance figures (``asv_benchmarks/peers_latest.md``, written by ``compare_peers.py``;
docs/performance.md's table rounds its ratios, the README's table is rows of that table),
and the README's quick test command names files that exist.

What the docs say about the code is checked by running their blocks (tests/test_readme.py,
tests/test_porting_doc.py); the TLS block of docs/executors.md, which needs the reader's
own certificate files, is run here from an empty folder, where it must name them.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PERFORMANCE = (ROOT / "docs" / "performance.md").read_text(encoding="utf-8")
PEERS = (ROOT / "asv_benchmarks" / "peers_latest.md").read_text(encoding="utf-8")

#: docs/performance.md's row labels -> the start of peers_latest.md's workload cell
PEER_ROWS = {
    "gradient of `np.sum(x**2)`, n = 100,": "gradient of sum(x**2), n=1e2",
    "gradient of `np.sum(x**2)`, n = 10⁴,": "gradient of sum(x**2), n=1e4",
    "gradient of `np.sum(x**2)`, n = 10⁶,": "gradient of sum(x**2), n=1e6",
    "gradient of `x @ x`, n = 10⁶,": "gradient of x@x, n=1e6",
    "marginal cost per elementwise op": "marginal gradient cost per elementwise op",
    "small ensemble (32 MLPs 16-64-1, batch 256), serial loop": "small ensemble gradient, serial loop",
    "heavy ensemble (32 MLPs 16-512-1, batch 4096), serial loop": "heavy ensemble gradient, serial loop",
    "heavy ensemble, psum on the serial executor": "heavy ensemble gradient, adrules psum on the serial executor",
}


def table_rows(text, header):
    """The body rows of the Markdown table whose header row starts with ``header``."""
    start = text.index(header)
    rows = []
    for line in text[start:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append(line)
    return rows


def cells(row):
    return [c.strip() for c in row.strip("|").split("|")]


def test_the_readme_table_is_rows_of_the_performance_doc():
    readme = table_rows(README[README.index("## Performance"):], "| workload |")
    doc = table_rows(PERFORMANCE, "| workload |")
    assert len(readme) >= 4 and all(row in doc for row in readme), \
        "README.md's speed table must copy rows of docs/performance.md's, figures included"
    run_date = re.search(r"latest full run \((\d{4}-\d\d-\d\d)", PERFORMANCE).group(1)
    readme_date = re.search(r"latest\s+full run \((\d{4}-\d\d-\d\d)", README).group(1)
    peers_date = re.search(r"^- date: (\d{4}-\d\d-\d\d)", PEERS, re.MULTILINE).group(1)
    assert readme_date == run_date == peers_date


def _peer_ratios(label):
    """{"adrules": 6.93, "autograd": 17.0, "hand": 0.19} from peers_latest.md's row."""
    row = next(r for r in PEERS.splitlines() if r.startswith(f"| {label}"))
    ratios = cells(row)[-1]
    return {lib: float(v) for lib, v in re.findall(r"\b(adrules|autograd|hand) ([\d.]+)x", ratios)}


def test_the_performance_doc_rounds_the_latest_peer_run():
    checked = 0
    for row in table_rows(PERFORMANCE, "| workload |"):
        label, *figures = cells(row)
        key = next((k for k in PEER_ROWS if label.startswith(k)), None)
        if key is None:
            continue  # page faults and memory: from page_faults.py, in their own units
        measured = _peer_ratios(PEER_ROWS[key])
        for lib, shown in zip(("adrules", "autograd", "hand"), figures):
            if shown == "—":
                continue
            want = float(f"{measured[lib]:.2g}")
            assert float(shown.rstrip("x")) == want, f"{label}: {lib} is {shown}, the run measured {measured[lib]}x"
            checked += 1
    assert checked >= 15


def test_the_readme_quick_test_command_names_test_files_that_exist():
    quick = re.search(r"`python -m pytest ([^`]+)`", README).group(1).split()
    assert quick and all((ROOT / name).is_file() for name in quick)
    assert re.search(r"runs the tests in [\d-]+ minutes", README)


def test_the_tls_block_names_the_files_it_needs(tmp_path):
    pytest.importorskip("distributed")
    text = (ROOT / "docs" / "executors.md").read_text(encoding="utf-8")
    (block,) = [b for b in re.findall(r"^```python\n(.*?)^```", text, re.MULTILINE | re.DOTALL) if ".pem" in b]
    (tmp_path / "block.py").write_text(block, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    proc = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode != 0
    assert all(name in proc.stderr for name in ("ca.pem", "cert.pem", "key.pem"))
    assert len(proc.stderr.strip().splitlines()) <= 3 and "Errno" not in proc.stderr, proc.stderr
