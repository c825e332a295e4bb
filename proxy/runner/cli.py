"""`faultproxy run` (and `sweep`): turn command-line arguments into a run, and say how it went."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evaluator.rundir import RunDirError
from proxy.cli import executor_options, parse_pairs, proxy_params
from proxy.errors import UsageError
from proxy.logs import configure_logging
from proxy.runner.plan import GridPoint
from proxy.runner.run import RunOptions, RunResult, resume_command, run
from proxy.runner.tasks import TaskError, load_tasks, single_task
from proxy.runner.variants import load_variant_function
from scenarios import Scenario, load_scenario


def agent_command(remainder: list[str]) -> list[str]:
    command = remainder[1:] if remainder[:1] == ["--"] else remainder
    if not command:
        raise UsageError("no agent command: put it after --, e.g. faultproxy run --scenario S -- python agent.py")
    return command


def run_options(args: argparse.Namespace, scenario: Scenario, grid: list[GridPoint], default_out: Path) -> RunOptions:
    """RunOptions from the arguments add_run_options declared; bad input raises UsageError."""
    command = agent_command(args.agent)
    if args.k < 1 or args.parallel < 1:
        raise UsageError("--k and --parallel must be at least 1")
    if args.budget_s is not None and not args.budget_s > 0:
        raise UsageError("--budget-s must be a positive number of seconds")
    if args.rewrite_model and not any(point.model for point in grid):
        raise UsageError("--rewrite-model needs a model to ask for: --model (run) or --models (sweep)")
    try:
        tasks = load_tasks(args.tasks) if args.tasks else single_task(" ".join(command))
        if args.only:
            tasks = tasks.only(i for i in args.only.split(",") if i)
        variant_function = load_variant_function(args.variants) if args.variants else None
    except (TaskError, ValueError) as error:
        raise UsageError(str(error)) from None
    return RunOptions(
        scenario=scenario, tasks=tasks, command=command, out=args.out or default_out, k=args.k, grid=grid,
        parallel=args.parallel, budget_s=args.budget_s, upstreams=parse_pairs(args.upstream, "--upstream"),
        no_proxy=[h for h in args.no_proxy.split(",") if h], variant_function=variant_function,
        secret_env=args.secret_env, insecure_upstream=args.insecure_upstream, show_progress=sys.stderr.isatty(),
        rewrite_model=args.rewrite_model,
        **executor_options(args),
    )


def run_and_tell(options: RunOptions) -> RunResult:
    """Run with fault events logged to the run directory (the terminal has the progress bar)."""
    options.out.mkdir(parents=True, exist_ok=True)
    log_file = options.out / "faultproxy.log"
    configure_logging(json_lines=True, file=log_file.open("a"))
    try:
        result = run(options)
    except RunDirError as error:
        raise UsageError(str(error)) from None
    if result.errors:
        more = f" (and {len(result.errors) - 1} more; see {log_file})" if len(result.errors) > 1 else ""
        print(f"not run, will run on resume: {result.errors[0]}{more}", file=sys.stderr)
    print(f"{options.out}: {result.logged}/{result.planned} episodes logged "
          f"({result.counts['pass']} pass, {result.counts['fail']} fail, {result.counts['incomplete']} incomplete)")
    if result.interrupted:
        print(f"interrupted; resume with: {resume_command()}")
    return result


def run_command(args: argparse.Namespace) -> int:
    scenario = load_scenario(args.scenario, proxy_params(args))
    options = run_options(args, scenario, [GridPoint(model=args.model)], Path("runs") / scenario.name)
    return 130 if run_and_tell(options).interrupted else 0
