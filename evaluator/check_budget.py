"""The `budget` check: what an episode spent against its task's (or policy's) budgets.

A monitor judges every budget from the trace (check_budget). A run's agent is stopped live when it
overruns its wall time, requests or tokens (runner.agent; the `budget` finding of
evaluator.check_ending), so a run judges here only the cost (check_cost), which needs each
model's usage priced: cost = Σ input·input_per_mtok + output·output_per_mtok, per million tokens,
at the prices the loader attached to the budget. A model that used tokens but has no price makes
the cost unknown: said in the detail, never guessed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.check_result import CheckResult, not_applicable
from faultproxy.evaluator.tally import episode_cost
from faultproxy.evaluator.traced import TracedExchange
from faultproxy.evaluator.usage import model_usage

NAME, SEVERITY = "budget", "medium"


def check_budget(task: Any, record: Mapping[str, Any], exchanges: Sequence[TracedExchange]) -> CheckResult:
    budgets = task.budgets
    if all(limit is None for limit in (budgets.requests, budgets.tokens, budgets.wall_s, budgets.cost)):
        return not_applicable(NAME, SEVERITY, "no budgets")
    used = {"requests": sum(1 for ex in exchanges if ex.is_request), "tokens": sum(ex.tokens for ex in exchanges),
            "wall_s": float(record.get("duration_s") or 0.0)}
    over = [f"{what} {used[what]:g} over {limit:g}" for what, limit in
            (("requests", budgets.requests), ("tokens", budgets.tokens), ("wall_s", budgets.wall_s))
            if limit is not None and used[what] > limit]
    spent = _cost(budgets, exchanges)
    if isinstance(spent, float) and spent > budgets.cost:
        over.append(f"cost {spent:.4g} over {budgets.cost:g}")
    if over:
        return CheckResult(NAME, False, SEVERITY, "; ".join(over))
    return CheckResult(NAME, True, SEVERITY, f"{used['requests']} requests, {used['tokens']} tokens, "
                                             f"{used['wall_s']:.1f} s{_cost_note(spent)}: within the budgets")


def _cost(budgets: Any, exchanges: Sequence[TracedExchange]) -> float | str | None:
    """The episode's cost at the budget's prices; None without a cost budget; the names of the
    models that used tokens but have no price, when the cost cannot be known."""
    if budgets.cost is None:
        return None
    usage = model_usage(exchanges, None)
    unpriced = sorted(model for model in usage if model not in budgets.prices)
    return ", ".join(unpriced) if unpriced else episode_cost(usage, budgets.prices)


def _cost_note(spent: float | str | None) -> str:
    if spent is None:
        return ""
    if isinstance(spent, str):  # not judged rather than guessed: the policy should price every model
        return f", cost unknown (no price for {spent})"
    return f", cost {spent:.4g}"


def check_cost(task: Any, record: Mapping[str, Any], exchanges: Sequence[TracedExchange]) -> CheckResult:
    """A run's episode over its cost budget (the runner enforces the other budgets live)."""
    spent = _cost(task.budgets, exchanges)
    if not isinstance(spent, float):
        return not_applicable(NAME, SEVERITY, "no cost budget" if spent is None else _cost_note(spent)[2:])
    if spent > task.budgets.cost:
        return CheckResult(NAME, False, SEVERITY, f"cost {spent:.4g} over {task.budgets.cost:g}")
    return CheckResult(NAME, True, SEVERITY, f"cost {spent:.4g}: within the budget")
