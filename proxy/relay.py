"""A loopback relay that paces a response event by event.

mitmproxy calls a response's stream function synchronously, so it cannot wait between events
without stalling every other flow. For slow_stream the injector points the flow at this relay
instead; the relay fetches the real upstream itself and writes each event after its delay,
and mitmproxy streams that through to the client unchanged. In replay the relay paces the
recorded response instead of fetching one (`supply`).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import ssl
from collections.abc import AsyncIterator

import aiohttp
from aiohttp import web
from faultproxy.proxy.sse import EventSplitter
from mitmproxy import ctx, http

TARGET_HEADER = "x-faultproxy-relay"
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailer",
     "transfer-encoding", "upgrade", "content-length", "host", TARGET_HEADER}
)


class Relay:
    def __init__(self) -> None:
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._session: aiohttp.ClientSession | None = None
        self._starting = asyncio.Lock()  # binds to the proxy's loop on first use
        self._supplied: dict[str, http.Response] = {}
        self._tokens = itertools.count(1)

    async def ensure_started(self) -> int:
        async with self._starting:
            if self.port is None:
                app = web.Application()
                app.router.add_route("*", "/{tail:.*}", self._handle)
                self._runner = web.AppRunner(app, access_log=None)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]
                self._session = aiohttp.ClientSession(auto_decompress=False)
        return self.port

    async def route(self, flow: http.HTTPFlow, first_ms: float, between_ms: float) -> None:
        """Send this flow through the relay, paced as given."""
        port = await self.ensure_started()
        spec = {"url": flow.request.url, "first_ms": first_ms, "between_ms": between_ms}
        flow.request.headers[TARGET_HEADER] = json.dumps(spec)
        flow.request.scheme = "http"
        flow.request.host = "127.0.0.1"
        flow.request.port = port

    def routes(self, flow: http.HTTPFlow) -> bool:
        return TARGET_HEADER in flow.request.headers

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

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        spec = json.loads(request.headers[TARGET_HEADER])
        if "supplied" in spec:
            supplied = self._supplied.pop(spec["supplied"])
            return await self._paced(request, spec, supplied.status_code, supplied.reason,
                                     supplied.headers.items(multi=True), _once(supplied.content or b""))
        headers = {k: v for k, v in request.headers.items() if k.lower() not in _HOP_BY_HOP}
        async with self._session.request(
            request.method, spec["url"], headers=headers, data=await request.read(),
            ssl=_upstream_ssl(), allow_redirects=False,
        ) as upstream:
            return await self._paced(request, spec, upstream.status, upstream.reason, upstream.headers.items(),
                                     upstream.content.iter_any())

    @staticmethod
    async def _paced(request: web.Request, spec: dict, status: int, reason: str | None, headers,
                     chunks: AsyncIterator[bytes]) -> web.StreamResponse:
        response = web.StreamResponse(status=status, reason=reason)
        for name, value in headers:
            if name.lower() not in _HOP_BY_HOP:
                response.headers.add(name, value)
        await response.prepare(request)
        await asyncio.sleep(spec["first_ms"] / 1000)
        splitter = EventSplitter()
        first = True
        async for chunk in chunks:
            for event in splitter.feed(chunk):
                if not first:
                    await asyncio.sleep(spec["between_ms"] / 1000)
                first = False
                await response.write(event)
        if rest := splitter.rest():
            await response.write(rest)
        await response.write_eof()
        return response


async def _once(body: bytes) -> AsyncIterator[bytes]:
    yield body


def _upstream_ssl() -> ssl.SSLContext | bool:
    # Verify upstreams exactly as mitmproxy itself is configured to.
    if ctx.options.ssl_insecure:
        return False
    trusted = ctx.options.ssl_verify_upstream_trusted_ca
    return ssl.create_default_context(cafile=trusted) if trusted else True
