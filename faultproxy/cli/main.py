"""The `faultproxy` command."""

from __future__ import annotations

import argparse
import os
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from faultproxy.cli import evaluate, mcp, monitor, otel, replay, scan, sweep
from faultproxy.cli.options import (
    add_listen_options,
    add_proxy_options,
    add_run_options,
    check_secret_env,
    check_upstream_ca,
    parse_upstreams,
    proxy_params,
    proxy_token,
)
from faultproxy.cli.run import proxy_start_problem, run_command
from faultproxy.formats.errors import UsageError, UserError
from faultproxy.formats.logs import configure_logging
from faultproxy.formats.paths import folder_option
from faultproxy.formats.redact import Redactor
from faultproxy.proxy.ca import ca_bundle
from faultproxy.proxy.server import ProxyServer, ProxyStartError
from faultproxy.scenarios import load_scenario

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    options, command = split_command(sys.argv[1:] if argv is None else list(argv))
    args = parser.parse_args(options)
    if command is not None:
        _take_command(parser, args, command)
    configure_logging(json_lines=getattr(args, "log_json", False))
    try:
        return args.handler(args)
    except UserError as error:
        print(f"faultproxy: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def split_command(argv: list[str]) -> tuple[list[str], list[str] | None]:
    """faultproxy's own arguments, and the command after the first `--`, verbatim.

    An agent or server command may hold a `--` of its own (`python agent.py -- server ...`,
    `uv run -- ...`); argparse would read what follows it as faultproxy's options, so every
    command that takes one is cut off here, before argparse sees it."""
    if "--" not in argv:
        return argv, None
    cut = argv.index("--")
    return argv[:cut], argv[cut + 1:]


def _take_command(parser: argparse.ArgumentParser, args: argparse.Namespace, command: list[str]) -> None:
    dest = next((name for name in ("agent", "server") if hasattr(args, name)), None)
    if dest is None:
        parser.error(f"faultproxy {args.command} takes no command after --")
    # argparse's REMAINDER may already hold options that came after a positional (`replay
    # STORE --parallel 2`): they stay in front, for the command to parse again.
    setattr(args, dest, [*getattr(args, dest), "--", *command])


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faultproxy", description="Chaos proxy and reliability harness for AI agents.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = _command(commands, "check", cmd_check, "Validate scenario files.")
    check.add_argument("files", nargs="+", metavar="FILE")

    ca = _command(commands, "ca", cmd_ca, "Print the path of a CA bundle (system roots + faultproxy's CA) to trust.")
    ca.add_argument("--confdir", type=Path, help="Where the CA lives (default: $FAULTPROXY_HOME or ~/.faultproxy).")

    proxy = _command(commands, "proxy", cmd_proxy, "Run the chaos proxy in the foreground.")
    proxy.add_argument("--scenario", required=True, help="Scenario file, or the name of a bundled one.")
    add_listen_options(proxy)
    proxy.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="Override a scenario param.")
    add_proxy_options(proxy)
    proxy.add_argument("--trace-dir", type=folder_option, default=Path("runs/proxy/flows"), help="Where episode traces go.")

    run = _command(commands, "run", cmd_run, "Run an agent behind the proxy: tasks x k variants, one resumable log.")
    run.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="Override a scenario param.")
    run.add_argument("--model", help="Model name handed to the agent as FAULTPROXY_MODEL.")
    add_run_options(run)
    otel.add_otlp_options(run)

    evaluate.register(commands)
    sweep.register(commands)
    replay.register(commands)
    scan.register(commands)
    mcp.register(commands)
    monitor.register(commands)
    otel.register(commands)
    return parser


def _command(commands, name: str, handler: Callable[[argparse.Namespace], int], help_text: str) -> argparse.ArgumentParser:
    parser = commands.add_parser(name, help=help_text, description=help_text)
    parser.set_defaults(handler=handler)
    return parser


def cmd_check(args: argparse.Namespace) -> int:
    for file in args.files:
        scenario = load_scenario(file)
        print(f"{file}: ok ({scenario.name}: {len(scenario.rules)} rules, params {dict(scenario.params) or 'none'})")
    return 0


def cmd_ca(args: argparse.Namespace) -> int:
    print(ca_bundle(args.confdir))
    return 0


def cmd_proxy(args: argparse.Namespace) -> int:
    upstreams = parse_upstreams(args.upstream)
    token = proxy_token(args)
    scenario = load_scenario(args.scenario, proxy_params(args))
    Redactor.from_env(args.secret_env)  # a too-short secret: one clear line before the proxy starts
    server = ProxyServer(
        scenario, trace_dir=args.trace_dir, host=args.host, port=args.port, reverse_port=args.reverse_port,
        upstreams=upstreams, secret_env=check_secret_env(args.secret_env), ssl_insecure=args.insecure_upstream,
        token=token,
        upstream_ca=check_upstream_ca(args.upstream_ca, args.insecure_upstream),
    )
    try:
        server.start()
    except ProxyStartError as error:
        raise proxy_start_problem(error) from None
    try:
        print(f"faultproxy: scenario {scenario.name} ({len(scenario.rules)} rules), traces in {args.trace_dir}/")
        credentials = f"EPISODE:{token}" if token else "EPISODE:x"
        print(f"  forward proxy: HTTPS_PROXY=http://{credentials}@{args.host}:{server.port}  (trust {server.ca_bundle})")
        for name in upstreams:
            print(f"  {name}: base URL {server.reverse_url('default', name)}")
        print("  Ctrl-C stops.", flush=True)
        threading.Event().wait()
    finally:
        server.stop()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
