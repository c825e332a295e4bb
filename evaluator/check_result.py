"""What a check returns, and the small helpers the checks share."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from faultproxy.tasks.model import SEVERITY_RANK


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool | None  # None: not applicable
    severity: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "severity": self.severity, "detail": self.detail}


def not_applicable(name: str, severity: str, why: str) -> CheckResult:
    return CheckResult(name, None, severity, why)


def clip(text: str, limit: int = 120) -> str:
    text = " ".join(str(text).split())
    return text if len(text) <= limit else text[: limit - 1] + "…"



def max_severity(a: str, b: str) -> str:
    return a if SEVERITY_RANK[a] >= SEVERITY_RANK[b] else b

