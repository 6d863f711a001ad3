"""Every ```python block of docs/porting.md runs, in order, in one namespace, as a reader
pastes them one after the other."""

import re
from pathlib import Path

import pytest

pytest.importorskip("scipy", reason="docs/porting.md ports SciPy code: pip install adrules[scipy]")

DOC = Path(__file__).resolve().parents[1] / "docs" / "porting.md"
BLOCKS = re.findall(r"^```python\n(.*?)^```\s*$", DOC.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def test_the_blocks_run_in_order():
    assert len(BLOCKS) >= 3
    namespace = {"__name__": "__porting__"}
    for i, code in enumerate(BLOCKS):
        exec(compile(code, f"{DOC.name} block {i}", "exec"), namespace)


def test_every_ported_example_is_listed_by_its_directory():
    text = DOC.read_text(encoding="utf-8")
    assert "../examples/ported" in text and "ten ported programs" in text.lower()
    assert len(list((DOC.parents[1] / "examples" / "ported").glob("*.py"))) == 10
