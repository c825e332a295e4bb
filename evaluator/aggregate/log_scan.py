"""Scanning a run's episode log once, fast, into per-task accumulators.

    scan = read_log(run_dir, plan, rejudge=False, limit=200, sinks=[...], jobs=None)

The log is read as `faultproxy run` would resume it: a log whose header names another plan is
refused (RunDirError); a second line for the same planned trial, and a line for a trial, task or
grid label the plan does not have, are ignored and counted (Scan.duplicates, out_of_plan,
unplanned) for the report to warn about.

Each line's verdict is read by formats.verdict_layout.read_verdict straight from the line's bytes (the
prompt, output, end state and the checks' details are never decoded). A line of any other
shape (an older verdict, no verdict, a hand-edited log) is parsed whole with json, and judged
from its trace when it has no verdict; the two paths give the same numbers (tested).

Large logs are read in chunks by forked worker processes when the caller is single-threaded:
each worker scans the lines that start in its byte range and sends back its accumulators and
its sinks' shards, which are folded together in log order.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import sys
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate.episode_sink import EpisodeSink
from faultproxy.evaluator.aggregate.tally import TaskAccumulator, new_accumulators
from faultproxy.evaluator.aggregate.verdict_forms import complete_verdict, raw_fields, sink_verdict, verdict_fields
from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats.run_records import EpisodeRecord, Verdict, upgrade_record
from faultproxy.formats.rundir import LOG_FILE, Plan, RunDirError, log_lines, trace_file
from faultproxy.formats.verdict_layout import decode_name, read_verdict
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.task_model import Task

PARALLEL_MIN_BYTES = 32 << 20  # below this, one process is faster than starting others
MAX_JOBS = 8


@dataclass
class Scan:
    """What reading the log (or one chunk of it) found."""

    accs: dict[tuple[str, str], TaskAccumulator]  # (grid label, task id) -> its accumulator
    header: dict[str, Any] = field(default_factory=dict)
    lines: int = 0
    unplanned: int = 0
    duplicates: int = 0
    out_of_plan: int = 0
    judged: int = 0
    fast: int = 0
    logged: int = 0
    side_channels: int = 0  # episodes whose verdict lists side-channel errors
    first_side_channel: dict | None = None  # the first of those errors (evaluator.judging.side_channels)
    unclassified: int = 0  # episodes whose verdict lists MCP tools nobody classified
    unclassified_tools: set[str] = field(default_factory=set)  # those tools
    missing_traces: list[str] = field(default_factory=list)  # episodes to judge whose trace file is gone
    kept_verdicts: int = 0  # of those, how many kept their logged verdict
    notable: list[bytes | Verdict] = field(default_factory=list)  # drill-down candidates: raw lines or verdicts
    passing: list[bytes | Verdict] = field(default_factory=list)
    shards: list = field(default_factory=list)
    seen: dict[tuple[str, str], bytearray] = field(default_factory=dict)  # per accumulator: trials read

    def absorb(self, other: Scan, limit: int) -> None:
        """Fold in the next chunk's findings (chunks in log order)."""
        for key, acc in other.accs.items():
            self.accs[key].absorb(acc)
        self.header = self.header or other.header
        for name in ("lines", "unplanned", "duplicates", "out_of_plan", "judged", "fast", "logged", "side_channels",
                     "unclassified", "missing_traces", "kept_verdicts"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.unclassified_tools |= other.unclassified_tools
        self.first_side_channel = self.first_side_channel or other.first_side_channel
        self.notable = (self.notable + other.notable)[:limit]
        self.passing = (self.passing + other.passing)[:limit]


class LineError(Exception):
    """A bad line, numbered within its chunk; the report turns it into a RunDirError."""

    def __init__(self, number: int, message: str) -> None:
        super().__init__(number, message)
        self.number, self.message = number, message


class _Chunk:
    """Reads the log's lines that start in [start, end) into a Scan."""

    def __init__(self, run_dir: Path, plan: Plan, rejudge: bool, limit: int, sinks: Sequence[EpisodeSink]) -> None:
        self.run_dir, self.plan, self.rejudge, self.limit, self.sinks = run_dir, plan, rejudge, limit, sinks
        shapes = {t["id"]: t.get("shape") or "unclassified" for t in plan.tasks}
        self.scan = Scan(new_accumulators(shapes, plan.labels, plan.k))
        self.scan.seen = {key: bytearray(plan.k) for key in self.scan.accs}
        self._seen_of = {id(acc): self.scan.seen[key] for key, acc in self.scan.accs.items()}
        self.tasks: dict[Any, Task] = {}  # built on first use: only judging needs them

    def read(self, start: int, end: int | None) -> Scan:
        """Scan the chunk (end None: to the end of the log); the accumulators come back finished."""
        scan, accs, sinks = self.scan, self.scan.accs, self.sinks
        raw_accs = {(json.dumps(label, ensure_ascii=False).encode("utf-8"),
                     json.dumps(task_id, ensure_ascii=False).encode("utf-8")): acc
                    for (label, task_id), acc in accs.items()}
        fast_read = read_verdict if not self.rejudge else (lambda line: None)
        field_sinks = [sink for sink in sinks if sink.wants_fields]
        episode_sinks = [sink for sink in sinks if not sink.wants_fields]
        number = 0
        for raw in log_lines(self.run_dir / LOG_FILE, start, end):
            number += 1
            v = fast_read(raw)
            if v is None:
                self._json_line(raw, number, start == 0 and number == 1)
                continue
            acc = raw_accs.get((v.grid_label, v.task_id))
            if acc is None:  # an escaped name, or not in the plan
                acc = accs.get((decode_name(v.grid_label) or "", decode_name(v.task_id)))
                if acc is None:
                    scan.unplanned += 1
                    continue
            if not self._first_of_trial(acc, v.trial):
                continue
            scan.fast += 1
            acc.add(v)
            if v.lists_more:  # only those lines are decoded
                listing = json.loads(raw)["verdict"]
                self._side_channels(listing)
                self._unclassified(listing)
            for sink in field_sinks:
                sink.fields(v, acc.task_id)
            if episode_sinks:
                verdict = sink_verdict(v, acc.task_id)
                for sink in episode_sinks:
                    sink.episode(verdict)
            self._keep(raw, v.status != 0 or v.failed != b"[]")
        scan.lines = number
        scan.logged += scan.fast
        for acc in accs.values():
            acc.finish()
        return scan

    def _json_line(self, raw: bytes, number: int, first: bool) -> None:
        """A line read whole: the header, an episode in another layout, or one to judge."""
        try:
            record = json.loads(raw)
        except UnicodeDecodeError:
            raise LineError(number, "not UTF-8 text; the log is damaged") from None
        except ValueError:
            raise LineError(number, "not JSON; the log is damaged") from None
        kind = record.get("type") if isinstance(record, dict) else None
        if kind == "header" or (first and kind != "episode"):
            self.scan.header = record if isinstance(record, dict) else {}
            return
        if kind != "episode":
            return
        record = upgrade_record(record, self.plan.document)
        if (record.get("grid_label") or "", record.get("task_id")) not in self.scan.accs:
            self.scan.unplanned += 1  # no task id, or one the plan lacks: ignored and counted, never judged
            return
        logged = record.get("verdict") if isinstance(record.get("verdict"), dict) else None  # upgraded with the record
        logged = logged if logged and "status" in logged else None
        verdict = None if self.rejudge else logged
        if verdict is None:
            verdict = self._verdict_without_trace(record, logged)
        if verdict is None:
            verdict = self._judge(record)
            self.scan.judged += 1
        verdict = complete_verdict(verdict, record)
        episode = verdict["episode"]
        acc = self.scan.accs.get((episode.get("grid_label") or "", episode.get("task_id")))
        if acc is None:
            self.scan.unplanned += 1
            return
        if not self._first_of_trial(acc, episode.get("trial")):
            return
        self.scan.logged += 1
        acc.add(verdict_fields(verdict))
        self._side_channels(verdict)
        self._unclassified(verdict)
        for sink in self.sinks:
            if sink.wants_fields:
                sink.fields(raw_fields(verdict), acc.task_id)
            else:
                sink.episode(verdict)
        self._keep(verdict, verdict["status"] != "pass" or bool(verdict["failed"]))

    def _side_channels(self, verdict: Verdict) -> None:
        errors = verdict.get("side_channel_errors")
        if errors:
            self.scan.side_channels += 1
            self.scan.first_side_channel = self.scan.first_side_channel or errors[0]

    def _unclassified(self, verdict: Verdict) -> None:
        tools = verdict.get("unclassified_tools")
        if tools:
            self.scan.unclassified += 1
            self.scan.unclassified_tools.update(str(tool) for tool in tools)

    def _first_of_trial(self, acc: TaskAccumulator, trial: Any) -> bool:
        """Is this line the first for a trial the plan has? Others are counted and ignored."""
        seen = self._seen_of[id(acc)]
        if not isinstance(trial, int) or isinstance(trial, bool) or not 0 <= trial < len(seen):
            self.scan.out_of_plan += 1
            return False
        if seen[trial]:
            self.scan.duplicates += 1
            return False
        seen[trial] = 1
        return True

    def _keep(self, item: bytes | Verdict, notable: bool) -> None:
        """A drill-down candidate: failing, incomplete or violating ones first, then passing ones."""
        kept = self.scan.notable if notable else self.scan.passing
        if len(kept) < self.limit:
            kept.append(item)

    def _verdict_without_trace(self, record: EpisodeRecord, logged: Verdict | None) -> Verdict | None:
        """An episode to judge whose trace file is gone: noted for the report's warnings, and its
        logged verdict kept (None: there is none, it is judged on what is left)."""
        path = trace_file(self.run_dir, record) if record.get("trace") else None
        if path is None or path.exists():
            return None
        self.scan.missing_traces.append(str(record["trace"]))
        self.scan.kept_verdicts += logged is not None
        return logged

    def _judge(self, record: EpisodeRecord) -> Verdict:
        task_id = record.get("task_id")
        if task_id not in self.tasks:
            self.tasks[task_id] = Task.from_json(self.plan.task_item(task_id))
        path = trace_file(self.run_dir, record) if record.get("trace") else None
        exchanges: Iterable[Mapping[str, Any]] = read_trace(path) if path else ()
        try:
            return judge_episode(self.tasks[task_id], record, exchanges, self.plan.severity)
        except json.JSONDecodeError:
            raise RunDirError(f"{path}: a trace line is not JSON; the trace is damaged") from None


# --- reading in parallel ------------------------------------------------------------------------


def _scan_shard(run_dir: Path, plan: Plan, start: int, end: int | None, rejudge: bool, limit: int,
                shards: list[EpisodeSink]) -> Scan:
    """One worker's chunk; its sink shards are closed here and travel back with the result."""
    scan = _Chunk(run_dir, plan, rejudge, limit, shards).read(start, end)
    for shard in shards:
        shard.close()
    scan.shards = shards
    return scan


def _can_fork() -> bool:
    """Workers are forked: they start at once and need no importable __main__ (spawn re-runs the
    caller's script, which breaks scripts without a main guard). Forking is only safe from a
    process with one thread, and on Linux (macOS frameworks do not survive it); elsewhere the
    log is read in one process."""
    return sys.platform == "linux" and threading.active_count() == 1


def default_jobs(log_bytes: int) -> int:
    """Processes to read a log of this size with: one below PARALLEL_MIN_BYTES, else up to one per CPU."""
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


def _abort(shards: list[list[EpisodeSink]]) -> None:
    for chunk in shards:
        for shard in chunk:
            shard.abort()


def _read_in_workers(run_dir: Path, plan: Plan, starts: list[int], shards: list[list[EpisodeSink]],
                     rejudge: bool, limit: int) -> list[Scan] | None:
    """Each chunk's Scan, in log order; None when no worker process can be started here."""
    ends: list[int | None] = [*starts[1:], None]
    try:
        with ProcessPoolExecutor(len(starts), mp_context=multiprocessing.get_context("fork")) as pool:
            futures = [pool.submit(_scan_shard, run_dir, plan, a, b, rejudge, limit, chunk)
                       for a, b, chunk in zip(starts, ends, shards)]
            scans: list[Scan] = []
            for future in futures:  # in log order
                try:
                    scans.append(future.result())
                except LineError as error:
                    # Number the line in the whole log: the earlier chunks' lines come first.
                    raise LineError(sum(s.lines for s in scans) + error.number, error.message) from None
            return scans
    except (OSError, NotImplementedError, BrokenProcessPool):
        return None  # no processes here (a sandbox, say): read it in one
    except BaseException:
        _abort(shards)
        raise


def _overlap(scans: list[Scan]) -> bool:
    """Does some trial appear in more than one chunk (a duplicated line the chunks could not see)?"""
    for key in scans[0].seen:
        union = 0
        for scan in scans:
            trials = int.from_bytes(scan.seen[key])  # one byte per trial, 0 or 1: AND finds a shared one
            if union & trials:
                return True
            union |= trials
    return False


def read_log(run_dir: Path, plan: Plan, rejudge: bool, limit: int, sinks: Sequence[EpisodeSink],
             jobs: int | None) -> Scan:
    """Scan the whole log (see the module docstring); jobs None picks by the log's size.
    Raises LineError for a damaged line, numbered in the whole log."""
    log_path = run_dir / LOG_FILE
    size = log_path.stat().st_size if log_path.exists() else 0
    jobs = default_jobs(size) if jobs is None else max(1, jobs)
    starts = _chunk_starts(log_path, jobs) if jobs > 1 and size else [0]
    shards = [[sink.shard(i) for sink in sinks] for i in range(len(starts))]
    if len(starts) > 1 and _can_fork() and all(s is not None for chunk in shards for s in chunk):
        scans = _read_in_workers(run_dir, plan, starts, shards, rejudge, limit)
        if scans is not None and _overlap(scans):  # a trial logged twice across chunks: read it in one
            scans = None
        if scans is not None:
            total = scans[0]
            for scan in scans[1:]:
                total.absorb(scan, limit)
            for position, sink in enumerate(sinks):
                for scan in scans:
                    sink.absorb(scan.shards[position])
            return total
        _abort(shards)
    return _Chunk(run_dir, plan, rejudge, limit, sinks).read(0, None)
