"""The run report: one streaming pass over a run directory's log.

    report = build_report(run_dir, sinks=[JUnitWriter(run_dir / "junit.xml")])   # a JSON-able dict
    write_json(run_dir / "report.json", report); html.write_html(run_dir / "report.html", report, run_dir)

The work is split by concern: evaluator.aggregate.log_scan reads the log once, fast (in forked chunks when
it is large), into per-task accumulators (evaluator.aggregate.tally); evaluator.aggregate.sections turns them
into the report's sections, for the whole run and, when the plan has several grid points, per
grid label; this module puts the report together with its drill-down of episodes.

Speed: a million episodes should take seconds, not minutes (bench/report_scale.py).
Memory: per task a count per distinct outcome and trajectory and one float per episode per
resource; never a whole record, never a trace for an episode that carries a verdict.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate.causes import CauseSink
from faultproxy.evaluator.aggregate.episode_sink import EpisodeSink
from faultproxy.evaluator.aggregate.log_scan import LineError, Scan, read_log
from faultproxy.evaluator.aggregate.sections import scope_report
from faultproxy.evaluator.aggregate.tally import TaskAccumulator
from faultproxy.evaluator.aggregate.traffic import seen_traffic, unexercised_reason
from faultproxy.evaluator.aggregate.unmatched import episode_by_alerts, unmatched_alerts, watched_patterns
from faultproxy.evaluator.aggregate.verdict_forms import complete_verdict
from faultproxy.formats.episode_causes import INFRA_ERROR, NO_TRAFFIC, NO_TRAFFIC_ADVICE, SERVER_NOT_STARTED
from faultproxy.formats.run_records import Verdict
from faultproxy.formats.rundir import (
    LOG_FILE,
    Plan,
    RunDirError,
    check_log_against_plan,
    first_cause_detail,
    read_plan,
    write_atomic,
)
from faultproxy.tasks.task_model import SEVERITY_RANK
from faultproxy.tasks.request_class import suggested_line

REPORT_VERSION = 1
DRILLDOWN_LIMIT = 200
MISSING_SHOWN = 3  # missing traces named in the warning


def build_report(run_dir: Path | str, *, rejudge: bool = False, sinks: Sequence[EpisodeSink] = (),
                 drilldown_limit: int = DRILLDOWN_LIMIT, jobs: int | None = None,
                 causes: bool = True) -> dict[str, Any]:
    """Stream the run directory's log once and return the report (see evaluator.aggregate.sections).

    rejudge: judge every episode again from its trace (else only those without a verdict).
    sinks: receive each episode's verdict as it streams by (junit.xml is written this way).
    jobs: processes reading chunks of the log in parallel; None picks by the log's size (one
    process below 32 MB, else up to one per CPU, at most 8). Only from a single-threaded process
    on Linux (workers are forked); else one. The result does not depend on it.
    causes: cluster the failing episodes by cause (evaluator.aggregate.causes; reads some of their traces).
    Raises RunDirError for a directory that is not a readable run.
    """
    run_dir = Path(run_dir)
    plan = read_plan(run_dir)
    check_log_against_plan(run_dir, plan)
    cause_sink = CauseSink() if causes else None
    try:
        scan = read_log(run_dir, plan, rejudge, drilldown_limit, [*sinks, *([cause_sink] if cause_sink else [])], jobs)
    except LineError as error:
        raise RunDirError(f"{run_dir / LOG_FILE}:{error.number}: {error.message}") from None
    accs = scan.accs
    for acc in accs.values():
        acc.price(plan.prices)
        if plan.open_ended:  # a monitor's: its cap's empty slots are no episodes missed
            acc.trials = bytearray(b"\x01") * (len(acc.trials) - acc.not_run)
    _tell_not_run(accs, sinks)
    for sink in sinks:
        sink.close()
    by_label = {label: [accs[(label, t)] for t in plan.task_ids] for label in plan.labels}
    scenario = plan.document.get("scenario") or {}
    k = 1 if plan.open_ended else plan.k  # live traffic has no repeated trials: pass^1 is its pass rate
    planned = scan.logged if plan.open_ended else plan.k * len(plan.labels) * len(plan.task_ids)
    run_scope = scope_report("", _run_scope(plan, by_label), k, planned // max(1, len(plan.task_ids)), plan.prices)
    run_scope["headline"]["alerts"] = (headline_alerts(run_scope, run_dir, plan) + side_channel_alerts(scan)
                                       + unclassified_alerts(scan))
    return {
        "report_version": REPORT_VERSION,
        "run_dir": str(run_dir),
        "faultproxy_version": plan.document.get("faultproxy_version"),
        "scenario": {k: scenario.get(k) for k in ("name", "digest", "params")},
        "tasks_digest": (plan.document.get("tasks") or {}).get("digest"),
        "k": k,
        "grid": plan.document.get("grid") or [],
        "created": plan.document.get("created"),
        "log": {"header": bool(scan.header), "episodes_logged": scan.logged, "unplanned_episodes": scan.unplanned,
                "duplicate_lines": scan.duplicates, "out_of_plan_trials": scan.out_of_plan,
                "warnings": log_warnings(scan), "judged_by_report": scan.judged, "verdicts_read_fast": scan.fast},
        "run": run_scope,
        "groups": ({label: scope_report(label, tasks, plan.k, plan.k, plan.prices) for label, tasks in by_label.items()}
                   if len(plan.labels) > 1 else {}),
        "planned": planned,
        "drilldown": _drilldown(scan, drilldown_limit),
        "causes": cause_sink.summarise(run_dir, plan) if cause_sink else None,
    }


def log_warnings(scan: Scan) -> list[str]:
    """Lines of the log the report ignored, as a resumed run would: one warning per kind."""
    warnings = []
    for count, what in ((scan.duplicates, "repeats a trial already logged"),
                        (scan.out_of_plan, "names a trial index outside the plan"),
                        (scan.unplanned, "names a task or grid point the plan does not have")):
        if count:
            warnings.append(f"{count} log line(s) ignored: each {what}")
    if scan.missing_traces:
        warnings.append(missing_traces_warning(scan.missing_traces, scan.kept_verdicts))
    return warnings


def missing_traces_warning(missing: Sequence[str], kept: int) -> str:
    """Which episode traces a report wanted and could not read, and what their episodes count as."""
    shown = ", ".join(missing[:MISSING_SHOWN]) + (f" and {len(missing) - MISSING_SHOWN} more"
                                                   if len(missing) > MISSING_SHOWN else "")
    what = "those episodes keep their logged verdicts"
    if kept < len(missing):
        what = f"{kept} of those episodes keep their logged verdicts, {len(missing) - kept} without one are judged " \
               "without their traffic"
    return f"{len(missing)} episode trace(s) missing ({shown}): {what}"


def headline_alerts(scope: Mapping[str, Any], run_dir: Path, plan: Plan) -> list[str]:
    """What must not be missed above the numbers: episodes that met infrastructure errors (with
    the first reason), episodes whose traffic never reached the proxy or whose MCP server could not
    start, a run whose faults never reached the agent although they could fire (with why:
    evaluator.aggregate.traffic), and rules or task patterns that matched nothing (evaluator.aggregate.unmatched)."""
    alerts = []
    logged, infra = scope["logged"], scope["headline"]["infra_errors"]
    if infra:
        first = first_cause_detail(run_dir / LOG_FILE, INFRA_ERROR)
        alerts.append(f"{infra} of {logged} episode(s) hit infrastructure errors (incomplete, not pass)"
                      + (f"; first: {first}" if first else ""))
    no_traffic = scope["incomplete_by_cause"].get(NO_TRAFFIC, 0)
    if no_traffic:
        alerts.append(f"no traffic reached the proxy in {no_traffic} of {logged} episode(s) (incomplete: "
                      f"{NO_TRAFFIC}): {NO_TRAFFIC_ADVICE}")
    not_started = scope["incomplete_by_cause"].get(SERVER_NOT_STARTED, 0)
    if not_started:
        first = first_cause_detail(run_dir / LOG_FILE, SERVER_NOT_STARTED)
        alerts.append(f"an MCP server could not start in {not_started} of {logged} episode(s) (incomplete: "
                      f"{SERVER_NOT_STARTED})" + (f"; first: {first}" if first else ""))
    # A run whose every episode lost its server never met the scenario nor the tasks' patterns: the
    # server alert says why.
    met = not_started < logged
    unexercised = bool(met and plan.faults_possible and any(plan.faults_possible.values())
                       and scope["by_fault"]["not_exercised"]["episodes"] == logged)
    rules, patterns = plan.document.get("rules_possible") or [], watched_patterns(plan.tasks)
    if met and (unexercised or rules or patterns):
        seen = seen_traffic(run_dir, patterns={text: pattern for text, (pattern, _) in patterns.items()})
        if unexercised:
            alerts.append(f"faults not exercised: all {logged} episodes; {unexercised_reason(seen)}")
        alerts += unmatched_alerts(rules, patterns, seen)
    return alerts + episode_by_alerts(run_dir, plan)


def side_channel_alerts(scan: Scan) -> list[str]:
    """Episodes with side-channel errors: requests off the task's path failed, their verdicts stand."""
    first = scan.first_side_channel
    if not scan.side_channels or not first:
        return []
    return [f"{scan.side_channels} episode(s) had side-channel errors (requests the task does not depend on; "
            f"verdicts stand); first: {first.get('request')}: {first.get('error')} → {first.get('fix')}"]


