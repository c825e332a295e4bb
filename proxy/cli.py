"""The `faultproxy` command."""

from __future__ import annotations

import argparse
import sys
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from evaluator import commands as evaluator_commands
from proxy.ca import ca_bundle
from proxy.errors import UsageError
from proxy.injector import parse_params
from proxy.logs import configure_logging
from scenarios import load_scenario
from scenarios.reader import InputError

EXIT_BAD_INPUT = 2


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    configure_logging(json_lines=getattr(args, "log_json", False))
    try:
        return args.handler(args)
    except (InputError, UsageError, evaluator_commands.EvaluatorInputError) as error:
        print(f"faultproxy: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        return 130


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="faultproxy", description="Chaos proxy and reliability harness for AI agents.")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    check = _command(commands, "check", cmd_check, "Validate scenario files.")
    check.add_argument("files", nargs="+", metavar="FILE")

    ca = _command(commands, "ca", cmd_ca, "Print the path of a CA bundle (system roots + faultproxy's CA) to trust.")
    ca.add_argument("--confdir", type=Path, help="Where the CA lives (default: $FAULTPROXY_HOME or ~/.faultproxy).")

    proxy = _command(commands, "proxy", cmd_proxy, "Run the chaos proxy in the foreground.")
    proxy.add_argument("--scenario", required=True, help="Scenario file, or the name of a bundled one.")
    proxy.add_argument("--host", default="127.0.0.1", help="Address to listen on (default: loopback only).")
    proxy.add_argument("--port", type=int, default=8080, help="Forward-proxy port (0: any free port).")
    proxy.add_argument("--reverse-port", type=int, default=0, help="Reverse-mode port, used with --upstream.")
    proxy.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="Override a scenario param.")
    add_proxy_options(proxy)
    proxy.add_argument("--trace-dir", type=Path, default=Path("runs/proxy/flows"), help="Where episode traces go.")

    run = _command(commands, "run", cmd_run, "Run an agent behind the proxy: tasks x k variants, one resumable log.")
    run.add_argument("--param", action="append", default=[], metavar="NAME=VALUE", help="Override a scenario param.")
    run.add_argument("--model", help="Model name handed to the agent as FAULTPROXY_MODEL.")
    add_run_options(run)

    evaluator_commands.register(commands)
    from proxy.runner.sweep import register as register_sweep
    register_sweep(commands)
    from replay_store.commands import register as register_replay
    register_replay(commands)
    return parser


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `run` and `sweep`: what to run, how, and where to log it."""
    parser.add_argument("--scenario", required=True, help="Scenario file, or the name of a bundled one.")
    parser.add_argument("--tasks", type=Path, help="Tasks file (YAML or JSON Lines); without it CMD is one task.")
    parser.add_argument("--only", default="", metavar="IDS", help="Comma-separated task ids: run just these.")
    parser.add_argument("--k", type=int, default=1, help="Trials (honest variants) per task (default 1).")
    parser.add_argument("--parallel", type=int, default=1, help="Episodes at once, through one proxy (default 1).")
    parser.add_argument("--out", type=Path, help="Run directory (default under runs/); rerun to resume.")
    parser.add_argument("--budget-s", type=float, help="Wall-time budget per episode, seconds.")
    parser.add_argument("--no-proxy", default="", metavar="HOSTS", help="Comma-separated hosts the agent reaches directly.")
    parser.add_argument("--variants", metavar="MODULE:FUNCTION", help="Your own variant function.")
    parser.add_argument("--rewrite-model", action="store_true",
                        help="Make the proxy set the `model` of every model API request to the episode's model "
                             "(--model, --models), for agents that do not read FAULTPROXY_MODEL.")
    add_proxy_options(parser)
    add_executor_options(parser)
    parser.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- CMD...", help="The agent command.")


def add_proxy_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that starts a proxy."""
    parser.add_argument("--upstream", action="append", default=[], metavar="NAME=URL",
                        help="Reverse-mode upstream; clients use http://HOST:PORT/EPISODE/NAME as base URL.")
    parser.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                        help="Redact the value of this environment variable from everything written.")
    parser.add_argument("--insecure-upstream", action="store_true", help="Do not verify upstream TLS (tests only).")
    parser.add_argument("--log-json", action="store_true", help="Log one JSON object per line.")


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """Where episodes run (`run` and `sweep`); executor_options(args) hands the choice to RunOptions."""
    parser.add_argument("--executor", choices=("local", "dask"), default="local",
                        help="local: agent processes on this machine (default); dask: on a Dask cluster, each worker "
                             "behind its own proxy (episodes at once = the workers' threads; --parallel is unused).")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="The Dask scheduler for --executor dask (default: $DASK_SCHEDULER_ADDRESS).")


def executor_options(args: argparse.Namespace) -> dict[str, str | None]:
    """RunOptions fields from add_executor_options' arguments."""
    executor, scheduler = getattr(args, "executor", "local"), getattr(args, "scheduler", None)
    if scheduler and executor != "dask":
        raise UsageError("--scheduler is for --executor dask")
    return {"executor": executor, "scheduler": scheduler}


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


def parse_pairs(specs: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} {spec!r} is not NAME=VALUE")
        pairs[name] = value
    return pairs


def proxy_params(args: argparse.Namespace) -> dict[str, float]:
    try:
        return parse_params(args.param)
    except ValueError as error:
        raise UsageError(str(error)) from None


def cmd_proxy(args: argparse.Namespace) -> int:
    from proxy.server import ProxyServer, ProxyStartError

    upstreams = parse_pairs(args.upstream, "--upstream")
    scenario = load_scenario(args.scenario, proxy_params(args))
    server = ProxyServer(
        scenario, trace_dir=args.trace_dir, host=args.host, port=args.port, reverse_port=args.reverse_port,
        upstreams=upstreams, secret_env=args.secret_env, ssl_insecure=args.insecure_upstream,
    )
    try:
        server.start()
    except ProxyStartError as error:
        raise UsageError(f"{error}; choose another port") from None
    try:
        print(f"faultproxy: scenario {scenario.name} ({len(scenario.rules)} rules), traces in {args.trace_dir}/")
        print(f"  forward proxy: HTTPS_PROXY=http://EPISODE:x@{args.host}:{server.port}  (trust {server.ca_bundle})")
        for name in upstreams:
            print(f"  {name}: base URL {server.reverse_url('default', name)}")
        print("  Ctrl-C stops.", flush=True)
        threading.Event().wait()
    finally:
        server.stop()
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from proxy.runner.cli import run_command

    return run_command(args)


if __name__ == "__main__":
    sys.exit(main())
