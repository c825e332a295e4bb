"""The stdio lane: how a `faultproxy mcp` shim's messages reach the proxy's fault injector.

Sent through mitmproxy, every message would pay a whole HTTP exchange (a few milliseconds on a
small machine, for each tools/call); the lane costs a line each way on a loopback socket. The
shim first asks for a lane through the proxy itself (`GET http://lane.stdio.invalid/`) with the
episode's proxy credentials, so the proxy's authentication and attribution decide which episode
the lane serves; the answer is a port and a one-time ticket. For each message the lane then
builds the HTTP exchange the message stands for (`POST http://<server>.stdio.invalid/mcp`) and
runs the injector's hooks on it in mitmproxy's order: match, decide, inject, record, with the
episode's own counters, keyed-hash decisions and trace. Where the exchange is forwarded, the
shim delivers the message to the server and reports the server's answer back.

Wire format, one JSON document per line, both ways:

    shim -> lane   {"ticket": T, "server": NAME}                        once, first
    shim -> lane   {"n": N, "send": MESSAGE}                            a client message
    lane -> shim   {"n": N, "forward": true, "unchanged": BOOL}         deliver it to the server
    shim -> lane   {"n": N, "status": S, "headers": [[K, V], ...], "body": TEXT}
                                                                        what the server answered
    lane -> shim   {"n": N, "status": S, "headers": [...], "body": TEXT}   what the client gets
    lane -> shim   {"n": N, "lost": true}                               the client gets nothing

`unchanged`: no rule fired and nothing may perturb the answer, so the shim answers the client at
once and the lane sends nothing more; the trace line is written off the call's path.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections.abc import Coroutine
from typing import Any

import structlog
from faultproxy.proxy.attribution import EPISODE_KEY, episode_of
from faultproxy.proxy.auth import EpisodeGate
from faultproxy.proxy.injector import EXCHANGE_KEY, FaultInjector, header_pairs
from faultproxy.proxy.stdio.child import LINE_LIMIT
from faultproxy.proxy.stdio.route import STDIO_PATH, STDIO_SUFFIX
from mitmproxy import connection, http
from mitmproxy import flow as flow_module

log = structlog.get_logger("faultproxy.mcp")

LANE_HOST = "lane" + STDIO_SUFFIX
LANE_URL = f"http://{LANE_HOST}/"
CLIENT_GONE = "Client disconnected: the MCP shim closed its lane"  # read by the injector as mitmproxy's own


def encode(document: dict[str, Any]) -> bytes:
    return json.dumps(document, separators=(",", ":")).encode() + b"\n"


def text(body: bytes) -> str:
    """A body as JSON text; bytes that are not UTF-8 survive the round trip (surrogateescape)."""
    return body.decode("utf-8", "surrogateescape")


def raw(body: str) -> bytes:
    return body.encode("utf-8", "surrogateescape")


class StdioLane:
    """mitmproxy addon, added after Attribution (which admits the lane request and names its
    episode) and before the FaultInjector (which must never see the lane request)."""

    def __init__(self, injector: FaultInjector, gate: EpisodeGate) -> None:
        self.injector = injector
        self.gate = gate
        self._tickets: dict[str, str] = {}
        self._server: asyncio.Server | None = None
        self._sessions: set[LaneSession] = set()

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response is not None or flow.request.host != LANE_HOST:
            return
        port = await self._listen()
        ticket = secrets.token_urlsafe(16)
        self._tickets[ticket] = episode_of(flow)
        flow.response = http.Response.make(200, json.dumps({"port": port, "ticket": ticket}),
                                           {"content-type": "application/json"})

    async def done(self) -> None:
        for session in list(self._sessions):
            session.close()
        if self._server:
            self._server.close()

    async def _listen(self) -> int:
        if self._server is None:
            self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0, limit=LINE_LIMIT)
        return self._server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        session = None
        try:
            hello = json.loads(await reader.readuntil(b"\n"))
            episode = self._tickets.pop(str(hello.get("ticket")), None)
            if episode is None:
                return  # not a ticket we gave: nothing is said to whoever it is
            session = LaneSession(self.injector, self.gate, episode, str(hello.get("server")), writer)
            self._sessions.add(session)
            while line := await reader.readline():
                session.receive(json.loads(line))
        except (ValueError, ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError) as error:
            log.warning("stdio_lane_broken", error=str(error) or type(error).__name__)
        finally:
            if session:
                self._sessions.discard(session)
                session.close()
            writer.close()


class LaneSession:
    """One shim's lane: its messages become exchanges of its episode."""

    def __init__(self, injector: FaultInjector, gate: EpisodeGate, episode: str, server: str,
                 writer: asyncio.StreamWriter) -> None:
        self.injector = injector
        self.gate = gate
        self.episode = episode
        self.host = server + STDIO_SUFFIX
        self.writer = writer
        # One client connection per lane, as mitmproxy has one per client socket; made once, as
        # each costs more than the rest of a message's passage.
        self.client = connection.Client(peername=("127.0.0.1", 0), sockname=("127.0.0.1", 0))
        self.server = connection.Server(address=None)
        self._forwarded: dict[int, tuple[http.HTTPFlow, bool]] = {}  # n -> (flow, unchanged): the shim has it
        self._tasks: set[asyncio.Task] = set()

    def receive(self, document: dict[str, Any]) -> None:
        # A task per message, as mitmproxy has one per flow (its loop runs them eagerly: a message
        # is dealt with up to its first wait before the next line is read, so lines keep their order).
        n = document["n"]
        if "send" in document:
            self._spawn(self._exchange(n, raw(document["send"])))
        elif (forwarded := self._forwarded.pop(n, None)) is not None:
            self._spawn(self._complete(n, *forwarded, document))

    def close(self) -> None:
        """The shim has gone: what it had not answered is an exchange whose client left."""
        for flow, _ in self._forwarded.values():
            flow.error = flow_module.Error(CLIENT_GONE)
            self.injector.error(flow)
        self._forwarded.clear()

    def _spawn(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _exchange(self, n: int, message: bytes) -> None:
        flow = self._flow(message)
        if self._admitted(flow):
            await self.injector.request(flow)
        if flow.error is not None:  # a fault dropped it before it was forwarded
            self.injector.error(flow)
        elif flow.response is None:  # forwarded: the shim delivers it and reports the answer
            self._forward(n, flow)
            return
        else:  # a fault, the replay or the gate answered
            await self._respond(flow)
        self._send(self._final(n, flow))

    def _forward(self, n: int, flow: http.HTTPFlow) -> None:
        ex = flow.metadata.get(EXCHANGE_KEY)  # none when the proxy has no scenario: a plain relay
        unchanged = ex is None or (ex.rule is None and ex.scenario.params.get("epsilon", 0.0) <= 0)
        self._forwarded[n] = (flow, unchanged)
        self._send({"n": n, "forward": True, "unchanged": unchanged})

    async def _complete(self, n: int, flow: http.HTTPFlow, unchanged: bool, report: dict[str, Any]) -> None:
        """The server's answer, as the upstream's response; the client gets what becomes of it
        (from the shim itself when unchanged)."""
        flow.response = http.Response.make(report["status"], raw(report["body"]),
                                           [(k.encode(), v.encode()) for k, v in report["headers"]])
        await self._respond(flow)
        if not unchanged:
            self._send(self._final(n, flow))

    def _flow(self, message: bytes) -> http.HTTPFlow:
        """The exchange a message stands for, as mitmproxy would have made it."""
        flow = http.HTTPFlow(self.client, self.server, live=True)
        now = time.time()
        flow.request = http.Request(self.host, 80, b"POST", b"http", b"", STDIO_PATH.encode(), b"HTTP/1.1",
                                    http.Headers(content_type="application/json"), message, None, now, now)
        return flow

    def _admitted(self, flow: http.HTTPFlow) -> bool:
        """The lane's episode is admitted again for each message, as each request over HTTP is
        (under a runner, an episode that has ended is refused: 407, flows/_rejected.jsonl)."""
        reason = self.gate.refusal(self.episode, self.gate.token)
        if reason:
            self.gate.reject(flow, self.episode, reason)
            return False
        flow.metadata[EPISODE_KEY] = self.episode
        return True

    async def _respond(self, flow: http.HTTPFlow) -> None:
        """mitmproxy's response hooks, for an answer from the server or one a fault made."""
        await self.injector.responseheaders(flow)
        if flow.error is None:
            await self.injector.response(flow)

    def _final(self, n: int, flow: http.HTTPFlow) -> dict[str, Any]:
        response = flow.response
        if flow.error is not None or response is None:
            return {"n": n, "lost": True}
        return {"n": n, "status": response.status_code, "headers": header_pairs(response.headers),
                "body": text(response.get_content(strict=False) or b"")}

    def _send(self, document: dict[str, Any]) -> None:
        if not self.writer.is_closing():
            with contextlib.suppress(ConnectionError):
                self.writer.write(encode(document))
