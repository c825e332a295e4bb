"""Command-line options shared by several commands, and turning them into library values."""

from __future__ import annotations

import argparse
import os
import re
import ssl
import sys
from pathlib import Path
from urllib.parse import urlsplit

from faultproxy.cli.evaluate import add_design_options, gate_options
from faultproxy.evaluator.gate import MAX_K, MIN_K, Design
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option
from faultproxy.formats.rundir import run_digest
from faultproxy.proxy.auth import check_token, is_loopback, new_token
from faultproxy.runner import (CHAT_HELP, MODEL_TEMPLATE, GridPoint, RunOptions, chat_mode, load_variant_function,
                               parse_pairs, reverse_variables)
from faultproxy.scenarios import Scenario, parse_params
from faultproxy.tasks.budget_block import MAX_WALL_S
from faultproxy.tasks.tasks_file import TaskError, load_tasks, single_task
from faultproxy.tasks.side_channel import SideChannel

# Documented ranges of the numbers a run takes (docs/reliability.md, `--help`); anything outside is refused.
K_RANGE = (1, 10_000)
PARALLEL_RANGE = (1, 256)
BUDGET_S_MAX = MAX_WALL_S  # a day per episode
TOKEN_ENV = "FAULTPROXY_TOKEN"
REVERSE_HELP = ("Reverse mode for a client that takes its API's address from VAR (OPENAI_BASE_URL, ...; repeatable): "
                "the agent's VAR leads to the proxy, which forwards to --upstream NAME=URL when given (NAME: VAR "
                "without _BASE_URL, lower case), else to VAR's value here, else to the provider's default. For "
                "clients that ignore HTTP(S)_PROXY (docs/agents.md).")
