"""The stdio lane: how a `faultproxy mcp` shim hands its session to the episode's proxy.

Relaying each message to the proxy and back would add a round trip between processes to every
tools/call; instead the shim hands the proxy the session's pipes (its own stdin and stdout, the
server's stdin and stdout) over a Unix socket (SCM_RIGHTS), and the proxy relays the session
itself (proxy/stdio/session.py), passing each message through the fault injector on the way.
The shim keeps the server process: it passes on the server's stderr, kills it when the proxy says
so (server_exit) and tells the proxy when it exits.

The shim first asks for a lane through the proxy itself (`GET http://lane.stdio.invalid/`) with
the episode's proxy credentials, so the proxy's authentication and attribution decide which
episode the session belongs to; the answer names the socket (in a folder only this user can
enter), a one-time ticket, and whether this proxy replays (`"replay": true`: it answers from the
recording, so the shim starts no server; it asks before starting one). Then, one JSON document
per line:

    shim -> proxy  {"ticket": T, "server": NAME, "start_error": ...}   with the pipes, once
    proxy -> shim  {"kill": WHY}                                        server_exit: kill it now
    proxy -> shim  {"restart": WHY, "ticket": T2, "start": N}           server_restart: kill it, start
                                                                        the command again
    shim -> proxy  {"exited": REASON, "status": S, "start": N}          the server has exited
    proxy -> shim  {"end": STATUS}                                      the session is over

The pipes come in the order client stdin, client stdout, server stdin, server stdout (the last
two absent when no server runs: it could not start, or replay answers from a recording). After a
restart the shim opens a new connection to the lane for the new server's pipes, with the one-time
ticket T2 the proxy gave it: `{"ticket": T2, "restarted": true, "start_error": ...}` and the
server's stdin and stdout (none if it could not start), then closes it. Starts are numbered (the
first is 0), so the exit of a server that was restarted away is not taken for the new one's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import shutil
import socket
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import structlog
from faultproxy.proxy.attribution import episode_of
from faultproxy.proxy.auth import EpisodeGate
from faultproxy.proxy.injector import FaultInjector
from faultproxy.proxy.stdio.passage import Naming, Passage
from faultproxy.proxy.stdio.pipes import Pipes
from faultproxy.proxy.stdio.route import SESSION_NAMING_KEY, STDIO_SUFFIX
from faultproxy.proxy.stdio.session import StdioSession
from faultproxy.proxy.stdio.upstream import ServerSide
from mitmproxy import http

log = structlog.get_logger("faultproxy.mcp")

LANE_HOST = "lane" + STDIO_SUFFIX
LANE_URL = f"http://{LANE_HOST}/"
HELLO_LIMIT = 64 * 1024
PIPES = 4
Restarted = tuple[list[int], str | None]  # a restarted server's stdin and stdout, or why it did not start
NO_SERVER_IN_REPLAY = "faultproxy replay: no server runs in replay; nothing was recorded to answer"
_SOCKET_PARENT_MAX = 64  # bytes: with the folder and socket names (about 35 more) under the 104 AF_UNIX allows
_HELLO_WAIT_S = 10.0  # how long a connection to the lane is given to say who it is
_EXIT_WAIT_S = 10.0  # after the server's stdout closed or a kill, how long its exit is awaited
_RESTART_WAIT_S = 30.0  # for the shim to start the server again and hand over its pipes (a slow start)


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


class StdioLane:
    """mitmproxy addon, added after Attribution (which admits the lane request and names its
    episode) and before the FaultInjector (which must never see the lane request)."""

    def __init__(self, injector: FaultInjector, gate: EpisodeGate) -> None:
        self.injector = injector
        self.gate = gate
        self._tickets: dict[str, tuple[str, Naming | None]] = {}  # ticket -> the episode, and how to renew it
        self._restarts: dict[str, asyncio.Future[Restarted]] = {}  # ticket -> the session awaiting a new server
        self._folder: Path | None = None
        self._listener: socket.socket | None = None
        self._accepting: asyncio.Task | None = None
        self._sessions: set[asyncio.Task] = set()

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.request.host != LANE_HOST:
            return
        try:
            path = self._listen()
        except OSError as error:
            flow.response = http.Response.make(503, f"faultproxy: cannot open the stdio lane: {error}\n",
                                               {"content-type": "text/plain"})
            return
        ticket = secrets.token_urlsafe(16)
        self._tickets[ticket] = episode_of(flow), flow.metadata.get(SESSION_NAMING_KEY)
        # "replay": a replaying proxy answers from the recording, so the shim must start no server; it
        # asks here before starting one (a function agent's MCP client passes no FAULTPROXY_REPLAY).
        lane = {"socket": str(path), "ticket": ticket, "replay": self.injector.replays}
        flow.response = http.Response.make(200, json.dumps(lane),
                                           {"content-type": "application/json"})

    async def done(self) -> None:
        for task in [self._accepting, *self._sessions]:
            if task:
                task.cancel()
        if self._listener:
            self._listener.close()
        if self._folder:
            shutil.rmtree(self._folder, ignore_errors=True)

    def _listen(self) -> Path:
        if self._listener is None:
            folder = Path(tempfile.mkdtemp(prefix="faultproxy-lane-", dir=_socket_parent()))  # mode 0700
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                listener.bind(str(folder / "lane"))
            except OSError:
                listener.close()
                shutil.rmtree(folder, ignore_errors=True)
                raise
            listener.listen(64)
            listener.setblocking(False)
            self._folder, self._listener = folder, listener
            self._accepting = asyncio.create_task(self._accept())
        return self._folder / "lane"

    async def _accept(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            connection, _ = await loop.sock_accept(self._listener)
            task = asyncio.create_task(self._serve(connection))
            self._sessions.add(task)
            task.add_done_callback(self._sessions.discard)

    async def _serve(self, connection: socket.socket) -> None:
        fds: list[int] = []
        try:
            hello, fds = await _receive_hello(connection)
            restarted = self._restarts.pop(str(hello.get("ticket")), None)
            if restarted is not None:
                if len(fds) in (0, 2) and not restarted.done():
                    restarted.set_result((fds, hello.get("start_error")))
                    fds = []
                return
            given = self._tickets.pop(str(hello.get("ticket")), None)
            if given is None or len(fds) not in (2, PIPES):
                return  # not a ticket we gave: nothing is said to whoever it is
            taken, fds = fds, []
            await self._relay(connection, hello, *given, taken)
        except (ValueError, OSError) as error:
            log.warning("stdio_lane_refused", error=str(error) or type(error).__name__)
        finally:
            for fd in fds:
                os.close(fd)
            connection.close()

    async def _relay(self, connection: socket.socket, hello: dict[str, Any], episode: str, naming: Naming | None,
                     fds: list[int]) -> None:
        """Run the handed-over session until it ends; tell the shim with what status."""
        reader, writer = await asyncio.open_unix_connection(sock=connection)
        pipes = Pipes()
        client_in, client_out = await pipes.reader(fds[0]), await pipes.writer(fds[1])
        if len(fds) == PIPES:
            server = ServerSide(await pipes.writer(fds[2]), await pipes.reader(fds[3]))
        else:
            server = ServerSide(None, None, hello.get("start_error") or NO_SERVER_IN_REPLAY)
        process = RemoteServer(writer, self._expect_restart)
        passage = Passage(self.injector, self.gate, episode, str(hello.get("server") or "server"), naming=naming)
        session = StdioSession(pipes, client_in, client_out, server, process if len(fds) == PIPES else None, passage)
        listening = asyncio.create_task(process.listen(reader, session))
        status = await session.run()
        if not writer.is_closing():
            writer.write(encode({"end": status}))
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        listening.cancel()
        writer.close()

    def _expect_restart(self) -> tuple[str, asyncio.Future[Restarted]]:
        """A one-time ticket for the connection that brings a restarted server's pipes."""
        ticket = secrets.token_urlsafe(16)
        waiting = self._restarts[ticket] = asyncio.get_running_loop().create_future()
        waiting.add_done_callback(lambda _: self._restarts.pop(ticket, None))
        return ticket, waiting


