"""A loopback relay that paces a response event by event.

mitmproxy calls a response's stream function synchronously, so it cannot wait between events
without stalling every other flow. For slow_stream the injector points the flow at this relay
instead; the relay fetches the real upstream itself and writes each event after its delay,
and mitmproxy streams that through to the client unchanged. In replay the relay paces the
recorded response instead of fetching one (`supply`). MCP's Streamable HTTP streams whose
server's messages a fault may hold come this way too (unpaced): those messages pass the fault
injector, which may hold, drop or answer them before the client sees them (proxy/mcp_http.py).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from collections.abc import AsyncIterator
from typing import Protocol

import aiohttp
import structlog
from aiohttp import web
from faultproxy.proxy.sse import EventSplitter, is_event_stream
from mitmproxy import ctx, http

log = structlog.get_logger("faultproxy")

TARGET_HEADER = "x-faultproxy-relay"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "content-length", "host", TARGET_HEADER}
)


class EventHandler(Protocol):
    """What sees each event of a relayed event stream: the event the client gets instead, or
    None to withhold it (`supplied`: the stream is a recording, in replay, not an upstream's)."""

    def headers_sent(self) -> None: ...  # the response's headers went to the proxy: events count from here

    async def event(self, event: bytes, supplied: bool) -> bytes | None: ...

    def end(self) -> None: ...


class Relay:
    def __init__(self) -> None:
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._starting = asyncio.Lock()  # binds to the proxy's loop on first use
        self._supplied: dict[str, http.Response] = {}
        self._handlers: dict[str, EventHandler] = {}
        self._failures: dict[str, str] = {}  # a routed flow's token -> why its upstream failed (failure())
        # a routed flow's token -> its request while the relay answers it (None: on its way), for drop()
        self._open: dict[str, web.Request | None] = {}
        self._tokens = itertools.count(1)

    async def ensure_started(self) -> int:
        async with self._starting:
            if self.port is None:
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", self._handle)
                # A handler ends when its client leaves (a replayed GET stream waits for that).
                self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]
                self._session = aiohttp.ClientSession(auto_decompress=False)
        return self.port

    async def route(self, flow: http.HTTPFlow, first_ms: float = 0, between_ms: float = 0,
                    events: EventHandler | None = None) -> None:
        """Send this flow through the relay, paced as given; `events` sees each event of an event
        stream on its way (MCP over HTTP: proxy/mcp_http.py). Routing a routed flow again adds."""
        port = await self.ensure_started()
        spec = json.loads(flow.request.headers[TARGET_HEADER]) if self.routes(flow) else {
            "url": flow.request.url, "flow": str(next(self._tokens))}
        spec["first_ms"] = max(first_ms, spec.get("first_ms", 0))
        spec["between_ms"] = max(between_ms, spec.get("between_ms", 0))
        if events is not None:
            spec["events"] = token = str(next(self._tokens))
            self._handlers[token] = events
        self._open[spec["flow"]] = None
        flow.request.headers[TARGET_HEADER] = json.dumps(spec)
        flow.request.scheme = "http"
        flow.request.host = "127.0.0.1"
        flow.request.port = port

    def routes(self, flow: http.HTTPFlow) -> bool:
        return TARGET_HEADER in flow.request.headers

    def hands_events(self, flow: http.HTTPFlow) -> bool:
        """Does a routed flow's stream go past an event handler (which records what the upstream sent)?"""
        return self.routes(flow) and "events" in json.loads(flow.request.headers[TARGET_HEADER])

    def failure(self, flow: http.HTTPFlow) -> str | None:
        """Why the relay could not reach or hear a routed flow's upstream, once (else None)."""
        if not self.routes(flow):
            return None
        return self._failures.pop(json.loads(flow.request.headers[TARGET_HEADER]).get("flow", ""), None)

    def drop(self, flow: http.HTTPFlow, why: str) -> bool:
        """End a routed flow's answer now, as a dropped upstream connection ends it: the client's
        stream ends unfinished, the upstream's request is abandoned, and `why` is the flow's
        error (failure()). A flow on its way to the relay is dropped as it arrives; False when
        its answer has already ended (nothing to drop)."""
        token = json.loads(flow.request.headers[TARGET_HEADER])["flow"]
        if token not in self._open:
            return False
        self._failures[token] = why
        request = self._open[token]
        if request is not None and request.transport is not None:
            request.transport.abort()  # the handler is cancelled with its connection (handler_cancellation)
        return True

    def supply(self, flow: http.HTTPFlow, response: http.Response) -> None:
        """For a flow routed here: pace `response` instead of fetching the upstream (replay)."""
        token = str(next(self._tokens))
        self._supplied[token] = response
        spec = json.loads(flow.request.headers[TARGET_HEADER])
        flow.request.headers[TARGET_HEADER] = json.dumps({**spec, "supplied": token})

    async def close(self) -> None:
        if self._session:
            await self._session.close()
        if self._runner:
            await self._runner.cleanup()
        self.port = self._runner = self._session = None

    async def post(self, url: str, headers: dict[str, str], body: bytes) -> int:
        """POST `body` to an upstream as its client would (an answer given in the client's
        place); the upstream's status."""
        return (await self.send("POST", url, headers, body))[0]

    async def send(self, method: str, url: str, headers: dict[str, str],
                   body: bytes) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send a request to an upstream from the proxy itself; its status, headers and whole body."""
        await self.ensure_started()
        headers = {k: v for k, v in headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(method, url, headers=headers, data=body, ssl=_upstream_ssl(),
                                         allow_redirects=False) as answered:
            return answered.status, list(answered.headers.items()), await answered.read()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        spec = json.loads(request.headers[TARGET_HEADER])
        token, events = spec.get("flow", ""), self._handlers.pop(spec.get("events", ""), None)
        if token in self._failures and request.transport is not None:  # dropped on its way (drop())
            self._open.pop(token, None)
            if events is not None:
                events.end()
            request.transport.abort()
            raise asyncio.CancelledError
        self._open[token] = request
        try:
            return await self._answer(request, spec, events)
        finally:
            self._open.pop(token, None)

    async def _answer(self, request: web.Request, spec: dict, events: EventHandler | None) -> web.StreamResponse:
        if "supplied" in spec:
            supplied = self._supplied.pop(spec["supplied"])
            return await self._paced(request, spec, supplied.status_code, supplied.reason,
                                     supplied.headers.items(multi=True), _once(supplied.content or b""),
                                     events, supplied=True)
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        try:
            async with self._session.request(
                request.method, spec["url"], headers=headers, data=await request.read(),
                ssl=_upstream_ssl(), allow_redirects=False,
            ) as upstream:
                return await self._paced(request, spec, upstream.status, upstream.reason, upstream.headers.items(),
                                         upstream.content.iter_any(), events)
        except aiohttp.ClientError as error:
            # Not the upstream's answer: the proxy could not reach or hear it. Leaving without a
            # response makes it mitmproxy's error, an infra_error with this reason (failure()).
            self._failures[spec.get("flow", "")] = why = str(error) or type(error).__name__
            log.warning("relay_upstream_failed", url=spec["url"], error=why)
            if request.transport is not None:
                request.transport.abort()
            raise asyncio.CancelledError from error

    @staticmethod
    async def _paced(request: web.Request, spec: dict, status: int, reason: str | None, headers,
                     chunks: AsyncIterator[bytes], events: EventHandler | None = None,
                     supplied: bool = False) -> web.StreamResponse:
        response = web.StreamResponse(status=status, reason=reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                response.headers.add(name, value)
        if events is not None and not is_event_stream(response.headers.get("content-type")):
            events = None
        await response.prepare(request)
        if events is not None:
            events.headers_sent()
        await asyncio.sleep(spec["first_ms"] / 1000)
        splitter = EventSplitter()
        first = True
        try:
            async for chunk in chunks:
                for event in splitter.feed(chunk):
                    if not first:
                        await asyncio.sleep(spec["between_ms"] / 1000)
                    first = False
                    shown = await events.event(event, supplied) if events else event
                    if shown is not None:
                        await response.write(shown)
            if rest := splitter.rest():
                await response.write(rest)
            if supplied and events is not None and request.method == "GET":
                await asyncio.Event().wait()  # a recorded GET stream stays open, as the server's did, until the client leaves
            if events is not None:
                events.end()  # before the stream's end reaches the proxy, which then writes the exchange's line
                events = None  # ended: the `finally` below is for a client that left
            await response.write_eof()
        except ConnectionResetError:  # the client left (an MCP client closes a stream once answered)
            pass
        finally:
            if events is not None:
                events.end()
        return response


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _upstream_ssl() -> ssl.SSLContext | bool:
    # Verify upstreams exactly as mitmproxy itself is configured to.
    if ctx.options.ssl_insecure:
        return False
    trusted = ctx.options.ssl_verify_upstream_trusted_ca
    return ssl.create_default_context(cafile=trusted) if trusted else True
