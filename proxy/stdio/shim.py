"""The relay between an MCP client (our stdin/stdout) and a stdio MCP server (our child).

Three ways to run, chosen by `Shim.link`:
- no proxy: a plain relay, line for line (outside any episode, with no scenario);
- through a proxy (a `faultproxy run` episode's, or one the shim embeds for `--scenario`): each
  message the client sends goes to its fault injector over the stdio lane (proxy/stdio/lane.py)
  as the HTTP exchange it stands for; what comes back is turned into what a stdio client would see;
- replay: no server is started; the replay proxy answers from the recording.

What the client sees for each answer the proxy gives:
  a JSON-RPC body (the server's answer, or a fault's)  -> that line, with the request's id
  any other status (a 504, a 599 replay miss, ...)       -> a JSON-RPC error naming it
  no answer (dropped: response_lost, timeout then close, the proxy gone) -> nothing: it waits
  a server_exit fault, or the server died                -> nothing; the shim kills the server
                                                            and closes the stream (EOF)
Server-initiated requests and notifications, and the client's answers to them, pass straight
through (they are not faulted, traced or replayed). Requests travel side by side, so two sent
together may reach the server in either order (as over HTTP); a notification reaches it before
anything the client sends after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from dataclasses import dataclass

import structlog
from faultproxy.proxy.faults.server_exit import SERVER_EXIT_HEADER
from faultproxy.proxy.stdio.child import LINE_LIMIT, ChildServer, ServerStartError
from faultproxy.proxy.stdio.messages import INTERNAL_ERROR, SERVER_GONE, Message, answer_line, error_line, parse_line
from faultproxy.proxy.stdio.lane_client import LaneClient, LaneError, body_of
from faultproxy.proxy.stdio.upstream import EXITED_HEADER, ServerSide

log = structlog.get_logger("faultproxy.mcp")

EXIT_CANNOT_START = 2


@dataclass(frozen=True)
class ProxyLink:
    """Where the messages go: the proxy URL (with the episode's credentials) and the server's name."""

    proxy_url: str
    server: str
    replay: bool = False


class Shim:
    """One session: `await Shim(command, link).run()` returns the exit status."""

    def __init__(self, command: list[str], link: ProxyLink | None, interactive: bool = False) -> None:
        self.link = link
        self.interactive = interactive  # stdin is a terminal: a person ran it, not an MCP client
        self.server = ServerSide(ChildServer(command))
        self.inflight: set[asyncio.Task] = set()
        self.done = asyncio.Event()
        self.exit_status = 0
        self._out: asyncio.StreamWriter | None = None
        self.lane: LaneClient | None = None
        self._closing = False

    async def run(self) -> int:
        if not (self.link and self.link.replay):
            try:
                await self.server.child.start()
            except ServerStartError as error:
                print(f"faultproxy mcp: {error}", file=sys.stderr, flush=True)
                if self.interactive:
                    return EXIT_CANNOT_START
                self.server.start_error, self.exit_status = str(error), EXIT_CANNOT_START
        reader, self._out = await _stdio_streams()
        if self.link:
            await self._open_lane()
        pump = asyncio.create_task(self._pump_server()) if self.server.child.process else None
        clients = asyncio.create_task(self._read_client(reader))
        await self.done.wait()
        clients.cancel()
        await self._shutdown(pump)
        return self.exit_status

    async def _open_lane(self) -> None:
        """Without its lane, the session cannot be faulted or recorded: rather than relay calls
        nobody would see, each request gets a JSON-RPC error saying why, and the session ends."""
        try:
            self.lane = await LaneClient.open(self.link.proxy_url, self.link.server)
        except (LaneError, OSError) as error:
            why = f"faultproxy mcp: {error}"
            print(why, file=sys.stderr, flush=True)
            self.server.start_error, self.exit_status = why, EXIT_CANNOT_START
            return
        if self.link.replay:
            self.server.start_error = "faultproxy replay: no server runs in replay; nothing was recorded to answer"

    # -- client -> server --------------------------------------------------------------------

    async def _read_client(self, reader: asyncio.StreamReader) -> None:
        while True:
            try:
                line = await reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as rest:
                if rest.partial.strip():
                    await self._from_client(parse_line(rest.partial))
                break
            await self._from_client(parse_line(line.rstrip(b"\r\n")))
        if self.inflight:
            await asyncio.wait(set(self.inflight))
        self.done.set()

    async def _from_client(self, message: Message) -> None:
        if self.lane and message.kind == "notification":
            # Sent before the next line is read: a notification must not overtake what follows
            # it (notifications/initialized before the first call), and its answer is immediate.
            await self._through_proxy(message)
        elif self.lane and message.kind == "request":
            task = asyncio.create_task(self._through_proxy(message))
            self.inflight.add(task)
            task.add_done_callback(self.inflight.discard)
        elif self.server.start_error and message.kind == "request":
            await self._write(error_line(message.body["id"], SERVER_GONE, self.server.start_error))
            self.done.set()
        elif not (self.link and self.link.replay):
            with contextlib.suppress(Exception):
                await self.server.child.send(message.raw)

    async def _through_proxy(self, message: Message) -> None:
        n, word = await self.lane.send(message.raw)
        if not word.get("forward"):  # a fault (or the replay) answered, or dropped it
            await self._give_client(message, word, body_of(word))
            return
        status, headers, body = await self.server.deliver(message)
        if word["unchanged"]:
            self.lane.report(n, status, headers, body)
            await self._give_client(message, {"status": status, "headers": headers}, body)
            return
        word = await self.lane.answer(n, status, headers, body)
        await self._give_client(message, word, body_of(word))

    async def _give_client(self, message: Message, word: dict, body: bytes) -> None:
        """What the client sees of the proxy's word on its message (see the module docstring)."""
        if word.get("lost"):
            log.info("answer_lost", method=message.method)
            return  # what a stdio client sees of a lost answer: nothing, until its own timeout
        answered = {name.lower(): value for name, value in word["headers"]}
        if SERVER_EXIT_HEADER in answered:
            await self._crash("server_exit fault", answered[SERVER_EXIT_HEADER])
        elif EXITED_HEADER in answered:
            await self._server_gone(message, answered[EXITED_HEADER], body)
        elif message.kind == "request":
            await self._write(self._client_answer(message, word["status"], body))

    def _client_answer(self, message: Message, status: int, body: bytes) -> bytes:
        rpc_id = message.body["id"]
        line = answer_line(body, rpc_id)
        if line is not None:
            return line
        said = body.decode("utf-8", "replace").strip()[:300]
        return error_line(rpc_id, INTERNAL_ERROR, f"faultproxy: HTTP {status} from the proxy: {said}")

    # -- server -> client --------------------------------------------------------------------

    async def _pump_server(self) -> None:
        async for line in self.server.child.lines():
            message = parse_line(line)
            if message.kind == "stray":
                self.server.note_stray(line)
            elif message.kind != "response" or not self.server.take_answer(message.id_key, line):
                await self._write(line + b"\n")
        await self.server.child.process.wait()
        self.server.server_ended()
        if self.server.child.killed_by is None and not self._closing:
            # It died on its own: as from a crashed server, the client gets EOF once the
            # exchanges in flight have been recorded.
            log.warning("server_exited", reason=self.server.child.exit_reason())
            self.exit_status = self.server.child.process.returncode
            if self.inflight:
                await asyncio.wait(set(self.inflight))
            self.done.set()

    async def _server_gone(self, message: Message, how: str, body: bytes) -> None:
        """The server is not there: it never started (the client gets the error, so the agent
        can say why) or it died (a crashed server answers nothing; the client sees EOF)."""
        if how == "start" and message.kind == "request":
            await self._write(error_line(message.body["id"], SERVER_GONE, body.decode("utf-8", "replace").strip()))
        if not self.exit_status:
            self.exit_status = EXIT_CANNOT_START if how == "start" else 1
        self.done.set()

    async def _crash(self, why: str, when: str) -> None:
        log.info("server_exit", when=when)
        if self.server.child.process:
            await self.server.child.kill(why)
        self.exit_status = 1
        self.done.set()

    async def _write(self, line: bytes) -> None:
        if self._out.is_closing():
            return
        self._out.write(line)
        with contextlib.suppress(ConnectionError):
            await self._out.drain()

    async def _shutdown(self, pump: asyncio.Task | None) -> None:
        self._closing = True
        for task in list(self.inflight):
            task.cancel()
        await self.server.child.close()
        if pump:
            with contextlib.suppress(Exception):
                await pump
        if self.lane:
            await self.lane.close()
        self._out.close()


async def _stdio_streams() -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Our stdin and stdout as asyncio streams (pipes, sockets or terminals)."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_LIMIT)
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(0), "rb", 0))
    transport, protocol = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                        os.fdopen(os.dup(1), "wb", 0))
    return reader, asyncio.StreamWriter(transport, protocol, None, loop)
