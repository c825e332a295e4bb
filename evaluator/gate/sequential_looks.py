"""The sequential gate: the regression gate at declared looks, with α spent across them.

    design = Design(alpha=0.05, margin=0.2, max_high=0, min_k=2, max_k=16, baseline_digest=run_digest(base))
    outcome = evaluate_sequential(run_dir, base_dir, design)
    outcome.result.verdict, outcome.todo_k, outcome.stop_k, outcome.fixed_k

Method: group-sequential, with an α-spending function over declared looks (Lan & DeMets 1983).
The looks are at kⱼ = min_k, 2·min_k, 4·min_k, … trials per task, and max_k last (doubling keeps
the looks few, so little α goes to each, while a clear case stops after a few trials). Look j
gets αⱼ = α(kⱼ/K) − α(kⱼ₋₁/K) of the power family α(t) = α·t^ρ (Kim & DeMets 1987; ρ = RHO,
stats.look_levels), and is the fixed-k gate of evaluator.gate run at level αⱼ on the episodes
with trial < kⱼ: the same exact stratified and per-task tests, Holm-corrected, the same
non-inferiority interval (now 1 − 2αⱼ), the same safety ceiling (absolute, so it blocks at the
first look it is crossed). The first look whose verdict is not INCONCLUSIVE decides; at max_k
INCONCLUSIVE stands.

Why the error rates hold under optional stopping: look j's tests reject a true hypothesis with
probability ≤ αⱼ whatever came before, so the chance that some look does is ≤ Σⱼ αⱼ = α by the
union bound, however the looks are correlated and wherever the run stops; the same holds for
PASS when the agent really lost the margin (each look's interval is a level-αⱼ test of it).
It is conservative: the bound ignores the strong correlation between looks (exact
group-sequential boundaries would use it, but they exist for normal statistics, not for the
exact conditional tests the gate uses on few trials). A killed run resumes at the look it had
not finished, so the looks stay the declared ones. Tasks and grid points are not stopped one by
one: a look's counts must be fixed by the design for its tests to keep their level.

The design (method, α, margin, --max-high, min/max k, looks and levels, the baseline's digest)
is sealed in plan.json under "sequential"; evaluating with another design, or another baseline,
is refused (GateError, exit 2).
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate import EpisodeSink, build_report
from faultproxy.evaluator.gate.gate_model import (INCONCLUSIVE, GateError, GateInput, GateResult, TaskCounts,
                                                  gate_input, high_detail)
from faultproxy.evaluator.gate.regression_gate import evaluate_counts
from faultproxy.evaluator.statistics import fixed_k_equivalent, look_levels
from faultproxy.formats.errors import UserError
from faultproxy.formats.rundir import read_plan, run_digest
from faultproxy.formats.verdict_layout import STATUSES, VerdictFields, decode_name, failed_pairs

METHOD = "group-sequential alpha-spending, power family, union bound over doubling looks"
RHO = 3.0  # most of α at the later looks, so power at max_k stays near the fixed-k gate's
MIN_K, MAX_K = 2, 16  # --min-k and --max-k unless given
PLAN_KEY = "sequential"
BASELINE_KEY = "baseline"  # beside the design in plan.json: the baseline's path when the run was sealed


def doubling_looks(min_k: int, max_k: int) -> list[int]:
    """min_k, 2·min_k, 4·min_k, … below max_k, then max_k."""
    if not 1 <= min_k <= max_k:
        raise ValueError(f"need 1 ≤ min_k ≤ max_k, got min_k={min_k}, max_k={max_k}")
    looks = [min_k]
    while looks[-1] * 2 < max_k:
        looks.append(looks[-1] * 2)
    return looks if looks[-1] == max_k else [*looks, max_k]


@dataclass(frozen=True)
class Design:
    """A sequential gate's design: what plan.json seals."""

    alpha: float
    margin: float
    max_high: int
    min_k: int
    max_k: int
    baseline_digest: str
    rho: float = RHO
    method: str = METHOD

    @property
    def looks(self) -> list[int]:
        return doubling_looks(self.min_k, self.max_k)

    @property
    def levels(self) -> list[float]:
        return look_levels(self.alpha, self.looks, self.rho)

    def to_json(self) -> dict[str, Any]:
        return {**dataclasses.asdict(self), "looks": self.looks, "levels": self.levels}

    @classmethod
    def from_json(cls, document: Mapping[str, Any], source: str) -> Design:
        try:
            return cls(**{f.name: document[f.name] for f in dataclasses.fields(cls)})
        except (KeyError, TypeError) as error:
            raise GateError(f"{source}: the sealed sequential design is damaged ({error})") from None

    def differences(self, other: Design) -> list[str]:
        """The fields in which two designs differ, as 'name sealed → asked'."""
        return [f"{f.name} {getattr(self, f.name)} → {getattr(other, f.name)}" for f in dataclasses.fields(self)
                if getattr(self, f.name) != getattr(other, f.name)]


