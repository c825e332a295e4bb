"""JSON-RPC 2.0 lines as MCP's stdio transport carries them: one message per line."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

SERVER_GONE = -32000  # implementation-defined server error: the server is not there to answer
INTERNAL_ERROR = -32603


@dataclass(frozen=True)
class Message:
    """One line read from a stream. `kind`: request (method and id), notification (method, no
    id), response (id, result or error), batch (a JSON array) or stray (not JSON-RPC at all)."""

    kind: str
    raw: bytes
    body: Any = None

    @property
    def id_key(self) -> str | None:
        """The id as a hashable key ("1" and 1 are different ids), or None without one."""
        if not isinstance(self.body, dict) or "id" not in self.body:
            return None
        return json.dumps(self.body["id"])

    @property
    def method(self) -> str | None:
        return self.body.get("method") if isinstance(self.body, dict) else None


def parse_line(raw: bytes) -> Message:
    """Classify one line (without its newline)."""
    try:
        body = json.loads(raw)
    except (ValueError, RecursionError):
        return Message("stray", raw)
    if isinstance(body, list):
        return Message("batch", raw, body)
    if not isinstance(body, dict) or body.get("jsonrpc") != "2.0":
        return Message("stray", raw, body)
    if isinstance(body.get("method"), str):
        return Message("request" if "id" in body else "notification", raw, body)
    if "id" in body and ("result" in body or "error" in body):
        return Message("response", raw, body)
    return Message("stray", raw, body)


def renumbered(message: Message, start: int) -> Message:
    """A request of a server started again (server_restart) as the client gets it: under an id the
    client's stream has not carried, since each server numbers its requests afresh (the SDK's from
    0), and the client may still answer one of an earlier server's."""
    body = {**message.body, "id": f"restart{start}:{message.body['id']}"}
    return Message(message.kind, json.dumps(body, separators=(",", ":"), ensure_ascii=False).encode(), body)


def error_line(rpc_id: Any, code: int, message: str) -> bytes:
    """A JSON-RPC error response, as one line with its newline."""
    document = {"jsonrpc": "2.0", "id": rpc_id, "error": {"code": code, "message": message}}
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


def answer_line(body: bytes, rpc_id: Any) -> bytes | None:
    """An HTTP body that carries a JSON-RPC answer, as the line the client gets: unchanged when it
    already is one line answering `rpc_id`; re-serialised on one line, with the request's id, when a
    fault rewrote it (a drifted body may span lines; a stale answer carries the earlier id).
    None when the body is not a JSON-RPC answer."""
    try:
        document = json.loads(body)
    except (ValueError, RecursionError):
        return None
    if not (isinstance(document, dict) and document.get("jsonrpc") == "2.0"
            and ("result" in document or "error" in document)):
        return None
    if document.get("id") == rpc_id and b"\n" not in body.strip():
        return body.strip() + b"\n"
    document["id"] = rpc_id
    return json.dumps(document, separators=(",", ":"), ensure_ascii=False).encode() + b"\n"


def answer_for(rpc_id: Any, status: int, body: bytes) -> bytes:
    """The JSON-RPC answer to request `rpc_id` for what the proxy made of it (status and body),
    as one line: the answer it carries, or an error naming the HTTP status (a 504, a 599 ...)."""
    line = answer_line(body, rpc_id)
    if line is not None:
        return line
    said = body.decode("utf-8", "replace").strip()[:300]
    return error_line(rpc_id, INTERNAL_ERROR, f"faultproxy: HTTP {status} from the proxy: {said}")
