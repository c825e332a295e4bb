"""Pipes (or sockets, or terminals) as asyncio streams in the running loop, let go of together.

A client's stdin or stdout may also be a file or /dev/null (`faultproxy mcp -- cmd < requests.jsonl`),
which the event loop cannot poll (epoll refuses them). Those are read in a thread and written
directly: a file never blocks for long, and it ends.
"""

from __future__ import annotations

import asyncio
import os
import selectors
import stat

from faultproxy.proxy.stdio.child import LINE_LIMIT

_CHUNK = 1 << 16


class Pipes:
    """The streams of one session; each takes its file descriptor over (closes it)."""

    def __init__(self) -> None:
        self._transports: list[asyncio.BaseTransport] = []

    async def reader(self, fd: int) -> asyncio.StreamReader:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=LINE_LIMIT)
        if not pollable(fd):
            self._transports.append(_ThreadReadTransport(loop, fd, reader))
            return reader
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                                    os.fdopen(fd, "rb", 0))
        self._transports.append(transport)
        return reader

    async def writer(self, fd: int) -> asyncio.StreamWriter:
        loop = asyncio.get_running_loop()
        if not pollable(fd):
            transport: asyncio.WriteTransport = _FileWriteTransport(fd)
            protocol = asyncio.streams.FlowControlMixin()
        else:
            transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                                os.fdopen(fd, "wb", 0))
        self._transports.append(transport)
        return asyncio.StreamWriter(transport, protocol, None, loop)

    def close(self) -> None:
        """Let go of them all: the client sees EOF, the server sees its stdin close (MCP's way of
        asking a server to exit)."""
        for transport in self._transports:
            transport.close()


def pollable(fd: int) -> bool:
    """Can the event loop wait on `fd` (a pipe, socket or terminal; not a file or /dev/null)?"""
    mode = os.fstat(fd).st_mode
    if not (stat.S_ISFIFO(mode) or stat.S_ISSOCK(mode) or stat.S_ISCHR(mode)):
        return False
    with selectors.DefaultSelector() as selector:
        try:
            selector.register(fd, selectors.EVENT_READ)
        except (OSError, ValueError):
            return False
    return True


class _ThreadReadTransport(asyncio.ReadTransport):
    """Reads a file to its end in a thread, feeding the stream as the data comes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, fd: int, reader: asyncio.StreamReader) -> None:
        super().__init__()
        self._file = os.fdopen(fd, "rb", 0)
        self._closing = False
        self._done = loop.run_in_executor(None, self._pump, loop, reader)

    def _pump(self, loop: asyncio.AbstractEventLoop, reader: asyncio.StreamReader) -> None:
        try:
            while not self._closing and (chunk := self._file.read(_CHUNK)):
                loop.call_soon_threadsafe(reader.feed_data, chunk)
        except (OSError, ValueError):
            pass  # closed under us: the session is over
        finally:
            loop.call_soon_threadsafe(reader.feed_eof)

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._closing = True
        self._done.add_done_callback(lambda _: self._file.close())


class _FileWriteTransport(asyncio.WriteTransport):
    """Writes straight to a file: it never waits on a reader."""

    def __init__(self, fd: int) -> None:
        super().__init__()
        self._fd: int | None = fd

    def write(self, data: bytes | bytearray | memoryview) -> None:
        view = memoryview(data)
        while view and self._fd is not None:
            view = view[os.write(self._fd, view):]

    def get_write_buffer_size(self) -> int:
        return 0

    def is_closing(self) -> bool:
        return self._fd is None

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