_UPSTREAM_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def add_run_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by `run` and `sweep`: what to run, how, and where to log it."""
    parser.add_argument("--scenario", required=True, help="Scenario file, or the name of a bundled one.")
    parser.add_argument("--tasks", type=Path, help="Tasks file (YAML or JSON Lines); without it CMD is one task.")
    parser.add_argument("--only", metavar="IDS", help="Comma-separated task ids: run just these.")
    parser.add_argument("--k", type=int, default=1,
                        help=f"Trials (honest variants) per task, {K_RANGE[0]} to {K_RANGE[1]:,} (default 1).")
    parser.add_argument("--parallel", type=int, default=1,
                        help=f"Episodes at once, through one proxy, {PARALLEL_RANGE[0]} to {PARALLEL_RANGE[1]} (default 1).")
    parser.add_argument("--out", type=folder_option, help="Run directory (default under runs/); rerun to resume.")
    parser.add_argument("--budget-s", type=float,
                        help=f"Wall-time budget per episode, seconds: more than 0, at most {BUDGET_S_MAX:g}.")
    parser.add_argument("--no-proxy", default="", metavar="HOSTS", help="Comma-separated hosts the agent reaches directly.")
    parser.add_argument("--variants", metavar="MODULE:FUNCTION", help="Your own variant function.")
    parser.add_argument("--rewrite", action="append", default=[], metavar="FIELD=TEMPLATE",
                        help="Make the proxy set FIELD in every model API request (repeatable), for agents that "
                             "do not read FAULTPROXY_*: model (every API), reasoning_effort (OpenAI chat "
                             "completions), reasoning.effort (OpenAI responses), thinking.budget_tokens (Anthropic "
                             "messages). TEMPLATE may use {model}, {PARAM} (a swept param's level) and "
                             "{PARAM:LEVEL=VALUE,...}, e.g. reasoning_effort={effort}.")
    parser.add_argument("--reverse", action="append", default=[], metavar="VAR", help=REVERSE_HELP)
    parser.add_argument("--allow-unexercised", action="store_true",
                        help="Exit 0 even when faults could fire and none reached the agent in any episode.")
    parser.add_argument("--allow-incomplete", action="store_true",
                        help="Exit 0 even when some planned episodes could not be judged by the harness "
                             "(infrastructure error, failed reset, lost worker, agent not started, not run); "
                             "the counts by cause are still printed.")
    parser.add_argument("--rewrite-model", action="store_true",
                        help="Short for --rewrite model={model}: ask the episode's model (--model, --models).")
    add_side_channel_option(parser)
    add_proxy_options(parser)
    add_executor_options(parser)
    add_sequential_options(parser)
    parser.add_argument("--chat", metavar="MODE", help=CHAT_HELP)
    parser.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- CMD...", help="The agent command.")


def add_proxy_options(parser: argparse.ArgumentParser) -> None:
    """Options shared by every command that starts a proxy."""
    parser.add_argument("--upstream", action="append", default=[], metavar="NAME=URL",
                        help="Reverse-mode upstream, NAME=http(s)://HOST[:PORT][/PATH] (NAME: letters, digits, _ "
                             "and -); clients use http://HOST:PORT/EPISODE/NAME as base URL.")
    parser.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                        help="Redact the value of this environment variable from everything written.")
    parser.add_argument("--insecure-upstream", action="store_true",
                        help="Do not verify upstream TLS at all (anyone on the path can answer as the upstream).")
    parser.add_argument("--upstream-ca", type=Path, metavar="FILE",
                        help="Also trust this PEM certificate (a private CA, a self-signed upstream) for upstream "
                             "TLS, in the proxy and for reset_url/state_url; added to the system roots.")
    parser.add_argument("--log-json", action="store_true", help="Log one JSON object per line.")


def add_side_channel_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--side-channel", action="append", default=[], metavar="[METHOD ]HOST[/PATH]",
                        help="Requests the task does not depend on (telemetry, price lists): when they fail, the "
                             "verdict stands. Any other failed request makes the episode incomplete. HOST and "
                             "PATH are globs; repeatable.")


def check_side_channels(texts: list[str]) -> list[str]:
    """--side-channel patterns, each readable (tasks.side_channel), or UsageError naming the bad one."""
    for text in texts:
        try:
            SideChannel.parse(text)
        except ValueError as error:
            raise UsageError(f"--side-channel: {error}") from None
    return texts


def add_listen_options(parser: argparse.ArgumentParser) -> None:
    """Where a proxy command listens and whether it checks a token (`proxy`, `monitor`)."""
    parser.add_argument("--host", default="127.0.0.1",
                        help="Address to listen on (default: loopback only; any other needs --allow-remote and --auth).")
    parser.add_argument("--auth", action="store_true",
                        help=f"Require the proxy token (EPISODE:TOKEN): ${TOKEN_ENV} if set, else a random one, printed.")
    parser.add_argument("--allow-remote", action="store_true",
                        help="Allow a --host other than loopback (with --auth): other machines may then use the proxy.")
    parser.add_argument("--port", type=int, default=8080, help="Forward-proxy port (0: any free port).")
    parser.add_argument("--reverse-port", type=int, default=0, help="Reverse-mode port, used with --upstream.")


def proxy_token(args: argparse.Namespace) -> str | None:
    """The token a proxy command demands, if any (checking its ports); a host beyond loopback demands one."""
    for option, port in (("--port", args.port), ("--reverse-port", args.reverse_port)):
        if not 0 <= port <= 65535:
            raise UsageError(f"{option} must be 0 (any free port) to 65535, got {port}")
    if not is_loopback(args.host):
        if not args.allow_remote:
            raise UsageError(f"--host {args.host} is not loopback: anyone who reaches it could use the proxy, also "
                             "to reach this machine's loopback services; add --allow-remote and --auth")
        if not args.auth:
            raise UsageError(f"--host {args.host} needs --auth: a proxy other machines reach must check a token")
    if not args.auth:
        return None
    chosen = os.environ.get(TOKEN_ENV)
    return check_token(chosen, f"${TOKEN_ENV}") if chosen else new_token()


def add_executor_options(parser: argparse.ArgumentParser) -> None:
    """Where episodes run (`run` and `sweep`); executor_options(args) hands the choice to RunOptions."""
    parser.add_argument("--executor", choices=("local", "dask"), default="local",
                        help="local: agent processes on this machine (default); dask: on a Dask cluster, each worker "
                             "behind its own proxy (episodes at once = the workers' threads; --parallel is unused).")
    parser.add_argument("--scheduler", metavar="tcp://HOST:PORT",
                        help="The Dask scheduler for --executor dask (default: $DASK_SCHEDULER_ADDRESS).")


def add_sequential_options(parser: argparse.ArgumentParser) -> None:
    """`--until-decided --baseline DIR`: trials in rounds until the gate decides (docs/gate.md)."""
    group = parser.add_argument_group("sequential gate", "Add trials in rounds until the gate against --baseline "
                                      "says PASS or BLOCK; exit with its status (0 PASS, 1 BLOCK, 3 INCONCLUSIVE "
                                      "at --max-k, 4 ERROR). The design is sealed in plan.json.")
    group.add_argument("--until-decided", action="store_true", help="Run rounds of trials until the gate decides.")
    group.add_argument("--baseline", type=Path, metavar="BASELINE_DIR", help="The run to gate against.")
    group.add_argument("--min-k", type=int, metavar="K", help=f"Trials per task in the first round (default {MIN_K}).")
    group.add_argument("--max-k", type=int, metavar="K",
                       help=f"Trials per task at most; undecided there is INCONCLUSIVE (default {MAX_K}).")
    add_design_options(group)


def sequential_design(args: argparse.Namespace) -> Design | None:
    """The design --until-decided asks for (None without it); UsageError for options that do not fit."""
    given = [option for option, value in (("--baseline", args.baseline), ("--min-k", args.min_k),
                                          ("--max-k", args.max_k), ("--alpha", args.alpha),
                                          ("--margin", args.margin), ("--max-high", args.max_high)) if value is not None]
    if not args.until_decided:
        if given:
            raise UsageError(f"{given[0]} is for --until-decided (to gate a finished run: faultproxy gate)")
        return None
    if args.baseline is None:
        raise UsageError("--until-decided needs --baseline BASELINE_DIR, the run to gate against")
    if args.k != 1:
        raise UsageError("--until-decided chooses k itself: give --max-k (and --min-k) instead of --k")
    if args.allow_incomplete:
        raise UsageError("--allow-incomplete is not part of a sequential design: the gate answers ERROR for "
                         "episodes the harness could not judge")
    min_k, max_k = args.min_k or MIN_K, args.max_k or MAX_K
    _check_range("--min-k", min_k, *K_RANGE)
    _check_range("--max-k", max_k, min_k, K_RANGE[1])
    return Design(**gate_options(args), min_k=min_k, max_k=max_k, baseline_digest=run_digest(args.baseline))


def executor_options(args: argparse.Namespace) -> dict[str, str | None]:
    """RunOptions fields from add_executor_options' arguments."""
    executor, scheduler = getattr(args, "executor", "local"), getattr(args, "scheduler", None)
    if scheduler and executor != "dask":
        raise UsageError("--scheduler is for --executor dask")
    return {"executor": executor, "scheduler": scheduler}


