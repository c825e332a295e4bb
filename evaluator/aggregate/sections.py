"""The report's sections: what one scope (the whole run, or one grid label) says about its tasks.

    scope_report(label, accumulators, k, planned_per_task, prices)   # a JSON-able dict

What it computes from the per-task accumulators (evaluator.aggregate.tally):
- per task: planned, logged (n), passed (c), failed, incomplete, not run; flaky, never passed;
  pass rate with its Wilson interval; pass^k and pass@k per k (metrics.pass_hat_k/pass_at_k);
  trajectory consistency (mean pairwise Jaccard of endpoint sets, same order); resources;
- the pass^k curve (metrics.pass_k_curve's formula, averaged over tasks) and the headline
  mean pass rate beside pass^k at the plan's k;
- failures by shape, by check and by fault type (faults not delivered are "not exercised",
  never "survived"); incomplete episodes by cause, with NotRun for planned, unlogged ones;
- violations by severity and the safety score; tokens, cost, requests and latency with their
  coefficients of variation; calibration where agents reported a confidence.

Rules that keep the numbers honest:
- an incomplete episode (crash, budget, ...) counts as a trial that did not pass;
- a planned episode that is not in the log is NotRun: the task's pass^k and the curve are then
  null ("not until resumed"), since n would differ between tasks;
- a k beyond 100 is reported on a geometric grid of k (every k up to 100, then ~12 per decade,
  and n itself): a 1000-point curve per task says nothing the grid does not.
"""

from __future__ import annotations

import json
import math
from array import array
from collections import Counter
from collections.abc import Mapping, Sequence
from itertools import compress, groupby, repeat
from typing import Any

from faultproxy.evaluator.aggregate.tally import TaskAccumulator
from faultproxy.evaluator.statistics import (TaskTally, brier_score, calibration_buckets, coefficient_of_variation,
                                             counted_coefficient_of_variation, counted_safety_score,
                                             fisher_exact_less, mean_pass_rate, pass_at_k, pass_hat_k, pass_k_curve,
                                             percentile, trajectory_consistency, wilson_interval)
from faultproxy.formats.episode_causes import INFRA_ERROR, NOT_RUN
from faultproxy.tasks.task_model import SEVERITIES

MAX_FULL_K = 100
MAX_TRAJECTORY_GROUPS = 2000  # distinct endpoint sequences of one task; beyond, consistency is not computed
EXACT_TEST_LIMIT = 4000  # episodes; the exact Fisher test sums big binomials


def k_points(n: int, also: int | None = None) -> list[int]:
    """Every k from 1 to n when n ≤ MAX_FULL_K; else every k up to MAX_FULL_K, then about 12
    points per decade, n, and `also` (the plan's k) when it is at most n."""
    if n <= MAX_FULL_K:
        return list(range(1, n + 1))
    points = set(range(1, MAX_FULL_K + 1))
    if also is not None and 1 <= also <= n:
        points.add(also)
    x = float(MAX_FULL_K)
    while x < n:
        x *= 10 ** (1 / 12)
        points.add(min(n, round(x)))
    points.add(n)
    return sorted(points)


def scope_report(label: str, tasks: list[TaskAccumulator], k: int, planned_per_task: int,
                 prices: Mapping[str, Any]) -> dict[str, Any]:
    """One scope's section of the report: its tasks' accumulators (finished and priced), each
    planned with planned_per_task trials; see the module docstring for what it holds."""
    status = {"pass": sum(t.c for t in tasks), "fail": sum(t.fail for t in tasks),
              "incomplete": sum(t.incomplete for t in tasks), "not_run": sum(t.not_run for t in tasks)}
    logged = status["pass"] + status["fail"] + status["incomplete"]
    per_task = [_task_entry(t, k) for t in tasks]
    not_run = status["not_run"]
    tallies = [TaskTally(t.task_id, t.shape, t.n, t.c) for t in tasks if t.n]
    curve = None
    if tallies and not not_run:
        curve = _curve(tallies, k)
    headline: dict[str, Any] = {
        "mean_pass_rate": mean_pass_rate(tallies) if tallies else None,
        "wilson": list(wilson_interval(status["pass"], logged)) if logged else None,
        "k": k,
        "pass_hat_k": None, "pass_at_k": None,
        "note": None,
        "infra_errors": sum(t.causes.get(INFRA_ERROR, 0) for t in tasks),
    }
    if curve:
        top = max(kk for kk in curve["k"] if kk <= k) if any(kk <= k for kk in curve["k"]) else curve["k"][-1]
        i = curve["k"].index(top)
        headline.update(k=top, pass_hat_k=curve["pass_hat_k"][i], pass_at_k=curve["pass_at_k"][i])
    elif not_run:
        headline["note"] = f"pass^k not until resumed: {not_run} planned episode(s) not run"
    elif not tallies:
        headline["note"] = "no episodes logged"
    return {
        "label": label,
        "planned": planned_per_task * len(tasks),
        "logged": logged,
        "status": status,
        "headline": headline,
        "curve": curve,
        "tasks": per_task,
        "flaky": [e["task_id"] for e in per_task if e["flaky"]],
        "never_passed": [e["task_id"] for e in per_task if e["never_passed"]],
        "by_shape": _by_shape(tasks),
        "by_check": _by_check(tasks),
        "by_fault": _by_fault(tasks),
        "incomplete_by_cause": _by_cause(tasks),
        "violations": _violations(tasks, logged),
        "resources": _resources(tasks, prices),
        "calibration": _calibration(tasks),
    }


