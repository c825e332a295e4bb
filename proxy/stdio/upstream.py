"""The server's side of the shim: the loopback endpoint the proxy forwards stdio messages to.

Each forwarded message is written to the server's stdin; a request waits for the line the
server answers it with (matched by JSON-RPC id), which becomes the HTTP response the proxy
records as the upstream's. Lines the server writes that are not JSON-RPC would corrupt the
client's stream: they are kept off it, logged, and reported on the next answer in
`x-faultproxy-stdio-stray` headers, so the trace shows them too.
"""

from __future__ import annotations

import asyncio
import re

import structlog
from aiohttp import web
from faultproxy.proxy.stdio.child import LINE_LIMIT, ChildServer, ServerGone
from faultproxy.proxy.stdio.messages import parse_line

log = structlog.get_logger("faultproxy.mcp")

EXITED_HEADER = "x-faultproxy-stdio-exited"  # on a 502: the server is gone; the value says how
STRAY_HEADER = "x-faultproxy-stdio-stray"
STRAY_LINE_HEADER = "x-faultproxy-stdio-stray-line"
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")


class ServerSide:
    """The server process, the requests waiting for its answers, and what it wrote off-protocol."""

    def __init__(self, child: ChildServer) -> None:
        self.child = child
        self.pending: dict[str, asyncio.Future[bytes]] = {}
        self.start_error: str | None = None
        self.stray_lines = 0
        self.stray_last = ""
        self._runner: web.AppRunner | None = None
        self.port = 0

    async def listen(self) -> int:
        """Serve the loopback endpoint on a free port; returns it."""
        app = web.Application(client_max_size=LINE_LIMIT)
        app.router.add_post("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        self.port = site._server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    def take_answer(self, id_key: str | None, line: bytes) -> bool:
        """Hand a response line to the request waiting for it; False when none waits."""
        waiting = self.pending.pop(id_key, None) if id_key is not None else None
        if waiting is None or waiting.done():
            return False
        waiting.set_result(line)
        return True

    def note_stray(self, line: bytes) -> None:
        self.stray_lines += 1
        self.stray_last = line.decode("utf-8", "replace")[:200]
        log.warning("server_stdout_not_jsonrpc", line=self.stray_last)

    def server_ended(self) -> None:
        """The server's stdout closed: nothing waiting will be answered."""
        for waiting in self.pending.values():
            if not waiting.done():
                waiting.set_exception(ServerGone(self.gone_reason()))
        self.pending.clear()

    def gone_reason(self) -> str:
        return self.start_error or self.child.exit_reason()

    async def _handle(self, request: web.Request) -> web.Response:
        body = await request.read()
        message = parse_line(body)
        try:
            if message.kind != "request":
                await self.child.send(body)
                return web.Response(status=202, headers=self._stray_headers())
            waiting = self.pending[message.id_key] = asyncio.get_running_loop().create_future()
            await self.child.send(body)
            answer = await waiting
        except ServerGone:
            self.pending.pop(message.id_key, None)
            return web.Response(status=502, text=self.gone_reason() + "\n",
                                headers={EXITED_HEADER: "start" if self.start_error else "exit"})
        return web.Response(body=answer, content_type="application/json", headers=self._stray_headers())

    def _stray_headers(self) -> dict[str, str]:
        if not self.stray_lines:
            return {}
        headers = {STRAY_HEADER: str(self.stray_lines), STRAY_LINE_HEADER: _UNPRINTABLE.sub("?", self.stray_last)}
        self.stray_lines, self.stray_last = 0, ""
        return headers