def proxy_params(args: argparse.Namespace) -> dict[str, float]:
    try:
        return parse_params(args.param)
    except ValueError as error:
        raise UsageError(str(error)) from None


def parse_upstreams(specs: list[str]) -> dict[str, str]:
    """--upstream NAME=URL values, each NAME a simple identifier and URL http(s)://HOST[:PORT][/PATH]."""
    return check_upstreams(parse_pairs(specs, "--upstream", once=True))


def check_upstreams(upstreams: dict[str, str]) -> dict[str, str]:
    """Upstreams whose NAME is a simple identifier and URL http(s)://HOST[:PORT][/PATH], or UsageError."""
    for name, url in upstreams.items():
        if not _UPSTREAM_NAME.fullmatch(name):
            raise UsageError(f"--upstream {name}={url}: NAME must be letters, digits, '_' and '-' "
                             "(it becomes a path segment and a variable name)")
        try:
            parts = urlsplit(url)
            parts.port  # noqa: B018 — raises ValueError for a port that is not a number in range
        except ValueError as error:
            raise UsageError(f"--upstream {name}={url}: {error}") from None
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UsageError(f"--upstream {name}={url}: URL must be http(s)://HOST[:PORT][/PATH]")
    return upstreams


def check_upstream_ca(path: Path | None, insecure: bool = False) -> Path | None:
    """--upstream-ca FILE: a readable file of PEM certificates, or one clear line. With
    --insecure-upstream (nothing verified) a CA to verify with is a contradiction: refused."""
    if path is None:
        return None
    if insecure:
        raise UsageError(f"--upstream-ca {path} and --insecure-upstream contradict each other: the first verifies "
                         "upstream TLS with that CA, the second verifies nothing; give one")
    try:
        ssl.create_default_context().load_verify_locations(cafile=str(path))
    except (OSError, ssl.SSLError) as error:
        raise UsageError(f"--upstream-ca {path}: not a readable PEM certificate file "
                         f"({getattr(error, 'strerror', None) or error})") from None
    return path


