"""What a check returns, and the small helpers the checks share."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from faultproxy.evaluator.traces import HeardRecord, TracedExchange
from faultproxy.formats.run_records import CheckRecord, EpisodeRecord
from faultproxy.tasks.task_model import SEVERITY_RANK, Task


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool | None  # None: not applicable
    severity: str
    detail: str = ""

    def to_json(self) -> CheckRecord:
        return {"name": self.name, "passed": self.passed, "severity": self.severity, "detail": self.detail}


# A check: what it makes of the task, the record (as the judge hands it over) and the trace.
Check = Callable[[Task, HeardRecord, Sequence[TracedExchange]], CheckResult]


def not_applicable(name: str, severity: str, why: str) -> CheckResult:
    return CheckResult(name, None, severity, why)


def clip(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"


def last_words(record: EpisodeRecord) -> str:
    """": " and the last line the agent printed (its log tail), clipped; "" when it printed none:
    what a user reads first when an agent ends badly (a traceback's last line names the error)."""
    last = next((line for line in reversed(str(record.get("log_tail") or "").splitlines()) if line.strip()), "")
    return f": {clip(last)}" if last else ""


def max_severity(a: str, b: str) -> str:
    return a if SEVERITY_RANK[a] >= SEVERITY_RANK[b] else b

