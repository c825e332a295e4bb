"""schema_drift: edits to the upstream's JSON body, to each SSE `data:` event, and to JSON WebSocket
messages its rule's `websocket:` block matches; forwarded.

Its one parameter, `ops`, is a list of edits, each read here from the YAML with its own line. An
edit names its field by `path`, or, on a world whose field names it cannot know, by `first`: the
first value of a JSON type in the answer's text order (depth first) at or below `path`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultproxy.formats.yaml_input import YamlReader
from faultproxy.scenarios.faults.base import AgentAnswer, FaultKind, ParamSpec
from yaml.nodes import Node

DRIFT_OPS = ("rename", "remove", "add", "retype", "wrap", "reorder")
JSON_TYPES = ("string", "number", "integer", "boolean", "null", "array", "object")
REORDER = ("reverse", "sorted")
# Extra fields each op accepts, and which of them it needs.
_OP_FIELDS = {"rename": ("to",), "remove": (), "add": ("value",), "retype": ("to",),
              "wrap": ("key",), "reorder": ("order",)}
_OP_REQUIRED = {"rename": ("to",), "add": ("value",), "retype": ("to",)}
_OPS_ON_A_KEY = ("rename", "remove", "add")  # these edit a named field, so the path must end in one
_OPS_ON_FIRST = ("rename", "remove", "retype", "wrap")  # these may edit the first value of a type instead
FIELD = "{field}"  # in a rename's `to`: the renamed field's own name (`{field}_v2`)


@dataclass(frozen=True)
class DriftOp:
    """One schema_drift edit. `path` is split on dots; `*` means every list item or dict value.
    `first`: a JSON type; the edit applies to the first value of that type at or below `path`
    instead (in the answer's text order: depth first), whatever its name."""

    op: str
    path: tuple[str, ...]
    to: str | None = None
    value: Any = None
    key: str | None = None
    order: str | None = None
    first: str | None = None


def read_ops(r: YamlReader, node: Node, field: str) -> tuple[DriftOp, ...]:
    """The `ops` list, each op checked against the fields it takes."""
    ops = r.sequence(node, field, "ops")
    return tuple(_read_op(r, op, f"{field}[{i}]") for i, op in enumerate(ops))


def _read_op(r: YamlReader, node: Node, field: str) -> DriftOp:
    present = r.fields(node, field)
    if "op" not in present:
        raise r.error(node, f"{field}.op", "missing required field 'op'")
    op = r.choice(present["op"], f"{field}.op", r.string(present["op"], f"{field}.op"), DRIFT_OPS)
    takes_first = op in _OPS_ON_FIRST and "first" in present
    r.check_keys(node, field, present, ("op", "path", *_OP_FIELDS[op], *(("first",) if op in _OPS_ON_FIRST else ())),
                 required=(*(() if takes_first else ("path",)), *_OP_REQUIRED.get(op, ())))
    first = None
    if takes_first:
        first = r.choice(present["first"], f"{field}.first", r.string(present["first"], f"{field}.first"), JSON_TYPES)
    names_a_key = first is None and op in _OPS_ON_A_KEY
    path = _read_path(r, present["path"], f"{field}.path", op, names_a_key) if "path" in present else ()
    to = None
    if op == "rename":
        to = r.string(present["to"], f"{field}.to", nonempty=True)
    elif op == "retype":
        to = r.choice(present["to"], f"{field}.to", r.string(present["to"], f"{field}.to"), JSON_TYPES)
    value = r.plain(present["value"], f"{field}.value") if op == "add" else None
    key = r.string(present["key"], f"{field}.key", nonempty=True) if "key" in present else None
    order = None
    if op == "reorder":
        order = "reverse"
        if "order" in present:
            order = r.choice(present["order"], f"{field}.order",
                             r.string(present["order"], f"{field}.order"), REORDER)
    return DriftOp(op, path, to, value, key, order, first)


def _read_path(r: YamlReader, node: Node, field: str, op: str, names_a_key: bool) -> tuple[str, ...]:
    text = r.string(node, field)
    segments = () if text in ("", "$") else tuple(text.split("."))
    if not all(segments):
        raise r.error(node, field, f"invalid path '{text}': empty segment")
    if names_a_key and (not segments or segments[-1] == "*"):
        raise r.error(node, field, f"op '{op}' needs a path ending in a field name (or `first: TYPE`), got '{text}'")
    return segments


KIND = FaultKind(
    name="schema_drift",
    description=("JSON bodies, each SSE `data:` event, and JSON WebSocket messages (a rule with a `websocket:` "
                 "block, [WebSocket sessions](websocket.md)) rewritten; gzip, br and zstd re-encoded, "
                 "Content-Length right"),
    params={
        "ops": ParamSpec("ops", None, "edits to the JSON response body: " + ", ".join(DRIFT_OPS) + "; each at a "
                         "dotted `path`, or (rename, remove, retype, wrap) at `first: TYPE`, the first value of that "
                         "JSON type in the answer's text order at or below `path` (default the whole answer; in an "
                         "MCP tool result, each text item holding JSON), whatever its name; a rename's `to` may hold `{field}`, "
                         "the old name", required=True, read=read_ops),
    },
    forwards=True,
    also_on_messages=True,
    went_on=AgentAnswer("accepted drifted field", "validate tool responses; treat a missing field as an error"),
    over_stdio=("the result rewritten (ops on `result.*` paths, `first:` ops on the JSON of its text items), "
                "on one line, with the call's id"),
)