def check_secret_env(names: list[str]) -> list[str]:
    """--secret-env names: each must be set, or there is nothing to redact (a typo, most likely)."""
    unset = [name for name in names if not os.environ.get(name)]
    if unset:
        raise UsageError(f"--secret-env {unset[0]}: no such variable is set here, so there is nothing to redact")
    return names


def check_budget_s(value: float | None) -> float | None:
    """--budget-s: more than 0 seconds, at most a day (or not given)."""
    if value is not None:
        _check_range("--budget-s", value, 0, BUDGET_S_MAX, low_open=True)
    return value


def _only_ids(text: str) -> list[str]:
    ids = [i.strip() for i in text.split(",") if i.strip()]
    if not ids:
        raise UsageError(f"--only {text!r} names no task: give task ids separated by commas, or leave it out")
    return ids


def _check_range(option: str, value: float, low: float, high: float, low_open: bool = False) -> None:
    if not (low < value <= high if low_open else low <= value <= high):
        least = f"more than {low:g}" if low_open else f"{low:g}"
        shown = value if isinstance(value, int) else f"{value:g}"
        raise UsageError(f"{option} must be {least} to {high:,g}, got {shown}")


def agent_command(remainder: list[str]) -> list[str]:
    command = remainder[1:] if remainder[:1] == ["--"] else remainder
    if not command:
        raise UsageError("no agent command: put it after --, e.g. faultproxy run --scenario S -- python agent.py")
    return command


def run_options(args: argparse.Namespace, scenario: Scenario, grid: list[GridPoint], default_out: Path) -> RunOptions:
    """RunOptions from the arguments add_run_options declared; bad input raises UsageError."""
    command = agent_command(args.agent)
    _check_range("--k", args.k, *K_RANGE)
    _check_range("--parallel", args.parallel, *PARALLEL_RANGE)
    check_budget_s(args.budget_s)
    try:
        tasks = load_tasks(args.tasks) if args.tasks else single_task(" ".join(command))
        if args.only is not None:
            tasks = tasks.only(_only_ids(args.only))
        variant_function = load_variant_function(args.variants) if args.variants else None
    except (TaskError, ValueError) as error:
        raise UsageError(str(error)) from None
    upstreams, base_url_env = reverse_variables(args.reverse, os.environ, parse_upstreams(args.upstream))
    return RunOptions(
        scenario=scenario, tasks=tasks, command=command, out=args.out or default_out, k=args.k, grid=grid,
        parallel=args.parallel, budget_s=args.budget_s, upstreams=check_upstreams(upstreams),
        base_url_env=base_url_env,
        no_proxy=[h for h in args.no_proxy.split(",") if h], variant_function=variant_function,
        side_channels=check_side_channels(args.side_channel),
        secret_env=check_secret_env(args.secret_env), insecure_upstream=args.insecure_upstream,
        upstream_ca=check_upstream_ca(args.upstream_ca, args.insecure_upstream), show_progress=sys.stderr.isatty(),
        rewrites=parse_pairs(args.rewrite + ([f"model={MODEL_TEMPLATE}"] if args.rewrite_model else []), "--rewrite",
                             once=True),
        chat=chat_mode(args.chat, tasks),
        **executor_options(args),
    )
