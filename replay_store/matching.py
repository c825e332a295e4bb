"""Which recorded response answers this request? Request identity and the pool of recordings.

A request's identity is its method, host (with a non-default port), path, query and body, made
canonical so that what varies between two sends of the same intent does not count:

- headers are not part of it at all (x-stainless-*, user-agent, dates, request ids, retry
  counts and idempotency keys live there);
- JSON bodies are compared as canonical JSON (sorted keys, 1.0 == 1) without volatile keys —
  timestamps, nonces, request/trace ids, idempotency keys (compared lower-case, without - and _)
  — and without a JSON-RPC request's top-level `id`; form bodies and query strings as sorted
  pairs without volatile names; anything else byte for byte;
- both sides are redacted the same way first, so a recorded "[REDACTED]" matches the secret the
  agent sends again.

The pool serves each recording once, in three tiers:
1. exact: the oldest unserved recording with the same identity;
2. endpoint order: else the oldest unserved recording with the same method, host and path (the
   documented fallback for a body that changed, e.g. a prompt reworded). For JSON-RPC (MCP),
   whose calls all share one path, the endpoint includes the operation: `tools/call:NAME`,
   `resources/read:URI`, `prompts/get:NAME`, or the method — a call is never answered with
   another tool's result;
3. repeat: else, for a read only, the latest recording with the same identity (or endpoint)
   again — a re-read of something already read. Reads are GET, HEAD and OPTIONS, the MCP
   methods that list or read, and tools/call of a tool that the recorded server's tools/list
   marks readOnlyHint. Writes never repeat.
Nothing left: the request diverged from the recording.
"""

from __future__ import annotations

import hashlib
import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from faultproxy.evaluator.checks import mcp_tool_hints, parse_trace
from faultproxy.formats.redact import Redactor
from faultproxy.replay_store.har import Recorded

