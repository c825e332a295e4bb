"""The `faultproxy` command: every command's parser and the commands of its own (check, ca, proxy,
run). cli/entry.py is the entry point; it starts report, gate and scan without this module."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from faultproxy.cli import action, evaluate, init, mcp, monitor, otel, replay, scan, sweep
from faultproxy.cli.dispatch import dispatch, new_parser
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
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option, refuse_links_out
from faultproxy.formats.redact import Redactor
from faultproxy.proxy.ca import ca_bundle
from faultproxy.proxy.server import ProxyServer, ProxyStartError
from faultproxy.scenarios import load_scenario


def main(argv: Sequence[str] | None = None) -> int:
    return dispatch(build_parser(), argv)


def build_parser() -> argparse.ArgumentParser:
    parser, commands = new_parser()

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
    init.register(commands)
    mcp.register(commands)
    monitor.register(commands)
    otel.register(commands)
    action.register(commands)
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
    refuse_links_out(args.trace_dir, "trace folder")  # traces are appended: never through a link out of it
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
        print("  Ctrl-C or SIGTERM stops (lines on their way to the traces are written first).", flush=True)
        stop = threading.Event()
        signal.signal(signal.SIGTERM, lambda *_: stop.set())
        stop.wait()
    finally:
        server.stop()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
