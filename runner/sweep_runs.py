"""Sweeps: every combination of param levels (and models) as one grid for the runner.

A sweep is `run(RunOptions(..., grid=plan_grid(scenario, levels, models)))`: the runner's log
rules hold (trial-major across the whole grid, so a stopped sweep has run every grid point about
equally often; rerunning resumes; a log of another plan is refused). Each episode gets its grid
point's params as a per-episode scenario version in the proxy, as FAULTPROXY_PARAM_<NAME> and as
{name} in CMD, and its model as FAULTPROXY_MODEL and {model}.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from faultproxy.evaluator.sweeps import EPSILON, SweepError, acceptance_rules
from faultproxy.formats.errors import UsageError
from faultproxy.runner.plan import GridPoint, build_grid
from faultproxy.runner.run_loop import run
from faultproxy.runner.run_options import RunOptions, RunResult
from faultproxy.scenarios import Scenario, load_scenario


def rule_params(scenario: Any) -> set[str]:
    """The params a scenario's rules name (as their probability)."""
    return {rule.when.probability for rule in scenario.rules if isinstance(rule.when.probability, str)}


def check_levels(scenario: Any, levels: dict[str, list[float | str]]) -> None:
    """Load the scenario at every level, so a level that breaks it fails now, in one line; words
    (a categorical param's levels) only for a param the proxy does not read."""
    for name, values in levels.items():
        if any(isinstance(v, str) for v in values):
            if name in rule_params(scenario) or name == EPSILON:
                raise UsageError(f"--param {name}: levels must be numbers ({name} is read by the proxy, "
                                 f"{'as the perturbation rate' if name == EPSILON else 'as a rule probability'}); "
                                 f"words such as {values[0]} are for a param only the agent sees")
            continue
        if name == EPSILON:
            outside = [v for v in values if not 0 <= v <= 1]
            if outside:
                raise UsageError(f"--param {EPSILON}: level {outside[0]:g} is outside [0, 1]; epsilon is the share "
                                 "of JSON responses the proxy perturbs")
        for value in values:
            load_scenario(scenario.path, {name: value})  # raises ScenarioError (exit 2) naming file and field


def plan_grid(scenario: Scenario, levels: dict[str, list[float | str]], models: list[str]) -> list[GridPoint]:
    """Validated levels and models -> the runner's grid; UsageError for anything that cannot run."""
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


def sweep(options: RunOptions, levels: dict[str, list[float | str]], models: Sequence[str] = ()) -> RunResult:
    """Run `options` at every combination of param `levels` and `models`, as one resumable run
    (the grid in `options` is replaced); analyse it with evaluator.sweeps.sweep_analysis.analyse_sweep."""
    grid = plan_grid(options.scenario, levels, list(models))
    return run(dataclasses.replace(options, grid=grid))