def sealed_design(run_dir: Path) -> Design | None:
    """The design plan.json seals, or None for a fixed-k run."""
    plan = read_plan(run_dir)
    document = plan.document.get(PLAN_KEY)
    return None if document is None else Design.from_json(document, str(plan.path))


def check_design(sealed: Design, asked: Design, where: str) -> None:
    """GateError (exit 2) unless the design asked for is the one sealed."""
    differ = sealed.differences(asked)
    if differ:
        raise GateError(f"{where} was sealed with another sequential design ({'; '.join(differ)}): "
                        "its error rates hold only for the design it was run with")


@dataclass(frozen=True)
class Trial:
    """What a look needs of one logged episode."""

    trial: int
    passed: bool
    unjudged: str | None  # the harness cause of an incomplete episode (evaluator.gate: ERROR)
    high: tuple[str, ...]  # its failed high-severity checks


class TrialSink(EpisodeSink):
    """Per grid label and task, each logged trial: status, harness cause, high-severity checks."""

    wants_fields = True

    def __init__(self) -> None:
        self.trials: dict[tuple[str, str], list[Trial]] = {}

    def fields(self, v: VerdictFields, task_id: str) -> None:
        label = v.grid_label if isinstance(v.grid_label, str) else decode_name(v.grid_label) or ""
        failed = failed_pairs(v.failed) if isinstance(v.failed, bytes) else v.failed
        high = tuple(str(name) for name, severity in failed if severity == "high")
        cause = (decode_name(v.cause) if isinstance(v.cause, bytes) else v.cause) or "unknown"
        self.trials.setdefault((label, task_id), []).append(
            Trial(v.trial, STATUSES[v.status] == "pass", cause if STATUSES[v.status] == "incomplete" else None, high))

    def look(self, full: GateInput, labels: list[str], task_ids: list[str], k: int) -> GateInput:
        """The run as the gate sees it at a look: trials below k only."""
        scopes: dict[str, list[TaskCounts]] = {}
        high: dict[str, Counter[str]] = {}
        unjudged: Counter[str] = Counter()
        for label in labels:
            for task_id in task_ids:
                seen = [t for t in self.trials.get((label, task_id), ()) if t.trial < k]
                causes = [t.unjudged for t in seen if t.unjudged]
                unjudged.update(causes)
                scopes.setdefault(label if full.sweep else "", []).append(
                    TaskCounts(task_id, sum(t.passed for t in seen), len(seen), len(causes)))
                for name in (name for t in seen for name in t.high):
                    high.setdefault(task_id, Counter())[name] += 1
        logged = sum(t.n for tasks in scopes.values() for t in tasks)
        return dataclasses.replace(
            full, scopes=scopes, k=k, not_run=k * len(labels) * len(task_ids) - logged, incomplete=dict(unjudged),
            high=sum(n for names in high.values() for n in names.values()), high_detail=high_detail(high.items()))


@dataclass
class Outcome:
    """Where the sequential gate stands: the verdict of the look it stopped at, and what to run next."""

    result: GateResult
    design: Design
    look: int  # index of the look that decided (or that is still to finish)
    todo_k: int | None  # trials per task the runner must reach next; None when decided
    logged: int  # episodes in the log
    used: int  # episodes the decision rests on (trials below stop_k)
    fixed_k: int | None  # trials per task a fixed-k design needs for the same power
    tasks: int  # tasks × grid points compared

    @property
    def stop_k(self) -> int:
        return self.design.looks[self.look]

    def summary(self) -> str:
        looks = self.design.looks
        at = f"round {self.look + 1} of {len(looks)} (k = {self.stop_k} per task, looks at {looks})"
        state = "stopped at" if self.todo_k is None else "waiting to finish"
        text = (f"sequential: {state} {at}; {self.used} episodes decide it ({self.logged} logged) of "
                f"{self.design.max_k * self.tasks} at max-k {self.design.max_k}; α at this look "
                f"{self.design.levels[self.look]:.2g} of {self.design.alpha:g}")
        if self.fixed_k is not None:
            text += (f"; a fixed-k gate with the same power against a drop of {self.design.margin:g} needs "
                     f"k = {self.fixed_k} ({self.fixed_k * self.tasks} episodes)")
        return text


