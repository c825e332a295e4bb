"""`faultproxy run`: turn command-line arguments into a run, and say how it went."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from evaluator.rundir import RunDirError
from proxy.cli import executor_options, parse_pairs, proxy_params
from proxy.errors import UsageError
from proxy.logs import configure_logging
from proxy.runner.plan import GridPoint
from proxy.runner.run import RunOptions, resume_command, run
from proxy.runner.tasks import TaskError, load_tasks, single_task
from proxy.runner.variants import load_variant_function
from scenarios import load_scenario


def agent_command(remainder: list[str]) -> list[str]:
    command = remainder[1:] if remainder[:1] == ["--"] else remainder
    if not command:
        raise UsageError("no agent command: put it after --, e.g. faultproxy run --scenario S -- python agent.py")
    return command


def run_command(args: argparse.Namespace) -> int:
    command = agent_command(args.agent)
    if args.k < 1 or args.parallel < 1:
        raise UsageError("--k and --parallel must be at least 1")
    scenario = load_scenario(args.scenario, proxy_params(args))
    try:
        tasks = load_tasks(args.tasks) if args.tasks else single_task(" ".join(command))
        if args.only:
            tasks = tasks.only(i for i in args.only.split(",") if i)
        variant_function = load_variant_function(args.variants) if args.variants else None
    except (TaskError, ValueError) as error:
        raise UsageError(str(error)) from None
    options = RunOptions(
        scenario=scenario, tasks=tasks, command=command, out=args.out or Path("runs") / scenario.name,
        k=args.k, grid=[GridPoint(model=args.model)], parallel=args.parallel, budget_s=args.budget_s,
        upstreams=parse_pairs(args.upstream, "--upstream"),
        no_proxy=[h for h in args.no_proxy.split(",") if h], variant_function=variant_function,
        secret_env=args.secret_env, insecure_upstream=args.insecure_upstream, show_progress=sys.stderr.isatty(),
        **executor_options(args),
    )
    options.out.mkdir(parents=True, exist_ok=True)
    configure_logging(json_lines=True, file=(options.out / "faultproxy.log").open("a"))  # the terminal has the progress bar
    try:
        result = run(options)
    except RunDirError as error:
        raise UsageError(str(error)) from None
    if result.errors:
        more = f" (and {len(result.errors) - 1} more; see {options.out / 'faultproxy.log'})" if len(result.errors) > 1 else ""
        print(f"not run, will run on resume: {result.errors[0]}{more}", file=sys.stderr)
    print(f"{options.out}: {result.logged}/{result.planned} episodes logged "
          f"({result.counts['pass']} pass, {result.counts['fail']} fail, {result.counts['incomplete']} incomplete)")
    if result.interrupted:
        print(f"interrupted; resume with: {resume_command()}")
        return 130
    return 0
