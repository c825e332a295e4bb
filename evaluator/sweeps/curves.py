"""A sweep's numbers per grid point, and how they change with each param.

Per grid point (point_summary):
- the mean success Σc/Σn over the logged episodes (an incomplete episode is a trial that did not
  pass, as in the report), with its Wilson interval over episodes;
- pass^k at the plan's k, the mean over tasks of C(c,k)/C(n,k) (evaluator.statistics.metrics.pass_hat_k). At n = k
  this is the share of tasks whose k trials all passed, so its interval is the Wilson interval
  over tasks — it says how far the task sample, not the trials, lets the number move. It is null
  while a planned episode of that point is not run, as in the report.

Curves: for each swept param, one series per combination of the other params (and the model),
its points sorted by level; a categorical param's levels (words, such as effort=low,medium,high)
keep the order the sweep gave them, so they read as a scale (curve_series). With exactly two
params, the surface: mean and pass^k on the grid of their levels, per model (surface). A point
where the mean rises over the previous level of a series while pass^k falls is flagged: more
success on average, less of it reliably (typical of an agent knob such as reasoning effort that
makes a run more capable but less repeatable; reliability_flags).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.statistics import pass_hat_k, wilson_interval
from faultproxy.evaluator.sweeps.outcomes import Outcomes
from faultproxy.evaluator.sweeps.sweep_grid import TOLERANCE, level_label


def point_summary(point: Mapping[str, Any], task_ids: Sequence[str], k: int, outcomes: Outcomes) -> dict[str, Any]:
    """One grid point of the analysis: its label, params and model, and summarise over its tasks."""
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


def curve_series(name: str, points: Sequence[Mapping[str, Any]],
                 levels: Sequence[float | str]) -> list[dict[str, Any]]:
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


def surface(params: Mapping[str, Sequence[float]], models: Sequence[str],
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


def reliability_flags(name: str, series_list: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
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
