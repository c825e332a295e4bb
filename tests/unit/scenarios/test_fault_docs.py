"""The fault tables of the docs are written from the fault kinds (scenarios.faults.docs_table,
`make docs`): the docs in the checkout agree with the kinds, and a kind that changes makes them
disagree until the tables are written again."""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

from faultproxy.scenarios import FAULT_KINDS
from faultproxy.scenarios.faults.docs_table import DOCS, main, regenerate, shown, tables_in
from tests.support.layout import ROOT

TABLES = {Path("docs/scenarios.md"): ["faults"], Path("docs/mcp-stdio.md"): ["over-stdio", "over-mcp-http"]}


@pytest.mark.parametrize("doc", DOCS, ids=[doc.name for doc in DOCS])
def test_the_docs_fault_tables_are_the_ones_the_kinds_write(doc: Path) -> None:
    text = (ROOT / doc).read_text(encoding="utf-8")
    assert tables_in(text) == TABLES[doc]
    assert regenerate(text) == text, f"{doc}: the fault table disagrees with scenarios/faults; run `make docs`"


def test_every_fault_has_a_row_with_each_range_and_a_one_line_description() -> None:
    text = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    table = text[text.index("fault table faults"):text.index("<!-- end of generated fault table -->")]
    rows = {line.split(" | ")[0].strip("| `"): line for line in table.splitlines() if line.startswith("| `")}
    assert list(rows) == list(FAULT_KINDS)  # catalogue order
    for kind in FAULT_KINDS.values():
        assert kind.description and "\n" not in kind.description, kind.name
        assert bool(kind.over_mcp_http) == bool(kind.robust_client), f"{kind.name}: over HTTP, and a robust client"
        row = rows[kind.name]
        assert kind.description in row.replace("\\|", "|")
        for name, spec in kind.params.items():
            if spec.minimum is not None and not spec.choices:
                assert f"`{name}` {shown(spec.minimum)}–{shown(spec.maximum)}" in row, f"{kind.name}.{name}"


def test_a_changed_kind_makes_the_docs_disagree_until_make_docs(tmp_path: Path, capsys) -> None:
    delay = FAULT_KINDS["delay"]
    ms = dataclasses.replace(delay.params["ms"], maximum=42)
    changed = {**FAULT_KINDS, "delay": dataclasses.replace(delay, params={**delay.params, "ms": ms},
                                                           over_stdio="the call waits")}
    text = (ROOT / "docs" / "scenarios.md").read_text(encoding="utf-8")
    assert "`ms` 0–42 (1000)" in regenerate(text, changed) and "`ms` 0–42" not in text
    stdio = (ROOT / "docs" / "mcp-stdio.md").read_text(encoding="utf-8")
    assert "| `delay` | the call waits |" in regenerate(stdio, changed)

    copy = tmp_path / "scenarios.md"
    copy.write_text(text.replace("`ms` 0–600,000 (1000)", "`ms` 0–9 (1000)", 1), encoding="utf-8")
    assert main(["--check", str(copy)]) == 1
    assert capsys.readouterr().err == f"{copy}: fault table out of date (make docs)\n"
    assert main([str(copy)]) == 0 and copy.read_text(encoding="utf-8") == text
    assert main(["--check", str(copy)]) == 0


def test_prose_outside_the_markers_is_kept_and_an_unknown_table_is_refused(tmp_path: Path) -> None:
    doc = tmp_path / "mcp-stdio.md"
    shutil.copyfile(ROOT / "docs" / "mcp-stdio.md", doc)
    text = doc.read_text(encoding="utf-8")
    emptied = text.replace(text[text.index("| fault | over stdio |"):text.index("<!-- end of generated")], "")
    assert regenerate(emptied) == text
    with pytest.raises(ValueError, match="no fault table named 'nope'; the tables: faults, over-stdio, over-mcp-http"):
        regenerate(text.replace("fault table over-stdio", "fault table nope"))
