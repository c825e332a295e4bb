"""`faultproxy sweep` and `faultproxy sweep-report`: every combination of param levels (and models)
in one resumable run, then curves, the surface, the model matrix and the scenario's acceptance.

    faultproxy sweep --scenario S --param lambda=0,0.05,0.1,0.2 [--param epsilon=0,0.1] \\
        [--models a,b,c] --tasks F --k N --out DIR [--parallel N] [--budget-s S] -- CMD
    faultproxy sweep-report DIR

A sweep is `run(RunOptions(..., grid=build_grid(levels, models)))`: the runner's log rules hold
(trial-major across the whole grid, so a stopped sweep has run every grid point about equally
often; rerunning the same command resumes; a log of another plan is refused). Each episode gets
its grid point's params as a per-episode scenario version in the proxy, as
FAULTPROXY_PARAM_<NAME> and as {name} in CMD, and its model as FAULTPROXY_MODEL and {model}.

Bad input is one line and exit status 2, before anything runs: a level that is not a number, a
level that makes a rule's probability leave [0, 1] (found by loading the scenario at each level),
an epsilon outside [0, 1], a level or model given twice, an expect block that cannot be checked
on this grid. Exit status after a sweep: 0, or 1 when the scenario's expect block is violated
(or pending on a sweep not fully run), 130 when interrupted.

Imports of the runner (and so of mitmproxy) happen inside the handlers: registering the commands
costs the CLI nothing.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from proxy.errors import UsageError

EPSILON = "epsilon"


def register(commands: Any) -> None:
    """Add `sweep` and `sweep-report` to the faultproxy command's subparsers."""
    from proxy.cli import add_executor_options
    sweep = commands.add_parser(
        "sweep", help="Run an agent at every combination of param levels (and models): curves, surface, pass^M.",
        description="Run every combination of --param levels and --models as one resumable run, then report "
                    "per level the mean success (Wilson interval) and pass^k, the curve per param, the surface "
                    "of two params, the model matrix (pass@M, pass^M, disagreement) and the scenario's "
                    "expect: block. Exit 0; 1 when expect is violated; 2 on bad input; 130 when interrupted.")
    sweep.add_argument("--scenario", required=True, help="Scenario file, or the name of a bundled one.")
    sweep.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2,...",
                       help="Levels of a param (repeatable). A param no rule names is handed to the agent only "
                            "(FAULTPROXY_PARAM_<NAME>, {name} in CMD); epsilon is the proxy's perturbation rate.")
    sweep.add_argument("--models", default="", metavar="A,B,...", help="Models, each handed to the agent as "
                                                                       "FAULTPROXY_MODEL and {model}.")
    sweep.add_argument("--tasks", type=Path, help="Tasks file (YAML or JSON Lines); without it CMD is one task.")
    sweep.add_argument("--only", default="", metavar="IDS", help="Comma-separated task ids: sweep just these.")
    sweep.add_argument("--k", type=int, default=1, help="Trials per task at each grid point (default 1).")
    sweep.add_argument("--parallel", type=int, default=1, help="Episodes at once, through one proxy (default 1).")
    sweep.add_argument("--out", type=Path, help="Run directory (default runs/<scenario name>-sweep); rerun to resume.")
    sweep.add_argument("--budget-s", type=float, help="Wall-time budget per episode, seconds.")
    sweep.add_argument("--no-proxy", default="", metavar="HOSTS",
                       help="Comma-separated hosts the agent reaches directly.")
    sweep.add_argument("--variants", metavar="MODULE:FUNCTION", help="Your own variant function.")
    sweep.add_argument("--no-html", action="store_true", help="Do not write sweep.html.")
    sweep.add_argument("--upstream", action="append", default=[], metavar="NAME=URL",
                       help="Reverse-mode upstream; clients use http://HOST:PORT/EPISODE/NAME as base URL.")
    sweep.add_argument("--secret-env", action="append", default=[], metavar="VAR",
                       help="Redact the value of this environment variable from everything written.")
    sweep.add_argument("--insecure-upstream", action="store_true", help="Do not verify upstream TLS (tests only).")
    sweep.add_argument("--log-json", action="store_true", help="Log one JSON object per line.")
    add_executor_options(sweep)
    sweep.add_argument("agent", nargs=argparse.REMAINDER, metavar="-- CMD...", help="The agent command.")
    sweep.set_defaults(handler=cmd_sweep)

    report = commands.add_parser(
        "sweep-report", help="Print a sweep's tables again and rewrite sweep.json and sweep.html.",
        description="Analyse an existing sweep directory (finished or not): per level, curves, surface, model "
                    "matrix and the scenario's expect: block (exit 1 when violated or not yet decidable).")
    report.add_argument("run_dir", type=Path, metavar="DIR")
    report.add_argument("--scenario", help="Scenario whose expect: block to check (default: the one the plan names).")
    report.add_argument("--out", type=Path, metavar="DIR", help="Where to write sweep.json and sweep.html "
                                                                "(default: DIR).")
    report.add_argument("--no-html", action="store_true", help="Do not write sweep.html.")
    report.set_defaults(handler=cmd_sweep_report)


