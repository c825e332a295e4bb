"""The server's side of a stdio session: delivers messages to the server and takes its answers.

Each forwarded message is written to the server's stdin; a request waits for the line the
server answers it with (matched by JSON-RPC id), which is recorded as the upstream's HTTP
response (200, or 202 for a notification; 502 when the server is gone, never started, or was
restarted before it answered: EXITED_HEADER says which). Lines the server writes that are not
JSON-RPC would corrupt the client's stream: they are kept off it, logged, and reported on the
next answer in `x-faultproxy-stdio-stray` headers, so the trace shows them too. So are the
notifications past the episode's recording cap the server sent since the last answer: counted in
`x-faultproxy-stdio-unrecorded`.

The client's side of the session is one too, for the requests a server sends the client: each
waits for the client's answer line.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator

import structlog
from faultproxy.proxy.stdio.child import ServerGone
from faultproxy.proxy.stdio.messages import Message

log = structlog.get_logger("faultproxy.mcp")

from faultproxy.formats.trace import STDIO_EXITED_HEADER as EXITED_HEADER  # on a 502: how the server is gone
STRAY_HEADER = "x-faultproxy-stdio-stray"
STRAY_LINE_HEADER = "x-faultproxy-stdio-stray-line"
UNRECORDED_HEADER = "x-faultproxy-stdio-unrecorded"
_UNPRINTABLE = re.compile(r"[^\x20-\x7e]")

Delivered = tuple[int, list[tuple[str, str]], bytes]  # status, headers, body: the upstream's response


class ServerSide:
    """The server's stdin and stdout, the requests waiting for its answers, and what it wrote
    off-protocol. Without streams (it never started, or replay runs none) every delivery fails
    with `start_error`."""

    def __init__(self, stdin: asyncio.StreamWriter | None, stdout: asyncio.StreamReader | None,
                 start_error: str | None = None, start: int = 0) -> None:
        self.stdin = stdin
        self.start = start  # which start of the server this is (server_restart: 1 for the first restart, ...)
        self.stdout = stdout
        self.start_error = start_error
        self.gone: str | None = start_error  # why nothing more can be sent, once so
        self.restarted = False  # a server_restart replaced this server with a new one
        self.served = False  # it has answered a request
        self.pending: dict[str, asyncio.Future[bytes]] = {}
        self.stray_lines = 0
        self.stray_last = ""
        self.unrecorded = 0  # notifications past the recording cap since the last answer

    async def send(self, line: bytes) -> None:
        """Write one message (a line without its newline) to the server's stdin."""
        if self.gone or self.stdin is None or self.stdin.is_closing():
            raise ServerGone(self.gone or "the server's stdin is closed")
        try:
            self.stdin.write(line + b"\n")
            await self.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ServerGone(self.gone or "the server closed its stdin") from None

    async def deliver(self, message: Message) -> Delivered:
        """Write a message to the server; for a request, wait for its answer."""
        try:
            if message.kind != "request":
                await self.send(message.raw)
                return 202, self._notes(), b""
            waiting = self.pending[message.id_key] = asyncio.get_running_loop().create_future()
            await self.send(message.raw)
            answer = await waiting
        except ServerGone as gone:
            self.pending.pop(message.id_key, None)
            how = "start" if self.start_error else "restart" if self.restarted else "exit"
            return 502, [("content-type", "text/plain"), (EXITED_HEADER, how)], f"{gone}\n".encode()
        return 200, [("content-type", "application/json"), *self._notes()], answer

    async def lines(self) -> AsyncIterator[bytes]:
        """The server's stdout, line by line without newlines, until it closes."""
        if self.stdout is None:
            return
        while True:
            try:
                line = await self.stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as partial:
                if partial.partial.strip():
                    yield partial.partial
                return
            yield line.rstrip(b"\r\n")

    def take_answer(self, id_key: str | None, line: bytes) -> bool:
        """Hand a response line to the request waiting for it; False when none waits."""
        waiting = self.pending.pop(id_key, None) if id_key is not None else None
        if waiting is None or waiting.done():
            return False
        waiting.set_result(line)
        self.served = True
        return True

    def note_stray(self, line: bytes) -> None:
        self.stray_lines += 1
        self.stray_last = line.decode("utf-8", "replace")[:200]
        log.warning("server_stdout_not_jsonrpc", line=self.stray_last)

    def never_started(self, reason: str) -> None:
        """It exited before answering anything: to the client (and the trace) it never started."""
        self.start_error = self.gone = self.gone or reason
        self.ended(reason)

    def ended(self, reason: str) -> None:
        """The server is gone: nothing waiting will be answered, nothing more can be sent."""
        self.gone = self.gone or reason
        for waiting in self.pending.values():
            if not waiting.done():
                waiting.set_exception(ServerGone(self.gone))
        self.pending.clear()

    def replaced(self, why: str) -> None:
        """The server is being restarted: the answers it owed are lost, and its input closes."""
        self.restarted = True
        self.ended(why)
        if self.stdin is not None:
            self.stdin.close()

    def _notes(self) -> list[tuple[str, str]]:
        """What the server did off the record since the last answer, as headers on this one."""
        headers = []
        if self.stray_lines:
            headers = [(STRAY_HEADER, str(self.stray_lines)), (STRAY_LINE_HEADER, _UNPRINTABLE.sub("?", self.stray_last))]
        if self.unrecorded:
            headers.append((UNRECORDED_HEADER, str(self.unrecorded)))
        self.stray_lines, self.stray_last, self.unrecorded = 0, "", 0
        return headers
