"""The fault tables of the docs, written from the fault kinds, so the docs cannot drift from them.

    python -m faultproxy.scenarios.faults.docs_table            # rewrite the tables (`make docs`)
    python -m faultproxy.scenarios.faults.docs_table --check    # exit 1 naming each stale file

A doc holds a table between two marker comments naming it:

    <!-- generated: fault table faults (make docs writes it from scenarios/faults) -->
    | fault | what the client sees | parameters: range (default) |
    ...
    <!-- end of generated fault table -->

`faults` (docs/scenarios.md): every kind in catalogue order, its description, and its parameters
with their choices or ranges, defaults and what they do. In docs/mcp-stdio.md, `over-stdio`:
what a client of a stdio MCP server sees, for each kind that says (FaultKind.over_stdio), and
`over-mcp-http`: what a client over Streamable HTTP sees and what a robust one does, for the
faults of the session and the tools around the calls (over_mcp_http, robust_client). Prose that
does not fit a table stays outside the markers.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from faultproxy.scenarios.faults import FAULT_KINDS, FaultKind, ParamSpec

DOCS = (Path("docs/scenarios.md"), Path("docs/mcp-stdio.md"))  # relative to the checkout (`make docs` runs there)
END = "<!-- end of generated fault table -->"
_TABLE = re.compile(r"(?P<begin><!-- generated: fault table (?P<name>[\w-]+) [^\n]*-->\n)(?P<body>.*?)"
                    + re.escape(END), re.DOTALL)


def shown(value: float) -> str:
    """A number as the tables write it: 600,000 or 0.5."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _default(spec: ParamSpec) -> str:
    value = spec.default
    if spec.required:
        return " (required)"
    if value is None or value == ():
        return ""
    if isinstance(value, bool):
        return f" ({str(value).lower()})"
    if isinstance(value, str) and not spec.choices:
        return f" ({json.dumps(value, ensure_ascii=False)})"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f" ({value})"


def param_cell(name: str, spec: ParamSpec) -> str:
    """One parameter as the fault table lists it: `name`, its choices or range, its default, what it does."""
    if spec.choices:
        bounds = " (" + "|".join(str(choice) for choice in spec.choices) + ")"
    elif spec.minimum is not None and spec.maximum is not None:
        bounds = f" {shown(spec.minimum)}–{shown(spec.maximum)}"
    else:
        bounds = ""
    return f"`{name}`{bounds}{_default(spec)}" + (f": {spec.doc}" if spec.doc else "")


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def _row(*cells: str) -> str:
    return "| " + " | ".join(cells) + " |"


def faults_table(kinds: Mapping[str, FaultKind]) -> list[str]:
    """Every fault: what the client sees, and its parameters (one a line)."""
    rows = [_row("fault", "what the client sees", "parameters: range (default)"), "|---|---|---|"]
    for kind in kinds.values():
        params = "<br>".join(_cell(param_cell(name, spec)) for name, spec in kind.params.items()) or "—"
        rows.append(_row(f"`{kind.name}`", _cell(kind.description), params))
    return rows


def over_stdio_table(kinds: Mapping[str, FaultKind]) -> list[str]:
    """What a stdio MCP client sees, for each fault that says."""
    return [_row("fault", "over stdio"), "|---|---|"] + [
        _row(f"`{kind.name}`", _cell(kind.over_stdio)) for kind in kinds.values() if kind.over_stdio]


def over_mcp_http_table(kinds: Mapping[str, FaultKind]) -> list[str]:
    """What a client over Streamable HTTP sees, and what a robust one does, for the faults of an
    MCP session and the tools around the calls."""
    return [_row("fault", "what the client sees over HTTP", "a robust client"), "|---|---|---|"] + [
        _row(f"`{kind.name}`", _cell(kind.over_mcp_http), _cell(kind.robust_client))
        for kind in kinds.values() if kind.over_mcp_http]


TABLES: Mapping[str, Callable[[Mapping[str, FaultKind]], list[str]]] = {
    "faults": faults_table, "over-stdio": over_stdio_table, "over-mcp-http": over_mcp_http_table}


def regenerate(text: str, kinds: Mapping[str, FaultKind] = FAULT_KINDS) -> str:
    """`text` with each marked table written afresh from `kinds`; raises ValueError for a marker
    naming no table."""
    def table(found: re.Match[str]) -> str:
        write = TABLES.get(found["name"])
        if write is None:
            raise ValueError(f"no fault table named {found['name']!r}; the tables: {', '.join(TABLES)}")
        return found["begin"] + "\n".join(write(kinds)) + "\n" + END
    return _TABLE.sub(table, text)


def tables_in(text: str) -> list[str]:
    """The names of the marked tables in `text`, in order."""
    return [found["name"] for found in _TABLE.finditer(text)]


def main(argv: Sequence[str] | None = None) -> int:
    """Rewrite the tables of the docs (or, with --check, name the docs whose tables are stale: exit 1)."""
    args = list(sys.argv[1:] if argv is None else argv)
    check = "--check" in args
    paths = [Path(arg) for arg in args if arg != "--check"] or list(DOCS)
    stale = []
    for path in paths:
        text = path.read_text(encoding="utf-8")
        fresh = regenerate(text)
        if fresh != text:
            stale.append(path)
            if not check:
                path.write_text(fresh, encoding="utf-8")
    for path in stale:
        print(f"{path}: fault table {'out of date (make docs)' if check else 'rewritten'}",
              file=sys.stderr if check else sys.stdout)
    return 1 if check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
