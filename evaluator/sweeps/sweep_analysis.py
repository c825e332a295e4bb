"""Sweeps: perturbation curves, the reliability surface, acceptance and the model matrix.

    analysis = analyse_sweep(run_dir, expect=scenario.expect, rule_params={"lambda"})
    print_sweep(analysis)                          # rich tables (evaluator.rendering.terminal)
    write_json(run_dir / "sweep.json", analysis)   # evaluator.aggregate.report's writer; this module owns sweep.json
    sys.exit(exit_status(analysis))                # 1 when the scenario's expect: block is not met

A sweep is an ordinary run directory whose plan has a grid of param levels (and models). It is
read in one streaming pass by evaluator.aggregate.report.build_report, with an EpisodeSink that keeps two
bit masks per (grid label, task) — which trials were logged and which passed — so the memory is
one pair of integers per task and grid point, whatever k is.

Per grid point:
- the mean success Σc/Σn over the logged episodes (an incomplete episode is a trial that did not
  pass, as in the report), with its Wilson interval over episodes;
- pass^k at the plan's k, the mean over tasks of C(c,k)/C(n,k) (metrics.pass_hat_k). At n = k
  this is the share of tasks whose k trials all passed, so its interval is the Wilson interval
  over tasks — it says how far the task sample, not the trials, lets the number move. It is null
  while a planned episode of that point is not run, as in the report.

Curves: for each swept param, one series per combination of the other params (and the model),
its points sorted by level; a categorical param's levels (words, such as effort=low,medium,high)
keep the order the sweep gave them, so they read as a scale. With exactly two params, the surface: mean and pass^k on the grid of
their levels, per model. A point where the mean rises over the previous level of a series while
pass^k falls is flagged: more success on average, less of it reliably (typical of an agent knob
such as reasoning effort that makes a run more capable but less repeatable).

Acceptance, from the scenario's `expect:` block:
  max_drop: {at: 0.10, drop: 0.08}   # mean success at param=0.10 ≥ (mean at param=0) − 0.08
The param is `max_drop.param` if given, else `lambda` if swept, else the only numeric swept param
(a categorical param has no level 0 to compare with). `at`
and 0 must both be swept levels (SweepError otherwise). It is checked in every series of that
param (each level of the other params, each model); one violation fails the sweep (exit 1). A
series whose two points are not fully run is pending, which also exits 1: a partial sweep must
not pass for a whole one.

Causes by level: each failure cause of the run (evaluator.aggregate.causes) with its episodes at every
grid point, so a sweep shows which causes appear as λ rises.

Model matrix (two or more models): each model alone; pass@M (some model succeeds) and pass^M
(every model succeeds) over aligned task-trials — the same task, trial index and non-model
params, logged for every model (evaluator.statistics.compare); per task the disagreement score (the
entropy of the pooled success rate minus the mean of each model's entropy, compare.disagreement),
computed within each combination of params and averaged over them; and a diagnostic selection
(compare.diagnostic_selection): one task per distinct pattern of which models passed every
trial, unanimous success and unanimous failure kept as anchors.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.statistics import (diagnostic_selection, disagreement, pass_at_M, pass_hat_M, pass_hat_k,
                                             wilson_interval)
from faultproxy.evaluator.sweeps.outcomes import OutcomeSink, Outcomes
from faultproxy.formats.errors import UserError
from faultproxy.formats.rundir import RunDirError, read_plan

SWEEP_VERSION = 1
SWEEP_FILE = "sweep.json"
SWEEP_HTML = "sweep.html"
EPSILON = "epsilon"  # the param the proxy reads as the intensity of semantics-preserving perturbation
TOLERANCE = 1e-9  # float noise, never a real difference between two rates
DISAGREEMENT_ROWS = 12


class SweepError(UserError):
    """A sweep that cannot be analysed or checked as asked; the message says why."""


# --- the plan's grid ----------------------------------------------------------------------------


def level_text(value: float | str) -> str:
    """A param's level as grid labels, episode keys and the agent's environment write it: a
    number to 6 significant digits (0.1), a word (a categorical level such as `high`) as it is."""
    return value if isinstance(value, str) else f"{value:g}"


def level_label(name: str, value: float | str) -> str:
    """As runner.plan.GridPoint writes a param into a grid label."""
    return f"{name}={level_text(value)}"


def point_order(analysis: Mapping[str, Any]) -> Callable[[Mapping[str, Any]], tuple]:
    """Sort key for an analysis' points, as its tables list them: by model, then each param's level
    in the order swept_params gives (ascending numbers, categorical levels as the sweep gave them)."""
    models = {m: i for i, m in enumerate(analysis["models"])}
    params = analysis["params"]
    return lambda point: (models.get(point["model"], -1),
                          [params[n].index(point["params"][n]) if n in point["params"] else -1 for n in params])


def is_sweep(plan: Mapping[str, Any]) -> bool:
    """A plan with more than one grid point, or one that sets params: what `faultproxy sweep` writes."""
    grid = plan.get("grid") or []
    return len(grid) > 1 or any(point.get("params") for point in grid)


def _grid(plan_grid: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    points = []
    for point in plan_grid or [{"label": "", "params": {}, "model": None}]:
        params = {str(n): v if isinstance(v, str) else float(v) for n, v in sorted((point.get("params") or {}).items())}
        points.append({"label": point.get("label") or "", "params": params, "model": point.get("model")})
    return points


def swept_params(grid: Sequence[Mapping[str, Any]]) -> dict[str, list[float | str]]:
    """Each param the grid sets, with its levels in order: numbers ascending, words (a categorical
    param, such as effort=low,medium,high) in the order the sweep gave them, its grid's order."""
    names = sorted({name for point in grid for name in point["params"]})
    levels: dict[str, list[float | str]] = {}
    for name in names:
        seen = list(dict.fromkeys(point["params"][name] for point in grid if name in point["params"]))
        levels[name] = seen if any(isinstance(v, str) for v in seen) else sorted(seen)
    return levels


