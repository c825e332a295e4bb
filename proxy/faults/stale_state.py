"""stale_state: serve a read the answer the same request got earlier in the episode.

The kind remembers reads: for every GET or HEAD a stale_state rule matches, the first answer the
upstream gave is kept in the episode (the most recent reads: EpisodeLimits.reads), and a firing
rule serves it without forwarding. Writes (what proxy.flow_kinds.writes calls one) touch their
path and the rule's `write_resources` on their own server (host and port: many MCP servers share
the path /mcp, and a lagging replica of one never shows another's writes). A JSON-RPC request (an
MCP tool call, over HTTP or stdio) counts as a read too — which calls are reads is its rule's
match's business — keyed without its id, and served with the id of the call it answers, in a
JSON answer or an event stream's.
"""

from __future__ import annotations

import json
import time
from typing import Any

from faultproxy.proxy import responses
from faultproxy.proxy.episodes import StoredResponse
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault
from faultproxy.proxy.sse import data_payloads, is_event_stream, map_json_data, split_events
from faultproxy.scenarios.faults import stale_state
from mitmproxy import http

READS = ("GET", "HEAD")


def _rpc_request(ex: FlowExchange) -> dict | None:
    body = ex.body_json()
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0" and "id" in body and isinstance(body.get("method"), str):
        return body
    return None


def is_read(ex: FlowExchange) -> bool:
    return ex.method in READS or _rpc_request(ex) is not None


def read_key(ex: FlowExchange) -> tuple[str, str, bytes]:
    """What makes two reads the same: method, URL and body (a JSON-RPC request's without its id)."""
    rpc = _rpc_request(ex)
    if rpc is not None:
        return (ex.method, ex.url, json.dumps({k: v for k, v in rpc.items() if k != "id"}, sort_keys=True).encode())
    return (ex.method, ex.url, ex.request_body or b"")


def _holds_answer(ex: FlowExchange) -> bool:
    """Have the upstream's events carried the JSON-RPC answer to this call? (An MCP client leaves
    a tools/call's event stream once it has its answer, often before the stream's end.)"""
    rpc = _rpc_request(ex)
    for payload in data_payloads(event for _, event in ex.upstream_events) if rpc is not None else ():
        try:
            message = json.loads(payload)
        except ValueError:
            continue
        if _is_answer(message) and message["id"] == rpc["id"]:
            return True
    return False


def _answer_as(response: http.Response, rpc_id: Any) -> None:
    """An earlier JSON-RPC answer names the earlier call's id; clients match answers by id. In an
    event stream that is the event carrying the answer (others are the server's own messages)."""
    body = response.get_content(strict=False) or b""
    if is_event_stream(response.headers.get("content-type")):
        response.content = b"".join(map_json_data(event, lambda message: _with_id(message, rpc_id))
                                    for event in split_events(body))
        return
    try:
        document = json.loads(body)
    except ValueError:
        return  # not JSON: served as it was
    response.content = json.dumps(_with_id(document, rpc_id)).encode()


def _with_id(message: Any, rpc_id: Any) -> Any:
    return {**message, "id": rpc_id} if _is_answer(message) else message


def _is_answer(message: Any) -> bool:
    """A JSON-RPC response, not a request or notification of the server's own."""
    return isinstance(message, dict) and "id" in message and ("result" in message or "error" in message)


class StaleStateFault(Fault):
    kind = stale_state.KIND

    def touched(self, ex: FlowExchange) -> list[str]:
        body = ex.body_json()
        return [path for template in self.params["write_resources"] if (path := template.fill(body)) is not None]

    def remember(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if not is_read(ex) or (flow.error is not None and not _holds_answer(ex)):
            return  # an answer broken off is none, unless its event stream had already carried the call's
        # A streamed answer (an MCP server's event stream) went on as it came: its events are its body.
        content = b"".join(event for _, event in ex.upstream_events) if flow.response.stream else flow.response.raw_content
        ex.episode.remember_read(read_key(ex), StoredResponse(
            ex.seq, flow.response.status_code, tuple(flow.response.headers.fields), content or b""
        ))

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        stored = ex.episode.recall_read(read_key(ex))
        if stored is None:
            ex.detail = "no earlier response to this request"
            return
        host, path = ex.host(), flow.request.path.split("?")[0]
        if self.params["after_write"] and not ex.episode.written_since(stored.seq, host, path):
            ex.detail = _no_write_detail(ex, stored.seq, host + path)
            return
        # The constructor keeps the stored bytes as they were sent (compressed or not).
        flow.response = http.Response(
            b"HTTP/1.1", stored.status, responses.reason(stored.status).encode(), http.Headers(stored.headers),
            stored.content, None, time.time(), time.time(),
        )
        rpc = _rpc_request(ex)
        if rpc is not None:
            _answer_as(flow.response, rpc["id"])
        ex.outcome = "stale"
        ex.deliver(f"served the response of exchange {stored.seq}")


def _no_write_detail(ex: FlowExchange, seq: int, resource: str) -> str:
    """Why a read stays fresh under after_write, naming the writes that did not touch it (each
    as host and path: a write to another server never does)."""
    detail = f"no write to {resource} since exchange {seq}"
    others = [host + path for host, path in ex.episode.writes_since(seq)]
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        detail += f"; later writes touched {shown} (write_resources names what a write touches)"
    return detail
