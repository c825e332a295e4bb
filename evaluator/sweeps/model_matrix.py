"""The model matrix of a sweep of two or more models: each model alone; pass@M (some model succeeds) and pass^M
(every model succeeds) over aligned task-trials — the same task, trial index and non-model
params, logged for every model (evaluator.statistics.compare); per task the disagreement score (the
entropy of the pooled success rate minus the mean of each model's entropy, compare.disagreement),
computed within each combination of params and averaged over them; and a diagnostic selection
(compare.diagnostic_selection): one task per distinct pattern of which models passed every
trial, unanimous success and unanimous failure kept as anchors.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.statistics import diagnostic_selection, disagreement, pass_at_M, pass_hat_M
from faultproxy.evaluator.sweeps.curves import summarise
from faultproxy.evaluator.sweeps.outcomes import Outcomes
from faultproxy.evaluator.sweeps.sweep_grid import grid_points, level_label, swept_models


def model_matrix(plan_grid: Sequence[Mapping[str, Any]], task_ids: Sequence[str], k: int,
                 outcomes: Outcomes) -> dict[str, Any] | None:
    """Each model alone, pass@M and pass^M on aligned task-trials, disagreement per task, and a
    diagnostic selection of tasks. None with fewer than two models."""
    grid = grid_points(plan_grid)
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
