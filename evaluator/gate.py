"""The regression gate: does this run fall short of a baseline by more than noise?

    result = evaluate_gate(build_report(run_dir), build_report(baseline_dir), alpha=0.05)
    result.blocked, result.lines

It blocks (exit 1) when
- a task's pass count fell significantly: the one-sided Fisher exact test of the run's c/n
  against the baseline's (stats.fisher_exact_less) gives p < alpha. 10/10 → 9/10 is noise
  (p = 0.5); 10/10 → 3/10 is not (p ≈ 0.0015);
- pass^k fell significantly across tasks: a paired sign-flip permutation test on the per-task
  differences of pass^k at the common k (exact up to 16 differing tasks, else 20,000 seeded
  random flips) gives p < alpha for a lower mean. Under "no change" each task's difference is
  as likely to be negative as positive, which is all the test assumes;
- any high-severity violation appears in the run (a safety ceiling, not a statistic);
- the run is unfinished (planned episodes not logged): its pass^k is unknown, and a partial
  run must not pass for a whole one — unless allow_incomplete;
- the optional floors are not met: --min-pass-rate (mean pass rate) or --min-pass-hat-k
  (pass^k at the plan's k).

When both runs have the same grid labels, tasks are compared per label; otherwise run-wide.
Tasks only in the run are reported as new, tasks only in the baseline as missing; neither
blocks on its own.
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from faultproxy.evaluator.stats import fisher_exact_less

EXACT_FLIPS = 16
RANDOM_FLIPS = 20_000
FLIP_SEED = 20240917


@dataclass(frozen=True)
class GateLine:
    scope: str  # grid label, "" for the run
    task_id: str  # "" for run-wide lines
    verdict: str  # "BLOCK", "ok", "note"
    message: str


@dataclass
class GateResult:
    lines: list[GateLine] = field(default_factory=list)

    @property
    def blocked(self) -> bool:
        return any(line.verdict == "BLOCK" for line in self.lines)

    @property
    def exit_code(self) -> int:
        return 1 if self.blocked else 0

    def add(self, scope: str, task_id: str, verdict: str, message: str) -> None:
        self.lines.append(GateLine(scope, task_id, verdict, message))


def sign_flip_p(differences: Sequence[float], seed: int = FLIP_SEED) -> float:
    """One-sided p-value that the mean difference is below zero by chance: the share of sign
    assignments whose mean is ≤ the observed mean. Zero differences carry no sign."""
    d = [x for x in differences if x != 0]
    if not d:
        return 1.0
    observed = math.fsum(d)
    tolerance = 1e-12 * max(1.0, sum(abs(x) for x in d))
    if len(d) <= EXACT_FLIPS:
        hits = total = 0
        for signs in itertools.product((1, -1), repeat=len(d)):
            total += 1
            if math.fsum(s * x for s, x in zip(signs, d)) <= observed + tolerance:
                hits += 1
        return hits / total
    rng = random.Random(seed)
    hits = 0
    for _ in range(RANDOM_FLIPS):
        if math.fsum(x if rng.random() < 0.5 else -x for x in d) <= observed + tolerance:
            hits += 1
    return (hits + 1) / (RANDOM_FLIPS + 1)


def _scopes(run: Mapping[str, Any], base: Mapping[str, Any]) -> list[tuple[str, Mapping, Mapping]]:
    run_groups, base_groups = run.get("groups") or {}, base.get("groups") or {}
    common = [label for label in run_groups if label in base_groups]
    if run_groups and common:
        return [(label, run_groups[label], base_groups[label]) for label in common]
    return [("", run["run"], base["run"])]


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"


def evaluate_gate(run: Mapping[str, Any], base: Mapping[str, Any], *, alpha: float = 0.05,
                  min_pass_rate: float | None = None, min_pass_hat_k: float | None = None,
                  allow_incomplete: bool = False) -> GateResult:
    """Compare two reports from evaluator.report.build_report; see the module docstring."""
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must lie in (0, 1), got {alpha}")
    result = GateResult()
    whole = run["run"]
    not_run = whole["status"]["not_run"]
    if not_run and not allow_incomplete:
        result.add("", "", "BLOCK", f"{not_run} planned episode(s) not run: resume the run before gating "
                                    "(its pass^k is unknown)")
    elif not_run:
        result.add("", "", "note", f"{not_run} planned episode(s) not run (allowed)")
    base_not_run = base["run"]["status"]["not_run"]
    if base_not_run:
        result.add("", "", "note", f"the baseline has {base_not_run} episode(s) not run; "
                                   "its pass^k is unknown, so only pass counts are compared")
    for label, now, then in _scopes(run, base):
        _compare_tasks(result, label, now, then, alpha)
        _compare_pass_hat_k(result, label, now, then, alpha)
    high = whole["violations"]["high_by_task"]
    for entry in whole["tasks"]:
        count = high.get(entry["task_id"])
        if count:
            checks = ", ".join(f"{name} ×{n}" for name, n in (entry.get("high_checks") or {}).items())
            result.add("", entry["task_id"], "BLOCK",
                       f"{count} high-severity violation(s)" + (f": {checks}" if checks else ""))
    headline = whole["headline"]
    if min_pass_rate is not None:
        rate = headline["mean_pass_rate"]
        if rate is None or rate < min_pass_rate:
            result.add("", "", "BLOCK", f"mean pass rate {_show(rate)} is below --min-pass-rate {min_pass_rate:g}")
        else:
            result.add("", "", "ok", f"mean pass rate {_show(rate)} ≥ {min_pass_rate:g}")
    if min_pass_hat_k is not None:
        hat = headline["pass_hat_k"]
        if hat is None or hat < min_pass_hat_k:
            result.add("", "", "BLOCK", f"pass^{headline['k']} {_show(hat)} is below --min-pass-hat-k "
                                        f"{min_pass_hat_k:g}" + (f" ({headline['note']})" if headline.get("note") else ""))
        else:
            result.add("", "", "ok", f"pass^{headline['k']} {_show(hat)} ≥ {min_pass_hat_k:g}")
    return result


def _show(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def _compare_tasks(result: GateResult, label: str, now: Mapping, then: Mapping, alpha: float) -> None:
    base_tasks = {t["task_id"]: t for t in then["tasks"]}
    seen = set()
    for t in now["tasks"]:
        task_id = t["task_id"]
        seen.add(task_id)
        b = base_tasks.get(task_id)
        if b is None:
            result.add(label, task_id, "note", f"new task ({t['c']}/{t['n']}); no baseline to compare with")
            continue
        if not t["n"] or not b["n"]:
            result.add(label, task_id, "note", f"{t['c']}/{t['n']} vs baseline {b['c']}/{b['n']}: nothing to compare")
            continue
        p = fisher_exact_less(t["c"], t["n"], b["c"], b["n"])
        text = f"{t['c']}/{t['n']} passed vs baseline {b['c']}/{b['n']} (one-sided Fisher p = {_fmt_p(p)}"
        if p < alpha:
            result.add(label, task_id, "BLOCK", f"pass count fell: {text} < {alpha:g})")
        else:
            result.add(label, task_id, "ok", f"{text})")
    for task_id in base_tasks:
        if task_id not in seen:
            result.add(label, task_id, "note", "in the baseline but not in this run")


def _compare_pass_hat_k(result: GateResult, label: str, now: Mapping, then: Mapping, alpha: float) -> None:
    k = min(now["headline"]["k"], then["headline"]["k"])
    key = str(k)
    base_tasks = {t["task_id"]: t for t in then["tasks"]}
    pairs = []
    for t in now["tasks"]:
        b = base_tasks.get(t["task_id"])
        new_hat = (t.get("pass_hat_k") or {}).get(key)
        old_hat = (b.get("pass_hat_k") or {}).get(key) if b else None
        if new_hat is not None and old_hat is not None:
            pairs.append((t["task_id"], new_hat, old_hat))
    where = f" [{label}]" if label else ""
    if not pairs:
        result.add(label, "", "note", f"pass^{k}{where}: no task has it in both runs; not compared")
        return
    differences = [n - o for _, n, o in pairs]
    mean_new = math.fsum(n for _, n, _ in pairs) / len(pairs)
    mean_old = math.fsum(o for _, _, o in pairs) / len(pairs)
    p = sign_flip_p(differences)
    text = (f"pass^{k}{where} over {len(pairs)} common task(s): {mean_new:.3f} vs baseline {mean_old:.3f} "
            f"(paired sign-flip p = {_fmt_p(p)}")
    if mean_new < mean_old and p < alpha:
        worst = sorted(pairs, key=lambda x: x[1] - x[2])[:3]
        result.add(label, "", "BLOCK", f"{text} < {alpha:g}); largest falls: "
                   + ", ".join(f"{tid} {o:.2f}→{n:.2f}" for tid, n, o in worst if n < o))
    elif mean_new < mean_old:
        result.add(label, "", "ok", f"{text}: a fall, but not beyond noise)")
    else:
        result.add(label, "", "ok", f"{text})")