VOLATILE = frozenset({"timestamp", "ts", "nonce", "requestid", "reqid", "traceid", "spanid",
                      "clientrequestid", "createdat", "updatedat", "sentat", "idempotencykey", "xrequestid",
                      "correlationid", "cachebuster"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
READ_ONLY_RPC = frozenset({"tools/list", "resources/list", "resources/templates/list", "resources/read",
                           "prompts/list", "prompts/get", "ping"})
_RPC_TARGET = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name"}  # params key naming what
_DEFAULT_PORTS = {"http": 80, "https": 443}


def _volatile(name: str) -> bool:
    return name.lower().replace("-", "").replace("_", "") in VOLATILE


def _strip(value: Any, top: bool = False) -> Any:
    if isinstance(value, dict):
        rpc = top and value.get("jsonrpc") == "2.0"
        return {k: _strip(v) for k, v in value.items() if not (rpc and k == "id") and not _volatile(str(k))}
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
            pairs = sorted((k, v) for k, v in parse_qsl(text, keep_blank_values=True) if not _volatile(k))
            return "form:" + json.dumps(pairs)
        return "text:" + text
    return "json:" + json.dumps(_strip(document, top=True), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def rpc_operation(body: bytes | None) -> str:
    """What a JSON-RPC (MCP) request asks for: "tools/call:NAME", "resources/read:URI", or its
    method; "" for anything else."""
    if not body or b'"jsonrpc"' not in body:
        return ""
    try:
        document = json.loads(body)
    except ValueError:
        return ""
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
    query = sorted((k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _volatile(k))
    return Endpoint(method.upper(), host, parts.path or "/", rpc_operation(body)), json.dumps(query) if query else ""


def identity_of(method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None,
                redactor: Redactor | None = None) -> Identity:
    content_type = next((v for k, v in headers if k.lower() == "content-type"), "")
    endpoint, query = endpoint_of(method, url, body, redactor)
    return Identity(endpoint, query, canonical_body(body, content_type, redactor))


def read_only_tools(recordings: Iterable[Recorded]) -> frozenset[str]:
    """The MCP tools the recorded server's tools/list answers mark readOnlyHint."""
    hints = mcp_tool_hints(parse_trace(_trace_line(r) for r in recordings
                                       if r.status is not None and rpc_operation(r.request_body) == "tools/list"))
    return frozenset(name for name, annotations in hints.items() if annotations.get("readOnlyHint") is True)


def _trace_line(recorded: Recorded) -> dict[str, Any]:
    """The parts of a trace line (proxy.trace) the evaluator's MCP helpers read."""
    def text(body: bytes | None) -> str | None:
        return body.decode("utf-8", "replace") if body is not None else None

    return {"seq": recorded.seq,
            "request": {"method": recorded.method, "url": recorded.url, "body": text(recorded.request_body)},
            "upstream": {"status": recorded.status, "headers": list(recorded.response_headers),
                         "body": text(recorded.response_body), "sse": list(recorded.sse) if recorded.sse else None}}


@dataclass
class Match:
    recorded: Recorded
    how: str  # exact | endpoint | repeat


@dataclass
class Pool:
    """The recordings an episode may serve, each once (but see `repeat`)."""

    recordings: list[Recorded]
    redactor: Redactor = field(default_factory=Redactor)

    def __post_init__(self) -> None:
        self.served: set[int] = set()
        self._identity: dict[int, Identity] = {}
        self._by_identity: dict[Identity, list[Recorded]] = defaultdict(list)
        self._by_endpoint: dict[Endpoint, list[Recorded]] = defaultdict(list)
        self._last: dict[Any, Recorded] = {}
        self._read_only_tools = read_only_tools(self.recordings)
        for recorded in self.recordings:
            if not recorded.forwarded:
                continue  # answered by a fault in the recording: nothing upstream to serve
            ident = identity_of(recorded.method, recorded.url, recorded.request_headers, recorded.request_body)
            self._identity[recorded.seq] = ident
            self._by_identity[ident].append(recorded)
            self._by_endpoint[ident.endpoint].append(recorded)

    def take(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None) -> Match | None:
        ident = identity_of(method, url, headers, body, self.redactor)
        for how, candidates in (("exact", self._by_identity.get(ident, ())),
                                ("endpoint", self._by_endpoint.get(ident.endpoint, ()))):
            for recorded in candidates:
                if recorded.seq not in self.served:
                    self.served.add(recorded.seq)
                    self._last[ident] = self._last[ident.endpoint] = recorded
                    return Match(recorded, how)
        if self._reads(ident.endpoint):
            again = self._last.get(ident) or self._last_recorded(self._by_identity.get(ident)) \
                or self._last.get(ident.endpoint) or self._last_recorded(self._by_endpoint.get(ident.endpoint))
            if again is not None:
                return Match(again, "repeat")
        return None

    def _reads(self, endpoint: Endpoint) -> bool:
        """A request that changes nothing, so answering it twice is honest."""
        if not endpoint.operation:
            return endpoint.method in SAFE_METHODS
        method, _, target = endpoint.operation.partition(":")
        return method in READ_ONLY_RPC or (method == "tools/call" and target in self._read_only_tools)

    def _last_recorded(self, candidates: list[Recorded] | None) -> Recorded | None:
        served = [r for r in candidates or () if r.seq in self.served]
        return served[-1] if served else None

    def unserved(self) -> list[Recorded]:
        return [r for r in self.recordings if r.forwarded and r.seq not in self.served]

    def explain_miss(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None) -> str:
        """Why nothing matched, naming the closest recording (as Hoverfly reports its closest miss)."""
        ident = identity_of(method, url, headers, body, self.redactor)
        same_path = [r for r in self.recordings if r.forwarded and self._identity[r.seq].endpoint.path == ident.endpoint.path]
        if not same_path:
            paths = sorted({str(self._identity[r.seq].endpoint) for r in self.recordings if r.forwarded})
            return "nothing recorded for this path" + (f"; recorded: {', '.join(paths[:6])}" if paths else "")
        def likeness(recorded: Recorded) -> tuple[bool, bool]:
            other = self._identity[recorded.seq].endpoint
            same_place = other.method == ident.endpoint.method and other.host == ident.endpoint.host
            return same_place and other.operation == ident.endpoint.operation, same_place

        closest = max(same_path, key=likeness)  # the first of the likeliest
        other = self._identity[closest.seq]
        if other.endpoint != ident.endpoint:
            return f"closest recording #{closest.seq} is {other.endpoint}"
        count = len(self._by_endpoint[ident.endpoint])
        return (f"all {count} recording(s) of {ident.endpoint} were already served, "
                "and only a read is served twice")
