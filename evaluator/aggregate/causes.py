"""Failure causes of a run: which failing episodes failed the same way, ranked.

    sink = CauseSink()                       # an EpisodeSink: build_report streams the log through it
    causes = sink.summarise(run_dir, plan)   # report.json's `causes`

Each failing episode (status fail, or incomplete) gets its cause (evaluator.aggregate.failure_cause: outcome,
failed checks, fault, where, response). Two causes are the same when all five parts are equal.
The task is deliberately not a part: one fault at one place answered the same way is one bug in
the agent, whichever task exposed it, and the cluster lists its tasks. The trial, variant, grid
point, timings and ids are not parts either (they vary between episodes of one bug). Everything
is a pure function of the log and the traces, so the same run gives the same clusters, ids and
representatives.

Reading traces. Episodes whose verdicts agree on the failed checks (with their details), the
faults (with sequence numbers, rules, types and delivery) and the endpoint sequence have the same
shape of trace as far as the parts above are concerned; the trace of the first of them in log
order is read for all (`traces_read` in the report says how many were read). An episode whose
trace is missing is explained from its verdict alone, its response "unknown (no trace)".

A cluster: its cause, episodes, tasks, shapes, severity (the worst of its failed checks), the
grid labels it appeared at (a sweep shows which causes appear as λ rises), where its trials
parted from the passing ones (evaluator.aggregate.parting), and a representative: the failing episode with
the fewest exchanges (then the first in the log). Clusters are ranked by episodes × severity weight
(0.25 / 0.5 / 1.0, the weights of the safety score).
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate.episode_sink import EpisodeSink
from faultproxy.evaluator.aggregate.failure_cause import NOT_JUDGED, Cause, explain, harness_cause
from faultproxy.evaluator.aggregate.parting import PassingTrials, parting_summary
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import Plan, trace_file
from faultproxy.formats.verdict_layout import VerdictFields, decode_name
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.task_model import SEVERITY_RANK, Task
from faultproxy.tasks.request_class import NOTHING_DECLARED, Declared

SEVERITY_WEIGHT = {"low": 0.25, "medium": 0.5, "high": 1.0}
NO_SEVERITY_WEIGHT = 0.25  # an incomplete episode with no failed check still cost a trial


@dataclass
class _Group:
    """Failing episodes of one task and grid label with the same verdict signature."""

    task_id: str
    label: Any
    status: int
    cause: Any
    failed: Any
    faults: Any
    endpoints: bytes
    requests: int
    first: Any  # the first episode's key (log order): its trace is read, and it may represent the cluster
    trial: Any
    order: tuple[int, int]  # (chunk, position in chunk) of the first episode
    count: int = 1


class CauseSink(EpisodeSink):
    """Collects what clustering needs from build_report's stream, a count per distinct failing
    verdict signature (task, grid label, status, failed checks, faults, endpoints) with its first
    episode, and per (grid label, task) the passing trials' endpoint sequences with their counts."""

    wants_fields = True

    def __init__(self, chunk: int = 0) -> None:
        self.chunk, self.seen = chunk, 0
        self.failing: dict[tuple, _Group] = {}
        self.passing: dict[tuple[Any, str], dict[bytes, int]] = {}

    def fields(self, v: VerdictFields, task_id: str) -> None:
        """One logged episode."""
        self.seen += 1
        if v.status == 0:
            counts = self.passing.get((v.grid_label, task_id))
            if counts is None:
                counts = self.passing[(v.grid_label, task_id)] = {}
            counts[v.endpoints] = counts.get(v.endpoints, 0) + 1
            return
        signature = (task_id, v.grid_label, v.status, v.cause, v.failed, v.faults, v.endpoints)
        group = self.failing.get(signature)
        if group is None:
            self.failing[signature] = _Group(task_id, v.grid_label, v.status, v.cause, v.failed, v.faults,
                                             v.endpoints, v.requests, v.key, v.trial, (self.chunk, self.seen))
        else:
            group.count += 1

    def shard(self, index: int) -> CauseSink:
        """A fresh sink for one chunk of the log."""
        return CauseSink(index)

    def absorb(self, shard: EpisodeSink) -> None:
        """Take a chunk's findings back (chunks in log order)."""
        assert isinstance(shard, CauseSink)
        for signature, group in shard.failing.items():
            mine = self.failing.get(signature)
            if mine is None:
                self.failing[signature] = group
            else:
                mine.count += group.count
        for key, counts in shard.passing.items():
            mine_counts = self.passing.setdefault(key, {})
            for endpoints, n in counts.items():
                mine_counts[endpoints] = mine_counts.get(endpoints, 0) + n

    def summarise(self, run_dir: Path, plan: Plan) -> dict[str, Any]:
        """report.json's `causes`: the clusters, ranked (see the module docstring)."""
        return _Clustering(run_dir, plan, self).result()


def _text(value: Any) -> Any:
    return json.loads(value) if isinstance(value, bytes) else value


_Member = tuple[_Group, "dict[str, Any] | None", "str | None"]


