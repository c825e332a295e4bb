"""Failure causes: why each failing episode failed, and which episodes failed the same way.

    sink = CauseSink()                       # an EpisodeSink: build_report streams the log through it
    causes = sink.summarise(run_dir, plan)   # report.json's `causes`

A failing episode (status fail, or incomplete) gets a cause computed from its verdict and its
trace (evaluator.checks.parse_trace), with five parts:

- outcome: "fail", or "incomplete: <why>" (infra_error, reset_failed, ...: the harness could not
  judge, and the cause's line then speaks of the harness, never of the agent);
- checks: the names of the checks that failed, sorted;
- fault: (rule, type) of the last fault delivered to the agent before the first failing
  effect, or none. The first failing effect is the earliest of: a write sent again after an
  earlier send of the same request (idempotency, effects; a write as tasks.request_class says:
  an MCP tool call only by its annotations or the task's patterns, never by its POST), a request
  sent again after it failed (retry); for any other check it is the end of the episode;
- where: that fault's endpoint class (method and path template, ids as {id}, the episode's key
  as {episode}, an MCP tool as `tools/call:<name>`); with no fault, the first failing effect's;
- response: how the agent answered that fault, read from what it sent next: "retried before
  Retry-After", "retried without idempotency key", "retried with a new idempotency key",
  "retried N times, then gave up", "gave up", "accepted drifted field", "read stale state and
  wrote", "answered from stale state", "went on after a cut stream", "went on without retrying",
  "went on"; or "failed with no fault delivered".

Two causes are the same when all five parts are equal. The task is deliberately not a part: one
fault at one place answered the same way is one bug in the agent, whichever task exposed it, and
the cluster lists its tasks. The trial, variant, grid point, timings and ids are not parts either
(they vary between episodes of one bug). Everything is a pure function of the log and the traces,
so the same run gives the same clusters, ids and representatives.

Reading traces. Episodes whose verdicts agree on the failed checks (with their details), the
faults (with sequence numbers, rules, types and delivery) and the endpoint sequence have the same
shape of trace as far as the parts above are concerned; the trace of the first of them in log
order is read for all (`traces_read` in the report says how many were read). An episode whose
trace is missing is explained from its verdict alone, its response "unknown (no trace)".

A cluster: its cause, episodes, tasks, shapes, severity (the worst of its failed checks), the
grid labels it appeared at (a sweep shows which causes appear as λ rises), where its trials
parted from the passing ones (evaluator.parting), and a representative: the failing episode with
the fewest exchanges (then the first in the log). Clusters are ranked by episodes × severity weight
(0.25 / 0.5 / 1.0, the weights of the safety score).
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from faultproxy.evaluator.checks import RETRY_AFTER_TOLERANCE_S, parse_trace
from faultproxy.evaluator.traced import mcp_tool_hints
from faultproxy.evaluator.parting import PassingTrials, parting_summary
from faultproxy.evaluator.scan import EpisodeSink
from faultproxy.formats.episode_causes import harness_explanation, is_agent_cause
from faultproxy.formats.rundir import Plan, VerdictFields, decode_name, trace_file
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.model import SEVERITY_RANK, Task
from faultproxy.tasks.request_class import NOTHING_DECLARED, Declared

SEVERITY_WEIGHT = {"low": 0.25, "medium": 0.5, "high": 1.0}
NO_SEVERITY_WEIGHT = 0.25  # an incomplete episode with no failed check still cost a trial
_RETRY_CHECKS = frozenset({"retry"})
_DUPLICATE_CHECKS = frozenset({"idempotency", "effects"})
NOT_JUDGED = "not judged"  # the response part of a cause the harness could not judge: no agent behaviour is read
# What to do about each kind of answer: the second half of a cause's one line.
ADVICE = {
    "retried before Retry-After": "wait as long as Retry-After says before retrying",
    "retried without idempotency key": "send an Idempotency-Key on writes and reuse it when retrying",
    "retried with a new idempotency key": "reuse the first Idempotency-Key when retrying a write",
    "gave up": "retry transient failures (with backoff) before giving up",
    "accepted drifted field": "validate tool responses; treat a missing field as an error",
    "read stale state and wrote": "re-read the resource right before writing to it",
    "answered from stale state": "re-read before answering when state may have changed",
    "went on after a cut stream": "treat a stream that ends without its final event as failed",
    "went on without retrying": "retry the failed call, or report that the task is unfinished",
    "failed with no fault delivered": "read the representative's trace: the agent fails without any fault",
}
# The same answers after a fault on an irreversible write (the task says so, or the upstream may
# have applied it): a plain retry is the double write the fault warns about.
IRREVERSIBLE_ADVICE = {
    "gave up": "retry the write with an Idempotency-Key (the same one each time), or read the state before "
               "retrying: a plain retry can apply it twice",
    "went on without retrying": "read the state, then retry the write with an Idempotency-Key, or report that "
                                "the task is unfinished",
}


@dataclass(frozen=True)
class Cause:
    """Why one episode failed (see the module docstring); equal parts, equal causes."""

    outcome: str
    checks: tuple[str, ...]
    fault_rule: str | None
    fault_type: str | None
    where: str | None
    response: str
    irreversible: bool = False  # the fault hit a write that must not be applied twice

    @property
    def id(self) -> str:
        """A short stable name for the cause (the same in every run that has it)."""
        parts = [self.outcome, self.checks, self.fault_rule, self.fault_type, self.where, self.response]
        text = json.dumps(parts + ["irreversible"] if self.irreversible else parts)  # ids of other causes unchanged
        return hashlib.blake2b(text.encode(), digest_size=5).hexdigest()

    @property
    def slug(self) -> str:
        """The cause in a few words, safe as a folder name: checks, fault and response."""
        parts = ["-".join(self.checks) or self.outcome.replace("incomplete: ", ""),
                 self.fault_type or "no-fault", self.response.split(" (")[0]]
        text = "--".join(parts).lower()
        return "".join(c if c.isalnum() or c in "-_" else "-" for c in text).strip("-")[:80] + f"--{self.id}"

    @property
    def line(self) -> str:
        """One line a person can act on: about the agent, or, when the harness could not judge, the harness."""
        harness = harness_cause(self.outcome)
        if harness is not None:
            what, todo = harness_explanation(harness)
            where = f" (at {self.where})" if self.where else ""
            return f"{self.outcome}: the harness could not judge these episodes: {what}{where} → {todo}"
        failed = ", ".join(self.checks) or "no check"
        what = f"{failed} failed" if self.outcome == "fail" else f"{self.outcome} ({failed} failed)"
        if self.fault_type:
            cause = f"after {self.fault_type} ({self.fault_rule}) on {self.where}, the agent {self.response}"
        else:
            cause = f"the agent {self.response}" + (f" at {self.where}" if self.where else "")
        table = IRREVERSIBLE_ADVICE if self.irreversible else {}
        response = self.response.split(" (")[0]
        advice = next((t[key] for key in (response, _family(self.response)) for t in (table, ADVICE) if key in t), None)
        return f"{what}: {cause}" + (f" → {advice}" if advice else "")

    def to_json(self) -> dict[str, Any]:
        """The cause's parts, its id and its line."""
        return {"id": self.id, "slug": self.slug, "line": self.line, "outcome": self.outcome,
                "checks": list(self.checks),
                "fault": {"rule": self.fault_rule, "type": self.fault_type} if self.fault_type else None,
                "where": self.where, "response": self.response, "irreversible": self.irreversible}