def _curve(tallies: list[TaskTally], k: int) -> dict[str, list]:
    """pass_k_curve's average over tasks, at k_points(min n). Tasks with equal (n, c) share one
    evaluation of the estimator, so a thousand tasks cost as much as their distinct counts."""
    n_min = min(t.n for t in tallies)
    groups = Counter((t.n, t.c) for t in tallies)
    ks = k_points(n_min, k)
    # Each group's estimates at ks; the tasks' own curves (_task_curve) have most of them already.
    estimates = {(n, c): _estimates_at(n, c, k, ks) for n, c in groups}
    hat, at = [], []
    for i in range(len(ks)):
        hat.append(math.fsum(m * estimates[group][0][i] for group, m in groups.items()) / len(tallies))
        at.append(math.fsum(m * estimates[group][1][i] for group, m in groups.items()) / len(tallies))
    return {"k": ks, "pass_hat_k": hat, "pass_at_k": at}


def _estimates_at(n: int, c: int, k: int, ks: list[int]) -> tuple[list[float], list[float]]:
    """pass^k and pass@k of n trials with c passed, at each of ks (each at most n)."""
    task_ks, task_hat, task_at = _task_curve(n, c, k)
    where = {kk: i for i, kk in enumerate(task_ks)}
    return ([task_hat[where[kk]] if kk in where else pass_hat_k(n, c, kk) for kk in ks],
            [task_at[where[kk]] if kk in where else pass_at_k(n, c, kk) for kk in ks])


_PASS_K_CACHE: dict[tuple[int, int, int], tuple[list[int], list[float], list[float]]] = {}


def _task_curve(n: int, c: int, k: int) -> tuple[list[int], list[float], list[float]]:
    key = (n, c, k)
    if key not in _PASS_K_CACHE:
        if len(_PASS_K_CACHE) > 100_000:
            _PASS_K_CACHE.clear()
        ks = k_points(n, k)
        _PASS_K_CACHE[key] = (ks, [pass_hat_k(n, c, kk) for kk in ks],
                              [pass_at_k(n, c, kk) for kk in ks])
    return _PASS_K_CACHE[key]


def _task_entry(t: TaskAccumulator, k: int) -> dict[str, Any]:
    tally = TaskTally(t.task_id, t.shape, t.n, t.c) if t.n else None
    not_run = t.not_run
    entry: dict[str, Any] = {
        "task_id": t.task_id, "shape": t.shape, "planned": len(t.trials), "n": t.n, "c": t.c,
        "fail": t.fail, "incomplete": t.incomplete, "not_run": not_run,
        "pass_rate": t.c / t.n if t.n else None,
        "wilson": list(wilson_interval(t.c, t.n)) if t.n else None,
        "flaky": bool(tally and tally.flaky),
        "never_passed": bool(tally and tally.never_passed),
        "pass_hat_k": None, "pass_at_k": None,
    }
    if tally and not not_run:
        ks, hat, at = _task_curve(t.n, t.c, k)
        entry["pass_hat_k"] = {str(kk): v for kk, v in zip(ks, hat)}
        entry["pass_at_k"] = {str(kk): v for kk, v in zip(ks, at)}
    entry["consistency"] = trajectory_consistency_grouped(collapse_repeats(t.trajectories))
    entry["failed_checks"] = _by_count(t.failed_checks)
    entry["violations"] = {s: t.violations[s] for s in SEVERITIES if t.violations[s]}
    entry["high_checks"] = _by_count(Counter({name: n for (name, severity), n in t.check_severity.items()
                                              if severity == "high"}))
    entry["resources"] = {
        "tokens_mean": _mean(t.tokens), "tokens_cv": _cv(t.tokens),
        "requests_mean": _mean(t.requests), "requests_cv": _cv(t.requests),
        "latency_mean_s": _mean(t.latency), "latency_cv": _cv(t.latency),
        "cost_mean": _mean(t.cost) if not t.unpriced else None,
    }
    return entry


