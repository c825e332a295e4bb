"""The faults: one class each, with the hooks of the exchange it needs.

A fault sees the flow at three points: `request` (before forwarding; it may answer, hold or
kill), `responseheaders` (it may choose to stream and shape the body as it flows) and
`response` (after the upstream answered; it may rewrite, delay or drop what the client gets).
Each records on the exchange whether the client really saw it (`delivered`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import Callable
from typing import Any, ClassVar

from faultproxy.proxy import decide, responses
from faultproxy.proxy.drift import apply_drift
from faultproxy.proxy.exchange import Exchange
from faultproxy.proxy.relay import Relay
from faultproxy.proxy.sse import is_event_stream, map_json_data
from mitmproxy import http

WRITE_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
SUPPLIED_KEY = "faultproxy_supplied"  # flow.metadata: the upstream response came from supply_response, not the network


def request_id(ex: Exchange) -> str:
    return "req_" + hashlib.sha256(f"{ex.episode.key}:{ex.seq}".encode()).hexdigest()[:24]


def answer(flow: http.HTTPFlow, ex: Exchange, status: int, headers: dict[str, str], body: bytes) -> None:
    """Answer from the proxy without forwarding."""
    flow.response = http.Response.make(status, body, headers)
    flow.response.reason = responses.reason(status)
    ex.outcome = "injected"


def is_streamed_events(flow: http.HTTPFlow) -> bool:
    return flow.response is not None and is_event_stream(flow.response.headers.get("content-type"))


class Fault:
    type: ClassVar[str]

    def __init__(self, params: dict[str, Any], seed: str, relay: Relay) -> None:
        self.params = params
        self.seed = seed
        self.relay = relay

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        pass

    async def responseheaders(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        pass

    async def response(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        pass

    def buffers_events(self) -> bool:
        """Must an event stream be buffered whole (the fault acts on the finished response)?"""
        return False

    def event_shaper(self, ex: Exchange) -> Callable[[bytes], bytes | None] | None:
        return None


class ProviderError(Fault):
    """rate_limit, server_error, auth_failure: answer with the provider's own error."""

    def status(self) -> int:
        return self.params["status"]

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        provider = self.params.get("provider", "auto")
        if provider == "auto":
            provider = responses.guess_provider(flow.request.host, flow.request.path, dict(flow.request.headers))
        error = responses.error_response(
            provider,
            self.status(),
            request_id(ex),
            message=self.params.get("message"),
            retry_after_s=self.params.get("retry_after"),
            retry_after_ms=self.params.get("retry_after_ms"),
            limit=self.params.get("limit", "requests"),
        )
        answer(flow, ex, error.status, error.headers, error.body)
        ex.deliver(f"{error.status} {provider}")


class RateLimit(ProviderError):
    type = "rate_limit"

    def status(self) -> int:
        return 429


class ServerError(ProviderError):
    type = "server_error"


class AuthFailure(ProviderError):
    type = "auth_failure"


