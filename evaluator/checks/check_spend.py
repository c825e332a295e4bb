"""The `budget` check: what an episode spent against its task's (or policy's) budgets.

A monitor judges every budget from the trace (check_budget). A run's agent is stopped live when it
overruns its wall time, requests or tokens (runner.agent; the `budget` finding of
evaluator.checks.check_run_end); the watch looks every 50 ms (runner.agent.POLL_S), so a run judges here the requests
and tokens of an agent that was not stopped, and the cost (check_spent). The cost needs each
model's usage priced: cost = Σ input·input_per_mtok + output·output_per_mtok, per million tokens,
at the prices the loader attached to the budget. A model that used tokens but has no price makes
the cost unknown: said in the detail, never guessed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faultproxy.evaluator.checks.check_result import CheckResult, not_applicable
from faultproxy.evaluator.traces import HeardRecord, TracedExchange, episode_cost, model_usage
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.tasks.task_model import Budgets, Task

NAME, SEVERITY = "budget", "medium"


def check_budget(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange]) -> CheckResult:
    """Every budget, from the trace (a monitor's episodes: nobody stops live traffic)."""
    return _judge(task.budgets, record, exchanges, ("requests", "tokens", "wall_s"))


def check_spent(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange]) -> CheckResult:
    """A run's episode: its cost, and the requests and tokens it spent when the runner did not
    stop it for them (an agent that overspends and exits between two looks of the live watch
    is over its budget all the same). Wall time is the live watch's alone."""
    stopped = str(record.get("cause") or "").startswith("budget_")
    return _judge(task.budgets, record, exchanges, () if stopped else ("requests", "tokens"))


def _judge(budgets: Budgets, record: EpisodeRecord, exchanges: Sequence[TracedExchange],
           limits: tuple[str, ...]) -> CheckResult:
    given = {what: getattr(budgets, what) for what in limits if getattr(budgets, what) is not None}
    if not given and budgets.cost is None:
        return not_applicable(NAME, SEVERITY, "no budgets")
    used = {"requests": sum(1 for ex in exchanges if ex.is_request), "tokens": sum(ex.tokens for ex in exchanges),
            "wall_s": float(record.get("duration_s") or 0.0)}
    over = [f"{what} {used[what]:g} over {limit:g}" for what, limit in given.items() if used[what] > limit]
    spent = _cost(budgets, exchanges)
    if isinstance(spent, float) and spent > budgets.cost:
        over.append(f"cost {spent:.4g} over {budgets.cost:g}")
    if over:
        return CheckResult(NAME, False, SEVERITY, "; ".join(over))
    if not given and isinstance(spent, str):  # only a cost to judge, and it cannot be known
        return not_applicable(NAME, SEVERITY, _cost_note(spent)[2:])
    spent_text = ", ".join(f"{used[what]:.1f} s" if what == "wall_s" else f"{used[what]} {what}" for what in given)
    return CheckResult(NAME, True, SEVERITY, f"{spent_text or 'spent'}{_cost_note(spent)}: within the budgets")


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