def _by_count(counter: Mapping[str, int]) -> dict[str, int]:
    """Most first, ties by name: the same order however the log was read."""
    return dict(sorted(counter.items(), key=lambda item: (-item[1], str(item[0]))))


def _mean(values: Sequence[float]) -> float | None:
    return math.fsum(values) / len(values) if len(values) else None


def _cv(values: Sequence[float]) -> float | None:
    return coefficient_of_variation(values) if len(values) else None


def collapse_repeats(trajectories: Mapping[bytes | tuple[str, ...], int]) -> Counter[tuple[str, ...]]:
    """Counts of endpoint sequences (tuples, or lists as JSON text) with immediate repeats
    collapsed (a retried call is the same step): what trajectory_consistency compares."""
    collapsed: Counter[tuple[str, ...]] = Counter()
    for path, count in trajectories.items():
        steps = json.loads(path) if isinstance(path, (bytes, str)) else path
        collapsed[tuple(step for step, _ in groupby(steps))] += count
    return collapsed


def trajectory_consistency_grouped(trajectories: Mapping[tuple[str, ...], int]) -> dict[str, Any] | None:
    """trajectory_consistency over the trials, computed from distinct trajectories
    and their counts: a pair of trials with the same trajectory contributes 1 to both means,
    and two distinct ones contribute count·count' times. Equal to the pairwise definition
    (tests check it) in O(distinct²) instead of O(trials²). Keys are endpoint sequences with
    immediate repeats already collapsed."""
    n = sum(trajectories.values())
    if not n:
        return None
    groups = list(trajectories.items())
    if len(groups) > MAX_TRAJECTORY_GROUPS:
        return {"jaccard": None, "same_order": None, "pairs": n * (n - 1) // 2, "distinct": len(groups),
                "note": f"more than {MAX_TRAJECTORY_GROUPS} distinct trajectories"}
    if n <= 30:  # small: the tested pairwise definition itself
        expanded = [list(seq) for seq, m in groups for _ in range(m)]
        result = trajectory_consistency(expanded)
        return {**result, "distinct": len(groups)}
    sets = [frozenset(seq) for seq, _ in groups]
    counts = [m for _, m in groups]
    pairs = n * (n - 1) // 2
    same = math.fsum(m * (m - 1) / 2 for m in counts)
    jaccard_terms = [same]
    for i in range(len(groups)):
        a, ma = sets[i], counts[i]
        for j in range(i + 1, len(groups)):
            b = sets[j]
            union = len(a | b)
            jaccard_terms.append(ma * counts[j] * (len(a & b) / union if union else 1.0))
    return {"jaccard": math.fsum(jaccard_terms) / pairs, "same_order": same / pairs, "pairs": pairs,
            "distinct": len(groups)}


def _by_shape(tasks: list[TaskAccumulator]) -> dict[str, Any]:
    shapes: dict[str, dict[str, Any]] = {}
    for t in tasks:
        s = shapes.setdefault(t.shape, {"tasks": 0, "failing_tasks": 0, "episodes": 0, "pass": 0, "fail": 0,
                                        "incomplete": 0, "not_run": 0})
        s["tasks"] += 1
        s["failing_tasks"] += 1 if (t.fail or t.incomplete or (t.n and not t.c)) else 0
        s["episodes"] += t.n
        s["pass"] += t.c
        s["fail"] += t.fail
        s["incomplete"] += t.incomplete
        s["not_run"] += t.not_run
    for s in shapes.values():
        s["pass_rate"] = s["pass"] / s["episodes"] if s["episodes"] else None
    return dict(sorted(shapes.items(), key=lambda kv: (-(kv[1]["fail"] + kv[1]["incomplete"]), kv[0])))


def _by_check(tasks: list[TaskAccumulator]) -> dict[str, Any]:
    failed: Counter[str] = Counter()
    severity: Counter[tuple[str, str]] = Counter()
    for t in tasks:
        failed.update(t.failed_checks)
        severity.update(t.check_severity)
    return {name: {"episodes": count,
                   "by_severity": {s: severity[(name, s)] for s in SEVERITIES if severity[(name, s)]}}
            for name, count in _by_count(failed).items()}


def _by_fault(tasks: list[TaskAccumulator]) -> dict[str, Any]:
    kinds: dict[str, list[int]] = {}
    not_exercised = [0, 0, 0]
    undelivered = 0
    for t in tasks:
        for kind, counts in t.fault_types.items():
            mine = kinds.setdefault(kind, [0, 0, 0])
            for i in range(3):
                mine[i] += counts[i]
        for i in range(3):
            not_exercised[i] += t.not_exercised[i]
        undelivered += t.undelivered
    types = {}
    for kind, (p, f, inc) in sorted(kinds.items(), key=lambda kv: -(kv[1][1] + kv[1][2])):
        types[kind] = {"episodes": p + f + inc, "survived": p, "failed": f, "incomplete": inc,
                       "survival_rate": p / (p + f + inc) if p + f + inc else None}
    return {"types": types,
            "not_exercised": {"episodes": sum(not_exercised), "pass": not_exercised[0], "fail": not_exercised[1],
                              "incomplete": not_exercised[2], "injected_not_delivered": undelivered}}


