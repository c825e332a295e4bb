"""Event streams as they pass the injector: each event recorded with its time offset, and
shaped, dropped or cut on its boundaries by the fault that holds the exchange; a watcher
(WATCH_KEY) sees each event the upstream sent, as it goes on unchanged."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Protocol

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.sse import EventSplitter
from mitmproxy import http

WATCH_KEY = "faultproxy_stream_watch"  # flow.metadata: an EventWatch for the flow's event stream


class EventWatch(Protocol):
    """What sees each event of a stream it may not hold: it acts after the event has gone on
    (an MCP server's messages passing the injector: proxy/mcp_http.py)."""

    def seen(self, event: bytes) -> None: ...


class StreamTap:
    """mitmproxy's stream function for event streams: records each event with its time offset
    and lets a fault shape, drop or cut events on their boundaries."""

    def __init__(self, ex: FlowExchange, shaper: Callable[[bytes], bytes | None] | None,
                 record_upstream: bool = True, watch: EventWatch | None = None) -> None:
        self.ex = ex
        self.shaper = shaper
        self.record_upstream = record_upstream
        self.watch = watch
        self.splitter = EventSplitter()
        self.started = time.monotonic()
        self.client_events = [] if shaper else None  # the exchange's, which only a shaper changes here
        if shaper:
            ex.client_events = self.client_events

    def __call__(self, chunk: bytes) -> list[bytes]:
        # A list, never b"": mitmproxy frames an empty bytes chunk as the chunked-encoding
        # terminator, which would end the client's response early.
        if chunk:
            events = self.splitter.feed(chunk)
        else:  # the stream's end: what is left is a last, partial event
            rest = self.splitter.rest()
            events = [rest] if rest else []
        out = []
        for event in events:
            offset = time.monotonic() - self.started
            if self.record_upstream:
                self.ex.upstream_events.append((offset, event))
            if self.watch is not None:
                self.watch.seen(event)
            shaped = self.shaper(event) if self.shaper else event
            if shaped is None:
                continue
            out.append(shaped)
            if self.client_events is not None:
                self.client_events.append((offset, shaped))
        return out


def pump(flow: http.HTTPFlow) -> None:
    """Run a response set in the request hook through its tap at once: mitmproxy never streams
    such a response, so its events are recorded and shaped here as they would be off the network."""
    tap = flow.response.stream
    body = b"".join([*tap(flow.response.raw_content or b""), *tap(b"")])
    flow.response.raw_content = body
    flow.response.headers.pop("transfer-encoding", None)
    flow.response.headers["content-length"] = str(len(body))
