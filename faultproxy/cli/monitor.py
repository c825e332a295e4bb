"""`faultproxy monitor`: judge live traffic (faultproxy.monitor) in a run directory.

faultproxy/cli/main.py calls `register(commands)`.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from faultproxy.cli.options import (
    add_listen_options,
    add_proxy_options,
    add_side_channel_option,
    check_secret_env,
    check_side_channels,
    check_upstream_ca,
    parse_upstreams,
    proxy_params,
    proxy_token,
)
from faultproxy.cli.otel import add_otlp_options, close_export, open_export, run_attributes
from faultproxy.cli.run import proxy_start_problem
from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor
from faultproxy.proxy.server import ProxyServer, ProxyStartError
from faultproxy.proxy.monitor_sessions import EpisodeRule
from faultproxy.monitor import Monitor, MonitorOptions
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_policy

OBSERVE = "observe"  # the bundled scenario that injects nothing
MAX_EPISODES_RANGE = (1, 10_000_000)


def register(commands) -> None:
    monitor = commands.add_parser(
        "monitor", help="Judge live agent traffic: a proxy that records, judges and logs episodes.",
        description="A proxy for agents in staging or production. Injects nothing unless --scenario names canary "
                    "faults; puts requests into episodes, judges each after --idle-s of silence by the checks that "
                    "need no expected end state, and logs it in --out, a run directory for report, freeze, replay.")
    monitor.set_defaults(handler=cmd_monitor)
    monitor.add_argument("--out", type=Path, default=Path("runs/monitor"), help="The run directory (default runs/monitor).")
    monitor.add_argument("--policy", type=Path, help="Policy file: irreversible, forbidden, secrets, secret_hosts, "
                         "max_retries, max_tool_calls, budgets, severity, prices, as in a tasks file.")
    monitor.add_argument("--episode-by", action="append", default=[], metavar="RULE",
                         help="header:NAME | traceparent | auth | client; repeat to try several in order "
                              "(default, and when none applies: the client connection).")
    monitor.add_argument("--idle-s", type=float, default=30.0, help="An episode ends after this much silence (30).")
    monitor.add_argument("--sample", type=float, default=1.0,
                         help="Fraction of sessions recorded and judged, by a keyed hash of the session id (1). "
                              "The rest pass through with nothing written.")
    monitor.add_argument("--max-episodes", type=int, default=10_000,
                         help="Episodes the log keeps; beyond, the oldest go first with their traces (10000).")
    monitor.add_argument("--scenario", default=OBSERVE, help="Canary faults for staging chaos (default: none).")
    monitor.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="Override a scenario param.")
    monitor.add_argument("--quiet", action="store_true", help="No live view.")
    add_listen_options(monitor)
    add_side_channel_option(monitor)
    add_proxy_options(monitor)
    add_otlp_options(monitor)


def cmd_monitor(args: argparse.Namespace) -> int:
    options = monitor_options(args)
    token = options.token

    def ready(server: ProxyServer) -> None:
        credentials = f"EPISODE:{token}" if token else "EPISODE:x"
        faults = "no faults" if options.scenario.name == OBSERVE else f"canary faults: {options.scenario.name}"
        print(f"faultproxy monitor: {faults}, policy {options.policy.path}, run directory {options.out}/")
        print(f"  forward proxy: HTTPS_PROXY=http://{credentials}@{options.host}:{server.port}  "
              f"(trust {server.ca_bundle})")
        for name in options.upstreams:
            print(f"  {name}: base URL {server.reverse_url('session', name)}")
        print(f"  stdio MCP servers: faultproxy mcp --monitor http://{options.host}:{server.port}"
              f"{' --auth' if token else ''} -- CMD...")
        print("  SIGTERM or Ctrl-C judges the open episodes and stops.", flush=True)

    export = open_export(args, Redactor.from_env(options.secret_env),
                         run_attributes("monitor", options.scenario.name, None))
    try:
        logged = Monitor(options, export).run(ready)
    except ProxyStartError as error:
        raise proxy_start_problem(error) from None
    finally:
        close_export(export)
    print(f"faultproxy monitor: {logged} episode(s) judged and logged; faultproxy report {options.out}", flush=True)
    return 0


def monitor_options(args: argparse.Namespace) -> MonitorOptions:
    """MonitorOptions from the command line; UsageError or the loaders' errors (exit 2) on bad input."""
    try:
        rules = tuple(EpisodeRule.parse(text) for text in args.episode_by)
    except ValueError as error:
        raise UsageError(f"--episode-by: {error}") from None
    if not 0 <= args.sample <= 1:
        raise UsageError(f"--sample must be 0 to 1, got {args.sample:g}")
    if not args.idle_s > 0:
        raise UsageError(f"--idle-s must be positive, got {args.idle_s:g}")
    low, high = MAX_EPISODES_RANGE
    if not low <= args.max_episodes <= high:
        raise UsageError(f"--max-episodes must be {low} to {high}, got {args.max_episodes}")
    token = proxy_token(args)
    return MonitorOptions(
        out=args.out, policy=load_policy(args.policy), scenario=load_scenario(args.scenario, proxy_params(args)),
        episode_by=rules, idle_s=args.idle_s, sample=args.sample, max_episodes=args.max_episodes, host=args.host,
        port=args.port, reverse_port=args.reverse_port, upstreams=parse_upstreams(args.upstream),
        upstream_ca=check_upstream_ca(args.upstream_ca, args.insecure_upstream), insecure_upstream=args.insecure_upstream,
        secret_env=check_secret_env(args.secret_env), side_channels=check_side_channels(args.side_channel),
        token=token, show_live=not args.quiet,
    )
