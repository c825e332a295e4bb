"""schema_drift: edits to the upstream's JSON body, to each SSE `data:` event, and to JSON WebSocket
messages its rule's `websocket:` block matches; forwarded.

Its one parameter, `ops`, is a list of edits, each read here from the YAML with its own line.
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


@dataclass(frozen=True)
class DriftOp:
    """One schema_drift edit. `path` is split on dots; `*` means every list item or dict value."""

    op: str
    path: tuple[str, ...]
    to: str | None = None
    value: Any = None
    key: str | None = None
    order: str | None = None


def read_ops(r: YamlReader, node: Node, field: str) -> tuple[DriftOp, ...]:
    """The `ops` list, each op checked against the fields it takes."""
    ops = r.sequence(node, field, "ops")
    return tuple(_read_op(r, op, f"{field}[{i}]") for i, op in enumerate(ops))


def _read_op(r: YamlReader, node: Node, field: str) -> DriftOp:
    present = r.fields(node, field)
    if "op" not in present:
        raise r.error(node, f"{field}.op", "missing required field 'op'")
    op = r.choice(present["op"], f"{field}.op", r.string(present["op"], f"{field}.op"), DRIFT_OPS)
    r.check_keys(node, field, present, ("op", "path", *_OP_FIELDS[op]),
                 required=("path", *_OP_REQUIRED.get(op, ())))
    path = _read_path(r, present["path"], f"{field}.path", op)
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
    return DriftOp(op, path, to, value, key, order)


def _read_path(r: YamlReader, node: Node, field: str, op: str) -> tuple[str, ...]:
    text = r.string(node, field)
    segments = () if text in ("", "$") else tuple(text.split("."))
    if not all(segments):
        raise r.error(node, field, f"invalid path '{text}': empty segment")
    if op in _OPS_ON_A_KEY and (not segments or segments[-1] == "*"):
        raise r.error(node, field, f"op '{op}' needs a path ending in a field name, got '{text}'")
    return segments


KIND = FaultKind(
    name="schema_drift",
    description=("JSON bodies, each SSE `data:` event, and JSON WebSocket messages (a rule with a `websocket:` "
                 "block, [WebSocket sessions](websocket.md)) rewritten; gzip, br and zstd re-encoded, "
                 "Content-Length right"),
    params={
        "ops": ParamSpec("ops", None, "edits to the JSON response body: " + ", ".join(DRIFT_OPS),
                         required=True, read=read_ops),
    },
    forwards=True,
    also_on_messages=True,
    went_on=AgentAnswer("accepted drifted field", "validate tool responses; treat a missing field as an error"),
    over_stdio="the result rewritten (ops on `result.*` paths), on one line, with the call's id",
)
