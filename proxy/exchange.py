"""One request/response exchange as the injector sees it live, and its trace line."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from faultproxy.formats.redact import Redactor
from faultproxy.formats.request_kinds import Kind, mcp_server
from faultproxy.formats.trace import encode_body, trace_time
from faultproxy.proxy.episodes import EpisodeState
from faultproxy.proxy.websocket import WsSession
from faultproxy.scenarios.selection import UNREADABLE_BODY, UNREADABLE_REASON, parse_json_body
from faultproxy.scenarios import Rule, Scenario

EXCHANGE_KEY = "faultproxy_exchange"  # flow.metadata: the flow's FlowExchange, while the injector holds it
_UNPARSED = object()


@dataclass
class FlowExchange:
    """A live exchange: what the injector knows of one flow while it passes, written to the
    episode's trace as one line when it ends (the evaluator reads it back as a TracedExchange).

    `forwarded`: the proxy passed the request on to the upstream (or, in replay, to the recorded
    upstream); false when a fault answered, held or dropped it first, or the proxy answered itself.
    """

    episode: EpisodeState
    seq: int
    method: str
    url: str
    request_headers: list[tuple[str, str]]
    request_body: bytes | None
    scenario: Scenario
    rule: Rule | None = None
    decision: float | None = None
    forced: bool = False
    delivered: bool = False
    detail: str = ""
    facts: dict[str, Any] | None = None  # what a delivered fault changed, as data (the trace's fault.facts)
    outcome: str = "response"
    forwarded: bool = False
    started: float = field(default_factory=time.time)
    response_started: float | None = None  # unix time the upstream's response headers arrived
    upstream: dict[str, Any] | None = None
    upstream_body: bytes | None = None
    upstream_events: list[tuple[float, bytes]] = field(default_factory=list)
    client_events: list[tuple[float, bytes]] | None = None
    client_status: int | None = None
    client_headers: list[tuple[str, str]] | None = None
    client_body: bytes | None = None
    tokens: int = 0
    perturbation: list[str] | None = None
    error: str | None = None
    infra_error: str | None = None  # an error the proxy met reaching the upstream, not one a fault made
    gone_after_s: float | None = None  # the episode ended this many seconds into the exchange, still held
    cut_short: str | None = None  # why the line was written before the upstream answered
    body_not_evaluated: str | None = None  # why a matching rule's body predicates were skipped
    matched: list[str] = field(default_factory=list)  # the rules whose match block selected the request
    direction: str | None = None  # MCP: "client to server" (stdio) or "server to client" (who asked)
    message_rules: list[Rule] = field(default_factory=list)  # rules on the messages of the session it may open
    kinds: frozenset[Kind] | None = None  # what the request is, once a rule with `kind:` asked (proxy.flow_kinds)
    websocket: WsSession | None = None  # the WebSocket session the upgrade opened, if it did
    duplicate: tuple[int, list[tuple[str, str]], bytes] | None = None  # duplicate_delivery: the second answer
    consequence_of: dict[str, Any] | None = None  # answered by the proxy because of an earlier fault: which
    # ends its open answer now as a dropped connection ends it, saying why; False once it has ended
    # (an MCP stream through the relay: proxy.relay.Relay.drop)
    drop: Callable[[str], bool] | None = None
    written: bool = False
    _body_json: Any = field(default=_UNPARSED, init=False, repr=False)

    def body_json(self) -> Any:
        """The request body as JSON, or NO_BODY; parsed on first use: a model request carries the
        whole conversation, and most requests never need it parsed."""
        if self._body_json is _UNPARSED:
            self._body_json = parse_json_body(self.request_body)
        return self._body_json

    def server(self) -> str:
        """The MCP server as the URL the client asked names it (formats.request_kinds.mcp_server, as
        the evaluator names it too; a stream's flow may be routed through the relay by now)."""
        return mcp_server(self.url)

    def host(self) -> str:
        """The server's host[:port] as the URL the client asked names it (in reverse mode, its
        upstream's; over stdio, the server's name): what stale_state's reads and writes share."""
        return self.url.split("/", 3)[2]

    def body_for_rules(self) -> Any:
        """body_json() as the rules' body predicates read it: when they cannot (match.UNREADABLE_BODY),
        the trace line says why, as the rule then selected the request on its other predicates."""
        body = self.body_json()
        if body is UNREADABLE_BODY:
            self.body_not_evaluated = UNREADABLE_REASON
        return body

    @property
    def fault_type(self) -> str | None:
        return self.rule.fault.type if self.rule else None

    def deliver(self, detail: str = "") -> None:
        self.delivered = True
        self.detail = detail or self.detail

    def to_record(self, redactor: Redactor, body_limit: int | None = None) -> dict[str, Any]:
        """The trace line; bodies longer than `body_limit` bytes are cut (formats.trace says how)."""
        return {
            "seq": self.seq,
            "episode": self.episode.key,
            "started": trace_time(self.started),
            "duration_s": trace_time(time.time() - self.started),
            "request": {
                "method": self.method,
                "url": redactor.url(self.url),
                "headers": redactor.headers(self.request_headers),
                **encode_body(self.request_body, redactor, body_limit),
            },
            "upstream": self._upstream_record(redactor, body_limit),
            "client": self._client_record(redactor, body_limit),
            "forwarded": self.forwarded,
            "fault": self._fault_record(redactor, body_limit),
            "perturbation": self.perturbation,
            "tokens": self.tokens,
            "error": self.error,
            **({"matched": list(self.matched)} if self.matched else {}),
            **{name: value for name, value in (("infra_error", self.infra_error), ("cut_short", self.cut_short),
                                               ("body_not_evaluated", self.body_not_evaluated),
                                               ("direction", self.direction),
                                               ("consequence_of", self.consequence_of),
                                               ("response_after_s", self._response_after_s()),
                                               ("websocket", self.websocket and self.websocket.to_record(_plain)))
               if value is not None},
        }

    def _response_after_s(self) -> float | None:
        return None if self.response_started is None else trace_time(self.response_started - self.started)

    def _upstream_record(self, redactor: Redactor, body_limit: int | None) -> dict[str, Any] | None:
        if self.upstream is None:
            return None
        record = {
            "status": self.upstream["status"],
            "headers": redactor.headers(self.upstream["headers"]),
            **encode_body(self.upstream_body, redactor, body_limit),
        }
        if self.upstream_events:
            record["sse"] = _events(self.upstream_events, redactor)
        return record

    def _client_record(self, redactor: Redactor, body_limit: int | None) -> dict[str, Any]:
        record: dict[str, Any] = {"outcome": self.outcome, "status": self.client_status}
        if self.gone_after_s is not None:
            record["gone_after_s"] = self.gone_after_s
        if self.client_headers is not None:
            record["headers"] = redactor.headers(self.client_headers)
        if self.client_body is not None:
            record |= encode_body(self.client_body, redactor, body_limit)
        if self.client_events is not None:
            record["sse"] = _events(self.client_events, redactor)
        return record

    def _fault_record(self, redactor: Redactor, body_limit: int | None) -> dict[str, Any] | None:
        if self.rule is None:
            return None
        duplicate = None
        if self.duplicate is not None:
            status, headers, body = self.duplicate
            duplicate = {"status": status, "headers": redactor.headers(headers), **encode_body(body, redactor, body_limit)}
        return {
            "rule": self.rule.name,
            "type": self.rule.fault.type,
            "params": _plain(self.rule.fault.params),
            "decision": self.decision,
            "forced": self.forced,
            "delivered": self.delivered,
            "detail": self.detail,
            **({"facts": self.facts} if self.facts else {}),
            **({"duplicate": duplicate} if duplicate else {}),
        }


def _events(events: list[tuple[float, bytes]], redactor: Redactor) -> list[list[Any]]:
    texts = redactor.events([e.decode("utf-8", "replace") for _, e in events])
    return [[round(t, 6), text] for (t, _), text in zip(events, texts, strict=True)]


def _plain(value: Any) -> Any:
    """Fault params as JSON (drift ops are dataclasses)."""
    if isinstance(value, dict) or hasattr(value, "items"):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _plain(getattr(value, k)) for k in value.__dataclass_fields__ if getattr(value, k) is not None}
    return value