# --- input --------------------------------------------------------------------------------------


def parse_levels(specs: Sequence[str]) -> dict[str, list[float]]:
    """["lambda=0,0.1", "epsilon=0,0.2"] -> {"lambda": [0.0, 0.1], "epsilon": [0.0, 0.2]}, in the given order."""
    levels: dict[str, list[float]] = {}
    for spec in specs:
        name, sep, text = spec.partition("=")
        name = name.strip()
        if not sep or not name:
            raise UsageError(f"--param {spec!r} is not NAME=V1,V2,...")
        if name in levels:
            raise UsageError(f"--param {name} is given twice; list all its levels in one: --param {name}=0,0.1,0.2")
        items = [item.strip() for item in text.split(",")]
        if any(not item for item in items):
            raise UsageError(f"--param {name}: an empty level in {text!r}")
        values: list[float] = []
        shown: dict[str, str] = {}
        for item in items:
            try:
                value = float(item)
            except ValueError:
                raise UsageError(f"--param {name}: level {item!r} is not a number") from None
            if not math.isfinite(value):
                raise UsageError(f"--param {name}: level {item!r} is not a finite number")
            value += 0.0  # -0.0 is 0
            label = f"{value:g}"  # as grid labels and episode keys write it
            if label in shown:
                same = "given twice" if shown[label] == item else f"the same as {shown[label]} to 6 significant digits"
                raise UsageError(f"--param {name}: level {item} is {same}")
            shown[label] = item
            values.append(value)
        levels[name] = values
    return levels


def parse_models(text: str) -> list[str]:
    if not text.strip():
        return []
    models = [m.strip() for m in text.split(",")]
    if any(not m for m in models):
        raise UsageError(f"--models: an empty model name in {text!r}")
    for i, model in enumerate(models):
        if model in models[:i]:
            raise UsageError(f"--models: {model} is given twice")
    return models


def rule_params(scenario: Any) -> set[str]:
    """The params a scenario's rules name (as their probability)."""
    return {rule.when.probability for rule in scenario.rules if isinstance(rule.when.probability, str)}


def check_levels(scenario: Any, levels: dict[str, list[float]]) -> None:
    """Load the scenario at every level, so a level that breaks it fails now, in one line."""
    from scenarios import load_scenario

    for name, values in levels.items():
        if name == EPSILON:
            outside = [v for v in values if not 0 <= v <= 1]
            if outside:
                raise UsageError(f"--param {EPSILON}: level {outside[0]:g} is outside [0, 1]; epsilon is the share "
                                 "of JSON responses the proxy perturbs")
        for value in values:
            load_scenario(scenario.path, {name: value})  # raises ScenarioError (exit 2) naming file and field


def plan_grid(scenario: Any, levels: dict[str, list[float]], models: list[str]) -> list[Any]:
    """Validated levels and models -> the runner's grid; UsageError for anything that cannot run."""
    from evaluator.sweep import SweepError, acceptance_rules
    from proxy.runner.plan import build_grid

    if not levels and not models:
        raise UsageError("nothing to sweep: give --param NAME=V1,V2,... and/or --models A,B")
    check_levels(scenario, levels)
    grid = build_grid(levels, models)
    suffixes: dict[str, str] = {}
    for point in grid:
        if point.key_suffix in suffixes:
            raise UsageError(f"grid points {suffixes[point.key_suffix]!r} and {point.label!r} would share episode "
                             "keys; rename a model")
        suffixes[point.key_suffix] = point.label
    try:
        acceptance_rules(scenario.expect, {name: sorted(values) for name, values in levels.items()})
    except SweepError as error:
        raise UsageError(f"{scenario.path}: {error}") from None
    return grid


# --- commands -----------------------------------------------------------------------------------


