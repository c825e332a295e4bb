"""stale_state: serve a read the answer the same request got earlier in the episode.

The kind remembers reads: for every GET or HEAD a stale_state rule matches, the first answer the
upstream gave is kept in the episode (the most recent reads: EpisodeLimits.reads), and a firing
rule serves it without forwarding. Writes touch their path and the rule's `write_resources`.
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

    def touched(self, ex: FlowExchange) -> list[str]:
        body = ex.body_json()
        return [path for template in self.params["write_resources"] if (path := template.fill(body)) is not None]

    def remember(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.method in READS:
            ex.episode.remember_read(read_key(ex), StoredResponse(
                ex.seq, flow.response.status_code, tuple(flow.response.headers.fields), flow.response.raw_content or b""
            ))

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        stored = ex.episode.recall_read(read_key(ex))
        if stored is None:
            ex.detail = "no earlier response to this request"
            return
        path = flow.request.path.split("?")[0]
        if self.params["after_write"] and not ex.episode.written_since(stored.seq, path):
            ex.detail = _no_write_detail(ex, stored.seq, path)
            return
        # The constructor keeps the stored bytes as they were sent (compressed or not).
        flow.response = http.Response(
            b"HTTP/1.1", stored.status, responses.reason(stored.status).encode(), http.Headers(stored.headers),
            stored.content, None, time.time(), time.time(),
        )
        ex.outcome = "stale"
        ex.deliver(f"served the response of exchange {stored.seq}")


def _no_write_detail(ex: FlowExchange, seq: int, path: str) -> str:
    """Why a read stays fresh under after_write, naming the writes that did not touch it."""
    detail = f"no write to {path} since exchange {seq}"
    others = ex.episode.writes_since(seq)
    if others:
        shown = ", ".join(others[:3]) + (f" and {len(others) - 3} more" if len(others) > 3 else "")
        detail += f"; later writes touched {shown} (write_resources names what a write touches)"
    return detail
