"""The shim's end of the stdio lane (proxy/stdio/lane.py has the proxy's end and the protocol):
hand the session's pipes to the episode's proxy, then look after the server until it says the
session is over."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import socket
from collections.abc import Mapping
from typing import Any

import aiohttp
import structlog
from faultproxy.proxy.stdio.child import ChildServer
from faultproxy.proxy.stdio.lane import LANE_URL, encode

log = structlog.get_logger("faultproxy.mcp")

PROXY_GONE_STATUS = 1
LANE_WAIT_S = 30.0  # for the proxy's answer to the lane request: something that never answers is no proxy


class LaneError(Exception):
    """The proxy would not take the session (refused credentials, not a faultproxy proxy, no
    Unix sockets on this platform)."""


async def hand_over(child: ChildServer, proxy_url: str, server: str, start_error: str | None,
                    headers: Mapping[str, str] | None = None) -> int:
    """Give the session to the proxy; the exit status it ends with. `headers` go on the lane
    request (a monitored session's name: proxy/stdio/monitored.py)."""
    where = await _ask_for_lane(proxy_url, headers or {})
    lane = _connect(where["socket"])
    pipes = [0, 1, *child.give_pipes()] if child.process else [0, 1]
    hello = encode({"ticket": where["ticket"], "server": server, "start_error": start_error})
    try:
        socket.send_fds(lane, [hello], pipes)
    except OSError as error:
        lane.close()
        raise LaneError(f"cannot hand the session to the proxy: {error.strerror or error}") from None
    for fd in pipes[2:]:
        os.close(fd)
    _let_go_of_stdio()
    reader, writer = await asyncio.open_unix_connection(sock=lane)
    watching = asyncio.create_task(_report_exit(child, writer)) if child.process else None
    status = await _obey(reader, child)
    await child.close()
    if watching:
        watching.cancel()
    writer.close()
    return status


async def _ask_for_lane(proxy_url: str, headers: Mapping[str, str]) -> dict[str, Any]:
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
    return where


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


async def _obey(reader: asyncio.StreamReader, child: ChildServer) -> int:
    """Do what the proxy says until it ends the session; if it goes away first, so does the server."""
    with contextlib.suppress(ValueError, ConnectionError):
        while line := await reader.readline():
            said = json.loads(line)
            if "kill" in said:
                await child.kill(str(said["kill"]))
            elif "end" in said:
                return int(said["end"])
    log.warning("proxy_gone", why="the proxy closed the lane without ending the session")
    await child.kill("the faultproxy proxy has gone")
    return PROXY_GONE_STATUS


async def _report_exit(child: ChildServer, writer: asyncio.StreamWriter) -> None:
    status = await child.wait_exit()
    if not writer.is_closing():
        writer.write(encode({"exited": child.exit_reason(), "status": status}))
