"""The shim's end of the stdio lane (proxy/stdio/lane.py has the proxy's end and the protocol):
ask the episode's proxy for a lane (which says whether it replays, before any server starts), hand
it the session's pipes, then look after the server until it says the session is over: kill it,
or restart it and hand the new server's pipes over too."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
import structlog
from faultproxy.proxy.stdio.child import ChildServer, ServerStartError
from faultproxy.proxy.stdio.lane import LANE_URL, encode

log = structlog.get_logger("faultproxy.mcp")

PROXY_GONE_STATUS = 1
LANE_WAIT_S = 30.0  # for the proxy's answer to the lane request: something that never answers is no proxy


class LaneError(Exception):
    """The proxy would not take the session (refused credentials, not a faultproxy proxy, no
    Unix sockets on this platform)."""


@dataclass(frozen=True)
class Lane:
    """The proxy's answer to the lane request: where to hand the session, and whether it replays."""

    socket: str
    ticket: str
    replay: bool  # the proxy answers from a recording: no server is to run


async def hand_over(child: ChildServer, where: Lane, server: str, start_error: str | None) -> int:
    """Give the session to the proxy; the exit status it ends with."""
    lane = _connect(where.socket)
    pipes = [0, 1, *child.give_pipes()] if child.process else [0, 1]
    hello = encode({"ticket": where.ticket, "server": server, "start_error": start_error})
    try:
        socket.send_fds(lane, [hello], pipes)
    except OSError as error:
        lane.close()
        raise LaneError(f"cannot hand the session to the proxy: {error.strerror or error}") from None
    for fd in pipes[2:]:
        os.close(fd)
    _let_go_of_stdio()
    reader, writer = await asyncio.open_unix_connection(sock=lane)
    keeper = _Keeper(child, where.socket, writer)
    status = await keeper.obey(reader)
    await keeper.child.close()
    keeper.stop_watching()
    writer.close()
    return status


async def ask_for_lane(proxy_url: str, headers: Mapping[str, str]) -> Lane:
    """The proxy's lane for this session; `headers` go on the request (a monitored session's name:
    proxy/stdio/monitored.py). One local round trip, made before the server starts."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=LANE_WAIT_S)) as http:
        try:
            async with http.get(LANE_URL, proxy=proxy_url, headers=headers) as response:
                said = await response.text()
                where = json.loads(said) if response.status == 200 else None
        except (aiohttp.ClientError, ValueError) as error:
            raise LaneError(f"cannot reach the faultproxy proxy: {error}") from None
        except TimeoutError:
            raise LaneError(f"the faultproxy proxy did not answer within {LANE_WAIT_S:g} s") from None
    if not isinstance(where, dict) or "socket" not in where:
        raise LaneError(f"the proxy gave no lane: HTTP {response.status}: {said.strip()[:200]}")
    return Lane(str(where["socket"]), str(where.get("ticket")), where.get("replay") is True)


def _connect(path: str) -> socket.socket:
    if not hasattr(socket, "AF_UNIX") or not hasattr(socket, "send_fds"):
        raise LaneError("stdio MCP servers are faulted on Linux and macOS only (the shim hands its pipes "
                        "to the proxy over a Unix socket)")
    lane = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        lane.connect(path)
    except OSError as error:
        lane.close()
        raise LaneError(f"cannot reach the proxy's lane {path}: {error.strerror or error}") from None
    return lane


def _let_go_of_stdio() -> None:
    """The proxy has the client's stream now: ours must not keep it open (the client sees EOF
    only once every copy is closed) nor write into it."""
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)
    os.close(null)


class _Keeper:
    """The server process, on the proxy's word, and the proxy told when it exits; `child` is the
    server now (a restart replaces it), `start` its number."""

    def __init__(self, child: ChildServer, lane_path: str, writer: asyncio.StreamWriter) -> None:
        self.child = child
        self.lane_path = lane_path
        self.writer = writer
        self.start = 0
        self._watching = asyncio.create_task(self._report_exit()) if child.process else None

    async def obey(self, reader: asyncio.StreamReader) -> int:
        """Do what the proxy says until it ends the session; if it goes away first, so does the server."""
        with contextlib.suppress(ValueError, ConnectionError):
            while line := await reader.readline():
                said = json.loads(line)
                if "kill" in said:
                    await self.child.kill(str(said["kill"]))
                elif "restart" in said:
                    await self._restart(str(said["restart"]), str(said.get("ticket")), int(said.get("start", 0)))
                elif "end" in said:
                    return int(said["end"])
        log.warning("proxy_gone", why="the proxy closed the lane without ending the session")
        await self.child.kill("the faultproxy proxy has gone")
        return PROXY_GONE_STATUS

    def stop_watching(self) -> None:
        if self._watching:
            self._watching.cancel()

    async def _restart(self, why: str, ticket: str, start: int) -> None:
        """Kill the server (its exit is no news: the proxy asked) and start the command again,
        fresh; its pipes go to the proxy on a connection of their own, with the proxy's ticket."""
        self.stop_watching()
        await self.child.kill(why)
        await self.child.close()
        self.child, self.start = ChildServer(self.child.command), start
        start_error = None
        try:
            await self.child.start()
        except ServerStartError as error:
            start_error = str(error)
        pipes = list(self.child.give_pipes()) if self.child.process else []
        hello = encode({"ticket": ticket, "restarted": True, "start_error": start_error})
        try:
            lane = _connect(self.lane_path)
            with lane:
                if pipes:
                    socket.send_fds(lane, [hello], pipes)
                else:
                    lane.sendall(hello)
        except (LaneError, OSError) as error:  # the proxy's wait for the new server runs out
            log.warning("restart_not_handed_over", error=str(error))
        for fd in pipes:
            os.close(fd)
        if self.child.process:
            self._watching = asyncio.create_task(self._report_exit())

    async def _report_exit(self) -> None:
        child, start = self.child, self.start
        status = await child.wait_exit()
        if not self.writer.is_closing():
            self.writer.write(encode({"exited": child.exit_reason(), "status": status, "start": start}))
