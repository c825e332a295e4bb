"""schema_drift: rename, remove, add, retype, wrap and reorder values at JSON paths, in a JSON
body, in each SSE `data:` event, or in a JSON WebSocket message its rule matched.

A path is a tuple of keys; `*` stands for every element of a list or every value of a mapping.
An op with `first: TYPE` edits the first value of that JSON type at or below its path instead, in
the answer's text order (depth first), so a rule can drift an answer whose field names it does not
know. In a JSON-RPC message (an MCP answer) the envelope and MCP's content blocks are the
protocol's, not the tool's: such an op drifts the tool's own answer in each text content item that
holds JSON, what a model reads. `structuredContent` is left as it is: clients check it against the
tool's listed outputSchema (the SDK's wraps even a string answer as {"result": ...}), so drifting
it fails every call rather than the agent's reading (named `result.*` paths reach it).
Operations work on a deep copy and report whether anything changed, so a drift rule that
matched a body without the targeted field is recorded as not delivered.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterable
from typing import Any

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault
from faultproxy.proxy.sse import map_json_data
from faultproxy.proxy.websocket import MessageFault, WsSession, message_json
from faultproxy.scenarios.faults import schema_drift
from faultproxy.scenarios.faults.schema_drift import FIELD, DriftOp
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage


class SchemaDriftFault(Fault):
    kind = schema_drift.KIND

    def event_shaper(self, ex: FlowExchange) -> Callable[[bytes], bytes | None] | None:
        def shape(event: bytes) -> bytes:
            return map_json_data(event, lambda document: self._drift(document, ex))

        return shape

    def _drift(self, document: Any, ex: FlowExchange) -> Any:
        drifted, changed = apply_drift(document, self.params["ops"])
        if changed:
            ex.deliver(self._detail())
        return drifted

    def _detail(self) -> str:
        return ", ".join(f"{op.op} {_place(op)}" for op in self.params["ops"])

    async def message(self, flow: http.HTTPFlow, session: WsSession, message: WebSocketMessage,
                      fault: MessageFault) -> None:
        document = message_json(message)
        if not isinstance(document, (dict, list)):  # binary, not JSON, or too deep to parse: nothing to drift
            return
        drifted, changed = apply_drift(document, self.params["ops"])
        if changed:
            # mitmproxy sends the message's content as it is when this hook returns
            message.content = json.dumps(drifted, ensure_ascii=False, separators=(",", ":")).encode()
            fault.deliver(self._detail())

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None or flow.response.stream:
            return
        content = flow.response.get_content(strict=False)
        try:
            document = json.loads(content)
        except ValueError:
            return
        drifted = self._drift(document, ex)
        if ex.delivered:
            # `content` re-encodes with the response's Content-Encoding and fixes Content-Length.
            flow.response.content = json.dumps(drifted, separators=(",", ":")).encode()


def _place(op: DriftOp) -> str:
    path = ".".join(op.path)
    if op.first is None:
        return path
    return f"the first {op.first}" + (f" below {path}" if path else "")


def apply_drift(document: Any, ops: Iterable[DriftOp]) -> tuple[Any, bool]:
    """The document with every op applied (on a deep copy), and whether anything changed."""
    document = copy.deepcopy(document)
    changed = False
    for op in ops:
        document, op_changed = _apply_one(document, op)
        changed = changed or op_changed
    return document, changed


def _apply_one(document: Any, op: DriftOp) -> tuple[Any, bool]:
    if op.first is not None:
        if isinstance(document, dict) and document.get("jsonrpc") == "2.0":
            return document, _drift_tool_result(document.get("result"), op)
        found = first_of_type(document, op.path, op.first)
        return document, found is not None and _edit(*found, op)
    if not op.path or op.path in (("$",), ("",)):
        if op.op == "reorder" and isinstance(document, dict):
            return _reordered(document, op.order), len(document) > 1
        return document, False
    changed = False
    for parent, key in path_targets(document, op.path[:-1], op.path[-1]):
        changed = _edit(parent, key, op) or changed
    return document, changed


def path_targets(node: Any, prefix: tuple[str, ...], last: str):
    """Yield (container, key) pairs for every place the path's last segment names."""
    for parent in _walk(node, prefix):
        if last == "*":
            keys = list(parent) if isinstance(parent, dict) else range(len(parent)) if isinstance(parent, list) else []
            for key in keys:
                yield parent, key
        elif isinstance(parent, dict):
            yield parent, last
        elif isinstance(parent, list) and last.isdigit():
            yield parent, int(last)


