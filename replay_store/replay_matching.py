"""Which recorded response answers this request? Request identity and the pool of recordings.

A request's identity (method, host, path, query, canonical body) is evaluator.traces.identity's, the
same the checks use to tell a retry.

The pool serves each recording once, in three tiers — after one rule first: a request carrying
an idempotency key (evaluator.traces.identity.idempotency_key_of) that this episode already sent to the
same endpoint gets the answer that key got ("idempotent"), as an upstream that honours keys
answers; the recording's next commit is not served for it. Then:
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
Nothing left: the request diverged from the recording. Why is said of the closest recording;
of a JSON-RPC batch, by its place among the batches to its endpoint and what its members send,
beside the recording's batch at that place.

A stdio MCP server's own requests and notifications (direction "server to client") are a pool
of their own (`from_server`), taken by replay's stand-in for the server: a client's
notifications/cancelled is never answered with the server's, nor the other way round.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.traces import (Endpoint, Identity, idempotency_key_of, identity_of, mcp_tool_hints,
                                         parse_trace, rpc_operation)
from faultproxy.formats.redact import Redactor
from faultproxy.formats.request_kinds import mcp_server
from faultproxy.proxy.stdio.passage import SERVER_TO_CLIENT
from faultproxy.replay_store.har import Recorded

SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
READ_ONLY_RPC = frozenset({"tools/list", "resources/list", "resources/templates/list", "resources/read",
                           "prompts/list", "prompts/get", "ping"})


def read_only_tools(recordings: Iterable[Recorded]) -> frozenset[tuple[str, str]]:
    """The (server, tool) pairs the recorded servers' tools/list answers mark readOnlyHint."""
    hints = mcp_tool_hints(parse_trace(_trace_line(r) for r in recordings
                                       if r.status is not None and rpc_operation(r.request_body) == "tools/list"))
    return frozenset(key for key, annotations in hints.items() if annotations.get("readOnlyHint") is True)


def _trace_line(recorded: Recorded) -> dict[str, Any]:
    """The parts of a trace line (formats.trace) the evaluator's MCP helpers read."""
    def text(body: bytes | None) -> str | None:
        return body.decode("utf-8", "replace") if body is not None else None

    return {"seq": recorded.seq,
            "request": {"method": recorded.method, "url": recorded.url, "body": text(recorded.request_body)},
            "upstream": {"status": recorded.status, "headers": list(recorded.response_headers),
                         "body": text(recorded.response_body), "sse": list(recorded.sse) if recorded.sse else None}}


def _idempotency_key(headers: list[tuple[str, str]], body: bytes | None) -> str | None:
    by_name: dict[str, tuple[str, ...]] = {}
    for name, value in headers:
        by_name.setdefault(name.lower(), (value,))
    document = None
    if body and (b"idempotency" in body.lower()):
        try:
            document = json.loads(body)
        except ValueError:
            pass
    return idempotency_key_of(by_name, document)


@dataclass
class Match:
    recorded: Recorded
    how: str  # idempotent | exact | endpoint | repeat


