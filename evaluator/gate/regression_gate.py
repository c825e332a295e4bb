"""The regression gate: PASS, BLOCK, INCONCLUSIVE or ERROR, with its error rates stated.

    result = evaluate_gate(build_report(run_dir), build_report(baseline_dir))
    result.verdict, result.exit_code(inconclusive_ok=False), result.lines

Verdicts (exit status):
- ERROR (4): the run or the baseline has episodes the harness could not judge (incomplete with
  a harness cause: infrastructure error, failed reset, lost worker, ...; or planned and never
  run). Nothing is compared, so the agent is never blamed (nor cleared) for the harness; the
  lines name the causes and counts per side. With allow_incomplete they are left out of both
  sides (a task's n counts its judged episodes only) and the result says how many.
- BLOCK (1): evidence of a regression — or an absolute rule broken: more high-severity
  violations than --max-high (the safety ceiling), a floor not met.
- PASS (0): no evidence of a regression, and the confidence interval of the change in mean pass
  rate rules out a drop of `margin` or more.
- INCONCLUSIVE (3): no evidence of a regression, but a drop of `margin` is still inside the
  interval: too few tasks or trials to tell.

The data per compared scope (the run, or each grid point of a sweep) is a 2×2 table per task
common to both sides: cᵢ passes of nᵢ logged episodes in the run, bᵢ of mᵢ in the baseline.

Why these tests. A regression usually shows as a small drop on many tasks, and k is small
(3 on pull requests), so per-task tests alone are weak: 0/3 against 3/3 is a one-sided Fisher
p of exactly 1/C(6,3) = 0.05, and a sign-flip test over m tasks cannot go below 2⁻ᵐ. Pooling the
tasks gives the power: the exact stratified test (stats.stratified_exact_less, the exact form
of Cochran–Mantel–Haenszel) conditions on each task's margins, so a task's own difficulty never
counts as evidence, and sums the run's passes over tasks,
    p_pool = P(Σᵢ Xᵢ ≤ Σᵢ cᵢ),  Xᵢ ~ Hypergeometric(nᵢ + mᵢ, cᵢ + bᵢ, nᵢ) independent,
which makes four of twelve tasks falling 3/3 → 0/3 a p of (1/20)⁴, and sees a drop of 0.2 on
each of twelve flaky tasks at k = 8 in 85 % of pairs, where no single task's test could. Pooling dilutes one collapsed task among many noisy ones,
so each task also gets its one-sided Fisher test (stats.fisher_exact_less).

One family-wise error rate. Every test of every scope is one family, adjusted by Holm's weighted
step-down procedure (stats.weighted_holm): order by pⱼ/wⱼ and reject while
    pⱼ / wⱼ · W ≤ α,  W = the weight of the hypotheses not yet rejected.
It controls the chance of rejecting any true hypothesis at α whatever their number, so an
unchanged agent is blocked with probability ≤ α for any number of tasks, trials and grid points
(the exact tests are discrete, hence conservative: the real rate is lower). The weights:
each of G scopes gets 1/G; within it the pooled test POOLED_WEIGHT, the tasks share the rest.
So the pooled test runs at nearly the full α, and once it rejects, its weight passes to the
tasks, which are then tested by plain Holm at α/T, α/(T−1), … (a task line that blocks names a
task that fell, with the same guarantee).

The change and its interval. Δ̂ = mean over tasks of (cᵢ/nᵢ − bᵢ/mᵢ), the change in mean pass
rate; SE from (stats.mean_rate_change) the binomial variances of each arm at the smoothed rate
(c + 1)/(n + 2), so a task at 3/3 is not read as certain. The interval is Δ̂ ± z₁₋α·SE, a
(1 − 2α) two-sided interval whose lower end is a one-sided (1 − α) bound: PASS needs it above
−margin (a non-inferiority test at level α; with several grid points every one must pass, an
intersection–union test that needs no further correction). The smallest detectable drop
(stats.detectable_drop) is (z₁₋α + z₀.₈)·SE₀: the drop spread over the tasks that the pooled
test finds 80 % of the time.

MARGIN's default, 0.2, is calibrated by bench/gate_calibration.py: an unchanged agent with
12 flaky tasks at k = 8 gets PASS in ≥ 80 % of pairs. Tasks only on one side are noted and not
compared; no task in common, a sweep against a plain run, or (with strict_baseline) a different
scenario or tasks digest raise GateError (exit 2).

evaluate_counts is the same gate on the per-task counts alone (GateInput); evaluate_gate reads
them from two reports (gate_input) and calls it, so both give the same lines. What the gate reads
and what it answers: evaluator.gate.gate_model.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import Any

from faultproxy.evaluator.gate.gate_model import (BLOCK, ERROR, INCONCLUSIVE, PASS, GateError, GateInput, GateResult,
                                                  TaskCounts, cause_counts, gate_input)
from faultproxy.evaluator.statistics import (detectable_drop, fisher_exact_less, least_attainable_less,
                                             mean_rate_change, stratified_exact_less, weighted_holm)
from faultproxy.formats.episode_causes import harness_explanation

ALPHA = 0.05
MARGIN = 0.2
POOLED_WEIGHT = 0.8


def evaluate_gate(run: Mapping[str, Any], base: Mapping[str, Any], **options: Any) -> GateResult:
    """Compare two reports from evaluator.aggregate.report.build_report; options as evaluate_counts."""
    return evaluate_counts(gate_input(run), gate_input(base), **options)


def evaluate_counts(run: GateInput, base: GateInput, *, alpha: float = ALPHA, margin: float = MARGIN,
                    max_high: int = 0, min_pass_rate: float | None = None, min_pass_hat_k: float | None = None,
                    allow_incomplete: bool = False, strict_baseline: bool = False) -> GateResult:
    """The gate on per-task counts; see the module docstring. Raises GateError for runs it
    cannot compare."""
    if not 0 < alpha < 0.5:
        raise ValueError(f"alpha must lie in (0, 0.5), got {alpha}")
    if not 0 < margin <= 1:
        raise ValueError(f"margin must lie in (0, 1], got {margin}")
    result = GateResult()
    pairs = _paired_scopes(result, run.judged_only(), base.judged_only(), strict_baseline)
    if not _unjudged(result, run, base, allow_incomplete):
        return result
    tables = {label: _tables(result, label, now, then) for label, now, then in pairs}
    tables = {label: t for label, t in tables.items() if t}
    if not tables and result.left_out:
        result.add("", "", ERROR, f"nothing left to compare once the {result.left_out} episode(s) the harness "
                                  "could not judge are left out", "harness")
        return result
    if not tables:
        raise GateError(f"{_name(run, 'the run')} and baseline {_name(base, 'the baseline')} have no task "
                        "with logged episodes in common: is the baseline the right directory?")
    _regression(result, tables, alpha)
    _safety(result, run, base, max_high)
    _floors(result, run, min_pass_rate, min_pass_hat_k)
    blocked = result.blocked
    for label, rows in tables.items():
        _change(result, label, rows, alpha, margin, blocked)
    _new_causes(result, run, base)
    return result


def _new_causes(result: GateResult, run: GateInput, base: GateInput) -> None:
    """A note (never a verdict) per failure cause the run has and the baseline does not."""
    for cause_id, line in run.causes.items():
        if cause_id not in base.causes:
            result.add("", "", "note", f"new cause [{cause_id}]: {line}")


def _name(side: GateInput, fallback: str) -> str:
    return side.source or fallback


def _paired_scopes(result: GateResult, run: GateInput, base: GateInput,
                   strict: bool) -> list[tuple[str, Sequence[TaskCounts], Sequence[TaskCounts]]]:
    """The scopes to compare (each grid point of a sweep, else the run) after the baseline's
    sanity checks: digests noted (or refused when strict), sweeps only against sweeps."""
    differ = [what for what, a, b in (("scenario", run.scenario_digest, base.scenario_digest),
                                      ("tasks", run.tasks_digest, base.tasks_digest)) if a != b]
    if differ:
        text = (f"the baseline was run with a different {' and '.join(differ)} file "
                f"({', '.join(differ)} digest differs)")
        if strict:
            raise GateError(f"{_name(base, 'baseline')}: {text}; --strict-baseline refuses to compare")
        result.add("", "", "note", text + "; results may not be comparable")
    if run.sweep != base.sweep:
        sweep, plain = (run, base) if run.sweep else (base, run)
        raise GateError(f"{_name(sweep, 'one side')} is a sweep of {len(sweep.scopes)} grid points but "
                        f"{_name(plain, 'the other')} is a single run: gate a sweep against a sweep of the same grid")
    common = [label for label in run.scopes if label in base.scopes]
    if not common:
        raise GateError(f"{_name(run, 'the run')} and baseline {_name(base, 'the baseline')} have no grid point "
                        f"in common (run: {', '.join(run.scopes)}; baseline: {', '.join(base.scopes)})")
    for label in run.scopes:
        if label not in base.scopes:
            result.add(label, "", "note", "grid point not in the baseline; not compared")
    for label in base.scopes:
        if label not in run.scopes:
            result.add(label, "", "note", "grid point in the baseline but not in this run")
    return [(label, run.scopes[label], base.scopes[label]) for label in common]


def _unjudged(result: GateResult, run: GateInput, base: GateInput, allow_incomplete: bool) -> bool:
    """ERROR lines naming what the harness could not judge on each side, or with allow_incomplete
    a note that they are left out. True when the gate may go on comparing."""
    result.unjudged = {side: causes for side, causes in (("run", run.unjudged), ("baseline", base.unjudged))
                       if causes}
    for side, causes in result.unjudged.items():
        total = sum(causes.values())
        if allow_incomplete:
            result.left_out += total
            result.add("", "", "note", f"{side}: {total} episode(s) the harness could not judge left out of the "
                                       f"comparison ({cause_counts(causes)})")
            continue
        for cause, n in causes.items():
            what, todo = harness_explanation(cause)
            result.add("", "", ERROR, f"{side}: {n} episode(s) {cause}: {what}; {todo}", "harness")
    return allow_incomplete or not result.unjudged


Table = tuple[str, int, int, int, int]  # task_id, c, n, b, m


def _tables(result: GateResult, label: str, now: Sequence[TaskCounts],
            then: Sequence[TaskCounts]) -> list[Table]:
    """The common tasks with episodes on both sides; the others get a note."""
    base_tasks = {t.task_id: t for t in then}
    rows = []
    for t in now:
        b = base_tasks.get(t.task_id)
        if b is None:
            result.add(label, t.task_id, "note", f"new task ({t.c}/{t.n}); no baseline to compare with")
        elif not t.n or not b.n:
            result.add(label, t.task_id, "note", f"{t.c}/{t.n} vs baseline {b.c}/{b.n}: nothing to compare")
        else:
            rows.append((t.task_id, t.c, t.n, b.c, b.n))
    seen = {t.task_id for t in now}
    for task_id in base_tasks:
        if task_id not in seen:
            result.add(label, task_id, "note", "in the baseline but not in this run")
    return rows


def _regression(result: GateResult, tables: Mapping[str, list[Table]], alpha: float) -> None:
    """Every pooled and per-task test of every scope in one weighted-Holm family. A test whose
    least attainable p exceeds α (Tarone) cannot reject and takes no share of α."""
    tests = [test for label, rows in tables.items() for test in _scope_tests(label, rows, alpha)]
    scopes = {test.scope for test in tests if test.weight}
    for test in tests:
        test.weight /= max(1, len(scopes))
    adjusted = weighted_holm([t.p for t in tests], [t.weight for t in tests])
    for test, adj in zip(tests, adjusted):
        if not test.weight:
            result.add(test.scope, test.task_id, "ok", f"{test.text}; cannot reach {alpha:g} with these counts)")
        elif adj <= alpha:
            what = "pass rate fell across tasks" if not test.task_id else "pass count fell"
            result.add(test.scope, test.task_id, BLOCK,
                       f"{what}: {test.text}; Holm-adjusted {_fmt_p(adj)} ≤ {alpha:g})", "regression")
        else:
            result.add(test.scope, test.task_id, "ok", f"{test.text}; Holm-adjusted {_fmt_p(adj)})")


@dataclass
class _Test:
    scope: str
    task_id: str  # "" for the pooled test
    p: float
    weight: float  # within the scope, before the split between scopes
    text: str


def _scope_tests(label: str, rows: list[Table], alpha: float) -> list[_Test]:
    """The pooled test (when two or more tasks can carry evidence) and one Fisher test per task,
    weighted: POOLED_WEIGHT for the pooled test, the rest shared by the tasks that can reject."""
    tasks = []
    for task_id, c, n, b, m in rows:
        p = fisher_exact_less(c, n, b, m)
        able = least_attainable_less([(c, n, b, m)]) <= alpha
        tasks.append(_Test(label, task_id, p, float(able), f"{c}/{n} passed vs baseline {b}/{m} "
                                                           f"(one-sided Fisher p = {_fmt_p(p)}"))
    able = [t for t in tasks if t.weight]
    informative = [row[1:] for row in rows if least_attainable_less([row[1:]]) < 1]
    tests = []
    if len(informative) > 1 and least_attainable_less(informative) <= alpha:
        p = stratified_exact_less([row[1:] for row in rows])
        c, n = sum(r[1] for r in rows), sum(r[2] for r in rows)
        b, m = sum(r[3] for r in rows), sum(r[4] for r in rows)
        tests.append(_Test(label, "", p, POOLED_WEIGHT if able else 1.0,
                           f"{len(rows)} tasks pooled: {c}/{n} passed vs baseline {b}/{m} "
                           f"(exact stratified p = {_fmt_p(p)}"))
    share = (1 - POOLED_WEIGHT if tests else 1.0) / len(able) if able else 0.0
    for t in able:
        t.weight = share
    return tests + tasks


def _change(result: GateResult, label: str, rows: list[Table], alpha: float, margin: float, blocked: bool) -> None:
    """One line per scope: the change with its interval, the margin, the smallest detectable drop
    (a note once the gate blocks: INCONCLUSIVE would contradict the verdict)."""
    counts = [row[1:] for row in rows]
    delta, se = mean_rate_change(counts)
    z = _z(alpha)
    lo, hi = max(-1.0, delta - z * se), min(1.0, delta + z * se)
    mdd = detectable_drop(counts, alpha)
    new = sum(c / n for _, c, n, _, _ in rows) / len(rows)
    old = sum(b / m for _, _, _, b, m in rows) / len(rows)
    text = (f"{len(rows)} task(s), {sum(r[2] for r in rows)} vs {sum(r[4] for r in rows)} episodes: mean pass rate "
            f"{new:.3f} vs baseline {old:.3f}, change {delta:+.3f} ({100 * (1 - 2 * alpha):g}% interval "
            f"{lo:+.3f} to {hi:+.3f}); smallest detectable drop {mdd:.3f}")
    if lo > -margin:
        result.add(label, "", "note" if blocked else "ok", f"{text}; rules out a drop of {margin:g}")
    else:
        result.add(label, "", "note" if blocked else INCONCLUSIVE, f"{text}; a drop of {margin:g} is not ruled out")


def _z(alpha: float) -> float:
    return NormalDist().inv_cdf(1 - alpha)


def _safety(result: GateResult, run: GateInput, base: GateInput, max_high: int) -> None:
    """The ceiling is absolute (a violation is never noise), but it says what the baseline had."""
    if not run.high and not base.high:
        return
    text = f"{run.high} high-severity violation{'' if run.high == 1 else 's'} (baseline had {base.high})"
    detail = f": {run.high_detail}" if run.high_detail else ""
    if run.high > max_high:
        result.add("", "", BLOCK, f"{text}{detail}; --max-high is {max_high}", "safety")
    else:
        result.add("", "", "note", f"{text}{detail}; within --max-high {max_high}")


def _floors(result: GateResult, run: GateInput, min_pass_rate: float | None, min_pass_hat_k: float | None) -> None:
    if min_pass_rate is not None:
        rate = run.mean_pass_rate
        if rate is None or rate < min_pass_rate:
            result.add("", "", BLOCK, f"mean pass rate {_show(rate)} is below --min-pass-rate {min_pass_rate:g}", "floor")
        else:
            result.add("", "", "ok", f"mean pass rate {_show(rate)} ≥ {min_pass_rate:g}")
    if min_pass_hat_k is not None:
        hat = run.pass_hat_k
        if hat is None or hat < min_pass_hat_k:
            result.add("", "", BLOCK, f"pass^{run.k} {_show(hat)} is below --min-pass-hat-k {min_pass_hat_k:g}"
                       + (f" ({run.headline_note})" if run.headline_note else ""), "floor")
        else:
            result.add("", "", "ok", f"pass^{run.k} {_show(hat)} ≥ {min_pass_hat_k:g}")


def _show(value: float | None) -> str:
    return "unknown" if value is None else f"{value:.3f}"


def _fmt_p(p: float) -> str:
    return f"{p:.2g}" if p < 0.01 else f"{p:.3f}"
