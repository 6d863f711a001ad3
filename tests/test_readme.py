"""The README and docs/ as a newcomer meets them: every ```python block runs as a script,
``python block.py`` in a subprocess, exactly as a user would paste it into a file (so each
block carries its own imports and data, and a Dask block its ``__main__`` guard); a block
that prints is followed by a ```text block showing what it prints, and its output must be
exactly that. Links between the files resolve, the README stays short, and it lists every
example.

Each block runs in an empty temporary directory, with the installed packages and the
environment less ``ADRULES_*``; a block that names ``.pem`` files finds ``ca.pem``,
``cert.pem`` and ``key.pem`` there (one self-signed certificate, as a cluster's admin would
hand out), and a block that needs the optional ``distributed`` package is skipped, with
the install command as the reason, when it is missing.
"""

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = [README, *sorted((ROOT / "docs").rglob("*.md"))]
README_MAX_LINES = 250
TIMEOUT = 300
_FENCE = re.compile(r"^```(?P<lang>[\w-]*)\n(?P<body>.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
_NEEDS_DASK = 'needs the optional "distributed" package: pip install -e ".[dask]"'


def python_blocks(text):
    """[(line of the code's first line, code, expected output or None)] in text order:
    the expected output is a ```text block that directly follows (blank lines between)."""
    fences = list(_FENCE.finditer(text))
    blocks = []
    for i, m in enumerate(fences):
        if m.group("lang") != "python":
            continue
        after = fences[i + 1] if i + 1 < len(fences) else None
        shown = None
        if after and after.group("lang") == "text" and not text[m.end():after.start()].strip():
            shown = after.group("body")
        blocks.append((text.count("\n", 0, m.start("body")) + 1, m.group("body"), shown))
    return blocks


BLOCKS = [(path, *block) for path in DOCS for block in python_blocks(path.read_text(encoding="utf-8"))]


def test_block_extraction():
    text = ("x\n```python\nprint(1)\n```\n\n```text\n1\n```\n```python\na = 2\n```\nprose\n"
            "```text\nnot output\n```\n```bash\nc\n```\n")
    assert python_blocks(text) == [(3, "print(1)\n", "1\n"), (10, "a = 2\n", None)]
    assert sum(path == README for path, *_ in BLOCKS) >= 5


def _needs_dask(code):
    return re.search(r"\bdistributed\b|DaskExecutor|\"dask\"", code) is not None


def _write_tls_credentials(directory):
    from distributed.security import Security

    tmp = Security.temporary()  # one self-signed certificate, in memory
    (directory / "ca.pem").write_text(tmp.tls_ca_file)
    (directory / "cert.pem").write_text(tmp.tls_client_cert)
    (directory / "key.pem").write_text(tmp.tls_client_key)


@pytest.mark.parametrize(("path", "line", "code", "shown"), BLOCKS,
                         ids=[f"{p.relative_to(ROOT)}:{line}" for p, line, _, _ in BLOCKS])
def test_block_runs_as_a_script(path, line, code, shown, tmp_path):
    where = f"{path.relative_to(ROOT)}, the block at line {line}"
    if _needs_dask(code) and importlib.util.find_spec("distributed") is None:
        pytest.skip(f"{where}: {_NEEDS_DASK}")
    if ".pem" in code:
        _write_tls_credentials(tmp_path)
    (tmp_path / "block.py").write_text(code, encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADRULES_")}
    try:
        proc = subprocess.run([sys.executable, "block.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=TIMEOUT)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"{where} did not finish in {TIMEOUT} s\n--- stdout ---\n{e.stdout}\n--- stderr ---\n{e.stderr}")
    assert proc.returncode == 0, f"{where} failed as a script:\n{proc.stderr}"
    printed = [ln.rstrip() for ln in proc.stdout.rstrip().splitlines()]
    if shown is None:
        assert not printed, f"{where} prints, but no ```text block after it shows what:\n{proc.stdout}"
    else:
        expected = [ln.rstrip() for ln in shown.rstrip().splitlines()]
        assert printed == expected, f"{where} prints something else than it shows:\n{proc.stdout}"


def test_readme_is_short():
    lines = README.read_text(encoding="utf-8").count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines; move details to docs/"


def _anchor(heading):
    """GitHub's anchor of a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path):
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    return {_anchor(h) for h in re.findall(r"^#+ (.*)$", text, re.MULTILINE)}


@pytest.mark.parametrize("path", DOCS, ids=[str(p.relative_to(ROOT)) for p in DOCS])
def test_links_resolve(path):
    text = _FENCE.sub("", path.read_text(encoding="utf-8"))
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address
        file, _, anchor = target.partition("#")
        linked = (path.parent / file).resolve() if file else path
        if not linked.exists():
            broken.append(target)
        elif anchor and linked.suffix == ".md" and anchor not in _anchors(linked):
            broken.append(target)
    assert not broken, f"{path.relative_to(ROOT)} links to what does not exist: {broken}"


def test_every_example_is_listed_in_the_readme():
    text = README.read_text(encoding="utf-8")
    listed = text[text.index("## Examples"):]
    listed = listed[: listed.index("\n## ", 1)]
    scripts = sorted(p.name for p in (README.parent / "examples").glob("*.py"))
    missing = [name for name in scripts if f"`{name}`" not in listed]
    assert not missing, f"README's Examples section does not list {missing}"