def _socket_parent() -> str:
    """Where the lane's folder goes: the temporary directory, unless its path is too long for a
    Unix socket address (about 100 bytes; macOS's per-user $TMPDIR comes close), then /tmp."""
    parent = tempfile.gettempdir()
    return parent if len(os.fsencode(parent)) <= _SOCKET_PARENT_MAX else "/tmp"


async def _receive_hello(connection: socket.socket) -> tuple[dict[str, Any], list[int]]:
    """The shim's first line and the pipes that came with it."""
    loop = asyncio.get_running_loop()
    readable = loop.create_future()
    loop.add_reader(connection.fileno(), lambda: readable.done() or readable.set_result(None))
    try:
        await asyncio.wait_for(readable, _HELLO_WAIT_S)
    finally:
        loop.remove_reader(connection.fileno())
    data, fds, _, _ = socket.recv_fds(connection, HELLO_LIMIT, PIPES)
    if not data.endswith(b"\n"):
        for fd in fds:
            os.close(fd)
        raise ValueError("the shim's hello did not come in one piece")
    return json.loads(data), list(fds)


class RemoteServer:
    """The server process as the proxy sees it: through the shim that supervises it."""

    def __init__(self, writer: asyncio.StreamWriter,
                 expect_restart: Callable[[], tuple[str, asyncio.Future[Restarted]]]) -> None:
        self.writer = writer
        self.expect_restart = expect_restart
        self.killed_by: str | None = None
        self.start = 0
        self._exited: asyncio.Future[tuple[str, int | None]] = asyncio.get_running_loop().create_future()

    async def listen(self, reader: asyncio.StreamReader, session: StdioSession) -> None:
        """The shim's words: the server's exit. Its silence (it died) ends the session."""
        with contextlib.suppress(ValueError, ConnectionError):
            while line := await reader.readline():
                said = json.loads(line)
                if "exited" in said and said.get("start", 0) == self.start and not self._exited.done():
                    self._exited.set_result((str(said["exited"]), said.get("status")))
        if not self._exited.done():
            self._exited.set_result(("the faultproxy mcp shim that ran the server has gone", None))
        session.end("the shim has gone")

    async def kill(self, why: str) -> None:
        self.killed_by = why
        if not self.writer.is_closing():
            self.writer.write(encode({"kill": why}))
        await self.wait_exit()

    async def restart(self, why: str) -> Restarted:
        """Have the shim kill the server and start it again; the new one's pipes, or why not."""
        if self.writer.is_closing():
            return [], "the faultproxy mcp shim that ran the server has gone"
        ticket, restarted = self.expect_restart()
        self.start += 1
        self.killed_by = None
        self._exited = asyncio.get_running_loop().create_future()
        self.writer.write(encode({"restart": why, "ticket": ticket, "start": self.start}))
        try:
            return await asyncio.wait_for(restarted, _RESTART_WAIT_S)
        except TimeoutError:
            return [], f"the MCP server was not started again within {_RESTART_WAIT_S:g} s"

    async def wait_exit(self) -> int | None:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(self._exited), _EXIT_WAIT_S)
        return self._exited.result()[1] if self._exited.done() else None

    def exit_reason(self) -> str:
        if self.killed_by:
            return f"MCP server killed ({self.killed_by})"
        return self._exited.result()[0] if self._exited.done() else "MCP server closed its stdout"
