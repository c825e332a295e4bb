"""`faultproxy mcp`: put a stdio MCP server behind the chaos proxy.

In an MCP client's configuration, in place of the server's command:

    {"command": "faultproxy", "args": ["mcp", "--", "npx", "some-server"]}

Under `faultproxy run` (or replay) the shim finds its episode by itself (proxy.stdio.locate)
and its exchanges go through that episode's proxy. `--monitor URL` sends them through a running
`faultproxy monitor` instead, so live agents' stdio servers are judged as their HTTP traffic is.
Outside both, `--scenario` (or `--trace-dir`) starts a proxy inside the shim for this session;
with neither it is a plain relay.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from urllib.parse import quote, urlsplit, urlunsplit
from pathlib import Path

import structlog
from faultproxy.cli.options import agent_command, proxy_params
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option, refuse_links_out
from faultproxy.proxy.server import ProxyServer
from faultproxy.proxy.stdio.locate import locate
from faultproxy.proxy.stdio.route import server_name
from faultproxy.proxy.stdio.shim import ProxyLink, run_shim
from faultproxy.scenarios import Scenario

log = structlog.get_logger("faultproxy.mcp")
# --trace-dir without --scenario: record everything, inject nothing.
NO_FAULTS = Scenario("no_faults", "record only", "0", {}, (), {}, "", "no_faults")


def register(commands) -> None:
    parser = commands.add_parser(
        "mcp", help="Run a stdio MCP server behind the proxy (use it as the server command).",
        description="Start CMD and relay its newline-delimited JSON-RPC with the client on stdin/stdout, "
                    "faulting and recording each message: under `faultproxy run` in the episode's proxy, "
                    "otherwise in one this command starts (--scenario, --trace-dir).")
    parser.set_defaults(handler=cmd_mcp)
    parser.add_argument("--scenario", help="Scenario file or bundled name (outside faultproxy run).")
    parser.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="Override a scenario param.")
    parser.add_argument("--trace-dir", type=folder_option, help="Write this session's trace here (outside faultproxy run).")
    parser.add_argument("--episode", help="Episode key outside faultproxy run (default: the server's name).")
    parser.add_argument("--name", help="The server's name in traces and URLs (default: from CMD).")
    parser.add_argument("--monitor", metavar="URL",
                        help="The proxy URL a running `faultproxy monitor` prints (http://EPISODE:TOKEN@HOST:PORT; "
                             "EPISODE is filled in): the session goes through it, as one episode unless its "
                             "--episode-by rules say otherwise.")
    parser.add_argument("server", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        command = agent_command(args.server)
    except UsageError:
        raise UsageError("no server command: put it after --, e.g. faultproxy mcp -- npx some-server") from None
    name = args.name or server_name(command)
    interactive = sys.stdin.isatty()
    if args.monitor:
        url = monitor_url(args.monitor, args.episode or os.environ.get("FAULTPROXY_EPISODE") or f"{name}-{os.getpid()}")
        return asyncio.run(run_shim(command, ProxyLink(url, name), interactive))
    located = locate()
    if located:
        if args.scenario or args.trace_dir:
            log.warning("mcp_flags_ignored", episode=located.episode,
                        why="inside a faultproxy episode, its proxy's scenario and trace apply")
        return asyncio.run(run_shim(command, ProxyLink(located.proxy_url, name, located.replay), interactive))
    if not (args.scenario or args.trace_dir):
        return asyncio.run(run_shim(command, None, interactive))
    episode = args.episode or name
    if args.trace_dir:
        refuse_links_out(args.trace_dir, "trace folder")  # traces are appended: never through a link out of it
    with ProxyServer(args.scenario or NO_FAULTS, trace_dir=args.trace_dir, params=proxy_params(args)) as proxy:
        proxy.begin_episode(episode)
        return asyncio.run(run_shim(command, ProxyLink(proxy.proxy_url(episode), name), interactive))


def monitor_url(url: str, episode: str) -> str:
    """The monitor's proxy URL with this session's episode as its user: in place of the EPISODE it
    prints, or added when the URL has no credentials (the monitor then has no token)."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.port:
        raise UsageError(f"--monitor: expected the monitor's proxy URL, http://EPISODE:TOKEN@HOST:PORT, got {url!r}")
    user = quote(episode, safe="")
    netloc = parts.netloc.split("@", 1)[1] if "@" in parts.netloc else parts.netloc
    password = parts.password if parts.password is not None else "x"
    return urlunsplit((parts.scheme, f"{user}:{password}@{netloc}", parts.path, "", ""))
