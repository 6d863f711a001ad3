"""Every ```python block of README.md runs, in order, in one namespace, as a newcomer pastes
them one after the other, so the README cannot rot.

A block that cannot run here says so in the README on the line before its fence, as
``<!-- not run: REASON -->``: it is still compiled, and reported as skipped with REASON.
A block that imports ``distributed`` is skipped, with the install command as the reason,
only when the dask extra is missing. The blocks run in a temporary working directory that
holds what they read: self-signed TLS credentials as ``ca.pem``, ``cert.pem``, ``key.pem``.
"""

import importlib.util
import logging
import os
import re
import traceback
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(
    r"(?:^<!--\s*not run:\s*(?P<reason>.*?)\s*-->\n)?^```python\n(?P<code>.*?)^```\s*$",
    re.MULTILINE | re.DOTALL,
)
_NEEDS_DASK = 'needs the optional "distributed" package: pip install -e ".[dask]"'


def readme_blocks(text):
    """[(line number of the fence, code, reason it is not run or None)] in README order."""
    return [
        (text.count("\n", 0, m.start("code")), m.group("code"), m.group("reason"))
        for m in _FENCE.finditer(text)
    ]


BLOCKS = readme_blocks(README.read_text(encoding="utf-8"))


def test_block_extraction():
    text = "x\n```python\na = 1\n```\n<!-- not run: needs a cluster -->\n```python\nb\n```\n```bash\nc\n```\n"
    assert readme_blocks(text) == [(2, "a = 1\n", None), (6, "b\n", "needs a cluster")]
    assert len(BLOCKS) >= 5


def _skip_reason(code, marked):
    if marked:
        return f"not run: {marked}"
    if re.search(r"^\s*(from|import)\s+distributed\b", code, re.MULTILINE):
        if importlib.util.find_spec("distributed") is None:
            return _NEEDS_DASK
    return None


class _Session:
    """Runs the blocks in order, once each, whichever test asks first."""

    def __init__(self, workdir):
        self.workdir = workdir
        self.namespace = {"__name__": "__readme__"}  # not importable: cloudpickle ships by value
        self.done = 0
        self.failed = None

    def run_through(self, index):
        while self.done <= index:
            line, code, marked = BLOCKS[self.done]
            self.done += 1
            if self.failed:
                continue
            compiled = compile(code, f"README.md:{line + 1}", "exec")
            if _skip_reason(code, marked):
                continue
            cwd = os.getcwd()
            os.chdir(self.workdir)
            try:
                exec(compiled, self.namespace)
            except BaseException:
                self.failed = (line, traceback.format_exc())
            finally:
                os.chdir(cwd)
        if self.failed and self.failed[0] != BLOCKS[index][0]:
            pytest.fail(f"an earlier README block (line {self.failed[0]}) failed")
        if self.failed:
            pytest.fail(f"README block at line {self.failed[0]} failed:\n{self.failed[1]}")


def _write_tls_credentials(directory):
    if importlib.util.find_spec("distributed") is None:
        return
    from distributed.security import Security

    tmp = Security.temporary()  # one self-signed certificate, as tests/test_dask_security.py uses
    (directory / "ca.pem").write_text(tmp.tls_ca_file)
    (directory / "cert.pem").write_text(tmp.tls_client_cert)
    (directory / "key.pem").write_text(tmp.tls_client_key)


def _logging_state():
    loggers = [logging.root] + [
        lg for lg in logging.root.manager.loggerDict.values() if isinstance(lg, logging.Logger)
    ]
    return {lg: (lg.level, list(lg.handlers)) for lg in loggers}


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    workdir = tmp_path_factory.mktemp("readme")
    _write_tls_credentials(workdir)
    s = _Session(workdir)
    before = _logging_state()
    yield s
    # a block may turn logging on (basicConfig, DEBUG levels): later tests see it as it was
    for lg in _logging_state():
        level, handlers = before.get(lg, (logging.NOTSET, []))
        lg.setLevel(level)
        lg.handlers[:] = handlers
    for value in list(s.namespace.values()):  # executors a block left open
        close = getattr(value, "close", None)
        if type(value).__module__.startswith("executors") and callable(close):
            close()


@pytest.mark.filterwarnings("ignore:Port 8787 is already in use:UserWarning")
@pytest.mark.parametrize("index", range(len(BLOCKS)), ids=[f"line{b[0]}" for b in BLOCKS])
def test_readme_block_runs(session, index):
    line, code, marked = BLOCKS[index]
    session.run_through(index)
    reason = _skip_reason(code, marked)
    if reason:
        pytest.skip(f"README block at line {line}: {reason}")


def test_every_example_is_listed_in_the_readme():
    text = README.read_text(encoding="utf-8")
    listed = text[text.index("## Examples"):]
    listed = listed[: listed.index("\n## ", 1)]
    scripts = sorted(p.name for p in (README.parent / "examples").glob("*.py"))
    missing = [name for name in scripts if f"`{name}`" not in listed]
    assert not missing, f"README's Examples section does not list {missing}"
