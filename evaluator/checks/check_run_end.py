"""How the agent's run ended, when it ended badly by its own doing: a crash or a budget overrun.

That is the agent failing at its job (formats.episode_causes): the episode is judged like a
completed one, and this finding — `crash` or `budget`, medium unless the tasks file's `severity`
says otherwise — fails it beside whatever the other checks found in what it did.
"""

from __future__ import annotations


from faultproxy.evaluator.checks.check_result import CheckResult, last_words
from faultproxy.formats.episode_causes import AGENT_FINDING_SEVERITY, AGENT_FINDINGS, BUDGET_REPLY, CRASH
from faultproxy.formats.run_records import EpisodeRecord

_BUDGETS = {"budget_wall": ("wall-time", "duration_s", "s"), "budget_requests": ("request", "exchanges", "requests"),
            "budget_tokens": ("token", "tokens", "tokens"), BUDGET_REPLY: ("reply-time", "duration_s", "s")}


def check_ending(record: EpisodeRecord) -> CheckResult | None:
    """The `crash` or `budget` finding of an episode the agent ended badly; None for any other ending."""
    cause = record.get("cause")
    name = AGENT_FINDINGS.get(cause)
    if name is None:
        return None
    return CheckResult(name, False, AGENT_FINDING_SEVERITY, _crash(record) if cause == CRASH else _overrun(cause, record))


def _crash(record: EpisodeRecord) -> str:
    code = record.get("exit_code")
    how = f"was killed by signal {-code}" if isinstance(code, int) and code < 0 else "crashed"
    return f"the agent {how}" + last_words(record)


def _overrun(cause: str, record: EpisodeRecord) -> str:
    what, field, unit = _BUDGETS[cause]
    spent = record.get(field) if field == "duration_s" else (record.get("stats") or {}).get(field)
    return f"the agent overran its {what} budget and was stopped" + (f" after {spent:g} {unit}"
                                                                       if isinstance(spent, (int, float)) else "")
