"""`faultproxy freeze`, `faultproxy replay` and `faultproxy minimize`.

    faultproxy freeze runs/response_lost --failing --to replay_store/
    faultproxy replay replay_store/ -- python agent.py          # exit 0: every entry as expected
    faultproxy minimize replay_store/ENTRY -- python agent.py

faultproxy/cli/main.py calls `register(commands)`.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

from faultproxy.cli.evaluate import add_markdown_option
from faultproxy.cli.options import check_budget_s, parse_pairs, parse_upstreams
from faultproxy.cli.otel import add_otlp_options, close_export, open_export, run_attributes
from faultproxy.evaluator.rendering import replay_markdown, write_markdown
from faultproxy.formats.redact import Redactor
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option
from faultproxy.replay_store import entry_writer, har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.minimize import minimize
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner import Replayer

EXIT_MISMATCH = 1


def register(commands) -> None:
    freeze = commands.add_parser(
        "freeze", help="Write episodes of a run as replay store entries.",
        description="Write episodes of a run directory as replay store entries (episode.json + flows.har).")
    freeze.set_defaults(handler=cmd_freeze)
    freeze.add_argument("run_dir", type=Path, metavar="RUN_DIR")
    freeze.add_argument("--failing", action="store_true", help="Only the episodes judged fail.")
    freeze.add_argument("--representatives", action="store_true",
                        help="One entry per failure cause (its representative episode), named after the cause; "
                             "causes the store already has are not frozen again.")
    freeze.add_argument("--episode", action="append", default=[], metavar="KEY", help="Only this episode (repeatable).")
    freeze.add_argument("--to", type=folder_option, default=Path("replay_store"), metavar="DIR",
                        help="The store (default replay_store/).")
    freeze.add_argument("--expect", choices=("pass", "fail"),
                        help="What replay must show (default: the episode's verdict).")
    freeze.add_argument("--env", action="append", default=[], metavar="NAME[=VALUE]",
                        help="A variable the agent needs at replay time, stored in the entry "
                             "(without a value: from this environment). Never a secret.")
    freeze.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                        help="Redact this variable's value from the entry too.")

    replay = commands.add_parser(
        "replay", help="Replay store entries with no network: exit 0 when each shows what it expects.",
        description="Run the agent against frozen episodes: the proxy serves the recorded upstream responses, "
                    "re-applies the recorded faults and opens no upstream connection.")
    replay.set_defaults(handler=cmd_replay, flags=_replay_flags)
    replay.add_argument("store", type=Path, metavar="STORE_OR_ENTRY")
    _replay_flags(replay)
    replay.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- CMD...",
                        help="The agent command (default: each entry's own).")

    minimize = commands.add_parser(
        "minimize", help="Shrink an entry's faults to the fewest that still reproduce its failure (ddmin).",
        description="Delta debugging over the entry's injected faults, by replay; writes minimal_faults "
                    "into its episode.json.")
    minimize.set_defaults(handler=cmd_minimize, flags=_minimize_flags)
    minimize.add_argument("entry", type=Path, metavar="ENTRY")
    _minimize_flags(minimize)
    minimize.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- CMD...",
                          help="The agent command (default: the entry's own).")


def _replay_flags(parser: argparse.ArgumentParser) -> None:
    _replay_options(parser)
    parser.add_argument("--parallel", type=int, default=1, help="Entries replayed at once (default 1).")
    parser.add_argument("--repeat", type=int, default=1, help="Replay each entry N times (flakiness check).")
    parser.add_argument("--accept", action="store_true",
                        help="Set each entry's expectation to what its replay showed (after fixing the agent).")
    parser.add_argument("--json", type=Path, metavar="FILE", help="Also write the results as JSON.")
    add_markdown_option(parser)
    add_otlp_options(parser)


def _minimize_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--check", action="append", default=[], metavar="NAME",
                        help="The failed check(s) that must reproduce (default: the entry's expect_failed).")
    parser.add_argument("--dry-run", action="store_true", help="Do not write the result into the entry.")
    _replay_options(parser)


def _replay_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--env", action="append", default=[], metavar="NAME=VALUE",
                        help="Set a variable for the agent (over the entry's env).")
    parser.add_argument("--upstream", action="append", default=[], metavar="NAME=URL",
                        help="Reverse-mode upstream (default: those the entries were recorded with).")
    parser.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                        help="Redact this variable's value from replay traces.")
    parser.add_argument("--budget-s", type=float, help="Wall-time budget per replayed episode (default: the task's, else 300).")
    parser.add_argument("--out", type=folder_option, help="Keep replay traces and agent files here (default: a temporary folder).")
    parser.add_argument("--log-json", action="store_true", help="Log one JSON object per line.")


def _command(remainder: list[str]) -> list[str] | None:
    command = remainder[1:] if remainder[:1] == ["--"] else remainder
    return command or None


def _split_remainder(args: argparse.Namespace) -> None:
    """argparse's REMAINDER takes everything after the positional, options included
    (`replay STORE --parallel 2 -- CMD`): parse what comes before `--` as options again. The
    first `--` here is the one cli.dispatch.split_command put before the command, verbatim after it."""
    if not args.agent or args.agent[0] == "--":
        return
    if "--" in args.agent:
        cut = args.agent.index("--")
        options, args.agent = args.agent[:cut], args.agent[cut:]
    elif args.agent[0].startswith("-"):
        options, args.agent = args.agent, []
    else:
        return
    flags = argparse.ArgumentParser(prog=f"faultproxy {args.command}", add_help=False)
    args.flags(flags)
    for name, value in vars(flags.parse_args(options)).items():
        default = flags.get_default(name)
        if value != default:
            setattr(args, name, getattr(args, name) + value if isinstance(default, list) else value)


def _options(args: argparse.Namespace):

    return ReplayOptions(command=_command(args.agent), env=parse_pairs(args.env, "--env"), out=args.out,
                         upstreams=parse_upstreams(args.upstream), secret_env=args.secret_env,
                         budget_s=check_budget_s(args.budget_s), parallel=max(1, getattr(args, "parallel", 1)))


# --- freeze ----------------------------------------------------------------------------------------


def cmd_freeze(args: argparse.Namespace) -> int:

    env: dict[str, str | None] = {}
    for spec in args.env:
        name, sep, value = spec.partition("=")
        if not name:
            raise UsageError(f"--env {spec!r} is not NAME or NAME=VALUE")
        env[name] = value if sep else None
    frozen = freeze(args.run_dir, args.to, failing=args.failing, representatives=args.representatives,
                    episodes=args.episode, expect=args.expect, env=env, secret_env=args.secret_env)
    new = [entry for entry in frozen if entry.new]
    for entry in new:
        failed = f" ({', '.join(entry.expect_failed)})" if entry.expect_failed else ""
        print(f"{entry.path}: {entry.key}, expect {entry.expect}{failed}")
        if entry.cause:
            print(f"  cause ({entry.cause['episodes']} episode(s); {', '.join(entry.cause['tasks'])}): "
                  f"{entry.cause['line']}")
        for warning in entry.warnings:
            print(f"  warning: {warning}")
    known = len(frozen) - len(new)
    print(f"{len(new)} episode(s) frozen into {args.to}/"
          + (f"; {known} cause(s) already in the store" if known else ""))
    return 0


# --- replay ----------------------------------------------------------------------------------------


def cmd_replay(args: argparse.Namespace) -> int:

    _split_remainder(args)
    if args.parallel < 1 or args.repeat < 1:
        raise UsageError("--parallel and --repeat must be at least 1")
    if args.json and args.json.is_dir():
        raise UsageError(f"--json {args.json}: is a folder; give the name of a file to write")
    entries = har.read_entries(args.store)
    if not entries:
        raise UsageError(f"{args.store}: no entries (folders with {har.EPISODE_FILE})")
    options = _options(args)
    export = open_export(args, Redactor.from_env(args.secret_env), run_attributes("replay", None, None))
    try:
        with Replayer(options, entries, export) as replayer:
            results = replayer.replay_all(entries, options.command, repeat=args.repeat)
    finally:
        close_export(export)
    if args.markdown:
        write_markdown(args.markdown, replay_markdown([r.to_json() for r in results]),
                       Redactor.from_env(args.secret_env))
    # with the summary alone on stdout (--markdown), the table goes to stderr
    with contextlib.redirect_stdout(sys.stderr) if args.markdown == "-" else contextlib.nullcontext():
        print_results(results)
        if args.json:
            args.json.write_text(json.dumps([r.to_json() for r in results], indent=2))
        if args.accept:
            return accept(results)
        if args.out:
            print(f"traces: {args.out}/flows/")
    return 0 if all(r.meets_expectation for r in results) else EXIT_MISMATCH


def accept(results) -> int:
    """Make each entry expect what its replay showed (not for a diverged or incomplete replay)."""

    code = 0
    for result in results:
        if result.diverged or result.status == "incomplete" or result.blocked:
            print(f"{result.entry.name}: not accepted: {result.explain()}")
            code = EXIT_MISMATCH
        elif not result.meets_expectation:
            entry_writer.update_episode(result.entry.path, {"expect": result.status, "expect_failed": result.failed})
            print(f"{result.entry.name}: now expects {result.status}")
    return code


def print_results(results) -> None:
    rows = [("entry", "expect", "replay", "failed checks", "requests served", "result")]
    for r in results:
        expect = r.entry.expect + (f" ({','.join(r.entry.expect_failed)})" if r.entry.expect_failed else "")
        how = [s["how"] for s in r.served]
        loose = [f"{how.count(kind)} {label}" for kind, label in (("endpoint", "by endpoint"), ("repeat", "repeated"))
                 if kind in how]
        served = f"{len(r.served)}" + (f" ({', '.join(loose)})" if loose else "") \
            + (f", {len(r.diverged)} diverged" if r.diverged else "")
        rows.append((r.entry.name, expect, r.status, ",".join(r.failed) or "-", served,
                     "ok" if r.meets_expectation else "MISMATCH"))
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip())
    for r in results:
        why = r.explain()
        if why:
            print(f"\n{r.entry.name} ({r.entry.title}): {why}")
            for d in r.diverged[:10]:
                print(f"  not recorded: #{d['seq']} {d['method']} {d['url']}: {d['why']}")
            for check in r.verdict["failed"]:
                print(f"  failed {check['name']} [{check['severity']}]: {check['detail']}")
            if not r.diverged and r.status in ("pass", "fail") and not r.blocked:
                print("  if the agent changed on purpose, `faultproxy replay --accept` records what replay shows now")
    ok = sum(r.meets_expectation for r in results)
    refused = sum(len(r.blocked) for r in results)
    print(f"\n{ok}/{len(results)} replay(s) as expected; upstream connections attempted: {refused} (none opened)")


# --- minimize --------------------------------------------------------------------------------------


def cmd_minimize(args: argparse.Namespace) -> int:

    _split_remainder(args)
    entry = har.read_entry(args.entry) if har.is_entry(args.entry) else None
    if entry is None:
        raise UsageError(f"{args.entry}: not a store entry (a folder with {har.EPISODE_FILE})")
    options = _options(args)

    def progress(trial) -> None:
        faults = ", ".join(f"{rule}#{index}" for rule, index in trial.faults) or "no faults"
        verdict = "reproduces" if trial.reproduced else "does not reproduce"
        extra = f", {trial.diverged} diverged" if trial.diverged else ""
        print(f"  trial {faults}: {trial.status} ({','.join(trial.failed) or '-'}{extra}) -> {verdict}", flush=True)

    print(f"{entry.name}: {len(entry.fired)} fault(s) fired; minimizing for {', '.join(args.check or entry.expect_failed)}")
    with Replayer(options, [entry]) as replayer:
        result = minimize(entry, lambda e, forced: replayer.replay(e, options.command, forced=forced), args.check,
                          progress, write=not args.dry_run)
    minimal = ", ".join(f"{d.rule}#{d.index} ({d.type}, exchange {d.seq})" for d in result.minimal) or "none"
    print(f"minimal faults ({len(result.minimal)} of {len(result.fired)}, {len(result.trials)} trials): {minimal}")
    if not args.dry_run:
        print(f"written to {entry.path / har.EPISODE_FILE} (minimal_faults)")
    return 0