class Delay(Fault):
    type = "delay"

    def seconds(self, ex: Exchange) -> float:
        p = self.params
        if p["distribution"] == "fixed":
            ms = p["ms"]
        else:
            u = decide.decision_value(self.seed, ex.episode.key, ex.rule.name, ex.seq, stream="delay")
            if p["distribution"] == "uniform":
                ms = decide.uniform(u, p["min_ms"], p["max_ms"])
            else:
                ms = decide.lognormal(u, p["median_ms"], p["sigma"])
        return ms / 1000

    async def _wait(self, ex: Exchange) -> None:
        seconds = self.seconds(ex)
        await asyncio.sleep(seconds)
        ex.deliver(f"{seconds * 1000:.0f} ms before the {self.params['at']}")

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        if self.params["at"] == "request":
            await self._wait(ex)

    async def responseheaders(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        # A streamed body starts flowing right after this hook, so its delay goes here.
        if self.params["at"] == "response" and is_streamed_events(flow):
            await self._wait(ex)

    async def response(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        if self.params["at"] == "response" and not ex.delivered:
            await self._wait(ex)


class Timeout(Fault):
    """Hold the request without forwarding it; the client's own timeout usually fires first."""

    type = "timeout"

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        await asyncio.sleep(self.params["hold_s"])
        if self.params["then"] == "504":
            error = responses.error_response("generic", 504, request_id(ex), message="Gateway timeout")
            answer(flow, ex, 504, error.headers, error.body)
        else:
            flow.kill()
            ex.outcome = "reset"
        ex.deliver(f"held {self.params['hold_s']} s, then {self.params['then']}")


class Reset(Fault):
    type = "reset"

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        flow.kill()
        ex.outcome = "reset"
        ex.deliver("connection closed before forwarding")


class ResponseLost(Fault):
    """The upstream commits the request; the client never hears back."""

    type = "response_lost"

    def buffers_events(self) -> bool:
        return True

    async def response(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        if ex.upstream is None:
            return
        mode = self.params["mode"]
        if mode == "504":
            error = responses.error_response("generic", 504, request_id(ex), message="Gateway timeout")
            answer(flow, ex, 504, error.headers, error.body)
        else:
            if mode == "hang":
                await asyncio.sleep(self.params["hang_s"])
            flow.kill()
            ex.outcome = "reset"
        ex.deliver(f"upstream answered {ex.upstream['status']}; client got {mode}")


class PartialResponse(Fault):
    type = "partial_response"

    def event_shaper(self, ex: Exchange) -> Callable[[bytes], bytes | None] | None:
        keep = self.params.get("events")
        if keep is None:
            return None  # byte-based cuts of an event stream happen on the finished body
        kept = 0

        def shape(event: bytes) -> bytes | None:
            nonlocal kept
            if kept >= keep:
                ex.deliver(f"kept {keep} events")
                return None
            kept += 1
            return event

        return shape

    def buffers_events(self) -> bool:
        return self.params.get("events") is None

    async def response(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        if ex.upstream is None:
            return
        reset = self.params["end"] == "reset"
        if flow.response.stream:
            if ex.delivered and reset and flow.metadata.get(SUPPLIED_KEY):
                # A supplied body (replay) is sent whole after this hook: send the kept events,
                # then break the read, as killing a live stream midway does.
                _promise_more(flow.response, len(flow.response.raw_content or b"") + 1)
                ex.outcome = "reset"
            elif ex.delivered and reset:
                flow.kill()
                ex.outcome = "reset"
            elif ex.delivered:
                ex.outcome = "cut"
            return
        raw = flow.response.raw_content or b""
        limit = self.params["bytes"]
        if limit is None:
            fraction = self.params["fraction"]
            limit = int(len(raw) * fraction) if fraction is not None else len(raw)
        if limit >= len(raw):
            return
        ex.deliver(f"body cut at {limit} of {len(raw)} bytes")
        ex.outcome = "reset" if reset else "cut"
        flow.response.raw_content = raw[:limit]
        flow.response.headers.pop("transfer-encoding", None)
        if reset:
            _promise_more(flow.response, len(raw))
        else:
            flow.response.headers["content-length"] = str(limit)


def _promise_more(response: http.Response, length: int) -> None:
    """Announce `length` bytes, send what the body holds, close: the client sees a broken read."""
    response.headers["content-length"] = str(length)
    response.headers["connection"] = "close"


class SlowStream(Fault):
    """Pace a body event by event. mitmproxy's stream hook cannot wait, so the relay does."""

    type = "slow_stream"

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        await self.relay.route(flow, self.params["first_event_ms"], self.params["between_events_ms"])
        ex.deliver(f"first event after {self.params['first_event_ms']} ms, then every {self.params['between_events_ms']} ms")


class SchemaDrift(Fault):
    type = "schema_drift"

    def event_shaper(self, ex: Exchange) -> Callable[[bytes], bytes | None] | None:
        def shape(event: bytes) -> bytes:
            return map_json_data(event, lambda document: self._drift(document, ex))

        return shape

    def _drift(self, document: Any, ex: Exchange) -> Any:
        drifted, changed = apply_drift(document, self.params["ops"])
        if changed:
            ex.deliver(", ".join(f"{op.op} {'.'.join(op.path)}" for op in self.params["ops"]))
        return drifted

    async def response(self, flow: http.HTTPFlow, ex: Exchange) -> None:
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


class StaleState(Fault):
    """Serve a read the answer the same request got earlier in the episode."""

    type = "stale_state"

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        stored = ex.episode.reads.get(read_key(ex))
        if stored is None:
            ex.detail = "no earlier response to this request"
            return
        if self.params["after_write"] and not ex.episode.written_since(stored.seq, flow.request.path.split("?")[0]):
            ex.detail = "no write since the earlier response"
            return
        # The constructor keeps the stored bytes as they were sent (compressed or not).
        flow.response = http.Response(
            b"HTTP/1.1", stored.status, responses.reason(stored.status).encode(), http.Headers(stored.headers),
            stored.content, None, time.time(), time.time(),
        )
        ex.outcome = "stale"
        ex.deliver(f"served the response of exchange {stored.seq}")


class JsonRpcError(Fault):
    type = "jsonrpc_error"

    async def request(self, flow: http.HTTPFlow, ex: Exchange) -> None:
        request_json = ex.body_json()
        rpc_id = request_json.get("id") if isinstance(request_json, dict) else None
        if self.params["mode"] == "tool_error":
            body = responses.jsonrpc_tool_error(rpc_id, self.params["message"])
        else:
            body = responses.jsonrpc_error(rpc_id, self.params["code"], self.params["message"])
        answer(flow, ex, 200, {"content-type": "application/json"}, body)
        ex.deliver(self.params["mode"])


def read_key(ex: Exchange) -> tuple[str, str, bytes]:
    return (ex.method, ex.url, ex.request_body or b"")


FAULT_CLASSES: dict[str, type[Fault]] = {
    cls.type: cls
    for cls in (RateLimit, ServerError, AuthFailure, Delay, Timeout, Reset, ResponseLost,
                PartialResponse, SlowStream, SchemaDrift, StaleState, JsonRpcError)
}

