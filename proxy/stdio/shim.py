"""`faultproxy mcp`'s process: start the server, then relay its session or hand it to a proxy.

Three ways to run, chosen by the link:
- no link: a plain relay, line for line, in this process (outside any episode, with no scenario);
- a link to a proxy (a `faultproxy run` episode's, or one this process embeds for `--scenario`):
  the session's pipes go to that proxy, which relays them through its fault injector
  (proxy/stdio/lane.py); this process looks after the server;
- a link to a replay proxy: no server is started; the replay proxy answers from the recording.
The shim asks the proxy for its lane before starting the server, and the answer says whether the
proxy replays: the environment cannot say, since an MCP client passes its servers an environment
of its own choosing. If the proxy will not take the session, the session is not relayed unseen:
each request gets a JSON-RPC error saying why, and the exit status is 2.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from faultproxy.proxy.stdio.child import ChildServer, ServerStartError
from faultproxy.proxy.stdio.handover import Lane, LaneError, ask_for_lane, hand_over
from faultproxy.proxy.stdio.pipes import Pipes
from faultproxy.proxy.stdio.session import EXIT_CANNOT_START, StdioSession
from faultproxy.proxy.stdio.upstream import ServerSide


@dataclass(frozen=True)
class ProxyLink:
    """Where the session goes: the proxy URL (with the episode's credentials) and the server's name."""

    proxy_url: str
    server: str
    headers: Mapping[str, str] = field(default_factory=dict)  # on the lane request: a monitored session's name


async def run_shim(command: list[str], link: ProxyLink | None, interactive: bool = False) -> int:
    """One session; the exit status. `interactive`: stdin is a terminal (a person ran it, not an
    MCP client), so a server that cannot start is an error on the spot."""
    child = ChildServer(command)
    lane: Lane | None = None
    start_error = None
    try:
        lane = await ask_for_lane(link.proxy_url, link.headers) if link else None
    except LaneError as error:  # no server is started for a session that will not be relayed
        start_error = _say(str(error))
        if interactive:  # a person at a terminal: the line says it all, no session to answer
            return EXIT_CANNOT_START
    if start_error is None and not (lane and lane.replay):
        try:
            await child.start()
        except ServerStartError as error:
            _say(str(error))
            if interactive:
                return EXIT_CANNOT_START
            start_error = str(error)
    if lane is None:
        status = await _relay_here(child, start_error)
    else:
        try:
            status = await hand_over(child, lane, link.server, start_error)
        except LaneError as error:
            start_error = _say(str(error))
            if interactive:
                await child.kill(start_error)
                return EXIT_CANNOT_START
            await _relay_here(child, start_error)
    return EXIT_CANNOT_START if start_error else status


async def _relay_here(child: ChildServer, start_error: str | None) -> int:
    """Relay the session in this process; with `start_error`, answer each request with it."""
    pipes = Pipes()
    client_in, client_out = await pipes.reader(os.dup(0)), await pipes.writer(os.dup(1))
    if child.process and start_error is None:
        stdin_fd, stdout_fd = child.give_pipes()
        server = ServerSide(await pipes.writer(stdin_fd), await pipes.reader(stdout_fd))
    else:
        server = ServerSide(None, None, start_error)
    status = await StdioSession(pipes, client_in, client_out, server, child if child.process else None).run()
    if start_error is None:
        await child.close()
    else:  # a server we will not relay to
        await child.kill(start_error)
    return status


def _say(error: str) -> str:
    line = f"faultproxy mcp: {error}"
    print(line, file=sys.stderr, flush=True)
    return line
