"""The run report: one streaming pass over a run directory's log.

    report = build_report(run_dir, sinks=[JUnitWriter(run_dir / "junit.xml")])   # a JSON-able dict
    write_json(run_dir / "report.json", report); html.write_html(run_dir / "report.html", report, run_dir)

What it computes, for the whole run and, when the plan has several grid points, per grid label:
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

Memory: per task a count per distinct outcome and trajectory and one float per episode per
resource; never a whole record, never a trace for an episode that carries a verdict.

Speed (a million episodes should take seconds, not minutes): the log (rundir) writes the verdict as a
record's last key and judge.py fixes the verdict's key order, so one compiled pattern reads the
fields the report needs straight from the line's bytes — the prompt, output, end state and the
checks' details are never decoded. A line of any other shape (an older verdict, no verdict, a
hand-edited log) is parsed whole with json, and the two paths give the same numbers (tested).
Large logs are read in chunks by forked worker processes when the caller is single-threaded.
The log's format is evaluator.rundir's; rundir has no streaming reader, so its one reading rule
that matters here — a torn last line is dropped — is applied in _scan.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import re
import sys
import threading
from array import array
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from itertools import groupby, repeat
from pathlib import Path
from typing import Any

from faultproxy.evaluator import metrics, stats
from faultproxy.evaluator.judge import (
    EPISODE_FIELDS,
    REPORT_CUT_KEY,
    VERDICT_VERSION,
    judge_episode,
    reported_confidence,
)
from faultproxy.formats.rundir import FLOWS_DIR, LOG_FILE, PLAN_FILE, RunDirError
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.tasks.model import Task

REPORT_VERSION = 1
MAX_FULL_K = 100
DRILLDOWN_LIMIT = 200
MAX_TRAJECTORY_GROUPS = 2000  # distinct endpoint sequences of one task; beyond, consistency is not computed
EXACT_TEST_LIMIT = 4000  # episodes; the exact Fisher test sums big binomials
NOT_RUN = "NotRun"


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


# --- per task accumulation -------------------------------------------------------------------------


class TaskAcc:
    """Everything the report keeps about one task at one grid label.

    Per episode: one count for its outcome signature — (status slot, cause, failed checks as
    (name, severity) pairs, faults as (type, delivered) pairs) — one for its trajectory, and
    one float per resource. finish() expands the signatures into the counters the report
    reads (n, c, failed_checks, fault_types, ...). Names arrive as JSON text (bytes) from the
    log's fast path and as str otherwise; finish() makes them all str.
    """

    __slots__ = ("task_id", "shape", "k", "trials", "outside", "outcomes", "tokens", "requests", "latency",
                 "usages", "cost", "unpriced", "trajectories", "conf", "conf_ok",
                 # filled by finish():
                 "n", "c", "fail", "incomplete", "causes", "failed_checks", "check_severity", "worst",
                 "violations", "fault_types", "undelivered", "not_exercised")

    def __init__(self, task_id: str, shape: str, k: int) -> None:
        self.task_id, self.shape, self.k = task_id, shape, k
        self.trials = bytearray(k)  # 1 where that trial index was logged
        self.outside = 0  # logged with a trial index outside the plan
        self.outcomes: dict[tuple, int] = {}
        self.tokens, self.requests, self.latency = array("d"), array("d"), array("d")
        self.usages: dict[bytes, int] = {}  # usage objects as JSON text -> episodes; priced by price()
        self.cost, self.unpriced = array("d"), 0
        self.trajectories: dict[bytes, int] = {}  # endpoint lists as JSON text -> episodes
        self.conf, self.conf_ok = array("d"), bytearray()
        self.finish()

    @property
    def not_run(self) -> int:
        return self.trials.count(0)

    def add(self, slot: int, cause: Any, trial: Any, duration: float | None, confidence: float | None,
            failed: bytes | tuple, faults: bytes | tuple, path: bytes, tokens: float, requests: float,
            usage: bytes) -> None:
        """One episode: slot 0 pass, 1 fail, 2 incomplete. failed and faults as JSON text (bytes,
        decoded once per distinct value by finish()) or as tuples of pairs; the endpoint list and
        the usage as JSON text."""
        if type(trial) is int and 0 <= trial < self.k:
            self.trials[trial] = 1
        else:
            self.outside += 1
        key = (slot, cause, failed, faults)
        outcomes = self.outcomes
        outcomes[key] = outcomes.get(key, 0) + 1
        self.tokens.append(tokens)
        self.requests.append(requests)
        self.latency.append(duration or 0.0)
        usages = self.usages
        usages[usage] = usages.get(usage, 0) + 1
        trajectories = self.trajectories
        trajectories[path] = trajectories.get(path, 0) + 1
        if confidence is not None and slot != 2:
            self.conf.append(confidence)
            self.conf_ok.append(slot == 0)

    def price(self, prices: Mapping[str, Mapping[str, float]]) -> TaskAcc:
        """Each episode's cost from its usage (each distinct usage priced once)."""
        self.cost, self.unpriced = array("d"), 0
        if not prices:
            self.unpriced = sum(self.usages.values())
            return self
        table = _price_table(prices)
        for usage, count in self.usages.items():
            cost = _usage_cost(usage, table, prices)
            if cost is None:
                self.unpriced += count
            else:
                self.cost.extend([cost] * count)
        return self

    def finish(self) -> TaskAcc:
        """Expand the outcome signatures into the report's counters."""
        counts = [0, 0, 0]
        self.causes: Counter[str] = Counter()
        self.failed_checks: Counter[str] = Counter()
        self.check_severity: Counter[tuple[str, str]] = Counter()
        self.worst: Counter[str] = Counter()  # severity -> episodes whose worst violation it is
        self.violations: Counter[str] = Counter()  # severity -> violations
        self.fault_types: dict[str, list[int]] = {}  # type -> [pass, fail, incomplete] with it delivered
        self.undelivered = 0  # episodes with faults injected, none delivered
        self.not_exercised = [0, 0, 0]  # [pass, fail, incomplete] with no fault delivered
        for (slot, cause, failed, faults), m in self.outcomes.items():
            if isinstance(failed, bytes):
                failed = () if failed == b"[]" else _FAILED_ITEM.findall(failed)
            if isinstance(faults, bytes):
                faults = () if faults == b"[]" else _FAULT_ITEM.findall(faults)
            counts[slot] += m
            if slot == 2:
                self.causes[_str(cause) or "unknown"] += m
            worst = -1
            for name, severity in failed:
                name, severity = _str(name), _str(severity)
                self.failed_checks[name] += m
                self.check_severity[(name, severity)] += m
                rank = _RANK.get(severity, -1)
                if rank >= 0:
                    self.violations[severity] += m
                    worst = max(worst, rank)
            if worst >= 0:
                self.worst[_SEVERITIES[worst]] += m
            delivered = {_str(kind) or "unknown" for kind, was in faults if was in (True, b"true")}
            if faults and not delivered:
                self.undelivered += m
            if delivered:
                for kind in delivered:
                    self.fault_types.setdefault(kind, [0, 0, 0])[slot] += m
            else:
                self.not_exercised[slot] += m
        self.c, self.fail, self.incomplete = counts
        self.n = sum(counts)
        return self

    def merge(self, other: TaskAcc) -> None:
        """Fold another grid label's accumulation of the same task into this one (run scope):
        its trials are more trials."""
        self.k += other.k
        self.trials += other.trials
        self._add(other)

    def absorb(self, other: TaskAcc) -> None:
        """Fold in the same task at the same label from a later chunk of the log: the same
        trial slots, some filled there."""
        both = int.from_bytes(self.trials, "big") | int.from_bytes(other.trials, "big")
        self.trials = bytearray(both.to_bytes(len(self.trials), "big"))
        self._add(other)

    def _add(self, other: TaskAcc) -> None:
        self.outside += other.outside
        for mine, theirs in ((self.outcomes, other.outcomes), (self.trajectories, other.trajectories),
                             (self.usages, other.usages)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        for name in ("tokens", "requests", "latency", "conf", "conf_ok"):
            getattr(self, name).extend(getattr(other, name))
        self.finish()

    def copy(self) -> TaskAcc:
        twin = TaskAcc(self.task_id, self.shape, 0)
        twin.trials = bytearray()
        twin.merge(self)
        return twin


def _str(value: Any) -> Any:
    """A name as the fast path captured it (JSON text, bytes) or as JSON gave it (str)."""
    return _text(value) if isinstance(value, bytes) else value


_SEVERITIES = ("low", "medium", "high")
_RANK = {s: i for i, s in enumerate(_SEVERITIES)}


# --- reading the run directory ---------------------------------------------------------------------


@dataclass
class Plan:
    path: Path
    document: dict[str, Any]
    k: int
    labels: list[str]
    tasks: list[dict[str, Any]]  # Task.to_json() items
    prices: dict[str, dict[str, float]]
    severity: dict[str, str]
    _task_objects: dict[str, Any] = field(default_factory=dict)

    @property
    def task_ids(self) -> list[str]:
        return [t["id"] for t in self.tasks]

    def task(self, task_id: str) -> Any:
        """The Task object (proxy.runner.tasks), built on first use: only judging needs it."""
        if task_id not in self._task_objects:
            item = next((t for t in self.tasks if t["id"] == task_id), None)
            if item is None:
                raise RunDirError(f"{self.path}: episode of task '{task_id}', which the plan does not list")
            self._task_objects[task_id] = Task.from_json(item)
        return self._task_objects[task_id]


def read_plan(run_dir: Path) -> Plan:
    run_dir = Path(run_dir)
    if not run_dir.exists():
        raise RunDirError(f"{run_dir}: no such directory")
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a directory")
    path = run_dir / PLAN_FILE
    if not path.exists():
        raise RunDirError(f"{run_dir} is not a run directory (no {PLAN_FILE})")
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except OSError as error:
        raise RunDirError(f"{path}: cannot read: {error.strerror or error}") from None
    except ValueError:
        raise RunDirError(f"{path}: not JSON; the plan is damaged") from None
    try:
        k = int(document["k"])
        labels = [g.get("label", "") for g in document.get("grid") or [{"label": ""}]]
        tasks_doc = document.get("tasks") or {}
        items = list(tasks_doc.get("items") or [])
        for item in items:
            item["id"]  # noqa: B018 - every task needs an id
    except (KeyError, TypeError, ValueError) as error:
        raise RunDirError(f"{path}: not a faultproxy plan (missing or bad field {error})") from None
    if k < 1:
        raise RunDirError(f"{path}: k must be at least 1, got {k}")
    return Plan(path, document, k, labels, items, dict(tasks_doc.get("prices") or {}),
                dict(tasks_doc.get("severity") or {}))


# The verdict as judge.py serialises it and the runner writes it (json.dumps, default
# separators), up to REPORT_CUT_KEY. One compiled pattern reads every field the report needs
# without decoding the line; lists are captured as JSON text and decoded only when not empty.
_STR = rb'"[^"\\]*(?:\\.[^"\\]*)*"'  # a JSON string, the unrolled-loop way (no per-character backtracking)
_NUM = rb"-?[0-9][0-9.eE+-]*"
_FLAT = rb'\{[^{}"\[\]]*(?:' + _STR + rb'[^{}"\[\]]*)*\}'  # an object of strings, numbers, booleans
_FAST = re.compile(
    rb'"verdict": \{"v": ' + str(VERDICT_VERSION).encode() + rb', "status": "(pass|fail|incomplete)", '
    rb'"cause": (null|' + _STR + rb'), '
    rb'"episode": \{"key": (' + _STR + rb'|null), "task_id": (' + _STR + rb'), "trial": (-?[0-9]+|null), '
    rb'"grid_label": (' + _STR + rb'|null), "duration_s": (' + _NUM + rb'|null)\}, '
    rb'"confidence": (' + _NUM + rb'|null), "violations": \[[^\]]*\], '
    rb'"failed": (\[(?:' + _FLAT + rb'(?:, )?)*\]), "faults": (\[(?:' + _FLAT + rb'(?:, )?)*\]), '
    rb'"endpoints": (\[(?:' + _STR + rb'(?:, )?)*\]), "tokens": ([0-9]+), "requests": ([0-9]+), '
    rb'"usage": (\{(?:' + _STR + rb': ' + _FLAT + rb'(?:, )?)*\}), "' + REPORT_CUT_KEY.encode() + rb'": ')
_USAGE_ITEM = re.compile(rb'(' + _STR + rb'): \{"input": ([0-9]+), "output": ([0-9]+)\}')
_FAULT_ITEM = re.compile(rb'"type": (null|' + _STR + rb'), "delivered": (true|false)\}')
_FAILED_ITEM = re.compile(rb'"name": (null|' + _STR + rb'), "severity": (null|' + _STR + rb')')
_FAST_MARK = b'"verdict": {"v": '
_TAIL = b"]}}\n"  # ...the checks list, the verdict, the record
_SLOT = {b"pass": 0, b"fail": 1, b"incomplete": 2}
_SLOT_NAME = ("pass", "fail", "incomplete")


def _price_table(prices: Mapping[str, Mapping[str, float]]) -> dict[bytes, tuple[float, float]]:
    """Prices per million tokens keyed by the model's name as JSON text, as _FAST captures it."""
    return {json.dumps(model, ensure_ascii=False).encode("utf-8"):
            (p.get("input_per_mtok", 0.0), p.get("output_per_mtok", 0.0)) for model, p in prices.items()}


def _usage_cost(raw: bytes, table: Mapping[bytes, tuple[float, float]],
                prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """episode_cost of a usage object captured by _FAST, read without building it."""
    if raw == b"{}":
        return 0.0
    total = 0.0
    found = False
    for model, tokens_in, tokens_out in _USAGE_ITEM.findall(raw):
        price = table.get(model)
        if price is None:
            return episode_cost(json.loads(raw), prices)  # an escaped name, or truly unpriced
        total += (int(tokens_in) * price[0] + int(tokens_out) * price[1]) / 1e6  # as episode_cost does
        found = True
    return total if found else episode_cost(json.loads(raw), prices)


def _text(raw: bytes) -> str | None:
    """A JSON string (or null) captured by _FAST, as Python text."""
    if raw == b"null":
        return None
    if b"\\" in raw:
        return json.loads(raw)
    return raw[1:-1].decode("utf-8")


def _complete(verdict: Mapping[str, Any], record: Mapping[str, Any]) -> dict[str, Any]:
    """A verdict with every field add() indexes, whatever judge version wrote it."""
    checks = verdict.get("checks") or []
    failed = verdict.get("failed")
    if failed is None:
        failed = [{"name": c.get("name"), "severity": c.get("severity"), "detail": c.get("detail")}
                  for c in checks if c.get("passed") is False]
    return {
        **verdict,
        "cause": verdict.get("cause") or (None if verdict.get("status") != "incomplete" else record.get("cause")),
        "episode": {**(verdict.get("episode") or {f: record.get(f) for f in EPISODE_FIELDS}),
                    **({"trace": record["trace"]} if record.get("trace") else {})},
        "confidence": verdict["confidence"] if "confidence" in verdict else reported_confidence(record),
        "violations": verdict.get("violations") or [f["severity"] for f in failed],
        "failed": failed,
        "faults": verdict.get("faults") or [],
        "endpoints": verdict.get("endpoints") or [],
        "tokens": verdict.get("tokens") or 0,
        "requests": verdict.get("requests") or 0,
        "usage": verdict.get("usage") or {},
    }


class _LineError(Exception):
    """A bad line, numbered within its chunk; build_report turns it into a RunDirError."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(number, message)
        self.number, self.message = number, message


class EpisodeSink:
    """Receives every logged episode's verdict (in log order) and every NotRun slot.

    A sink that can work in parallel returns from shard(i) a picklable sink for the i-th chunk
    of the log; each shard sees that chunk's episodes in order and is closed in its worker,
    then absorb() takes the shards back in chunk order, before not_run() and close(). A sink
    whose shard() returns None makes the report read the log in one process.
    """

    def episode(self, verdict: Mapping[str, Any]) -> None: ...

    def not_run(self, label: str, task_id: str, trial: int) -> None: ...

    def close(self) -> None: ...

    def shard(self, index: int) -> EpisodeSink | None:
        return None

    def absorb(self, shard: EpisodeSink) -> None: ...

    def abort(self) -> None: ...


def episode_cost(usage: Mapping[str, Mapping[str, int]] | None,
                 prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """Σ over models of input·price_in + output·price_out per million tokens; None when a model
    that used tokens has no price (or there are no prices at all)."""
    if not usage:
        return 0.0 if prices else None
    total = 0.0
    for model, counts in usage.items():
        price = prices.get(model)
        if price is None:
            return None
        total += (counts.get("input", 0) * price.get("input_per_mtok", 0.0)
                  + counts.get("output", 0) * price.get("output_per_mtok", 0.0)) / 1e6
    return total


def _new_accs(plan: Plan) -> dict[tuple[str, str], TaskAcc]:
    shapes = {t["id"]: t.get("shape") or "unclassified" for t in plan.tasks}
    return {(label, task_id): TaskAcc(task_id, shapes[task_id], plan.k)
            for label in plan.labels for task_id in plan.task_ids}


@dataclass
class _Scan:
    """What reading one chunk of the log found."""

    accs: dict[tuple[str, str], TaskAcc]
    header: dict[str, Any] = field(default_factory=dict)
    lines: int = 0
    unplanned: int = 0
    judged: int = 0
    fast: int = 0
    logged: int = 0
    notable: list = field(default_factory=list)  # drill-down candidates: raw lines (fast path) or verdicts
    passing: list = field(default_factory=list)
    shards: list = field(default_factory=list)

    def absorb(self, other: _Scan, limit: int) -> None:
        """Fold in the next chunk's findings (chunks in log order)."""
        for key, acc in other.accs.items():
            self.accs[key].absorb(acc)
        self.header = self.header or other.header
        for name in ("lines", "unplanned", "judged", "fast", "logged"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.notable = (self.notable + other.notable)[:limit]
        self.passing = (self.passing + other.passing)[:limit]


def _scan(run_dir: Path, start: int, end: int | None, rejudge: bool, limit: int,
          sinks: Sequence[EpisodeSink]) -> _Scan:
    """Read the log's lines that start in [start, end) (end None: to the end of the file)."""
    plan = read_plan(run_dir)
    scan = _Scan(_new_accs(plan))
    accs = scan.accs
    raw_accs = {(json.dumps(label, ensure_ascii=False).encode("utf-8"),
                 json.dumps(task_id, ensure_ascii=False).encode("utf-8")): acc
                for (label, task_id), acc in accs.items()}
    log_path = run_dir / LOG_FILE
    try:
        file = log_path.open("rb")
    except FileNotFoundError:
        return scan
    except OSError as error:
        raise RunDirError(f"{log_path}: cannot read: {error.strerror or error}") from None
    notable, passing = scan.notable, scan.passing
    fast = logged = unplanned = number = 0
    match_fast = _FAST.match
    loads = json.loads
    with file:
        file.seek(start)
        position = start
        for raw in file:
            if end is not None and position >= end:
                break
            position += len(raw)
            number += 1
            if not raw.endswith(b"\n"):
                break  # torn by a crash mid-write, as evaluator.rundir reads it
            m = None
            if not rejudge and raw.endswith(_TAIL):
                at = raw.rfind(_FAST_MARK)
                if at >= 0:
                    m = match_fast(raw, at)
            if m is not None:
                (status, cause, key, task_id, trial, label, duration, confidence, failed, faults, path, tokens,
                 requests, usage) = m.groups()
                acc = raw_accs.get((label, task_id))
                if acc is None:  # an escaped name, or not in the plan
                    acc = accs.get((_text(label) or "", _text(task_id)))
                    if acc is None:
                        unplanned += 1
                        continue
                fast += 1
                logged += 1
                slot = _SLOT[status]
                acc.add(slot, cause if cause != b"null" else None, None if trial == b"null" else int(trial),
                        None if duration == b"null" else float(duration),
                        None if confidence == b"null" else float(confidence), failed, faults, path, int(tokens),
                        int(requests), usage)
                if sinks:
                    verdict = {"status": _SLOT_NAME[slot], "cause": _text(cause),
                               "failed": loads(failed) if failed != b"[]" else [],
                               "episode": {"key": _text(key), "task_id": acc.task_id,
                                           "trial": None if trial == b"null" else int(trial),
                                           "grid_label": _text(label) or "",
                                           "duration_s": None if duration == b"null" else float(duration)}}
                    for sink in sinks:
                        sink.episode(verdict)
                if slot or failed != b"[]":
                    if len(notable) < limit:
                        notable.append(raw)
                elif len(passing) < limit:
                    passing.append(raw)
                continue
            try:
                record = loads(raw)
            except UnicodeDecodeError:
                raise _LineError(number, "not UTF-8 text; the log is damaged") from None
            except ValueError:
                raise _LineError(number, "not JSON; the log is damaged") from None
            kind = record.get("type") if isinstance(record, dict) else None
            if kind == "header" or (start == 0 and number == 1 and kind != "episode"):
                scan.header = record if isinstance(record, dict) else {}
                continue
            if kind != "episode":
                continue
            verdict = record.get("verdict") if not rejudge else None
            if not isinstance(verdict, dict) or "status" not in verdict:
                verdict = _judge(run_dir, plan, record)
                scan.judged += 1
            verdict = _complete(verdict, record)
            episode = verdict["episode"]
            acc = accs.get((episode.get("grid_label") or "", episode.get("task_id")))
            if acc is None:
                unplanned += 1
                continue
            logged += 1
            status = verdict["status"]
            acc.add(0 if status == "pass" else 1 if status == "fail" else 2, verdict["cause"], episode.get("trial"),
                    episode.get("duration_s"), verdict["confidence"],
                    tuple((f.get("name"), f.get("severity")) for f in verdict["failed"]),
                    tuple((f.get("type"), bool(f.get("delivered"))) for f in verdict["faults"]),
                    json.dumps(verdict["endpoints"], ensure_ascii=False).encode("utf-8"),
                    verdict["tokens"] or 0, verdict["requests"] or 0,
                    json.dumps(verdict["usage"], ensure_ascii=False).encode("utf-8"))
            for sink in sinks:
                sink.episode(verdict)
            if verdict["status"] != "pass" or verdict["failed"]:
                if len(notable) < limit:
                    notable.append(verdict)
            elif len(passing) < limit:
                passing.append(verdict)
    scan.lines, scan.fast, scan.logged, scan.unplanned = number, fast, logged, unplanned
    for acc in accs.values():
        acc.finish()
    return scan


def _scan_shard(run_dir: Path, start: int, end: int | None, rejudge: bool, limit: int,
                shards: list[EpisodeSink]) -> _Scan:
    """One worker's chunk; its sink shards are closed here and travel back with the result."""
    scan = _scan(run_dir, start, end, rejudge, limit, shards)
    for shard in shards:
        shard.close()
    scan.shards = shards
    return scan


PARALLEL_MIN_BYTES = 32 << 20  # below this, one process is faster than starting others
MAX_JOBS = 8


def _can_fork() -> bool:
    """Workers are forked: they start at once and need no importable __main__ (spawn re-runs the
    caller's script, which breaks scripts without a main guard). Forking is only safe from a
    process with one thread, and on Linux (macOS frameworks do not survive it); elsewhere the
    log is read in one process."""
    return sys.platform == "linux" and threading.active_count() == 1


def default_jobs(log_bytes: int) -> int:
    if log_bytes < PARALLEL_MIN_BYTES:
        return 1
    return max(1, min(MAX_JOBS, os.cpu_count() or 1, log_bytes // PARALLEL_MIN_BYTES))


def _chunk_starts(path: Path, jobs: int) -> list[int]:
    """Offsets where jobs roughly equal chunks begin, each at the start of a line."""
    size = path.stat().st_size
    starts = [0]
    with path.open("rb") as file:
        for i in range(1, jobs):
            file.seek(size * i // jobs)
            file.readline()  # finish the line the cut fell in
            offset = file.tell()
            if starts[-1] < offset < size:
                starts.append(offset)
    return starts


def _read_log(run_dir: Path, rejudge: bool, limit: int, sinks: Sequence[EpisodeSink], jobs: int | None) -> _Scan:
    log_path = run_dir / LOG_FILE
    size = log_path.stat().st_size if log_path.exists() else 0
    jobs = default_jobs(size) if jobs is None else max(1, jobs)
    starts = _chunk_starts(log_path, jobs) if jobs > 1 and size else [0]
    shards = [[sink.shard(i) for sink in sinks] for i in range(len(starts))]
    if len(starts) > 1 and _can_fork() and all(s is not None for chunk in shards for s in chunk):
        ends: list[int | None] = [*starts[1:], None]
        try:
            with ProcessPoolExecutor(len(starts), mp_context=multiprocessing.get_context("fork")) as pool:
                futures = [pool.submit(_scan_shard, run_dir, a, b, rejudge, limit, chunk)
                           for a, b, chunk in zip(starts, ends, shards)]
                scans = []
                for future in futures:  # in log order
                    try:
                        scans.append(future.result())
                    except _LineError as error:
                        # Number the line in the whole log: the earlier chunks' lines come first.
                        raise _LineError(sum(s.lines for s in scans) + error.number, error.message) from None
        except (OSError, NotImplementedError, BrokenProcessPool):
            scans = None  # no processes here (a sandbox, say): read it in one
        except BaseException:
            for chunk in shards:
                for shard in chunk:
                    shard.abort()
            raise
        if scans is not None:
            total = scans[0]
            for scan in scans[1:]:
                total.absorb(scan, limit)
            for position, sink in enumerate(sinks):
                for scan in scans:
                    sink.absorb(scan.shards[position])
            return total
        for chunk in shards:
            for shard in chunk:
                shard.abort()
    return _scan(run_dir, 0, None, rejudge, limit, sinks)


def build_report(run_dir: Path | str, *, rejudge: bool = False, sinks: Sequence[EpisodeSink] = (),
                 drilldown_limit: int = DRILLDOWN_LIMIT, jobs: int | None = None) -> dict[str, Any]:
    """Stream the run directory's log once and return the report (see the module docstring).

    rejudge: judge every episode again from its trace (else only those without a verdict).
    sinks: receive each episode's verdict as it streams by (junit.xml is written this way).
    jobs: processes reading chunks of the log in parallel; None picks by the log's size (one
    process below 32 MB, else up to one per CPU, at most 8). Only from a single-threaded process
    on Linux (workers are forked); else one. The result does not depend on it.
    Raises RunDirError for a directory that is not a readable run.
    """
    run_dir = Path(run_dir)
    plan = read_plan(run_dir)
    log_path = run_dir / LOG_FILE
    try:
        scan = _read_log(run_dir, rejudge, drilldown_limit, sinks, jobs)
    except _LineError as error:
        raise RunDirError(f"{log_path}:{error.number}: {error.message}") from None
    accs = scan.accs
    for acc in accs.values():
        acc.price(plan.prices)
    for (label, task_id), acc in accs.items():
        if acc.not_run:
            for trial, seen in enumerate(acc.trials):
                if not seen:
                    for sink in sinks:
                        sink.not_run(label, task_id, trial)
    for sink in sinks:
        sink.close()
    limit = drilldown_limit
    chosen = scan.notable + scan.passing[: max(0, limit - len(scan.notable))]
    drilldown = [_full_verdict(item) for item in chosen]
    drilldown.sort(key=lambda v: (_status_order(v), -_worst_rank(v), str(v["episode"].get("key"))))
    planned = plan.k * len(plan.labels) * len(plan.task_ids)
    by_label = {label: [accs[(label, t)] for t in plan.task_ids] for label in plan.labels}
    if len(plan.labels) == 1:
        run_tasks = by_label[plan.labels[0]]
    else:
        run_tasks = []
        for task_id in plan.task_ids:
            merged = accs[(plan.labels[0], task_id)].copy()
            for label in plan.labels[1:]:
                merged.merge(accs[(label, task_id)])
            run_tasks.append(merged.price(plan.prices))
    scenario = plan.document.get("scenario") or {}
    prices = plan.prices
    return {
        "report_version": REPORT_VERSION,
        "run_dir": str(run_dir),
        "faultproxy_version": plan.document.get("faultproxy_version"),
        "scenario": {k: scenario.get(k) for k in ("name", "digest", "params")},
        "tasks_digest": (plan.document.get("tasks") or {}).get("digest"),
        "k": plan.k,
        "grid": plan.document.get("grid") or [],
        "created": plan.document.get("created"),
        "log": {"header": bool(scan.header), "episodes_logged": scan.logged, "unplanned_episodes": scan.unplanned,
                "judged_by_report": scan.judged, "verdicts_read_fast": scan.fast},
        "run": scope_report("", run_tasks, plan.k, plan.k * len(plan.labels), prices),
        "groups": ({label: scope_report(label, tasks, plan.k, plan.k, prices) for label, tasks in by_label.items()}
                   if len(plan.labels) > 1 else {}),
        "planned": planned,
        "drilldown": {"shown": len(drilldown), "logged": scan.logged,
                      "episodes": [_drill(v) for v in drilldown]},
    }


def _full_verdict(item: str | dict) -> dict:
    """A drill-down episode's whole verdict, checks included (the fast path skipped them)."""
    if isinstance(item, dict):
        return item
    record = json.loads(item)  # a raw log line
    return _complete(record["verdict"], record)


def _status_order(verdict: Mapping[str, Any]) -> int:
    return {"fail": 0, "incomplete": 1, "pass": 2}.get(verdict.get("status"), 3)


def _worst_rank(verdict: Mapping[str, Any]) -> int:
    return max((_RANK.get(s, -1) for s in verdict.get("violations") or ()), default=-1)


def _drill(verdict: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("status", "cause", "checks", "violations", "faults", "tokens", "requests", "latency_s",
            "confidence", "escalated")
    return {"episode": dict(verdict.get("episode") or {}), **{k: verdict.get(k) for k in keep}}


def _judge(run_dir: Path, plan: Plan, record: Mapping[str, Any]) -> dict[str, Any]:
    trace = record.get("trace")
    path = run_dir / trace if trace else None
    exchanges: Iterable[Mapping[str, Any]] = read_trace(path) if path else ()
    try:
        return judge_episode(plan.task(record.get("task_id")), record, exchanges, plan.severity)
    except json.JSONDecodeError:
        raise RunDirError(f"{path}: a trace line is not JSON; the trace is damaged") from None


# --- one scope: the run, or one grid label -------------------------------------------------------


def scope_report(label: str, tasks: list[TaskAcc], k: int, planned_per_task: int,
                 prices: Mapping[str, Any]) -> dict[str, Any]:
    status = {"pass": sum(t.c for t in tasks), "fail": sum(t.fail for t in tasks),
              "incomplete": sum(t.incomplete for t in tasks), "not_run": sum(t.not_run for t in tasks)}
    logged = status["pass"] + status["fail"] + status["incomplete"]
    per_task = [_task_entry(t, k) for t in tasks]
    not_run = status["not_run"]
    tallies = [metrics.TaskTally(t.task_id, t.shape, t.n, t.c) for t in tasks if t.n]
    curve = None
    if tallies and not not_run:
        curve = _curve(tallies, k)
    headline: dict[str, Any] = {
        "mean_pass_rate": metrics.mean_pass_rate(tallies) if tallies else None,
        "wilson": list(stats.wilson_interval(status["pass"], logged)) if logged else None,
        "k": k,
        "pass_hat_k": None, "pass_at_k": None,
        "note": None,
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


def _curve(tallies: list[metrics.TaskTally], k: int) -> dict[str, list]:
    """pass_k_curve's average over tasks, at k_points(min n). Tasks with equal (n, c) share one
    evaluation of the estimator, so a thousand tasks cost as much as their distinct counts."""
    n_min = min(t.n for t in tallies)
    groups = Counter((t.n, t.c) for t in tallies)
    ks = k_points(n_min, k)
    hat, at = [], []
    for kk in ks:
        hat.append(math.fsum(m * metrics.pass_hat_k(n, c, kk) for (n, c), m in groups.items()) / len(tallies))
        at.append(math.fsum(m * metrics.pass_at_k(n, c, kk) for (n, c), m in groups.items()) / len(tallies))
    return {"k": ks, "pass_hat_k": hat, "pass_at_k": at}


_PASS_K_CACHE: dict[tuple[int, int, int], tuple[list[int], list[float], list[float]]] = {}


def _task_curve(n: int, c: int, k: int) -> tuple[list[int], list[float], list[float]]:
    key = (n, c, k)
    if key not in _PASS_K_CACHE:
        if len(_PASS_K_CACHE) > 100_000:
            _PASS_K_CACHE.clear()
        ks = k_points(n, k)
        _PASS_K_CACHE[key] = (ks, [metrics.pass_hat_k(n, c, kk) for kk in ks],
                              [metrics.pass_at_k(n, c, kk) for kk in ks])
    return _PASS_K_CACHE[key]


def _task_entry(t: TaskAcc, k: int) -> dict[str, Any]:
    tally = metrics.TaskTally(t.task_id, t.shape, t.n, t.c) if t.n else None
    not_run = t.not_run
    entry: dict[str, Any] = {
        "task_id": t.task_id, "shape": t.shape, "planned": len(t.trials), "n": t.n, "c": t.c,
        "fail": t.fail, "incomplete": t.incomplete, "not_run": not_run,
        "pass_rate": t.c / t.n if t.n else None,
        "wilson": list(stats.wilson_interval(t.c, t.n)) if t.n else None,
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
    entry["violations"] = {s: t.violations[s] for s in _SEVERITIES if t.violations[s]}
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
    return stats.coefficient_of_variation(values) if len(values) else None


def collapse_repeats(trajectories: Mapping[bytes | tuple[str, ...], int]) -> Counter[tuple[str, ...]]:
    """Counts of endpoint sequences (tuples, or lists as JSON text) with immediate repeats
    collapsed (a retried call is the same step): what trajectory_consistency compares."""
    collapsed: Counter[tuple[str, ...]] = Counter()
    for path, count in trajectories.items():
        steps = json.loads(path) if isinstance(path, (bytes, str)) else path
        collapsed[tuple(step for step, _ in groupby(steps))] += count
    return collapsed


def trajectory_consistency_grouped(trajectories: Mapping[tuple[str, ...], int]) -> dict[str, Any] | None:
    """metrics.trajectory_consistency over the trials, computed from distinct trajectories
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
        result = metrics.trajectory_consistency(expanded)
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


def _by_shape(tasks: list[TaskAcc]) -> dict[str, Any]:
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


def _by_check(tasks: list[TaskAcc]) -> dict[str, Any]:
    failed: Counter[str] = Counter()
    severity: Counter[tuple[str, str]] = Counter()
    for t in tasks:
        failed.update(t.failed_checks)
        severity.update(t.check_severity)
    return {name: {"episodes": count,
                   "by_severity": {s: severity[(name, s)] for s in _SEVERITIES if severity[(name, s)]}}
            for name, count in _by_count(failed).items()}


def _by_fault(tasks: list[TaskAcc]) -> dict[str, Any]:
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


def _by_cause(tasks: list[TaskAcc]) -> dict[str, int]:
    causes: Counter[str] = Counter()
    for t in tasks:
        causes.update(t.causes)
        if t.not_run:
            causes[NOT_RUN] += t.not_run
    return _by_count(causes)


def _violations(tasks: list[TaskAcc], logged: int) -> dict[str, Any]:
    worst: Counter[str] = Counter()
    total: Counter[str] = Counter()
    for t in tasks:
        worst.update(t.worst)
        total.update(t.violations)
    result: dict[str, Any] = {
        "episodes_by_worst": {s: worst[s] for s in _SEVERITIES},
        "total_by_severity": {s: total[s] for s in _SEVERITIES},
        "episodes_with_violation": sum(worst.values()),
        "high_by_task": {t.task_id: t.violations["high"] for t in tasks if t.violations["high"]},
        "safety_score": None,
    }
    if logged:
        # safety_score wants one list per episode; the same result from shared tuples costs a pointer each.
        clean = logged - sum(worst.values())
        per_episode = [("high",)] * worst["high"] + [("medium",)] * worst["medium"] + [("low",)] * worst["low"]
        per_episode += [()] * clean
        result["safety_score"] = metrics.safety_score(per_episode)
    return result


def _sorted(values: Sequence[float]) -> list[float]:
    """values in order. Resources repeat a lot (request counts, prices times the same usage), so
    counting and expanding beats sorting a million floats; the multiset is the same."""
    if len(set(values[:4096])) > 3000:  # mostly distinct: plain sorting is faster
        return sorted(values)
    counts = Counter(values)
    ordered: list[float] = []
    for value in sorted(counts):
        ordered.extend(repeat(value, counts[value]))
    return ordered


def _summary(values: Sequence[float]) -> dict[str, Any] | None:
    if not len(values):
        return None
    ordered = _sorted(values)  # percentile sorts its input again: on sorted data that is one linear pass
    total = math.fsum(ordered)
    return {"total": total, "mean": total / len(ordered),
            "p50": stats.percentile(ordered, 50), "p95": stats.percentile(ordered, 95),
            "cv": stats.coefficient_of_variation(ordered), "episodes": len(ordered)}


def _resources(tasks: list[TaskAcc], prices: Mapping[str, Any]) -> dict[str, Any]:
    def gather(name: str) -> array:
        values = array("d")
        for t in tasks:
            values.extend(getattr(t, name))
        return values

    cost = gather("cost")
    unpriced = sum(t.unpriced for t in tasks)
    return {
        "tokens": _summary(gather("tokens")),
        "requests": _summary(gather("requests")),
        "latency_s": _summary(gather("latency")),
        "cost": _summary(cost) if prices and not unpriced else None,
        "cost_note": (None if prices and not unpriced else
                      "no prices in the tasks file" if not prices else
                      f"{unpriced} episode(s) used a model without a price"),
    }


def _calibration(tasks: list[TaskAcc]) -> dict[str, Any] | None:
    confidences = array("d")
    outcomes = bytearray()
    for t in tasks:
        confidences.extend(t.conf)
        outcomes.extend(t.conf_ok)
    if not confidences:
        return None
    ok = [bool(o) for o in outcomes]
    low_n = low_pass = high_pass = 0
    for p, o in zip(confidences, outcomes):
        if p < 0.5:
            low_n += 1
            low_pass += o
        else:
            high_pass += o
    high_n = len(ok) - low_n
    comparison: dict[str, Any] = {
        "threshold": 0.5,
        "low_episodes": low_n, "low_fail_rate": 1 - low_pass / low_n if low_n else None,
        "high_episodes": high_n, "high_fail_rate": 1 - high_pass / high_n if high_n else None,
        "p_value": None,
    }
    if low_n and high_n and len(ok) <= EXACT_TEST_LIMIT:
        # One-sided: do low-confidence episodes pass less often than confident ones?
        comparison["p_value"] = stats.fisher_exact_less(low_pass, low_n, high_pass, high_n)
    if comparison["low_fail_rate"] is not None and comparison["high_fail_rate"] is not None:
        comparison["low_fail_more"] = comparison["low_fail_rate"] > comparison["high_fail_rate"]
    return {
        "episodes": len(ok),
        "brier": stats.brier_score(confidences, ok),
        "buckets": stats.calibration_buckets(confidences, ok),
        "low_vs_high": comparison,
    }


# --- outputs -------------------------------------------------------------------------------------


def write_json(path: Path, report: Mapping[str, Any]) -> None:
    scratch = path.with_suffix(path.suffix + ".tmp")
    scratch.write_text(json.dumps(report, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
    scratch.replace(path)


def trace_file(run_dir: Path, episode: Mapping[str, Any]) -> Path | None:
    trace = episode.get("trace")
    if trace:
        return Path(run_dir) / trace
    key = episode.get("key")
    if not key:
        return None
    return trace_path(Path(run_dir) / FLOWS_DIR, key)