def cmd_sweep(args: argparse.Namespace) -> int:
    from evaluator.rundir import RunDirError
    from proxy.cli import executor_options, parse_pairs
    from proxy.logs import configure_logging
    from proxy.runner.cli import agent_command
    from proxy.runner.run import RunOptions, resume_command, run
    from proxy.runner.tasks import TaskError, load_tasks, single_task
    from proxy.runner.variants import load_variant_function
    from scenarios import load_scenario

    command = agent_command(args.agent)
    if args.k < 1 or args.parallel < 1:
        raise UsageError("--k and --parallel must be at least 1")
    if args.budget_s is not None and not args.budget_s > 0:
        raise UsageError("--budget-s must be a positive number of seconds")
    scenario = load_scenario(args.scenario)
    levels = parse_levels(args.param)
    models = parse_models(args.models)
    grid = plan_grid(scenario, levels, models)
    try:
        tasks = load_tasks(args.tasks) if args.tasks else single_task(" ".join(command))
        if args.only:
            tasks = tasks.only(i for i in args.only.split(",") if i)
        variant_function = load_variant_function(args.variants) if args.variants else None
    except (TaskError, ValueError) as error:
        raise UsageError(str(error)) from None
    out = args.out or Path("runs") / f"{scenario.name}-sweep"
    options = RunOptions(
        scenario=scenario, tasks=tasks, command=command, out=out, k=args.k, grid=grid, parallel=args.parallel,
        budget_s=args.budget_s, upstreams=parse_pairs(args.upstream, "--upstream"),
        no_proxy=[h for h in args.no_proxy.split(",") if h], variant_function=variant_function,
        secret_env=args.secret_env, insecure_upstream=args.insecure_upstream, show_progress=sys.stderr.isatty(),
        **executor_options(args),
    )
    shape = " × ".join([f"{len(v)} {n}" for n, v in levels.items()] + ([f"{len(models)} models"] if models else []))
    print(f"sweep: {shape} = {len(grid)} grid points × {len(tasks.tasks)} tasks × k {args.k} = "
          f"{len(grid) * len(tasks.tasks) * args.k} episodes → {out}", flush=True)
    out.mkdir(parents=True, exist_ok=True)
    log_file = out / "faultproxy.log"
    configure_logging(json_lines=True, file=log_file.open("a"))  # fault events to the file; the terminal has tables
    try:
        result = run(options)
    except RunDirError as error:
        raise UsageError(str(error)) from None
    if result.errors:
        more = f" (and {len(result.errors) - 1} more; see {log_file})" if len(result.errors) > 1 else ""
        print(f"not run, will run on resume: {result.errors[0]}{more}", file=sys.stderr)
    print(f"{out}: {result.logged}/{result.planned} episodes logged "
          f"({result.counts['pass']} pass, {result.counts['fail']} fail, {result.counts['incomplete']} incomplete)")
    if result.interrupted:
        print(f"interrupted; resume with: {resume_command()}")
        return 130
    return report_sweep(out, scenario, out, html=not args.no_html)


def cmd_sweep_report(args: argparse.Namespace) -> int:
    from evaluator.report import read_plan
    from evaluator.rundir import RunDirError
    from evaluator.sweep import is_sweep
    from scenarios import load_scenario

    try:
        plan = read_plan(args.run_dir)
    except RunDirError as error:
        raise UsageError(str(error)) from None
    if not is_sweep(plan.document):
        raise UsageError(f"{args.run_dir} is not a sweep (one grid point, no params); use: faultproxy report "
                         f"{args.run_dir}")
    planned = plan.document.get("scenario") or {}
    path = args.scenario or planned.get("path")
    if not args.scenario and not (path and Path(path).is_file()):
        raise UsageError(f"the sweep's scenario file {path} is gone; name one with --scenario to check its expect: "
                         "block")
    scenario = load_scenario(path)
    if planned.get("digest") and scenario.digest != planned["digest"]:
        print(f"note: {scenario.path} is not the scenario the sweep ran (its digest changed); "
              "its current expect: block is checked", file=sys.stderr)
    return report_sweep(args.run_dir, scenario, args.out or args.run_dir, html=not args.no_html)


def report_sweep(run_dir: Path, scenario: Any, out: Path, html: bool = True, console: Any = None) -> int:
    """Analyse, print, write sweep.json (and sweep.html); the exit status the acceptance sets."""
    from evaluator import sweep_html
    from evaluator.sweep import SWEEP_FILE, SWEEP_HTML, SweepError, analyse_sweep, exit_status, print_sweep, write_json

    try:
        analysis = analyse_sweep(run_dir, expect=scenario.expect, rule_params=rule_params(scenario))
    except SweepError as error:
        raise UsageError(str(error)) from None
    print_sweep(analysis, console)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = [out / SWEEP_FILE]
        write_json(out / SWEEP_FILE, analysis)
        if html:
            sweep_html.write_sweep_html(out / SWEEP_HTML, analysis)
            written.append(out / SWEEP_HTML)
    except OSError as error:
        raise UsageError(f"{out}: cannot write: {error.strerror or error}") from None
    print("wrote " + ", ".join(str(p) for p in written))
    return exit_status(analysis)