class _Clustering:
    """Explains each failing signature (one trace per trace signature) and groups them by cause."""

    def __init__(self, run_dir: Path, plan: Plan, sink: CauseSink) -> None:
        self.run_dir, self.sink = run_dir, sink
        self.shapes = {t["id"]: t.get("shape") or "unclassified" for t in plan.tasks}
        self.declared = {t["id"]: Declared.of(Task.from_json(t)) for t in plan.tasks}
        self.passing = PassingTrials()
        for (label, task_id), counts in sink.passing.items():
            self.passing.add(decode_name(label) or "", task_id, counts)
        self.explained: dict[tuple, tuple[Cause, list[str], int | None, bool]] = {}
        self.traces_read = 0

    def result(self) -> dict[str, Any]:
        members: dict[Cause, list[_Member]] = {}
        for group in sorted(self.sink.failing.values(), key=lambda g: g.order):
            cause, endpoints, fault_at, _ = self._explain(group)
            label = decode_name(group.label) or ""
            parting = self.passing.parting(label, group.task_id, endpoints, fault_at, cause)
            members.setdefault(cause, []).append((group, parting, _worst(_text(group.failed))))
        clusters = [self._cluster(cause, items) for cause, items in members.items()]
        clusters.sort(key=lambda c: (-c["score"], c["id"]))
        return {"failing": sum(g.count for g in self.sink.failing.values()), "clusters": clusters,
                "traces_read": self.traces_read, "signatures": len(self.explained),
                "without_trace": sum(1 for e in self.explained.values() if not e[3])}

    def _explain(self, group: _Group) -> tuple[Cause, list[str], int | None, bool]:
        signature = (group.status, group.cause, group.failed, group.faults, group.endpoints)
        known = self.explained.get(signature)
        if known is None:
            known = self.explained[signature] = self._read(group)
        return known

    def _read(self, group: _Group) -> tuple[Cause, list[str], int | None, bool]:
        key = decode_name(group.first)
        failed = [f.get("name") for f in _text(group.failed) if f.get("name")]
        outcome = "fail" if group.status == 1 else f"incomplete: {decode_name(group.cause) or 'unknown'}"
        endpoints = list(_text(group.endpoints))
        path = trace_file(self.run_dir, {"key": key})
        if path is not None and path.exists():
            exchanges = parse_trace(read_trace(path))
            self.traces_read += 1
            if exchanges:
                cause, fault_at = explain(exchanges, failed, outcome, key,
                                           self.declared.get(group.task_id, NOTHING_DECLARED))
                return cause, [ex.endpoint(key) for ex in exchanges], fault_at, True
        return _from_verdict(outcome, failed, _text(group.faults), endpoints), endpoints, None, False

    def _cluster(self, cause: Cause, items: list[_Member]) -> dict[str, Any]:
        severities = [s for _, _, s in items if s]
        severity = max(severities, key=lambda s: SEVERITY_RANK[s]) if severities else None
        episodes = sum(group.count for group, _, _ in items)
        tasks: Counter[str] = Counter()
        labels: Counter[str] = Counter()
        shapes: Counter[str] = Counter()
        for group, _, _ in items:
            tasks[group.task_id] += group.count
            labels[decode_name(group.label) or ""] += group.count
            shapes[self.shapes.get(group.task_id, "unclassified")] += group.count
        rep = min((group for group, _, _ in items), key=lambda g: (g.requests, g.order))
        return {
            **cause.to_json(),
            "episodes": episodes,
            "severity": severity,
            "score": episodes * (SEVERITY_WEIGHT[severity] if severity else NO_SEVERITY_WEIGHT),
            "tasks": dict(sorted(tasks.items(), key=lambda kv: (-kv[1], kv[0]))),
            "shapes": dict(sorted(shapes.items(), key=lambda kv: (-kv[1], kv[0]))),
            "by_label": dict(sorted(labels.items())),
            "parting": parting_summary((p, group.count) for group, p, _ in items),
            "representative": {"key": decode_name(rep.first), "task_id": rep.task_id, "trial": rep.trial,
                               "grid_label": decode_name(rep.label) or "", "requests": rep.requests},
        }


def _worst(failed: Sequence[Mapping[str, Any]]) -> str | None:
    ranked = [f.get("severity") for f in failed if f.get("severity") in SEVERITY_RANK]
    return max(ranked, key=lambda s: SEVERITY_RANK[s]) if ranked else None


def _from_verdict(outcome: str, failed: Sequence[str], faults: Sequence[Mapping[str, Any]],
                  endpoints: Sequence[str]) -> Cause:
    """A cause from the verdict alone (no trace): the last delivered fault, the response unknown."""
    if harness_cause(outcome) is not None:
        return Cause(outcome, tuple(sorted(set(failed))), None, None, None, NOT_JUDGED)
    delivered = [f for f in faults if f.get("delivered")]
    if not delivered:
        # No trace and no request named: the agent sent nothing (the proxy writes no empty trace).
        response = "sent no request" if not endpoints else "unknown (no trace)"
        return Cause(outcome, tuple(sorted(set(failed))), None, None, None, response)
    last = delivered[-1]
    seq = last.get("seq")
    where = endpoints[seq - 1] if isinstance(seq, int) and 0 < seq <= len(endpoints) else None
    return Cause(outcome, tuple(sorted(set(failed))), str(last.get("rule") or "?"), str(last.get("type") or "?"),
                 where, "unknown (no trace)")