def _by_cause(tasks: list[TaskAccumulator]) -> dict[str, int]:
    causes: Counter[str] = Counter()
    for t in tasks:
        causes.update(t.causes)
        if t.not_run:
            causes[NOT_RUN] += t.not_run
    return _by_count(causes)


def _violations(tasks: list[TaskAccumulator], logged: int) -> dict[str, Any]:
    worst: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for t in tasks:
        worst.update(t.worst)
        total.update(t.violations)
    result: dict[str, Any] = {
        "episodes_by_worst": {s: worst[s] for s in SEVERITIES},
        "total_by_severity": {s: total[s] for s in SEVERITIES},
        "episodes_with_violation": sum(worst.values()),
        "high_by_task": {t.task_id: t.violations["high"] for t in tasks if t.violations["high"]},
        "safety_score": None,
    }
    if logged:
        result["safety_score"] = counted_safety_score(worst, logged)
    return result


def _sorted(values: Sequence[float]) -> tuple[list[float], Counter[float] | None]:
    """values in order, and their counts when they were counted. Resources repeat a lot (request
    counts, prices times the same usage), so counting and expanding beats sorting a million
    floats; the multiset is the same."""
    if len(set(values[:4096])) > 3000:  # mostly distinct: plain sorting is faster
        return sorted(values), None
    counts = Counter(values)
    ordered: list[float] = []
    for value in sorted(counts):
        ordered.extend(repeat(value, counts[value]))
    return ordered, counts


def _summary(values: Sequence[float]) -> dict[str, Any] | None:
    if not len(values):
        return None
    ordered, counts = _sorted(values)  # percentile sorts its input again: on sorted data that is one linear pass
    total = math.fsum(ordered)
    cv = coefficient_of_variation(ordered) if counts is None else counted_coefficient_of_variation(counts)
    return {"total": total, "mean": total / len(ordered),
            "p50": percentile(ordered, 50), "p95": percentile(ordered, 95),
            "cv": cv, "episodes": len(ordered)}


def _resources(tasks: list[TaskAccumulator], prices: Mapping[str, Any]) -> dict[str, Any]:
    def gather(name: str) -> array:
        values = array("d")
        for t in tasks:
            values.extend(getattr(t, name))
        return values

    cost, turns = gather("cost"), gather("turns")
    unpriced = sum(t.unpriced for t in tasks)
    return {
        "tokens": _summary(gather("tokens")),
        "requests": _summary(gather("requests")),
        "latency_s": _summary(gather("latency")),
        "turns": _summary(turns) if any(turns) else None,  # conversations only
        "cost": _summary(cost) if prices and not unpriced else None,
        "cost_note": (None if prices and not unpriced else
                      "no prices in the tasks file" if not prices else
                      f"{unpriced} episode(s) used a model without a price"),
    }


def _calibration(tasks: list[TaskAccumulator]) -> dict[str, Any] | None:
    confidences = array("d")
    outcomes = bytearray()
    for t in tasks:
        confidences.extend(t.conf)
        outcomes.extend(t.conf_ok)
    if not confidences:
        return None
    ok = list(map(bool, outcomes))
    # Counted in C (a million episodes): those below 0.5, and how many of them passed.
    low = list(map((0.5).__gt__, confidences))
    low_n, low_pass = sum(low), sum(compress(outcomes, low))
    high_pass = sum(outcomes) - low_pass
    high_n = len(ok) - low_n
    comparison: dict[str, Any] = {
        "threshold": 0.5,
        "low_episodes": low_n, "low_fail_rate": 1 - low_pass / low_n if low_n else None,
        "high_episodes": high_n, "high_fail_rate": 1 - high_pass / high_n if high_n else None,
        "p_value": None,
    }
    if low_n and high_n and len(ok) <= EXACT_TEST_LIMIT:
        # One-sided: do low-confidence episodes pass less often than confident ones?
        comparison["p_value"] = fisher_exact_less(low_pass, low_n, high_pass, high_n)
    if comparison["low_fail_rate"] is not None and comparison["high_fail_rate"] is not None:
        comparison["low_fail_more"] = comparison["low_fail_rate"] > comparison["high_fail_rate"]
    return {
        "episodes": len(ok),
        "brier": brier_score(confidences, ok),
        "buckets": calibration_buckets(confidences, ok),
        "low_vs_high": comparison,
    }