def swept_models(grid: Sequence[Mapping[str, Any]]) -> list[str]:
    """The grid's models, in the order the grid first names them."""
    models: list[str] = []
    for point in grid:
        if point["model"] is not None and point["model"] not in models:
            models.append(point["model"])
    return models


def param_roles(params: Iterable[str], rule_params: Iterable[str] | None) -> dict[str, str] | None:
    """fault: a rule's probability names it (λ); perturbation: epsilon, read by the proxy (ε);
    agent: named by nothing in the proxy, so only the agent sees it (FAULTPROXY_PARAM_<NAME>, {name})."""
    if rule_params is None:
        return None
    named = set(rule_params)
    return {name: "fault" if name in named else "perturbation" if name == EPSILON else "agent" for name in params}


# --- reading a run directory --------------------------------------------------------------------


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


# --- the analysis -------------------------------------------------------------------------------


def analyse(plan_grid: Sequence[Mapping[str, Any]], task_ids: Sequence[str], k: int, outcomes: Outcomes, *,
            expect: Mapping[str, Any] | None = None, rule_params: Iterable[str] | None = None) -> dict[str, Any]:
    """Everything the sweep reports, from the plan's grid, its tasks, k and the logged outcomes."""
    if k < 1:
        raise SweepError(f"k must be at least 1, got {k}")
    grid = _grid(plan_grid)
    params = swept_params(grid)
    models = swept_models(grid)
    points = [_point(point, task_ids, k, outcomes) for point in grid]
    planned = sum(p["planned"] for p in points)
    logged = sum(p["logged"] for p in points)
    curves = {name: _curves(name, points, levels) for name, levels in params.items()}
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
        "surface": _surface(params, models, points),
        "flags": [flag for name in params for flag in _flags(name, curves[name])],
        "matrix": model_matrix(grid, task_ids, k, outcomes) if len(models) > 1 else None,
    }
    analysis["acceptance"] = evaluate_acceptance(analysis, expect) if expect else None
    return analysis


def _point(point: Mapping[str, Any], task_ids: Sequence[str], k: int, outcomes: Outcomes) -> dict[str, Any]:
    tallies = [(task_id, *outcomes.counts(point["label"], task_id, k)) for task_id in task_ids]
    return {"label": point["label"], "params": dict(point["params"]), "model": point["model"],
            **summarise(tallies, k)}


