"""What the regression gate reads and what it answers: per-task counts per scope (TaskCounts,
GateInput, read from a report by gate_input) and the verdict with its lines (GateResult: PASS,
BLOCK, INCONCLUSIVE or ERROR, and the exit status of each). evaluator.gate.regression_gate
decides; evaluator.gate.sequential_looks decides again at each look."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from faultproxy.formats.episode_causes import NOT_RUN
from faultproxy.formats.errors import UserError

BLOCK, INCONCLUSIVE, PASS, ERROR = "BLOCK", "INCONCLUSIVE", "PASS", "ERROR"
EXIT_PASS, EXIT_BLOCK, EXIT_INCONCLUSIVE, EXIT_ERROR = 0, 1, 3, 4


class GateError(UserError):
    """Two runs the gate cannot compare; the message says why."""


@dataclass(frozen=True)
class TaskCounts:
    """One task of one scope: c passes among n logged episodes, `incomplete` of which the harness
    could not judge."""

    task_id: str
    c: int
    n: int
    incomplete: int = 0


@dataclass(frozen=True)
class GateInput:
    """What the gate reads from one report: per-task counts per scope, and the absolute rules."""

    scopes: Mapping[str, Sequence[TaskCounts]]  # grid label ("" for a plain run) -> tasks
    source: str = ""
    sweep: bool = False
    not_run: int = 0
    incomplete: Mapping[str, int] = field(default_factory=dict)  # harness cause -> logged episodes
    high: int = 0
    high_detail: str = ""
    scenario_digest: str | None = None
    tasks_digest: str | None = None
    k: int = 0
    mean_pass_rate: float | None = None
    pass_hat_k: float | None = None
    headline_note: str | None = None
    causes: dict[str, str] = field(default_factory=dict)  # failure cause id -> its line (evaluator.aggregate.causes)

    @property
    def unjudged(self) -> dict[str, int]:
        """Episodes the harness could not judge, by cause: the logged incomplete ones and NotRun."""
        causes = {cause: n for cause, n in self.incomplete.items() if n and cause != NOT_RUN}
        return causes | ({NOT_RUN: self.not_run} if self.not_run else {})

    def judged_only(self) -> GateInput:
        """The same counts with the episodes the harness could not judge left out."""
        scopes = {label: [TaskCounts(t.task_id, t.c, t.n - t.incomplete) for t in tasks]
                  for label, tasks in self.scopes.items()}
        return replace(self, scopes=scopes, not_run=0, incomplete={})


@dataclass(frozen=True)
class GateLine:
    scope: str  # grid label, "" for the run
    task_id: str  # "" for lines about a whole scope
    verdict: str  # "ERROR", "BLOCK", "INCONCLUSIVE", "ok", "note"
    message: str
    reason: str = ""  # for BLOCK: "regression", "safety", "floor"; for ERROR: "harness"


@dataclass
class GateResult:
    lines: list[GateLine] = field(default_factory=list)
    # side ("run", "baseline") -> {harness cause: episodes}: what could not be judged
    unjudged: dict[str, dict[str, int]] = field(default_factory=dict)
    left_out: int = 0  # unjudged episodes left out of both sides (allow_incomplete)

    @property
    def verdict(self) -> str:
        """ERROR if the harness could not judge, else BLOCK if any line blocks, else INCONCLUSIVE
        if any interval allows the margin, else PASS."""
        if any(line.verdict == ERROR for line in self.lines):
            return ERROR
        if any(line.verdict == BLOCK for line in self.lines):
            return BLOCK
        return INCONCLUSIVE if any(line.verdict == INCONCLUSIVE for line in self.lines) else PASS

    @property
    def blocked(self) -> bool:
        return self.verdict == BLOCK

    @property
    def reasons(self) -> list[str]:
        """The distinct kinds of BLOCK, in the order they first appear."""
        return list(dict.fromkeys(line.reason for line in self.lines if line.verdict == BLOCK))

    @property
    def unjudged_text(self) -> str:
        """The unjudged episodes by side and cause, e.g. "run: infra_error 8; baseline: NotRun 2"."""
        return "; ".join(f"{side}: {cause_counts(causes)}" for side, causes in self.unjudged.items())

    def exit_code(self, inconclusive_ok: bool = False) -> int:
        """4 for ERROR, 1 for BLOCK, 3 for INCONCLUSIVE (0 with inconclusive_ok), 0 for PASS."""
        if self.verdict == ERROR:
            return EXIT_ERROR
        if self.verdict == BLOCK:
            return EXIT_BLOCK
        if self.verdict == INCONCLUSIVE and not inconclusive_ok:
            return EXIT_INCONCLUSIVE
        return EXIT_PASS

    def add(self, scope: str, task_id: str, verdict: str, message: str, reason: str = "") -> None:
        self.lines.append(GateLine(scope, task_id, verdict, message, reason))


def gate_input(report: Mapping[str, Any]) -> GateInput:
    """The counts and rules the gate needs from a report of evaluator.aggregate.report.build_report."""
    whole = report["run"]
    groups = report.get("groups") or {}
    scopes = groups if groups else {"": whole}
    tasks_of = {label: [TaskCounts(t["task_id"], t["c"], t["n"], t.get("incomplete", 0)) for t in scope["tasks"]]
                for label, scope in scopes.items()}
    detail = high_detail((entry["task_id"], entry["high_checks"]) for entry in whole["tasks"] if entry.get("high_checks"))
    headline = whole["headline"]
    return GateInput(
        scopes=tasks_of, source=str(report.get("run_dir") or ""), sweep=bool(groups),
        not_run=whole["status"]["not_run"], incomplete=dict(whole.get("incomplete_by_cause") or {}), high=whole["violations"]["total_by_severity"]["high"],
        high_detail=detail,
        scenario_digest=(report.get("scenario") or {}).get("digest"), tasks_digest=report.get("tasks_digest"),
        k=headline["k"], mean_pass_rate=headline["mean_pass_rate"], pass_hat_k=headline["pass_hat_k"],
        headline_note=headline.get("note"),
        causes={c["id"]: c["line"] for c in (report.get("causes") or {}).get("clusters") or ()})


def high_detail(tasks: Iterable[tuple[str, Mapping[str, int]]]) -> str:
    """'t01 idempotency ×2; t04 secret ×1': each task's high-severity checks with their counts."""
    return "; ".join(f"{task_id} " + ", ".join(f"{name} ×{n}" for name, n in checks.items())
                     for task_id, checks in tasks)


def cause_counts(causes: Mapping[str, int]) -> str:
    """"infra_error 8, NotRun 2": episodes by harness cause."""
    return ", ".join(f"{cause} {n}" for cause, n in causes.items())
