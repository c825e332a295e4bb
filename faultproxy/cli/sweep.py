"""`faultproxy sweep` and `faultproxy sweep-report`: every combination of param levels (and models)
in one resumable run, then curves, the surface, the model matrix and the scenario's acceptance.

    faultproxy sweep --scenario S --param lambda=0,0.05,0.1,0.2 [--param epsilon=0,0.1] \\
        [--models a,b,c] --tasks F --k N --out DIR [--parallel N] [--budget-s S] -- CMD
    faultproxy sweep-report DIR

A sweep is `run(RunOptions(..., grid=build_grid(levels, models)))`: the runner's log rules hold
(trial-major across the whole grid, so a stopped sweep has run every grid point about equally
often; rerunning the same command resumes; a log of another plan is refused). Each episode gets
its grid point's params as a per-episode scenario version in the proxy, as
FAULTPROXY_PARAM_<NAME> and as {name} in CMD, and its model as FAULTPROXY_MODEL and {model};
`--rewrite FIELD=TEMPLATE` makes the proxy set them in the agent's model API requests itself
(runner/rewrites.py), for an agent that reads none of them.

A param's levels are numbers, or words (`--param effort=low,medium,high`): a categorical param,
which only the agent sees (no rule may name it), reported per level in the given order; the
"mean rises while pass^k falls" flag reads that order as its scale.

Bad input is one line and exit status 2, before anything runs: numbers and words mixed in one
param's levels, words for a param a rule names, a level that makes a rule's probability leave [0, 1] (found by loading the scenario at each level),
an epsilon outside [0, 1], a level or model given twice, an expect block that cannot be checked
on this grid. Exit status after a sweep: 0, or 1 when the scenario's expect block is violated
(or pending on a sweep not fully run) or some planned episode could not be judged by the
harness (unless --allow-incomplete; the counts by cause are the last line), 130 when interrupted.

The grid itself is the runner's (runner/sweep_runs.py); the analysis is the evaluator's.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from faultproxy.cli.options import add_run_options, run_options, sequential_design
from faultproxy.cli.otel import add_otlp_options
from faultproxy.cli.run import incomplete_status, run_and_tell, run_sequential
from faultproxy.evaluator.aggregate import build_report, write_json
from faultproxy.evaluator.rendering import print_sweep, write_sweep_html
from faultproxy.evaluator.sweeps import SWEEP_FILE, SWEEP_HTML, analyse_sweep, exit_status, is_sweep
from faultproxy.formats.errors import UsageError
from faultproxy.formats.paths import folder_option
from faultproxy.formats.rundir import read_plan
from faultproxy.runner import plan_grid, rule_params
from faultproxy.scenarios import load_scenario


def register(commands: Any) -> None:
    """Add `sweep` and `sweep-report` to the faultproxy command's subparsers."""
    sweep = commands.add_parser(
        "sweep", help="Run an agent at every combination of param levels (and models): curves, surface, pass^M.",
        description="Run every combination of --param levels and --models as one resumable run, then report "
                    "per level the mean success (Wilson interval) and pass^k, the curve per param, the surface "
                    "of two params, the model matrix (pass@M, pass^M, disagreement) and the scenario's "
                    "expect: block. Exit 0; 1 when expect is violated; 2 on bad input; 130 when interrupted.")
    sweep.add_argument("--param", action="append", default=[], metavar="NAME=V1,V2,...",
                       help="Levels of a param (repeatable): numbers, or words (effort=low,medium,high) for a "
                            "param no rule names. A param no rule names is handed to the agent only "
                            "(FAULTPROXY_PARAM_<NAME>, {name} in CMD, {name} in --rewrite); epsilon is the "
                            "proxy's perturbation rate.")
    sweep.add_argument("--models", default="", metavar="A,B,...", help="Models, each handed to the agent as "
                                                                       "FAULTPROXY_MODEL and {model}.")
    sweep.add_argument("--no-html", action="store_true", help="Do not write sweep.html.")
    add_run_options(sweep)
    add_otlp_options(sweep)
    sweep.set_defaults(handler=cmd_sweep)

    report = commands.add_parser(
        "sweep-report", help="Print a sweep's tables again and rewrite sweep.json and sweep.html.",
        description="Analyse an existing sweep directory (finished or not): per level, curves, surface, model "
                    "matrix and the scenario's expect: block (exit 1 when violated or not yet decidable).")
    report.add_argument("run_dir", type=Path, metavar="DIR")
    report.add_argument("--scenario", help="Scenario whose expect: block to check (default: the one the plan names).")
    report.add_argument("--out", type=folder_option, metavar="DIR", help="Where to write sweep.json and sweep.html "
                                                                "(default: DIR).")
    report.add_argument("--no-html", action="store_true", help="Do not write sweep.html.")
    report.set_defaults(handler=cmd_sweep_report)