def summarise(tallies: Sequence[tuple[str, int, int]], k: int) -> dict[str, Any]:
    """Mean success and pass^k of units (task, n logged, c passed), each planned with k trials."""
    n = sum(t[1] for t in tallies)
    c = sum(t[2] for t in tallies)
    planned = k * len(tallies)
    result: dict[str, Any] = {
        "planned": planned, "logged": n, "passed": c, "not_run": planned - n,
        "mean": c / n if n else None,
        "wilson": list(wilson_interval(c, n)) if n else None,
        "tasks": len(tallies), "tasks_all_passed": None,
        "pass_hat_k": None, "pass_hat_k_interval": None,
        "note": None,
    }
    if not tallies:
        result["note"] = "no tasks"
    elif planned > n:
        result["note"] = f"pass^{k} not until resumed: {planned - n} planned episode(s) not run"
    else:
        all_passed = sum(1 for _, tn, tc in tallies if tc == tn)
        result["tasks_all_passed"] = all_passed
        result["pass_hat_k"] = math.fsum(pass_hat_k(tn, tc, k) for _, tn, tc in tallies) / len(tallies)
        result["pass_hat_k_interval"] = list(wilson_interval(all_passed, len(tallies)))
    return result


def _others_label(point: Mapping[str, Any], name: str) -> str:
    parts = [level_label(other, value) for other, value in point["params"].items() if other != name]
    if point["model"]:
        parts.append(f"model={point['model']}")
    return ",".join(parts)


def _curves(name: str, points: Sequence[Mapping[str, Any]], levels: Sequence[float | str]) -> list[dict[str, Any]]:
    """One series per combination of the other params and the model; points in the order of `levels`."""
    series: dict[str, dict[str, Any]] = {}
    for point in points:
        if name not in point["params"]:
            continue
        key = _others_label(point, name)
        entry = series.setdefault(key, {"series": key or "all", "fixed": {
            **{o: v for o, v in point["params"].items() if o != name}, **({"model": point["model"]}
                                                                          if point["model"] else {})},
            "points": []})
        entry["points"].append({"level": point["params"][name], "label": point["label"],
                                **{f: point[f] for f in ("logged", "planned", "not_run", "mean", "wilson",
                                                         "pass_hat_k", "pass_hat_k_interval", "note")}})
    for entry in series.values():
        entry["points"].sort(key=lambda p: levels.index(p["level"]))
    return list(series.values())


