"""Request identity: are two sends the same request? One definition, used by the checks (a
retry, a repeat of an irreversible write) and by replay matching (which recording answers).

A request's identity is its method, host (with a non-default port), path, query and body, made
canonical so that what varies between two sends of the same intent does not count:

- headers are not part of it at all (x-stainless-*, user-agent, dates, request ids, retry
  counts and idempotency keys live there);
- JSON bodies are compared as canonical JSON (sorted keys, 1.0 == 1) without volatile keys —
  timestamps, nonces, request/trace ids, idempotency keys (compared lower-case, without - and _)
  — and without a JSON-RPC request's top-level `id`; form bodies and query strings as sorted
  pairs without volatile names; anything else byte for byte;
- a JSON-RPC batch is what it sends (its requests and notifications): the client's answers to a
  server's requests in it are those requests' exchanges, paired and compared there;
- the idempotency key (idempotency_key_of) is not part of it either: it says which sends the
  client means as one, which is what the checks and replay ask of it separately;
- with a redactor, both sides are redacted the same way first, so a recorded "[REDACTED]"
  matches the secret the agent sends again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from faultproxy.formats.redact import Redactor

VOLATILE = frozenset({"timestamp", "ts", "nonce", "requestid", "reqid", "traceid", "spanid",
                      "clientrequestid", "createdat", "updatedat", "sentat", "idempotencykey", "xrequestid",
                      "correlationid", "cachebuster"})
_RPC_TARGET = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}  # params key naming what
_DEFAULT_PORTS = {"http": 80, "https": 443}


def is_volatile(name: str) -> bool:
    """A key or parameter that varies between two sends of one intent (VOLATILE)."""
    return name.lower().replace("-", "").replace("_", "") in VOLATILE


def _strip(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        rpc = top and value.get("jsonrpc") == "2.0"
        return {k: _strip(v) for k, v in value.items() if not (rpc and k == "id") and not is_volatile(str(k))}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def canonical_body(body: bytes | None, content_type: str = "", redactor: Redactor | None = None) -> str:
    if not body:
        return ""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError:
        return "sha256:" + hashlib.sha256(body).hexdigest()
    if redactor is not None:
        text = redactor.body(text)
    try:
        document = json.loads(text)
    except ValueError:
        if "x-www-form-urlencoded" in content_type.lower():
            pairs = sorted((k, v) for k, v in parse_qsl(text, keep_blank_values=True) if not is_volatile(k))
            return "form:" + json.dumps(pairs)
        return "text:" + text
    return "json:" + json.dumps(_strip(document, top=True), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rpc_operation(body: bytes | None) -> str:
    """What a JSON-RPC (MCP) request asks for: "tools/call:NAME", "resources/read:URI", or its
    method (a batch: its messages', joined by commas); "" for anything else."""
    if not body or b'"jsonrpc"' not in body:
        return ""
    try:
        document = json.loads(body)
    except ValueError:
        return ""
    if isinstance(document, list):
        return ",".join(operation for element in document if (operation := _operation(element)))
    return _operation(document)


def _operation(document: Any) -> str:
    if not isinstance(document, dict) or not isinstance(document.get("method"), str):
        return ""
    method = document["method"]
    params = document.get("params")
    target = params.get(_RPC_TARGET[method]) if method in _RPC_TARGET and isinstance(params, dict) else None
    return f"{method}:{target}" if isinstance(target, str) else method


@dataclass(frozen=True)
class Endpoint:
    method: str
    host: str  # lower-case host, with the port when not the scheme's default
    path: str
    operation: str = ""  # JSON-RPC: rpc_operation(body)

    def __str__(self) -> str:
        return f"{self.method} {self.host}{self.path}" + (f" {self.operation}" if self.operation else "")


@dataclass(frozen=True)
class Identity:
    endpoint: Endpoint
    query: str
    body: str


def endpoint_of(method: str, url: str, body: bytes | None, redactor: Redactor | None = None) -> tuple[Endpoint, str]:
    """(endpoint, canonical query) of a request."""
    parts = urlsplit(redactor.url(url) if redactor else url)
    host = (parts.hostname or "").lower()
    port = parts.port
    if port and port != _DEFAULT_PORTS.get(parts.scheme.lower()):
        host = f"{host}:{port}"
    query = sorted((k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not is_volatile(k))
    return Endpoint(method.upper(), host, parts.path or "/", rpc_operation(body)), json.dumps(query) if query else ""


def identity_of(method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None,
                redactor: Redactor | None = None) -> Identity:
    content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
    body = _without_answers(body)
    endpoint, query = endpoint_of(method, url, body, redactor)
    return Identity(endpoint, query, canonical_body(body, content_type, redactor))


def _without_answers(body: bytes | None) -> bytes | None:
    """A JSON-RPC batch (a JSON array) without its responses: each answers a server's request and
    is that request's exchange (recorded and compared there), not part of what the batch sends
    (which the proxy and a replay cut down differently: what the server gets, nothing)."""
    if not body or not body.lstrip().startswith(b"["):
        return body
    try:
        document = json.loads(body)
    except ValueError:
        return body
    kept = [element for element in document if not (isinstance(element, dict) and element.get("jsonrpc") == "2.0"
                                                     and "method" not in element
                                                     and ("result" in element or "error" in element))]
    return body if len(kept) == len(document) else json.dumps(kept, separators=(",", ":")).encode()


IDEMPOTENCY_HEADERS = ("idempotency-key", "x-idempotency-key")
_IDEMPOTENCY_BODY_KEYS = ("idempotency_key", "idempotencyKey")


def idempotency_key_of(headers: Mapping[str, tuple[str, ...]], body_json: Any) -> str | None:
    """The idempotency key a request carries: an Idempotency-Key (or X-Idempotency-Key) header,
    else an `idempotency_key` field of its JSON body or of an MCP tool call's arguments.
    `headers` maps lower-case names to their values."""
    for name in IDEMPOTENCY_HEADERS:
        values = headers.get(name)
        if values and values[0]:
            return values[0]
    if isinstance(body_json, dict):
        params = body_json.get("params")
        arguments = params.get("arguments") if isinstance(params, dict) else None
        for holder in (body_json, arguments):
            if isinstance(holder, dict):
                for key in _IDEMPOTENCY_BODY_KEYS:
                    if isinstance(holder.get(key), str) and holder[key]:
                        return holder[key]
    return None