@dataclass
class Pool:
    """The recordings an episode may serve, each once (but see `repeat`)."""

    recordings: list[Recorded]
    redactor: Redactor = field(default_factory=Redactor)
    from_server: bool = False  # the server's own messages (stdio MCP), else everything else

    def __post_init__(self) -> None:
        self.served: set[int] = set()
        self._identity: dict[int, Identity] = {}
        self._by_identity: dict[Identity, list[Recorded]] = defaultdict(list)
        self._by_endpoint: dict[Endpoint, list[Recorded]] = defaultdict(list)
        self._last: dict[Any, Recorded] = {}
        self._keyed: dict[tuple[Endpoint, str], Recorded] = {}  # (endpoint, idempotency key) -> its answer
        self._batches: dict[str, int] = defaultdict(int)  # "METHOD host/path" -> batches the client sent there
        self._read_only_tools = read_only_tools(self.recordings)
        for recorded in self._servable():
            ident = identity_of(recorded.method, recorded.url, recorded.request_headers, recorded.request_body)
            self._identity[recorded.seq] = ident
            self._by_identity[ident].append(recorded)
            self._by_endpoint[ident.endpoint].append(recorded)

    def take(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None) -> Match | None:
        headers = list(headers)
        ident = identity_of(method, url, headers, body, self.redactor)
        key = _idempotency_key(headers, body)
        if _is_batch(ident):
            self._batches[_place(ident)] += 1
        if key is not None and (ident.endpoint, key) in self._keyed:
            return Match(self._keyed[(ident.endpoint, key)], "idempotent")
        for how, candidates in (("exact", self._by_identity.get(ident, ())),
                                ("endpoint", self._by_endpoint.get(ident.endpoint, ()))):
            for recorded in candidates:
                if recorded.seq not in self.served:
                    self.served.add(recorded.seq)
                    self._last[ident] = self._last[ident.endpoint] = recorded
                    if key is not None:
                        self._keyed[(ident.endpoint, key)] = recorded
                    return Match(recorded, how)
        if self._reads(ident.endpoint, mcp_server(url)):
            again = self._last.get(ident) or self._last_recorded(self._by_identity.get(ident)) \
                or self._last.get(ident.endpoint) or self._last_recorded(self._by_endpoint.get(ident.endpoint))
            if again is not None:
                return Match(again, "repeat")
        return None

    def _reads(self, endpoint: Endpoint, server: str) -> bool:
        """A request that changes nothing, so answering it twice is honest (`server`: the MCP server
        it went to, whose tools' annotations apply)."""
        if not endpoint.operation:
            return endpoint.method in SAFE_METHODS
        method, _, target = endpoint.operation.partition(":")
        return method in READ_ONLY_RPC or (method == "tools/call" and (server, target) in self._read_only_tools)

    def _last_recorded(self, candidates: list[Recorded] | None) -> Recorded | None:
        served = [r for r in candidates or () if r.seq in self.served]
        return served[-1] if served else None

    def client_before(self, url: str, message: bytes) -> int | None:
        """In the server's pool: the seq of the recording the client sent last before the server
        sent `message` (its first unserved recording, POSTed to `url` as the server's), else None.
        A GET to the same URL is the stream the server spoke on, not the client's turn."""
        ident = identity_of("POST", url, [], message, self.redactor)
        spoken = next((r for r in self._by_identity.get(ident, ()) if r.seq not in self.served), None)
        if spoken is None:
            return None
        host = urlsplit(url).hostname
        before = [r.seq for r in self.recordings if r.seq < spoken.seq and r.forwarded
                  and r.direction != SERVER_TO_CLIENT and urlsplit(r.url).hostname == host
                  and not (r.method == "GET" and r.url == url)]
        return before[-1] if before else None

    def unserved(self) -> list[Recorded]:
        return [r for r in self._servable() if r.seq not in self.served]

    def _servable(self) -> list[Recorded]:
        """This pool's recordings that reached their upstream (those a fault answered when recorded
        have nothing upstream to serve)."""
        return [r for r in self.recordings
                if r.forwarded and (r.direction == SERVER_TO_CLIENT) == self.from_server]

    def explain_miss(self, method: str, url: str, headers: Iterable[tuple[str, str]], body: bytes | None) -> str:
        """Why nothing matched, naming the closest recording (as Hoverfly reports its closest miss)."""
        ident = identity_of(method, url, headers, body, self.redactor)
        if _is_batch(ident):
            return self._batch_miss(ident)
        same_path = [r for r in self._servable() if self._identity[r.seq].endpoint.path == ident.endpoint.path]
        if not same_path:
            paths = sorted({str(self._identity[r.seq].endpoint) for r in self._servable()})
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

    def _batch_miss(self, ident: Identity) -> str:
        """A batch that matched nothing: its place among the client's batches to its endpoint and
        what it sends, beside the recording's batch at that place."""
        place, sent = _place(ident), self._batches[_place(ident)]
        said = f"batch {sent} to {place} sends {_members(ident)}"
        recorded = [r for r in self._servable()
                    if _is_batch(self._identity[r.seq]) and _place(self._identity[r.seq]) == place]
        if len(recorded) < sent:
            return f"{said}; the recording has {len(recorded)} batch(es) there"
        there = recorded[sent - 1]
        return f"{said}; the recording's batch {sent} there (#{there.seq}) sent {_members(self._identity[there.seq])}"


def _is_batch(ident: Identity) -> bool:
    return ident.body.startswith("json:[")


def _place(ident: Identity) -> str:
    return f"{ident.endpoint.method} {ident.endpoint.host}{ident.endpoint.path}"


def _members(ident: Identity) -> str:
    """What a batch's members send (their methods, a call's tool), its answers to the server left out."""
    return ident.endpoint.operation.replace(",", ", ") or "nothing but answers"