def _surface(params: Mapping[str, Sequence[float]], models: Sequence[str],
             points: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """With exactly two params: mean and pass^k on their grid, per model ("" without models)."""
    if len(params) != 2:
        return None
    names = sorted(params, key=lambda n: (n != "lambda", n))  # λ across, when it is swept
    x, y = names
    by_model: dict[str, dict[str, list[list[Any]]]] = {}
    for model in (models or [None]):
        mean = [[None] * len(params[x]) for _ in params[y]]
        hat = [[None] * len(params[x]) for _ in params[y]]
        labels = [[None] * len(params[x]) for _ in params[y]]
        for point in points:
            if point["model"] != model:
                continue
            i, j = params[y].index(point["params"][y]), params[x].index(point["params"][x])
            mean[i][j], hat[i][j], labels[i][j] = point["mean"], point["pass_hat_k"], point["label"]
        by_model[model or ""] = {"mean": mean, "pass_hat_k": hat, "labels": labels}
    return {"x": x, "y": y, "x_levels": list(params[x]), "y_levels": list(params[y]), "by_model": by_model}


def _flags(name: str, series_list: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Levels where the mean rises over the previous level while pass^k falls."""
    flags = []
    for series in series_list:
        for before, after in zip(series["points"], series["points"][1:]):
            if None in (before["mean"], after["mean"], before["pass_hat_k"], after["pass_hat_k"]):
                continue
            if after["mean"] > before["mean"] + TOLERANCE and after["pass_hat_k"] < before["pass_hat_k"] - TOLERANCE:
                flags.append({"param": name, "series": series["series"], "level": after["level"],
                              "previous_level": before["level"], "label": after["label"],
                              "mean": after["mean"], "previous_mean": before["mean"],
                              "pass_hat_k": after["pass_hat_k"], "previous_pass_hat_k": before["pass_hat_k"]})
    return flags


# --- the model matrix ---------------------------------------------------------------------------


def model_matrix(plan_grid: Sequence[Mapping[str, Any]], task_ids: Sequence[str], k: int,
                 outcomes: Outcomes) -> dict[str, Any] | None:
    """Each model alone, pass@M and pass^M on aligned task-trials, disagreement per task, and a
    diagnostic selection of tasks. None with fewer than two models."""
    grid = _grid(plan_grid)
    models = swept_models(grid)
    if len(models) < 2:
        return None
    cells: dict[str, dict[str, str]] = {}  # non-model params label -> model -> grid label
    cell_params: dict[str, dict[str, float]] = {}
    for point in grid:
        key = ",".join(level_label(n, v) for n, v in point["params"].items())
        cells.setdefault(key, {})[point["model"]] = point["label"]
        cell_params[key] = dict(point["params"])
    tally = _MatrixTally(models, task_ids, k, outcomes)
    cell_entries = [{"cell": key or "all", "params": cell_params[key], **tally.cell(key, by_model, len(cells) == 1)}
                    for key, by_model in cells.items()]
    selection = []
    for unit in diagnostic_selection(tally.patterns) if tally.patterns else []:
        pattern = tally.patterns[unit]
        cell, task_id = (None, unit) if isinstance(unit, str) else unit
        kind = "all passed" if all(pattern) else "all failed" if not any(pattern) else "mixed"
        selection.append({"task_id": task_id, "cell": cell, "kind": kind, "pattern": dict(zip(models, pattern))})
    return {
        "models": models,
        "per_model": {model: summarise(tally.units[model], k) for model in models},
        "aligned": len(tally.rows),
        "unaligned": tally.unaligned,
        **_joint(models, tally.rows),
        "cells": cell_entries,
        "disagreement": _disagreement(models, task_ids, k, cells, tally.rates, outcomes),
        "selection": selection,
        "selection_rule": f"a model succeeds on a task when all {k} of its trials passed",
    }


class _MatrixTally:
    """What the model matrix counts, one param combination (cell) at a time."""

    def __init__(self, models: Sequence[str], task_ids: Sequence[str], k: int, outcomes: Outcomes) -> None:
        self.models, self.task_ids, self.k, self.outcomes = models, task_ids, k, outcomes
        self.rows: list[tuple[bool, ...]] = []  # per aligned task-trial, which models passed
        self.unaligned = 0
        self.units: dict[str, list[tuple[str, int, int]]] = {m: [] for m in models}  # (task, n, c) per model
        self.rates: dict[str, dict[str, dict[str, float]]] = {t: {} for t in task_ids}  # task -> cell -> rates
        self.patterns: dict[Any, tuple[bool, ...]] = {}  # task (or (cell, task)) -> which models passed all k

    def cell(self, key: str, by_model: Mapping[str, str], only_cell: bool) -> dict[str, Any]:
        """Count one cell (by_model: model -> grid label); its entry in the matrix's `cells`."""
        models, k = self.models, self.k
        rows: list[tuple[bool, ...]] = []
        present = [m for m in models if m in by_model]
        for task_id in self.task_ids:
            masks = {m: self.outcomes.get(by_model[m], task_id, k) for m in present}
            for m in present:
                self.units[m].append((task_id, masks[m][0].bit_count(), masks[m][1].bit_count()))
            if len(present) < len(models):
                continue
            for trial in range(k):
                bit = 1 << trial
                logged = [bool(masks[m][0] & bit) for m in models]
                if all(logged):
                    rows.append(tuple(bool(masks[m][1] & bit) for m in models))
                elif any(logged):
                    self.unaligned += 1
            counts = {m: (masks[m][0].bit_count(), masks[m][1].bit_count()) for m in models}
            if all(n for n, _ in counts.values()):
                self.rates[task_id][key] = {m: c / n for m, (n, c) in counts.items()}
            if all(n == k for n, _ in counts.values()):
                self.patterns[task_id if only_cell else (key, task_id)] = tuple(c == k for _, c in counts.values())
        self.rows.extend(rows)
        return {"aligned": len(rows), **_joint(models, rows), "per_model": {m: {"label": by_model[m]} for m in present}}


def _disagreement(models: Sequence[str], task_ids: Sequence[str], k: int, cells: Mapping[str, Mapping[str, str]],
                  rates: Mapping[str, Mapping[str, Mapping[str, float]]], outcomes: Outcomes) -> list[dict[str, Any]]:
    """Per task: the disagreement score averaged over the cells where every model ran it, and
    each model's success rate pooled over those cells; most disagreement first."""
    rows = []
    for task_id in task_ids:
        by_cell = rates[task_id]
        if not by_cell:
            continue
        scores = [disagreement(r) for r in by_cell.values()]
        pooled = {}
        for model in models:
            n = c = 0
            for key, by_model in cells.items():
                if key in by_cell:
                    tn, tc = outcomes.counts(by_model[model], task_id, k)
                    n, c = n + tn, c + tc
            pooled[model] = c / n if n else None
        rows.append({"task_id": task_id, "score": math.fsum(scores) / len(scores), "cells": len(scores),
                     "rates": pooled})
    rows.sort(key=lambda r: (-r["score"], r["task_id"]))
    return rows


def _joint(models: Sequence[str], rows: Sequence[tuple[bool, ...]]) -> dict[str, Any]:
    if not rows:
        return {"pass_at_M": None, "pass_hat_M": None}
    table = {model: [row[i] for row in rows] for i, model in enumerate(models)}
    return {"pass_at_M": pass_at_M(table), "pass_hat_M": pass_hat_M(table)}


# --- acceptance ---------------------------------------------------------------------------------


def _same(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)


def acceptance_rules(expect: Mapping[str, Any] | None, params: Mapping[str, Sequence[float]]) -> list[dict[str, Any]]:
    """The sweep rules of an expect block, resolved against the swept levels; SweepError if one
    cannot be checked on this sweep (call it before running, to fail fast)."""
    rules = []
    drop_rule = (expect or {}).get("max_drop")
    if drop_rule is None:
        return rules
    if not isinstance(drop_rule, Mapping) or not {"at", "drop"} <= set(drop_rule):
        raise SweepError("expect.max_drop must be a mapping with 'at' and 'drop'")
    at, drop = drop_rule["at"], drop_rule["drop"]
    for field, value in (("at", at), ("drop", drop)):
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            raise SweepError(f"expect.max_drop.{field} must be a number, got {value!r}")
    name = drop_rule.get("param")
    words = {n for n, levels in params.items() if any(isinstance(v, str) for v in levels)}
    if name in words:
        raise SweepError(f"expect.max_drop is about {name}, whose levels are words, not numbers from 0")
    params = {n: levels for n, levels in params.items() if n not in words}
    if name is None:
        if "lambda" in params:
            name = "lambda"
        elif len(params) == 1:
            name = next(iter(params))
        elif not params:
            raise SweepError(f"expect.max_drop.at {at:g} is not a swept level: this sweep sets no params"
                             f"{' with numeric levels' if words else ''} "
                             "(sweep one with --param NAME=0,...)")
        else:
            raise SweepError(f"expect.max_drop does not say which param it is about (swept: {', '.join(params)}); "
                             "sweep lambda, or one param")
    if name not in params:
        raise SweepError(f"expect.max_drop is about {name}, which this sweep does not vary "
                         f"(add --param {name}=0,{at:g})")
    levels = params[name]
    shown = ", ".join(f"{v:g}" for v in levels)
    if not any(_same(at, v) for v in levels):
        raise SweepError(f"expect.max_drop.at {at:g} is not a swept level of {name} ({shown})")
    if not any(_same(0.0, v) for v in levels):
        raise SweepError(f"expect.max_drop compares with {name}=0, which is not a swept level ({shown})")
    rules.append({"rule": "max_drop", "param": name, "at": float(at), "baseline": 0.0, "drop": float(drop)})
    return rules


def evaluate_acceptance(analysis: Mapping[str, Any], expect: Mapping[str, Any]) -> dict[str, Any]:
    """Each rule in each series of its param: ok (true, false) or pending (null, not fully run)."""
    results = []
    for rule in acceptance_rules(expect, analysis["params"]):
        for series in analysis["curves"][rule["param"]]:
            base = next((p for p in series["points"] if _same(p["level"], rule["baseline"])), None)
            at = next((p for p in series["points"] if _same(p["level"], rule["at"])), None)
            if base is None or at is None:  # a series of a grid that is not a full product
                continue
            entry = {**rule, "series": series["series"], "baseline_mean": base["mean"], "at_mean": at["mean"],
                     "fall": None, "ok": None, "note": None}
            if base["not_run"] or at["not_run"]:
                entry["note"] = f"not until resumed: {base['not_run'] + at['not_run']} episode(s) not run"
            else:
                entry["fall"] = base["mean"] - at["mean"]
                entry["ok"] = entry["fall"] <= rule["drop"] + TOLERANCE
            results.append(entry)
    if not results:
        status = "none"
    elif any(r["ok"] is False for r in results):
        status = "violated"
    elif any(r["ok"] is None for r in results):
        status = "pending"
    else:
        status = "met"
    return {"status": status, "results": results}


def exit_status(analysis: Mapping[str, Any]) -> int:
    """0: acceptance met or none asked; 1: violated, or pending on a sweep not fully run."""
    acceptance = analysis.get("acceptance") or {}
    return 1 if acceptance.get("status") in ("violated", "pending") else 0