def _drift_tool_result(result: Any, op: DriftOp) -> bool:
    """A `first:` op on an MCP tool result: on each text item that holds JSON (written back
    compact); whether anything changed."""
    if not isinstance(result, dict):
        return False
    changed = False
    for item in result.get("content") if isinstance(result.get("content"), list) else ():
        if not (isinstance(item, dict) and item.get("type") == "text" and isinstance(item.get("text"), str)):
            continue
        try:
            answer = json.loads(item["text"])
        except ValueError:
            continue
        if (found := first_of_type(answer, op.path, op.first)) is not None and _edit(*found, op):
            item["text"] = json.dumps(answer, ensure_ascii=False, separators=(",", ":"))
            changed = True
    return changed


def first_of_type(document: Any, path: tuple[str, ...], json_type: str) -> tuple[Any, Any] | None:
    """(container, key) of the first value of `json_type` at or below the places `path` names, in
    the document's text order; None when there is none."""
    for start in _walk(document, path):
        found = next(_places_of_type(start, json_type), None)
        if found is not None:
            return found
    return None


def _places_of_type(node: Any, json_type: str):
    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        if _is_type(value, json_type):
            yield node, key
        yield from _places_of_type(value, json_type)


def _is_type(value: Any, json_type: str) -> bool:
    if json_type in ("number", "integer"):
        return isinstance(value, (int, float)) and not isinstance(value, bool) and (
            json_type == "number" or isinstance(value, int))
    return isinstance(value, _PYTHON_TYPES[json_type])


_PYTHON_TYPES = {"string": str, "boolean": bool, "null": type(None), "array": list, "object": dict}


def _walk(node: Any, path: tuple[str, ...]):
    if not path:
        yield node
        return
    head, rest = path[0], path[1:]
    if head == "*":
        children = node.values() if isinstance(node, dict) else node if isinstance(node, list) else []
        for child in children:
            yield from _walk(child, rest)
    elif isinstance(node, dict) and head in node:
        yield from _walk(node[head], rest)
    elif isinstance(node, list) and head.isdigit() and int(head) < len(node):
        yield from _walk(node[int(head)], rest)


def _edit(parent: Any, key: Any, op: DriftOp) -> bool:
    present = key in parent if isinstance(parent, dict) else key < len(parent)
    if op.op == "add":
        if isinstance(parent, dict):
            parent[key] = copy.deepcopy(op.value)
            return True
        return False
    if not present:
        return False
    if op.op == "remove":
        del parent[key]
    elif op.op == "rename":
        if not isinstance(parent, dict):
            return False
        _rename_in_place(parent, key, op.to.replace(FIELD, str(key)))
    elif op.op == "retype":
        parent[key] = _retyped(parent[key], op.to)
    elif op.op == "wrap":
        parent[key] = {op.key: parent[key]} if op.key else [parent[key]]
    elif op.op == "reorder":
        if not isinstance(parent[key], dict):
            return False
        parent[key] = _reordered(parent[key], op.order)
    return True


def _rename_in_place(mapping: dict, old: str, new: str) -> None:
    # Keep the key's position: clients that read JSON as ordered text should see only the rename.
    items = [(new if k == old else k, v) for k, v in mapping.items()]
    mapping.clear()
    mapping.update(items)


def _reordered(mapping: dict, order: str) -> dict:
    keys = sorted(mapping) if order == "sorted" else list(reversed(mapping))
    return {k: mapping[k] for k in keys}


def _retyped(value: Any, to: str) -> Any:
    if to == "string":
        return value if isinstance(value, str) else json.dumps(value)
    if to in ("number", "integer"):
        try:
            number = float(value)
        except (TypeError, ValueError):
            return 0
        return int(number) if to == "integer" or number.is_integer() else number
    if to == "boolean":
        return bool(value)
    if to == "null":
        return None
    if to == "array":
        return value if isinstance(value, list) else [value]
    if to == "object":
        return value if isinstance(value, dict) else {"value": value}
    raise ValueError(f"unknown type {to!r}")
