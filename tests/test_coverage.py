"""docs/coverage.md is current, and every function HIPS autograd differentiates has both
rules here or a stated reason (adrules.coverage.LEFT_OUT)."""

import pathlib
import re

import pytest

from adrules import coverage

TABLE = pathlib.Path(__file__).resolve().parent.parent / "docs" / "coverage.md"


def _rows(text):
    """{(section, function): (status, note)} from the markdown tables."""
    out, section = {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        elif line.startswith("| `"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            out[(section, cells[0])] = tuple(cells[1:])
    return out


def _made_with(text):
    return dict(re.findall(r"(numpy|scipy) (\d+\.\d+)", text.split("\n\n")[1]))


def test_committed_table_is_current():
    committed, fresh = TABLE.read_text(), coverage.render()
    if _made_with(committed) == _made_with(fresh):
        assert committed == fresh, "docs/coverage.md is stale: run python -m adrules.coverage"
        return
    # Another NumPy/SciPy release: compare the functions both versions have.
    old, new = _rows(committed), _rows(fresh)
    changed = {k: (old[k], new[k]) for k in old.keys() & new.keys() if old[k] != new[k]}
    assert not changed, f"docs/coverage.md is stale for {sorted(changed)[:10]}: run python -m adrules.coverage"


def test_every_autograd_function_has_both_rules_or_a_reason():
    # non-differentiable counts: autograd's rule for a piecewise-constant function is zero
    missing = [(q, st) for q, st, _, _ in coverage.target_rows()
               if st not in ("rrule, frule", "non-differentiable", "absent here") and q not in coverage.LEFT_OUT]
    assert not missing


def test_left_out_functions_really_have_no_rule():
    import numpy as np

    spaces = dict(coverage._namespaces())
    for qualified in coverage.LEFT_OUT:
        space, _, name = qualified.rpartition(".")
        if space in spaces and hasattr(spaces[space], name):
            assert coverage.status(getattr(spaces[space], name)) == "not supported", qualified
    assert coverage.status(np.sin) == "rrule, frule"


def test_check_mode_reports_a_stale_file(tmp_path, capsys):
    stale = tmp_path / "coverage.md"
    stale.write_text("# old\n")
    assert coverage.main(["--output", str(stale), "--check"]) == 1
    assert coverage.main(["--output", str(stale)]) == 0
    assert coverage.main(["--output", str(stale), "--check"]) == 0


@pytest.mark.parametrize("name", ["sin", "diff", "median"])
def test_table_lists_numpy_functions(name):
    assert ("numpy", f"`{name}`") in _rows(TABLE.read_text())


def test_complex_column_follows_the_rules_flags():
    import numpy as np

    import adrules as ad

    rows = _rows(TABLE.read_text())
    assert rows[("numpy", "`exp`")][1] == "yes"                  # flagged complex=True
    assert rows[("numpy", "`argmax`")][:2] == ("non-differentiable", "")

    @ad.primitive
    def real_only(x):
        return x

    @ad.primitive
    def both(x):
        return x

    ad.scalar_rule(real_only, lambda x, y: 1.0)
    ad.scalar_rule(both, lambda x, y: 1.0, complex=True)
    assert coverage.complex_status(real_only) == "no"
    assert coverage.complex_status(both) == "yes"
    assert coverage.complex_status(np.block) == "through its calls"
    assert coverage.complex_status(lambda x: x) == ""