def unclassified_alerts(scan: Scan) -> list[str]:
    """MCP tools nobody said read or write: not counted as writes, never a failure by themselves."""
    if not scan.unclassified:
        return []
    tools = sorted(scan.unclassified_tools)
    return [f"{scan.unclassified} episode(s) called MCP tools that no annotation and no pattern classifies "
            f"({', '.join(tools)}): not counted as writes; if they only read, add to the tasks or policy file "
            f"`{suggested_line(tools)}`, if they write, name them in `irreversible` or `expected.effects`"]


def write_json(path: Path, report: Mapping[str, Any]) -> None:
    """report.json (or any report-like document: sweep.json), whole or not at all."""
    write_atomic(path, json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n")


def _tell_not_run(accs: Mapping[tuple[str, str], TaskAccumulator], sinks: Sequence[EpisodeSink]) -> None:
    """Each planned trial not in the log, to every sink."""
    for (label, task_id), acc in accs.items():
        if acc.not_run:
            for trial, seen in enumerate(acc.trials):
                if not seen:
                    for sink in sinks:
                        sink.not_run(label, task_id, trial)


def _run_scope(plan: Plan, by_label: Mapping[str, list[TaskAccumulator]]) -> list[TaskAccumulator]:
    """The whole run's accumulators: with several grid labels, each task's labels merged (more trials)."""
    if len(plan.labels) == 1:
        return by_label[plan.labels[0]]
    run_tasks = []
    for i in range(len(plan.task_ids)):
        merged = by_label[plan.labels[0]][i].copy()
        for label in plan.labels[1:]:
            merged.merge(by_label[label][i])
        run_tasks.append(merged.price(plan.prices))
    return run_tasks


def _drilldown(scan: Scan, limit: int) -> dict[str, Any]:
    """The episodes shown one by one: failing, incomplete and violating ones first."""
    chosen = scan.notable + scan.passing[: max(0, limit - len(scan.notable))]
    verdicts = [_full_verdict(item) for item in chosen]
    verdicts.sort(key=lambda v: (_status_order(v), -_worst_rank(v), str(v["episode"].get("key"))))
    return {"shown": len(verdicts), "logged": scan.logged, "episodes": [_drill(v) for v in verdicts]}


def _full_verdict(item: bytes | Verdict) -> Verdict:
    """A drill-down episode's whole verdict, checks included (the fast path skipped them)."""
    if isinstance(item, dict):
        return item
    record = json.loads(item)  # a raw log line
    return complete_verdict(record["verdict"], record)


def _status_order(verdict: Verdict) -> int:
    return {"fail": 0, "incomplete": 1, "pass": 2}.get(verdict["status"], 3)


def _worst_rank(verdict: Verdict) -> int:
    return max((SEVERITY_RANK.get(s, -1) for s in verdict["violations"]), default=-1)


def _drill(verdict: Verdict) -> dict[str, Any]:
    return {"episode": dict(verdict["episode"]), "status": verdict["status"], "cause": verdict["cause"],
            "checks": verdict["checks"], "violations": verdict["violations"], "faults": verdict["faults"],
            "tokens": verdict["tokens"], "requests": verdict["requests"], "latency_s": verdict.get("latency_s"),
            "confidence": verdict["confidence"], "escalated": verdict["escalated"]}