# --- input --------------------------------------------------------------------------------------

_LEVEL_WORD = re.compile(r"[A-Za-z0-9_.-]+")


def parse_levels(specs: Sequence[str]) -> dict[str, list[float | str]]:
    """["lambda=0,0.1", "effort=low,high"] -> {"lambda": [0.0, 0.1], "effort": ["low", "high"]}, in the
    given order. A param's levels are all numbers, or all words (a categorical param, for the agent)."""
    levels: dict[str, list[float | str]] = {}
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
        if not any(_is_number(item) for item in items):
            levels[name] = _word_levels(name, items)
            continue
        values: list[float] = []
        shown: dict[str, str] = {}
        for item in items:
            try:
                value = float(item)
            except ValueError:
                raise UsageError(f"--param {name}: level {item!r} is not a number, and the others are "
                                 "(levels are all numbers, or all words)") from None
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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _word_levels(name: str, items: list[str]) -> list[str]:
    """A categorical param's levels (low,medium,high), kept in the given order: it is their scale."""
    for i, item in enumerate(items):
        if not _LEVEL_WORD.fullmatch(item):
            raise UsageError(f"--param {name}: level {item!r} must be a number or a word of letters, digits, "
                             "'_', '.' and '-'")
        if item in items[:i]:
            raise UsageError(f"--param {name}: level {item} is given twice")
    return items


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


# --- commands -----------------------------------------------------------------------------------


def cmd_sweep(args: argparse.Namespace) -> int:

    scenario = load_scenario(args.scenario)
    levels = parse_levels(args.param)
    models = parse_models(args.models)
    grid = plan_grid(scenario, levels, models)
    options = run_options(args, scenario, grid, Path("runs") / f"{scenario.name}-sweep")
    design = sequential_design(args)
    shape = " × ".join([f"{len(v)} {n}" for n, v in levels.items()] + ([f"{len(models)} models"] if models else []))
    k = f"k {args.k}" if design is None else f"k up to {design.max_k}"
    print(f"sweep: {shape} = {len(grid)} grid points × {len(options.tasks.tasks)} tasks × {k} = "
          f"{len(grid) * len(options.tasks.tasks) * (design.max_k if design else args.k)} episodes → {options.out}",
          flush=True)
    if design is not None:  # every grid point gated against the baseline sweep's, in the same rounds
        return run_sequential(options, args, design,
                              lambda: report_sweep(options.out, scenario, options.out, html=not args.no_html), "sweep")
    if run_and_tell(options, args, "sweep").interrupted:
        return 130
    status = report_sweep(options.out, scenario, options.out, html=not args.no_html)
    run = build_report(options.out, causes=False, drilldown_limit=0)["run"]
    return max(status, incomplete_status(run, args.allow_incomplete))


def cmd_sweep_report(args: argparse.Namespace) -> int:

    plan = read_plan(args.run_dir)
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

    analysis = analyse_sweep(run_dir, expect=scenario.expect, rule_params=rule_params(scenario))
    print_sweep(analysis, console)
    try:
        out.mkdir(parents=True, exist_ok=True)
        written = [out / SWEEP_FILE]
        write_json(out / SWEEP_FILE, analysis)
        if html:
            write_sweep_html(out / SWEEP_HTML, analysis)
            written.append(out / SWEEP_HTML)
    except OSError as error:
        raise UsageError(f"{out}: cannot write: {error.strerror or error}") from None
    print("wrote " + ", ".join(str(p) for p in written))
    return exit_status(analysis)
