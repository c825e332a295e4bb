"""One stdio MCP session: the relay between a client's stream and a server's.

It runs in the shim's own process (a plain relay, outside any episode) or in the episode's
proxy, which the shim hands the session's pipes to (proxy/stdio/lane.py), so that each message
passes the fault injector on the way (`Passage`) with no extra hop.

What the client sees for each answer the proxy gives:
  a JSON-RPC body (the server's answer, or a fault's)  -> that line, with the request's id
  any other status (a 504, a 599 replay miss, ...)       -> a JSON-RPC error naming it
  no answer (dropped: response_lost, timeout then close) -> nothing: it waits
  a server_exit fault, or the server died                -> nothing; the server is killed and
                                                            the stream closed (EOF)
  a server_restart fault                                 -> the shim starts the server again and
                                                            the session goes on with it: `before`,
                                                            the call reaches the new server; `after`,
                                                            nothing (the answer is lost); other
                                                            calls in flight get nothing either
The server's own requests (elicitation/create, sampling/createMessage, roots/list) pass the
injector the other way (direction "server to client"): the client's answer is the upstream's,
and what the injector makes of it goes to the server, as the rules above with the roles swapped.
After a server_restart the client's answer to a request the old server asked goes to no server (the
trace keeps it, the outcome `reset`), and the new server's requests reach the client under ids
of their own (messages.renumbered): it numbers them afresh, as the old one did.
Notifications pass it from either side (past the episode's cap for progress and logging they are
only counted). In replay no server runs; the recorded server's requests and notifications that
followed a client message are sent the client before that message's answer, through the
injector the same way (replay_store.stand_in says which and checks the client's answers). Requests travel side by side, so two sent together may arrive in either order (as
over HTTP); a notification arrives before anything its sender sends after it.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from typing import Protocol

import structlog
from faultproxy.proxy.faults.server_exit import SERVER_EXIT_HEADER
from faultproxy.proxy.faults.server_restart import RESTART_KEY
from faultproxy.proxy.stdio.messages import SERVER_GONE, Message, answer_for, error_line, parse_line, renumbered
from faultproxy.proxy.stdio.child import ServerGone
from faultproxy.proxy.stdio.passage import CLIENT_TO_SERVER, SERVER_TO_CLIENT, Passage
from faultproxy.proxy.stdio.pipes import Pipes
from faultproxy.proxy.stdio.upstream import EXITED_HEADER, Delivered, ServerSide

log = structlog.get_logger("faultproxy.mcp")

EXIT_CANNOT_START = 2
SHUTDOWN_GRACE_S = 5.0  # how long a relayed server may take to exit once it has answered and its input closed
ANSWER_WAIT_S = 60.0  # how long it may take to answer what it was sent (a server still starting under load)


class ServerProcess(Protocol):
    """The server's process, wherever it is supervised (the shim's ChildServer, or the proxy's
    view of it through the shim)."""

    killed_by: str | None

    async def kill(self, why: str) -> None: ...

    async def restart(self, why: str) -> tuple[list[int], str | None]:
        """Kill the server and start its command again: the new server's stdin and stdout, or why
        it could not start."""
        ...

    async def wait_exit(self) -> int | None: ...

    def exit_reason(self) -> str: ...


class StdioSession:
    """`await StdioSession(...).run()` relays until the client closes its stream or the server
    is gone, and returns the shim's exit status."""

    def __init__(self, pipes: Pipes, client_in: asyncio.StreamReader, client_out: asyncio.StreamWriter,
                 server: ServerSide, process: ServerProcess | None, passage: Passage | None = None) -> None:
        self.pipes = pipes
        self.client_in = client_in
        self.client_out = client_out
        self.server = server
        self.client = ServerSide(client_out, None)  # the client's side, for the requests the server sends it
        self.process = process
        self.passage = passage
        self.inflight: set[asyncio.Task] = set()
        self.done = asyncio.Event()
        self.server_finished = asyncio.Event()  # the server's output ended
        self.unanswered: set = set()  # a plain relay: ids of the client's requests the server has not answered
        self.all_answered = asyncio.Event()
        self.all_answered.set()
        self.exit_status = 0
        self._closing = False
        self._standing_in = asyncio.Lock()  # replay: the server's recorded messages go out in order
        self.starts = 0  # server_restart: how many times the server was started again
        self._server_ready = asyncio.Event()  # cleared while it restarts: nothing is sent to it meanwhile
        self._server_ready.set()
        self._pumps: set[asyncio.Task] = set()

    async def run(self) -> int:
        self._pump(self.server)
        clients = asyncio.create_task(self._read_client())
        try:
            await self.done.wait()
        finally:  # also when the proxy stops: every stream is let go of, so the client sees EOF
            self._closing = True
            for task in (clients, *self.inflight):
                task.cancel()
            self.pipes.close()
            for pump in set(self._pumps):
                pump.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await pump
        return self.exit_status

    def _pump(self, server: ServerSide) -> None:
        """Relay what `server` writes, as long as it is this session's server."""
        if server.stdout is not None:
            pump = asyncio.create_task(self._pump_server(server, self.starts))
            self._pumps.add(pump)
            pump.add_done_callback(self._pumps.discard)

    def end(self, why: str) -> None:
        """End the session from outside (the shim that supervises the server has gone)."""
        log.warning("stdio_session_ended", why=why)
        self.exit_status = self.exit_status or 1
        self.done.set()

    # -- client -> server --------------------------------------------------------------------

    async def _read_client(self) -> None:
        while True:
            try:
                line = await self.client_in.readuntil(b"\n")
            except asyncio.IncompleteReadError as rest:
                if rest.partial.strip():
                    await self._from_client(parse_line(rest.partial))
                break
            await self._from_client(parse_line(line.rstrip(b"\r\n")))
        self.client.ended("the client closed its stream")  # no answer will come to the server's requests
        if self.inflight:
            await asyncio.wait(set(self.inflight))
        if self.passage is None and self.server.stdin is not None:
            await self._shut_down_server()
        self.done.set()

    async def _shut_down_server(self) -> None:
        """MCP's stdio shutdown, for a plain relay: the server's input closes, and it answers what
        it still has and exits; the end of its output ends the session. Ending sooner would close
        the pipe it is still writing its last answers to, so the grace period starts only once
        every request it was sent is answered (a server still starting may take a while)."""
        self.server.stdin.close()
        finished = asyncio.ensure_future(self.server_finished.wait())
        answered = asyncio.ensure_future(self.all_answered.wait())
        try:
            await asyncio.wait({finished, answered}, timeout=ANSWER_WAIT_S, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait({finished}, timeout=SHUTDOWN_GRACE_S)
        finally:
            finished.cancel()
            answered.cancel()

    async def _from_client(self, message: Message) -> None:
        if message.kind == "response" and self.client.take_answer(message.id_key, message.raw):
            return  # the client's answer to a server's request: that exchange takes it
        if self.passage and message.kind in ("request", "notification"):
            await self._pass(message, CLIENT_TO_SERVER)
        elif self.server.start_error and message.kind == "request":
            await self._write(error_line(message.body["id"], SERVER_GONE, self.server.start_error))
            self.done.set()
        else:
            if message.kind == "request":
                self.unanswered.add(message.id_key)
                self.all_answered.clear()
            with contextlib.suppress(Exception):
                await self.server.send(message.raw)

    async def _pass(self, message: Message, direction: str, asker: ServerSide | None = None) -> None:
        """A message through the injector: a notification before the next line from its sender is
        read (it must not overtake what follows it, as notifications/initialized the first call;
        its answer is immediate), a request side by side with the others. `asker`: the server that
        sent a message to the client (none in replay, which runs no server)."""
        if message.kind == "notification":
            await self._through_proxy(message, direction, asker)
            return
        task = asyncio.create_task(self._through_proxy(message, direction, asker))
        self.inflight.add(task)
        task.add_done_callback(self.inflight.discard)

    async def _through_proxy(self, message: Message, direction: str, asker: ServerSide | None = None) -> None:
        to_server = direction == CLIENT_TO_SERVER
        give = self._give_client if to_server else functools.partial(self._give_server, asker or self.server)
        stand_in = functools.partial(self._stand_in, message) if to_server else None
        asked = renumbered(message, asker.start) if asker and asker.start and message.kind == "request" else message
        flow, unchanged = await self.passage.begin(asked.raw, direction, stand_in)
        if unchanged is None:  # a fault (or the replay) answered, or dropped it
            await give(message, self.passage.final(flow))
            return
        sent = flow.request.content  # as the injector let it go on (a renamed tool's call goes under its old name)
        sending = asked if sent == asked.raw else parse_line(sent)
        try:
            if flow.metadata.get(RESTART_KEY) == "before":
                await self._restart("server_restart fault, before the call")
            delivered = await (await self._server() if to_server else self.client).deliver(sending)
        except asyncio.CancelledError:  # the session ended first
            self.passage.abandon(flow)
            raise
        if asker is not None and asker.restarted:  # the server that asked is gone: its answer with it
            await self.passage.complete(flow, delivered, unheard=f"the server that asked was gone: {asker.gone}")
            return
        if unchanged:  # the sender has its answer first; the trace can wait
            await give(message, delivered)
            await self.passage.complete(flow, delivered)
            return
        await self.passage.complete(flow, delivered)
        if flow.metadata.get(RESTART_KEY) == "after":  # the answer is lost with the old server
            await self._restart("server_restart fault, after the call")
        await give(message, self.passage.final(flow))

    async def _server(self) -> ServerSide:
        """The server to send to now: once a restart in progress has its new one."""
        await self._server_ready.wait()
        return self.server

    async def _restart(self, why: str) -> None:
        """server_restart: the old server is killed and forgets everything; the answers it owed
        are lost. The session goes on with a new one, started from the same command, never
        initialized (or, if it could not start, gone as a server that never started is)."""
        if self.process is None:  # replay runs no server: the recording answers as the new one did
            return
        await self._server_ready.wait()  # one restart at a time
        self._server_ready.clear()
        try:
            log.info("server_restart", why=why)
            self.starts += 1
            self.server.replaced(f"the MCP server was restarted ({why})")
            fds, start_error = await self.process.restart(why)
            if fds:
                self.server = ServerSide(await self.pipes.writer(fds[0]), await self.pipes.reader(fds[1]),
                                         start=self.starts)
            else:
                self.server = ServerSide(None, None, start_error or "the MCP server did not start again")
            self._pump(self.server)
        finally:
            self._server_ready.set()

    async def _stand_in(self, message: Message, lines: list[bytes]) -> None:
        """Replay: the recorded server's messages that followed the client's `message`, to the
        client, each through the injector as the server's own; a request's answer waits for them.
        After a notification they go aside: the client's next lines (its answers among them) must
        still be read."""
        sending = asyncio.create_task(self._send_recorded(lines))
        self.inflight.add(sending)
        sending.add_done_callback(self.inflight.discard)
        if message.kind == "request":
            await sending

    async def _send_recorded(self, lines: list[bytes]) -> None:
        async with self._standing_in:
            for line in lines:
                recorded = parse_line(line.strip())
                if recorded.kind in ("request", "notification"):
                    await self._through_proxy(recorded, SERVER_TO_CLIENT)

    async def _give_client(self, message: Message, delivered: Delivered | None) -> None:
        """What the client sees of the proxy's word on its message (see the module docstring)."""
        if delivered is None:
            log.info("answer_lost", method=message.method)
            return  # what a stdio client sees of a lost answer: nothing, until its own timeout
        status, headers, body = delivered
        answered = {name.lower(): value for name, value in headers}
        if SERVER_EXIT_HEADER in answered:
            await self._crash("server_exit fault", answered[SERVER_EXIT_HEADER])
        elif answered.get(EXITED_HEADER) == "restart":
            log.info("answer_lost", method=message.method, why="the server was restarted")
        elif EXITED_HEADER in answered:
            await self._server_gone(message, answered[EXITED_HEADER], body)
        elif message.kind == "request":
            await self._write(answer_for(message.body["id"], status, body))

    async def _give_server(self, server: ServerSide, message: Message, delivered: Delivered | None) -> None:
        """What `server` gets of the proxy's word on its own request: the client's answer, or a
        fault's; nothing when it was lost, the client's stream is gone, or the server was restarted."""
        if delivered is None:
            log.info("answer_lost", method=message.method, direction=SERVER_TO_CLIENT)
            return
        status, headers, body = delivered
        answered = {name.lower(): value for name, value in headers}
        if SERVER_EXIT_HEADER in answered:
            await self._crash("server_exit fault", answered[SERVER_EXIT_HEADER])
        elif message.kind == "request" and EXITED_HEADER not in answered:
            with contextlib.suppress(ServerGone):
                await server.send(answer_for(message.body["id"], status, body).rstrip(b"\n"))

    # -- server -> client --------------------------------------------------------------------

    async def _pump_server(self, server: ServerSide, start: int) -> None:
        async for line in server.lines():
            message = parse_line(line)
            if message.kind == "response" and message.id_key in self.unanswered:
                self.unanswered.discard(message.id_key)
                if not self.unanswered:
                    self.all_answered.set()
            if message.kind == "stray":
                server.note_stray(line)
            elif message.kind == "response" and server.take_answer(message.id_key, line):
                continue
            elif self.passage and message.kind == "notification" and not self.passage.records(message.method):
                server.unrecorded += 1
                await self._write(line + b"\n")
            elif self.passage and message.kind in ("request", "notification"):
                await self._pass(message, SERVER_TO_CLIENT, server)
            else:
                await self._write(line + b"\n")
        if start != self.starts:
            return  # a restart ended this server's output; the session goes on with the new one
        self.server_finished.set()
        status = await self.process.wait_exit()
        on_its_own = self.process.killed_by is None and not self._closing
        if on_its_own and not server.served and self.passage:
            # It exited before answering initialize: the client's requests, the first in flight or
            # still to come, are answered as a server that cannot start (_server_gone), recorded.
            log.warning("server_not_started", reason=self.process.exit_reason())
            self.exit_status = status
            server.never_started(f"the MCP server exited before answering: {self.process.exit_reason()}")
            return
        server.ended(self.process.exit_reason())
        if on_its_own:
            # It died on its own: as from a crashed server, the client gets EOF once the
            # exchanges in flight have been recorded.
            log.warning("server_exited", reason=self.process.exit_reason())
            self.exit_status = status
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
        if self.process is not None:
            await self.process.kill(why)
        self.exit_status = 1
        self.done.set()

    async def _write(self, line: bytes) -> None:
        if self.client_out.is_closing():
            return
        self.client_out.write(line)
        with contextlib.suppress(ConnectionError):
            await self.client_out.drain()
