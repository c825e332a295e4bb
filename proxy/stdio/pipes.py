"""Pipes (or sockets, or terminals) as asyncio streams in the running loop, let go of together."""

from __future__ import annotations

import asyncio
import os

from faultproxy.proxy.stdio.child import LINE_LIMIT


class Pipes:
    """The streams of one session; each takes its file descriptor over (closes it)."""

    def __init__(self) -> None:
        self._transports: list[asyncio.BaseTransport] = []

    async def reader(self, fd: int) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(fd, "rb", 0))
        self._transports.append(transport)
        return reader

    async def writer(self, fd: int) -> asyncio.StreamWriter:
        loop = asyncio.get_running_loop()
        transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin, os.fdopen(fd, "wb", 0))
        self._transports.append(transport)
        return asyncio.StreamWriter(transport, protocol, None, loop)

    def close(self) -> None:
        """Let go of them all: the client sees EOF, the server sees its stdin close (MCP's way of
        asking a server to exit)."""
        for transport in self._transports:
            transport.close()
