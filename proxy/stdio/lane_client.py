"""The shim's end of the stdio lane (proxy/stdio/lane.py has the proxy's end and the wire format)."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from typing import Any

import aiohttp
import structlog
from faultproxy.proxy.stdio.child import LINE_LIMIT
from faultproxy.proxy.stdio.lane import LANE_URL, encode, raw, text

log = structlog.get_logger("faultproxy.mcp")

Headers = list[tuple[str, str]]
LOST: dict[str, Any] = {"lost": True}
CLOSE_GRACE_S = 5.0


class LaneError(Exception):
    """The proxy would not give the shim a lane (refused credentials, not a faultproxy proxy)."""


class LaneClient:
    """Sends the client's messages to the episode's proxy and hears what becomes of each."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._writer = writer
        self._numbers = itertools.count(1)
        self._waiting: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reading = asyncio.create_task(self._read(reader))

    @classmethod
    async def open(cls, proxy_url: str, server: str) -> LaneClient:
        """Ask the proxy for a lane with the episode's credentials, then connect to it."""
        async with aiohttp.ClientSession() as http:
            try:
                async with http.get(LANE_URL, proxy=proxy_url) as response:
                    said = await response.text()
                    where = json.loads(said) if response.status == 200 else None
            except (aiohttp.ClientError, ValueError) as error:
                raise LaneError(f"cannot reach the faultproxy proxy: {error}") from None
        if not isinstance(where, dict) or "port" not in where:
            raise LaneError(f"the proxy gave no lane: HTTP {response.status}: {said.strip()[:200]}")
        reader, writer = await asyncio.open_connection("127.0.0.1", where["port"], limit=LINE_LIMIT)
        writer.write(encode({"ticket": where["ticket"], "server": server}))
        return cls(reader, writer)

    async def send(self, message: bytes) -> tuple[int, dict[str, Any]]:
        """Send a message; its number and the lane's first word on it: `forward` (deliver it to the
        server), an answer for the client (`status`, `headers`, `body`) or `lost`."""
        n = next(self._numbers)
        return n, await self._ask(n, {"n": n, "send": text(message)})

    async def answer(self, n: int, status: int, headers: Headers, body: bytes) -> dict[str, Any]:
        """Report what the server answered to a forwarded message; what the client gets."""
        return await self._ask(n, self._report(n, status, headers, body))

    def report(self, n: int, status: int, headers: Headers, body: bytes) -> None:
        """Report what the server answered to a message the client gets unchanged."""
        self._write(self._report(n, status, headers, body))

    async def close(self, grace_s: float = CLOSE_GRACE_S) -> None:
        """Say we are done and wait (up to `grace_s`) until the proxy closes its end: by then it
        has taken every report, so the episode's trace has each exchange when the shim exits."""
        with contextlib.suppress(OSError, RuntimeError):
            if not self._writer.is_closing():
                self._writer.write_eof()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._reading), grace_s)
        self._writer.close()
        self._reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._reading

    @staticmethod
    def _report(n: int, status: int, headers: Headers, body: bytes) -> dict[str, Any]:
        return {"n": n, "status": status, "headers": headers, "body": text(body)}

    async def _ask(self, n: int, document: dict[str, Any]) -> dict[str, Any]:
        if self._reading.done():
            return LOST
        waiting = self._waiting[n] = asyncio.get_running_loop().create_future()
        self._write(document)
        return await waiting

    def _write(self, document: dict[str, Any]) -> None:
        if not self._writer.is_closing():
            self._writer.write(encode(document))

    async def _read(self, reader: asyncio.StreamReader) -> None:
        try:
            while line := await reader.readline():
                document = json.loads(line)
                waiting = self._waiting.pop(document["n"], None)
                if waiting is not None and not waiting.done():
                    waiting.set_result(document)
        except (ValueError, ConnectionError) as error:
            log.warning("stdio_lane_broken", error=str(error) or type(error).__name__)
        finally:
            # The proxy has gone: what was in flight is lost, as an answer is when a connection drops.
            for waiting in self._waiting.values():
                if not waiting.done():
                    waiting.set_result(LOST)
            self._waiting.clear()


def body_of(document: dict[str, Any]) -> bytes:
    return raw(document.get("body", ""))