def evaluate_sequential(run_dir: Path, base_dir: Path, design: Design, *, jobs: int | None = None) -> Outcome:
    """Replay the looks on the run's log in order; stop at the first decision or unfinished look.
    GateError when the baseline is not the one the design names."""
    if run_digest(base_dir) != design.baseline_digest:
        raise GateError(f"{base_dir}: not the baseline this sequential run was sealed with "
                        "(its plan and log digest differs)")
    sink = TrialSink()
    report = build_report(run_dir, sinks=[sink], jobs=jobs, drilldown_limit=0)
    full, base = gate_input(report), gate_input(build_report(base_dir, jobs=jobs, drilldown_limit=0))
    plan = read_plan(run_dir)
    look, now, result = replay_looks(lambda k: sink.look(full, plan.labels, plan.task_ids, k), base, design)
    k, unfinished, logged = design.looks[look], now.not_run > 0, report["run"]["logged"]
    tables = [(t.c, t.n, b.c, b.n) for label, tasks in now.scopes.items()
              for t, b in _common(tasks, base.scopes.get(label, ())) if t.n and b.n]
    fixed = fixed_k_equivalent(tables, design.margin, design.alpha, design.levels[-1], design.max_k) if tables else None
    outcome = Outcome(result, design, look, k if unfinished else None, logged,
                      sum(t.n for tasks in now.scopes.values() for t in tasks), fixed,
                      len(plan.task_ids) * len(plan.labels))
    result.add("", "", "note", outcome.summary())
    return outcome


def replay_looks(at_look: Callable[[int], GateInput], base: GateInput,
                 design: Design) -> tuple[int, GateInput, GateResult]:
    """The looks in order, each the gate at its level on at_look(kⱼ) (the run with trials below kⱼ):
    (look index, its input, its result) of the first that decides, is unfinished, or is the last."""
    for look, (k, level) in enumerate(zip(design.looks, design.levels)):
        now = at_look(k)
        result = evaluate_counts(now, base, alpha=level, margin=design.margin, max_high=design.max_high)
        if now.not_run or result.verdict != INCONCLUSIVE or k == design.max_k:
            break
    return look, now, result


def _common(run: Any, base: Any) -> list[tuple[TaskCounts, TaskCounts]]:
    by_id = {b.task_id: b for b in base}
    return [(t, by_id[t.task_id]) for t in run if t.task_id in by_id]


def report_section(run_dir: Path, *, jobs: int | None = None) -> dict[str, Any] | None:
    """report.json's "sequential": the sealed design and where the gate stands against the baseline
    sealed beside it (its "line" says it in words); None for a fixed-k run."""
    plan = read_plan(run_dir)
    document = plan.document.get(PLAN_KEY)
    if document is None:
        return None
    design = Design.from_json(document, str(plan.path))
    section: dict[str, Any] = {"design": design.to_json(), "baseline": document.get(BASELINE_KEY)}
    try:
        outcome = evaluate_sequential(run_dir, Path(section["baseline"] or "?"), design, jobs=jobs)
    except UserError as error:
        return {**section, "line": f"sequential: the looks cannot be replayed against the sealed baseline ({error})"}
    return {**section, "verdict": outcome.result.verdict, "decided": outcome.todo_k is None,
            "round": outcome.look + 1, "rounds": len(design.looks), "k": outcome.stop_k,
            "episodes_used": outcome.used, "episodes_logged": outcome.logged,
            "episodes_at_max_k": design.max_k * outcome.tasks, "fixed_k": outcome.fixed_k,
            "line": f"{outcome.summary()}; verdict {outcome.result.verdict}" + _unneeded(outcome)}


def _unneeded(outcome: Outcome) -> str:
    """Why a decided run has planned episodes 'not run': the design planned max-k, the gate needed fewer."""
    left = outcome.design.max_k * outcome.tasks - outcome.used
    if outcome.todo_k is not None or not left:
        return ""
    return f" (the {left} episode(s) past k = {outcome.stop_k} were not needed: they are the report's 'not run')"
