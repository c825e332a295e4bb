"""Sweeps: perturbation curves, the reliability surface, acceptance and the model matrix.

    analysis = analyse_sweep(run_dir, expect=scenario.expect, rule_params={"lambda"})
    print_sweep(analysis)                          # rich tables (evaluator.rendering.terminal)
    write_json(run_dir / "sweep.json", analysis)   # evaluator.aggregate.report's writer; this module owns sweep.json
    sys.exit(exit_status(analysis))                # 1 when the scenario's expect: block is not met

A sweep is an ordinary run directory whose plan has a grid of param levels (and models). It is
read in one streaming pass by evaluator.aggregate.report.build_report, with an EpisodeSink that keeps two
bit masks per (grid label, task) — which trials were logged and which passed — so the memory is
one pair of integers per task and grid point, whatever k is.

Per grid point, its mean success and pass^k, and curves per param (evaluator.sweeps.curves);
acceptance against the scenario's `expect:` block (evaluator.sweeps.acceptance); with two or more
models, the model matrix (evaluator.sweeps.model_matrix). The grid and its levels:
evaluator.sweeps.sweep_grid.

Causes by level: each failure cause of the run (evaluator.aggregate.causes) with its episodes at every
grid point, so a sweep shows which causes appear as λ rises.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.sweeps.acceptance import evaluate_acceptance
from faultproxy.evaluator.sweeps.curves import curve_series, point_summary, reliability_flags, surface
from faultproxy.evaluator.sweeps.model_matrix import model_matrix
from faultproxy.evaluator.sweeps.outcomes import OutcomeSink, Outcomes
from faultproxy.evaluator.sweeps.sweep_grid import (SweepError, grid_points, param_roles, swept_models,
                                                    swept_params)
from faultproxy.formats.rundir import RunDirError, read_plan

SWEEP_VERSION = 1
SWEEP_FILE = "sweep.json"
SWEEP_HTML = "sweep.html"


def analyse_sweep(run_dir: Path | str, *, expect: Mapping[str, Any] | None = None,
                  rule_params: Iterable[str] | None = None, jobs: int | None = None) -> dict[str, Any]:
    """The sweep analysis of a run directory (a JSON-able dict; see the module docstring).

    expect: the scenario's expect block (acceptance); rule_params: the params its rules name (to
    tell fault params from the agent's own knobs); jobs: as build_report's. Raises SweepError for
    an unreadable directory.
    """
    run_dir = Path(run_dir)
    collector = OutcomeSink()
    try:
        plan = read_plan(run_dir)
        report = build_report(run_dir, sinks=[collector], drilldown_limit=0, jobs=jobs)
    except RunDirError as error:
        raise SweepError(str(error)) from None
    except OSError as error:
        raise SweepError(f"{run_dir}: {error.strerror or error}") from None
    scenario = plan.document.get("scenario") or {}
    analysis = analyse(plan.document.get("grid") or [], plan.task_ids, plan.k, collector.outcomes,
                       expect=expect, rule_params=rule_params)
    analysis.update(run_dir=str(run_dir), created=plan.document.get("created"),
                    scenario={key: scenario.get(key) for key in ("name", "digest", "path", "params")},
                    command=plan.document.get("command"),
                    unplanned_episodes=report["log"]["unplanned_episodes"],
                    causes=causes_by_level(report.get("causes"), [p["label"] for p in analysis["points"]]))
    return analysis


def causes_by_level(causes: Mapping[str, Any] | None, labels: Sequence[str]) -> list[dict[str, Any]]:
    """Which failure causes appear at which grid point (as λ rises, say): per cause (ranked as in
    the report) its episodes at each grid label, and the first label, in grid order, it appears at."""
    rows = []
    for cluster in (causes or {}).get("clusters") or ():
        counts = [cluster["by_label"].get(label, 0) for label in labels]
        first = next((label for label, n in zip(labels, counts) if n), None)
        rows.append({"id": cluster["id"], "line": cluster["line"], "severity": cluster["severity"],
                     "episodes": counts, "first_at": first})
    return rows


def analyse(plan_grid: Sequence[Mapping[str, Any]], task_ids: Sequence[str], k: int, outcomes: Outcomes, *,
            expect: Mapping[str, Any] | None = None, rule_params: Iterable[str] | None = None) -> dict[str, Any]:
    """Everything the sweep reports, from the plan's grid, its tasks, k and the logged outcomes."""
    if k < 1:
        raise SweepError(f"k must be at least 1, got {k}")
    grid = grid_points(plan_grid)
    params = swept_params(grid)
    models = swept_models(grid)
    points = [point_summary(point, task_ids, k, outcomes) for point in grid]
    planned = sum(p["planned"] for p in points)
    logged = sum(p["logged"] for p in points)
    curves = {name: curve_series(name, points, levels) for name, levels in params.items()}
    analysis: dict[str, Any] = {
        "sweep_version": SWEEP_VERSION,
        "k": k,
        "tasks": list(task_ids),
        "params": params,
        "param_roles": param_roles(params, rule_params),
        "models": models,
        "planned": planned,
        "logged": logged,
        "complete": logged == planned,
        "points": points,
        "curves": curves,
        "surface": surface(params, models, points),
        "flags": [flag for name in params for flag in reliability_flags(name, curves[name])],
        "matrix": model_matrix(grid, task_ids, k, outcomes) if len(models) > 1 else None,
    }
    analysis["acceptance"] = evaluate_acceptance(analysis, expect) if expect else None
    return analysis
