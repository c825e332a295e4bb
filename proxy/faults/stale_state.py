"""stale_state: serve a read the answer the same request got earlier in the episode.

The kind remembers reads: for every GET or HEAD a stale_state rule matches, the first answer the
upstream gave is kept in the episode, and a firing rule serves it without forwarding.
"""

from __future__ import annotations

import time

from faultproxy.proxy import responses
from faultproxy.proxy.episodes import StoredResponse
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault
from faultproxy.scenarios.faults import stale_state
from mitmproxy import http

READS = ("GET", "HEAD")


def read_key(ex: FlowExchange) -> tuple[str, str, bytes]:
    """What makes two reads the same: method, URL and body."""
    return (ex.method, ex.url, ex.request_body or b"")


class StaleStateFault(Fault):
    kind = stale_state.KIND

    def remember(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        key = read_key(ex)
        if ex.method in READS and key not in ex.episode.reads:
            ex.episode.reads[key] = StoredResponse(
                ex.seq, flow.response.status_code, tuple(flow.response.headers.fields), flow.response.raw_content or b""
            )

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
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