def harness_cause(outcome: str) -> str | None:
    """The harness cause in an outcome "incomplete: <cause>"; None for "fail" or an agent's cause."""
    if not outcome.startswith("incomplete: "):
        return None
    cause = outcome.removeprefix("incomplete: ")
    return None if is_agent_cause(cause) else cause


def _family(response: str) -> str:
    return "gave up" if response.startswith("retried") and response.endswith("gave up") else response


# --- one episode ---------------------------------------------------------------------------------


def explain(exchanges: Sequence[Any], failed: Sequence[str], outcome: str, episode_key: str | None,
            declared: Declared = NOTHING_DECLARED) -> tuple[Cause, int | None]:
    """The cause of one failing episode from its parsed trace (checks.parse_trace) and the names of
    its failed checks; also the index of the fault it names in the trace (None: no fault).
    `declared`: what the task says about its requests (irreversible, effects, read_only)."""
    checks = tuple(sorted(set(failed)))
    if harness_cause(outcome) is not None:
        where = next((ex.endpoint(episode_key) for ex in exchanges if ex.infra_error), None)
        return Cause(outcome, checks, None, None, where, NOT_JUDGED), None
    hints = mcp_tool_hints(exchanges)

    def is_write(ex: Any) -> bool:
        return ex.request_class(declared, hints).is_write

    effect = _first_failing_effect(exchanges, checks, is_write)
    fault_at = next((i for i in range(min(effect, len(exchanges)) - 1, -1, -1)
                     if (exchanges[i].fault or {}).get("delivered")), None)
    if fault_at is None:
        where = exchanges[effect].endpoint(episode_key) if effect < len(exchanges) else None
        return Cause(outcome, checks, None, None, where, "failed with no fault delivered"), None
    ex = exchanges[fault_at]
    fault = ex.fault or {}
    request = ex.request_class(declared, hints)
    once = request.is_write and (_may_have_committed(ex) or request.irreversible)
    return (Cause(outcome, checks, str(fault.get("rule") or "?"), str(fault.get("type") or "?"),
                  ex.endpoint(episode_key), _response(exchanges, fault_at, is_write), once), fault_at)


