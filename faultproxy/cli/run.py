"""`faultproxy run` (and `sweep`): turn command-line arguments into a run, and say how it went.

The exit status is one a CI job can trust. A run with any planned episode the harness could not
judge (incomplete with a harness cause, or never run) exits 1, its last line the counts by cause,
unless --allow-incomplete; an agent that crashed or overran its budget was judged (fail) and
does not count here. A run whose faults could fire but never reached the agent tested nothing:
it says so and exits 1 (unless --allow-unexercised)."""

from __future__ import annotations

import argparse
import errno
import os
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from faultproxy.cli.evaluate_commands import print_gate
from faultproxy.cli.options import proxy_params, run_options, sequential_design
from faultproxy.cli.otel import close_export, open_export, run_attributes
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.gate import Design, evaluate_sequential
from faultproxy.formats.errors import UsageError
from faultproxy.formats.files import LineFile
from faultproxy.formats.logs import configure_logging
from faultproxy.proxy.server import ProxyStartError
from faultproxy.runner import (GridPoint, RunOptions, RunResult, resume_command, run, run_redactor, run_until_decided,
                               sequential_options)
from faultproxy.scenarios import load_scenario


def run_and_tell(options: RunOptions, args: argparse.Namespace, mode: str = "run",
                 baseline: Path | None = None) -> RunResult:
    """Run with fault events logged to the run directory (the terminal has the progress bar), and
    each episode exported as OpenTelemetry spans when `args` ask for it (--otlp, OTEL_* variables).
    With `baseline`, in the rounds of run_until_decided (options from sequential_options)."""
    log_file = options.out / "faultproxy.log"
    try:
        options.out.mkdir(parents=True, exist_ok=True)
        configure_logging(json_lines=True, file=LineFile(log_file), redactor=run_redactor(options))
    except OSError as error:
        raise UsageError(f"--out {options.out}: cannot write the run directory there "
                         f"({error.strerror or error})") from None
    export = open_export(args, run_redactor(options), run_attributes(mode, options.scenario.name, options.command))
    try:
        result = (run(options, export=export) if baseline is None
                  else run_until_decided(options, baseline, export=export))
    except ProxyStartError as error:
        raise proxy_start_problem(error) from None
    finally:
        close_export(export)
    if result.errors:
        more = f" (and {len(result.errors) - 1} more; see {log_file})" if len(result.errors) > 1 else ""
        print(f"not run, will run on resume: {result.errors[0]}{more}", file=sys.stderr)
    print(f"{options.out}: {result.logged}/{result.planned} episodes logged "
          f"({result.counts['pass']} pass, {result.counts['fail']} fail, {result.counts['incomplete']} incomplete)")
    if result.interrupted:
        print(f"interrupted; resume with: {resume_command()}")
    return result


def judged_status(options: RunOptions, allow_unexercised: bool, allow_incomplete: bool) -> int:
    """Print the report headline's alerts; 1 when faults could fire and none reached the agent
    (unless allowed) or when episodes could not be judged (incomplete_status), else 0."""
    run = build_report(options.out, causes=False, drilldown_limit=0)["run"]
    return max(alerts_status(options, allow_unexercised, run), incomplete_status(run, allow_incomplete))


def alerts_status(options: RunOptions, allow_unexercised: bool, run: Mapping[str, Any] | None = None) -> int:
    """Print the report headline's alerts (of `run`, the report's run scope, read when not given);
    1 when faults could fire and none reached the agent (unless allowed), else 0."""
    run = run or build_report(options.out, causes=False, drilldown_limit=0)["run"]
    headline, logged = run["headline"], run["logged"]
    for alert in headline["alerts"]:
        print(f"warning: {alert}", file=sys.stderr)
    if logged and headline["infra_errors"] == logged:
        print(f"no episode could be judged: all {logged} hit infrastructure errors on the task's path "
              "(the first, and what to do about it: above)", file=sys.stderr)
    status = 0
    unexercised = any(alert.startswith("faults not exercised") for alert in headline["alerts"])
    if unexercised and not allow_unexercised:
        print("the scenario's faults never reached the agent (why: see above; --allow-unexercised to accept)",
              file=sys.stderr)
        status = 1
    return status


def incomplete_status(scope: Mapping[str, Any], allow_incomplete: bool) -> int:
    """1, with the counts by cause as the last line printed, when some planned episode of a report
    scope (evaluator.aggregate.sections) was not judged; 0 when all were, or with --allow-incomplete."""
    causes = scope["incomplete_by_cause"]
    if not causes:
        return 0
    counts = ", ".join(f"{cause} {n}" for cause, n in causes.items())
    line = f"{sum(causes.values())} of {scope['planned']} planned episode(s) not judged by the harness: {counts}"
    sys.stdout.flush()  # the counts stay the last line when both streams go to one log
    if allow_incomplete:
        print(f"{line} (allowed: --allow-incomplete)", file=sys.stderr)
        return 0
    print(f"{line}; exit 1 (--allow-incomplete to accept)", file=sys.stderr)
    return 1


def proxy_start_problem(error: ProxyStartError) -> UsageError:
    """The proxy did not start: say why, and suggest another port only when the port was the problem."""
    text = str(error)  # the listening error's text is all the proxy passes on
    port_problem = any(f"[Errno {number}]" in text or os.strerror(number).lower() in text.lower()
                       for number in (errno.EADDRINUSE, errno.EACCES))
    return UsageError(f"{text}; choose another port" if port_problem else text)


def run_command(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, proxy_params(args))
    options = run_options(args, scenario, [GridPoint(model=args.model)], Path("runs") / scenario.name)
    design = sequential_design(args)
    if design is not None:
        return run_sequential(options, args, design, lambda: alerts_status(options, args.allow_unexercised))
    if run_and_tell(options, args).interrupted:
        return 130
    return judged_status(options, args.allow_unexercised, args.allow_incomplete)


def run_sequential(options: RunOptions, args: argparse.Namespace, design: Design,
                   afterwards: Callable[[], int], mode: str = "run") -> int:
    """Rounds until the gate decides, the command's own checks (`afterwards`: its status counts
    only when the gate passes), then the gate's lines and status (130 when interrupted). The
    gate answers for the episodes the harness could not judge (ERROR); trials past the round it
    stopped at were not needed, so they are not 'not run'."""
    options = sequential_options(options, design, args.baseline)
    if run_and_tell(options, args, mode, args.baseline).interrupted:
        return 130
    own = afterwards()
    result = evaluate_sequential(options.out, args.baseline, design).result
    code = result.exit_code()
    print_gate(result, options.out, args.baseline, code)
    return code or own
