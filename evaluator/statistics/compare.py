"""Metrics across models sharing one harness (after MaD-RSI, Cui et al.).

Here M counts distinct models, not repeated samples of one model. pass@M is oracle
coverage (some model would have succeeded); pass^M is joint success (the task survives a
change of backbone). Two harnesses with equal pass@M can differ a lot in pass^M.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from typing import TypeVar

from faultproxy.evaluator.statistics.stats import binary_entropy

TaskId = TypeVar("TaskId", bound=Hashable)


def _aligned(outcomes_by_model: Mapping[str, Sequence[bool]]) -> list[tuple[bool, ...]]:
    """Rows of the table: the i-th outcome of every model, for one task-trial."""
    if not outcomes_by_model:
        raise ValueError("no models")
    lengths = {model: len(v) for model, v in outcomes_by_model.items()}
    if len(set(lengths.values())) != 1:
        raise ValueError(f"outcome lists are not aligned: lengths {lengths}")
    if not next(iter(lengths.values())):
        raise ValueError("no task-trials")
    return list(zip(*outcomes_by_model.values()))


def pass_at_M(outcomes_by_model: Mapping[str, Sequence[bool]]) -> float:
    """pass@M = (1/m)·Σᵢ [∃ model: outcomeᵢ]  over m aligned task-trials."""
    rows = _aligned(outcomes_by_model)
    return sum(any(row) for row in rows) / len(rows)


def pass_hat_M(outcomes_by_model: Mapping[str, Sequence[bool]]) -> float:
    """pass^M = (1/m)·Σᵢ [∀ model: outcomeᵢ]  over m aligned task-trials."""
    rows = _aligned(outcomes_by_model)
    return sum(all(row) for row in rows) / len(rows)


def disagreement(success_rates: Mapping[str, float]) -> float:
    """D = H(r̄) − (1/M)·Σ_m H(r_m), r̄ = (1/M)·Σ_m r_m, H the binary entropy in bits.

    The mutual information between "which model" and "success" for one task: 0 when all
    models share a rate, 1 bit when half always succeed and half always fail. ≥ 0 because
    H is concave; the clamp only removes float rounding below zero.
    """
    if not success_rates:
        raise ValueError("disagreement of no models")
    rates = list(success_rates.values())
    pooled = math.fsum(rates) / len(rates)
    mean_h = math.fsum(binary_entropy(r) for r in rates) / len(rates)
    return max(0.0, binary_entropy(pooled) - mean_h)


def diagnostic_selection(outcomes: Mapping[TaskId, tuple[bool, ...]]) -> list[TaskId]:
    """One task per distinct pattern of model outcomes, sorted.

    outcomes maps a task to one success flag per model (same model order for every task).
    Each pattern is represented by its smallest task id, so the choice is deterministic.
    The all-True (shared capability) and all-False (shared deficiency) patterns are
    patterns like any other, so their anchors are kept whenever such a task exists, even
    though their disagreement is zero.
    """
    widths = {len(p) for p in outcomes.values()}
    if len(widths) > 1:
        raise ValueError(f"outcome patterns have different lengths: {sorted(widths)}")
    chosen: dict[tuple[bool, ...], TaskId] = {}
    for task in sorted(outcomes):
        chosen.setdefault(tuple(bool(x) for x in outcomes[task]), task)
    return sorted(chosen.values())