WriteTest = Callable[[Any], bool]  # is an exchange a write (tasks.request_class, in explain)


def _first_failing_effect(exchanges: Sequence[Any], checks: tuple[str, ...], is_write: WriteTest) -> int:
    """Index of the first exchange that is a failing effect of these checks; len() for the end.
    For retry: the first retry sent before its Retry-After, else the first retry of a failed send."""
    duplicates, retries = bool(_DUPLICATE_CHECKS & set(checks)), bool(_RETRY_CHECKS & set(checks))
    sent: set[tuple[str, str, str]] = set()
    last_failed: dict[tuple[str, str, str], Any] = {}
    first_retry = len(exchanges)
    for i, ex in enumerate(exchanges):
        if duplicates and is_write(ex) and ex.identity in sent:
            return i
        failed = last_failed.get(ex.identity)
        if retries and failed is not None:
            if _early(failed, ex):
                return i
            first_retry = min(first_retry, i)
        if is_write(ex):
            sent.add(ex.identity)
        if ex.failed:
            last_failed[ex.identity] = ex
        else:
            last_failed.pop(ex.identity, None)
    return first_retry if not duplicates else len(exchanges)


def _early(failed: Any, retry: Any) -> bool:
    """Was `retry` sent before the wait `failed`'s response asked for (counted as checks.check_retry does)?"""
    wait = failed.retry_after_s
    return wait is not None and retry.started - failed.started + RETRY_AFTER_TOLERANCE_S < wait


def _response(exchanges: Sequence[Any], at: int, is_write: WriteTest) -> str:
    """How the agent answered the fault at exchanges[at]."""
    ex, later = exchanges[at], exchanges[at + 1:]
    kind = (ex.fault or {}).get("type")
    retries = [x for x in later if x.identity == ex.identity]
    if retries:
        return _retry_response(ex, retries, is_write)
    if kind == "schema_drift":
        return "accepted drifted field"
    if kind == "stale_state":
        return "read stale state and wrote" if any(is_write(x) for x in later) else "answered from stale state"
    if kind == "partial_response":
        return "went on after a cut stream"
    if not ex.failed:
        return "went on"
    return "gave up" if not any(not x.is_model for x in later) else "went on without retrying"


def _retry_response(ex: Any, retries: Sequence[Any], is_write: WriteTest) -> str:
    first = retries[0]
    if _early(ex, first):
        return "retried before Retry-After"
    if is_write(ex) and _may_have_committed(ex):
        if first.idempotency_key is None:
            return "retried without idempotency key"
        if first.idempotency_key != ex.idempotency_key:
            return "retried with a new idempotency key"
    if all(x.failed for x in retries):
        return f"retried {len(retries)} time{'s' if len(retries) > 1 else ''}, then gave up"
    return "retried"


def _may_have_committed(ex: Any) -> bool:
    """The upstream may have applied this write although the client saw a failure."""
    return ex.committed or ex.maybe_committed


# --- the stream ------------------------------------------------------------------------------------


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
