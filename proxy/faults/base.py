"""What every fault's behaviour shares: the hooks it may implement, and answering in the
proxy's own name.

A fault sees the flow at three points: `request` (before forwarding; it may answer, hold or
kill), `responseheaders` (it may choose to stream and shape the body as it flows) and
`response` (after the upstream answered; it may rewrite, delay or drop what the client gets).
Each records on the exchange whether the client really saw it (`delivered`).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any, ClassVar

from faultproxy.proxy import responses
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.relay import Relay
from faultproxy.proxy.sse import is_event_stream, map_json_data, split_events
from faultproxy.proxy.websocket import MessageFault, WsSession
from faultproxy.scenarios import FaultKind
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage

SUPPLIED_KEY = "faultproxy_supplied"  # flow.metadata: the upstream response came from supply_response, not the network
RECORDED_FAULT_KEY = "faultproxy_recorded_fault"  # flow.metadata, in replay: the recording's fault record


def request_id(ex: FlowExchange) -> str:
    """A request id for an answer the proxy makes, stable per episode and exchange."""
    return "req_" + hashlib.sha256(f"{ex.episode.key}:{ex.seq}".encode()).hexdigest()[:24]


def answer(flow: http.HTTPFlow, ex: FlowExchange, status: int, headers: dict[str, str], body: bytes) -> None:
    """Answer from the proxy; the request is not forwarded (or, after forwarding, not the upstream's answer)."""
    flow.response = http.Response.make(status, body, headers)
    flow.response.reason = responses.reason(status)
    ex.outcome = "injected"
    if ex.upstream is None:
        ex.forwarded = False


def answer_gateway_timeout(flow: http.HTTPFlow, ex: FlowExchange) -> None:
    """A generic 504, as a gateway that gave up on the upstream sends."""
    error = responses.error_response("generic", 504, request_id(ex), message="Gateway timeout")
    answer(flow, ex, 504, error.headers, error.body)


def is_streamed_events(flow: http.HTTPFlow) -> bool:
    return flow.response is not None and is_event_stream(flow.response.headers.get("content-type"))


def rewritten_documents(flow: http.HTTPFlow, change: Callable[[Any], Any]) -> bytes | None:
    """The answer's body with its JSON documents (the body, or each buffered SSE event's data)
    rewritten by `change`; None when the body is not JSON."""
    content = flow.response.get_content(strict=False) or b""
    if is_streamed_events(flow):
        return b"".join(map_json_data(event, change) for event in split_events(content))
    try:
        return json.dumps(change(json.loads(content)), separators=(",", ":")).encode()
    except ValueError:
        return None


def replace_body(flow: http.HTTPFlow, body: bytes) -> None:
    flow.response.headers.pop("transfer-encoding", None)
    flow.response.content = body  # re-encoded with the response's Content-Encoding


class Fault:
    """One fault's behaviour. A subclass sets `kind`, its FaultKind in scenarios.faults, which
    holds its name, parameters, whether it forwards and whether it remembers reads."""

    kind: ClassVar[FaultKind]
    # May it end streams other exchanges have open (proxy.mcp_http sends those through the relay)?
    drops_streams: ClassVar[bool] = False

    def __init__(self, params: dict[str, Any], seed: str, relay: Relay) -> None:
        self.params = params
        self.seed = seed
        self.relay = relay

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        pass

    async def responseheaders(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        pass

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        pass

    async def message(self, flow: http.HTTPFlow, session: WsSession, message: WebSocketMessage,
                      fault: MessageFault) -> None:
        """For a kind that acts on WebSocket messages: the matching message, before it is sent
        on (it may drop it, hold it, or queue others around it)."""

    def buffers_events(self) -> bool:
        """Must an event stream be buffered whole (the fault acts on the finished response)?"""
        return False

    def event_shaper(self, ex: FlowExchange) -> Callable[[bytes], bytes | None] | None:
        return None

    def touched(self, ex: FlowExchange) -> list[str]:
        """For a kind that remembers reads: the resource paths a write request touches besides
        its own path (called for every write of an episode whose scenario has such a rule)."""
        return []

    def remember(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """For a kind that remembers reads: keep what the upstream answered to a request one of
        its rules matched (called once the whole body is in, whichever rule fired)."""
