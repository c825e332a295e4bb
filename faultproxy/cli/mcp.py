"""`faultproxy mcp`: put a stdio MCP server behind the chaos proxy.

In an MCP client's configuration, in place of the server's command:

    {"command": "faultproxy", "args": ["mcp", "--", "npx", "some-server"]}

Under `faultproxy run` (or replay) the shim finds its episode by itself (proxy.stdio.locate)
and its exchanges go through that episode's proxy. Outside one, `--monitor URL` sends them
through a running `faultproxy monitor` (proxy.stdio.monitored), so live agents' stdio servers are
judged as their HTTP traffic is; `--scenario` (or `--trace-dir`) starts a proxy inside the shim
for this session; with none of these it is a plain relay.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

import structlog
from faultproxy.cli.options import TOKEN_ENV, agent_command, proxy_params
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option, refuse_links_out
from faultproxy.proxy.server import ProxyServer
from faultproxy.proxy.stdio.locate import locate, nearest
from faultproxy.proxy.stdio.monitored import ShimRule, monitor_proxy_url, session_headers
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
                        help="Send the session through a running `faultproxy monitor`, to be judged with its live traffic: "
                             "the proxy URL it prints (http://EPISODE:TOKEN@HOST:PORT; EPISODE is not used, "
                             "--episode-by names the episode) or http://HOST:PORT.")
    parser.add_argument("--auth", action="store_true",
                        help=f"With --monitor: the monitor checks a token; ${TOKEN_ENV} holds it (here or in the agent's "
                             "environment).")
    parser.add_argument("--episode-by", action="append", default=[], metavar="RULE",
                        help="With --monitor: env:NAME | process | session; repeat to try several in order "
                             "(default, and when none applies: this client session).")
    parser.add_argument("server", nargs=argparse.REMAINDER, metavar="-- CMD [ARGS...]")


def cmd_mcp(args: argparse.Namespace) -> int:
    try:
        command = agent_command(args.server)
    except UsageError:
        raise UsageError("no server command: put it after --, e.g. faultproxy mcp -- npx some-server") from None
    name = args.name or server_name(command)
    interactive = sys.stdin.isatty()
    located = locate()
    if located and (located.harness or not args.monitor):  # a run or replay: the same MCP configuration is
        # then faulted or replayed, never monitored
        if args.scenario or args.trace_dir or args.monitor:
            log.warning("mcp_flags_ignored", episode=located.episode,
                        why="inside a faultproxy episode, its proxy applies: its scenario and trace, not --monitor")
        return asyncio.run(run_shim(command, ProxyLink(located.proxy_url, name), interactive))
    monitored = monitor_link(args, name)
    if monitored:
        return asyncio.run(run_shim(command, monitored, interactive))
    if not (args.scenario or args.trace_dir):
        return asyncio.run(run_shim(command, None, interactive))
    episode = args.episode or name
    if args.trace_dir:
        refuse_links_out(args.trace_dir, "trace folder")  # traces are appended: never through a link out of it
    with ProxyServer(args.scenario or NO_FAULTS, trace_dir=args.trace_dir, params=proxy_params(args)) as proxy:
        proxy.begin_episode(episode)
        return asyncio.run(run_shim(command, ProxyLink(proxy.proxy_url(episode), name), interactive))


def monitor_link(args: argparse.Namespace, name: str) -> ProxyLink | None:
    """The link to the monitor `--monitor` names, the session named by `--episode-by`; None without
    --monitor. UsageError (exit 2, before any server starts) for what cannot work."""
    if not args.monitor:
        if args.auth or args.episode_by:
            raise UsageError("--auth and --episode-by go with --monitor URL")
        return None
    if args.scenario or args.trace_dir:
        raise UsageError("--monitor sends the session to a running monitor: --scenario and --trace-dir are for "
                         "a proxy of the shim's own; give one or the other")
    try:
        rules = tuple(ShimRule.parse(text) for text in args.episode_by)
    except ValueError as error:
        raise UsageError(f"--episode-by: {error}") from None
    try:
        url = monitor_proxy_url(args.monitor, _token(args.auth))
    except ValueError as error:
        raise UsageError(str(error)) from None
    return ProxyLink(url, name, headers=session_headers(rules, name))


def _token(auth: bool) -> str | None:
    """The monitor's token: ${TOKEN_ENV} in this environment or the agent's (an MCP client passes
    its servers few variables); never written anywhere."""
    if not auth:
        return None
    token = nearest(TOKEN_ENV)
    if not token:
        raise ValueError(f"--auth: ${TOKEN_ENV} is set neither here nor in the agent's environment; put the "
                         "monitor's token there (or in the server's env in the MCP configuration)")
    return token
