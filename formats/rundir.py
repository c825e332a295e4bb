"""The run directory: `plan.json` and the append-only `episodes.jsonl`.

This module owns both formats; the runner writes through it and the evaluator reads through
it. The log is JSON Lines: a header naming the plan, then one line per finished episode,
flushed as it is written. A torn last line (a crash mid-write) is dropped on reading; a log
written for another plan is refused rather than mixed.

`flows/<episode>.jsonl`, the traces, belong to formats.trace (trace_file finds an episode's).

plan.json: {"faultproxy_version", "scenario": {"name", "digest", "path", "params"},
  "tasks": {"path", "digest", "severity", "prices", "items": [Task.to_json(), ...]},
  "k", "grid": [{"label", "params": {name: level, a number or a word}, "model"}], "command": [...], "created",
  "upstreams": {name: url} (reverse mode, `--upstream`),
  "base_url_env": {VAR: upstream name} (only with `--reverse VAR`: VAR led the agent to that
               upstream's reverse-mode URL; a replay points it at the replay proxy's),
  "rewrites": {field: template} (`--rewrite`: fields the proxy set in model API requests; each
               episode's line has them resolved as "rewrites": {field: value}),
  "faults_possible": {grid label: bool} (could some rule fire there: a probability above zero),
  "rules_possible": [rule name, ...] the rules that could fire at some grid point (a report names
                    those that matched no request: evaluator.aggregate.unmatched),
  "sequential": (only for `run --until-decided`) the design evaluator.gate.sequential_looks.Design.to_json()
                seals — method, alpha, margin, max_high, min_k, max_k, rho, looks, levels,
                baseline_digest (run_digest of the baseline) — and "baseline", its path then}

episodes.jsonl: a header line, then one line per finished episode; their fields, versions and
upgrade are formats.run_records', the verdict's layout in its line formats.verdict_layout's.

A monitor's run directory (faultproxy.monitor) is one of these too: its plan has one task, its
policy (Task.online), k the log's cap (`--max-episodes`: each episode's trial is its number
modulo k, and once full the oldest are dropped, EpisodeLog.drop_oldest), and `"monitor":
{"policy", "policy_digest", "episode_by", "idle_s", "sample", "max_episodes"}` in the plan and
the log's header; such a plan is open-ended (Plan.open_ended): a slot not logged is no episode
missed. Its episode lines add "monitor": {"id" (the session), "rule", "ended": "idle" | "stopped" |
"recovered"} (recovered: open when an earlier monitor died, judged at the next start).
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Final

from faultproxy.formats.errors import UserError
from faultproxy.formats.files import append_line, no_space, open_lines, write_whole
from faultproxy.formats.paths import refuse_links_out, relative_file
from faultproxy.formats.run_records import EpisodeRecord, LogHeader, upgrade_record
from faultproxy.formats.trace import trace_path
from faultproxy.formats.verdict_layout import episode_line

PLAN_FILE = "plan.json"
LOG_FILE = "episodes.jsonl"
FLOWS_DIR = "flows"
_LOG_READ_BUFFER = 1 << 20  # bytes read at a time from a log (its lines run to kilobytes)
# The header fields that identify a plan: a resumed log must agree on every one.
PLAN_IDENTITY = ("faultproxy_version", "scenario_digest", "tasks_digest", "k", "grid", "command", "chat")  # chat: absent unless --chat

FUNCTION_PREFIX = "python-function:"  # the plan's `command` of a function agent: [python-function:module.name]
MONITOR_KEY: Final = "monitor"  # plan.json and the log's header of a monitor's run directory: its policy and settings


class RunDirError(UserError):
    """A run directory that cannot be used as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Run:
    """A whole run directory in memory: for runs that fit (replay, freeze, tests), not for reports."""

    path: Path
    plan: dict[str, Any]
    header: LogHeader | dict[str, Any]  # {} when nothing is logged yet
    episodes: list[EpisodeRecord]


# --- plan.json -----------------------------------------------------------------------------------


@dataclass(frozen=True)
class Plan:
    """plan.json, checked: the document and the fields every reader of a run needs."""

    path: Path
    document: dict[str, Any]
    k: int
    labels: list[str]  # grid labels, "" for a run without a grid
    tasks: list[dict[str, Any]]  # Task.to_json() items
    prices: dict[str, dict[str, float]]
    severity: dict[str, str]
    faults_possible: dict[str, bool] | None  # per grid label; None in plans written before it was kept
    open_ended: bool = False  # a monitor's: k bounds the log's size; a slot not logged is no episode missed

    @property
    def task_ids(self) -> list[str]:
        """The planned tasks' ids, in plan order."""
        return [t["id"] for t in self.tasks]

    def task_item(self, task_id: Any) -> dict[str, Any]:
        """The plan's item (Task.to_json()) of a task; RunDirError for a task the plan does not list."""
        item = next((t for t in self.tasks if t["id"] == task_id), None)
        if item is None:
            raise RunDirError(f"{self.path}: episode of task '{task_id}', which the plan does not list")
        return item


def write_plan(run_dir: Path, plan: dict[str, Any]) -> None:
    """Write plan.json, whole or not at all."""
    run_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(run_dir / PLAN_FILE, json.dumps(plan, indent=2, sort_keys=True))


def read_plan(run_dir: Path | str) -> Plan:
    """The run directory's plan; RunDirError naming the reason when it is not a readable run."""
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
    possible = document.get("faults_possible")
    return Plan(path, document, k, labels, items, dict(tasks_doc.get("prices") or {}),
                dict(tasks_doc.get("severity") or {}), dict(possible) if isinstance(possible, dict) else None,
                isinstance(document.get(MONITOR_KEY), dict))


def run_digest(run_dir: Path | str) -> str:
    """sha256 of plan.json and the log, bytes as written: names one run's data exactly (a
    sequential run seals its baseline's)."""
    digest = hashlib.sha256()
    for name in (PLAN_FILE, LOG_FILE):
        path = Path(run_dir) / name
        try:
            data = path.read_bytes()
        except OSError as error:
            raise RunDirError(f"{path}: cannot read: {error.strerror or error}") from None
        digest.update(f"{name} {len(data)}\n".encode())
        digest.update(data)
    return digest.hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """A file of the run directory (plan, report, page), written whole or not at all
    (formats.files; DiskFull when the disk is full)."""
    write_whole(path, text)


def trace_file(run_dir: Path, episode: Mapping[str, Any]) -> Path | None:
    """Where an episode's trace is: its record's (or verdict's) `trace`, else by its key."""
    trace = episode.get("trace")
    if trace:
        return relative_file(Path(run_dir), trace, str(Path(run_dir) / LOG_FILE), "trace")
    key = episode.get("key")
    if not key:
        return None
    return trace_path(Path(run_dir) / FLOWS_DIR, key)


# --- episodes.jsonl ------------------------------------------------------------------------------


def read_run(run_dir: Path) -> Run:
    """The plan, the log's header and every logged episode, upgraded to the current shape."""
    plan = read_plan(run_dir)
    header, episodes = read_log(Path(run_dir) / LOG_FILE)
    return Run(Path(run_dir), plan.document, header, [upgrade_record(record, plan.document) for record in episodes])


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The header and the episodes of a log, whole; a torn last line is dropped."""
    lines = list(log_lines(path))
    if not lines:
        return {}, []
    try:
        header = json.loads(lines[0])
    except ValueError:
        raise RunDirError(f"{path}:1: the header is not JSON") from None
    episodes = []
    for number, line in enumerate(lines[1:], start=2):
        try:
            episodes.append(json.loads(line))
        except ValueError:
            raise RunDirError(f"{path}:{number}: not JSON; the log is damaged") from None
    return header, episodes


def log_lines(path: Path, start: int = 0, end: int | None = None) -> Iterator[bytes]:
    """The log's lines (bytes, newline included) that start in [start, end), end None meaning the
    end of the file. A torn last line (a crash mid-write) is dropped: that episode runs again.
    No log, no lines; an unreadable one is a RunDirError."""
    try:
        # A large buffer: with the default one, reading a long log's lines cost three times as much.
        file = path.open("rb", buffering=_LOG_READ_BUFFER)
    except FileNotFoundError:
        return
    except OSError as error:
        raise RunDirError(f"{path}: cannot read: {error.strerror or error}") from None
    with file:
        file.seek(start)
        position = start
        for line in file:
            if (end is not None and position >= end) or not line.endswith(b"\n"):
                return
            position += len(line)
            yield line


class EpisodeLog:
    """Appends finished episodes; opening an existing log resumes it, for the same plan only."""

    def __init__(self, run_dir: Path, header: dict[str, Any], *, slim: bool = False) -> None:
        """`slim`: `done` keeps only each episode's key and trial (a long-running monitor's log)."""
        self.path = Path(run_dir) / LOG_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._slim = slim
        refuse_links_out(self.path.parent, "run directory")  # a resumed run appends to what is there
        logged_header, episodes = read_log(self.path)
        if logged_header:
            _refuse_other_plan(self.path, logged_header, header)
        self.done: dict[str, dict[str, Any]] = {}
        for episode in episodes:  # a duplicated line counts once, the first (as reports read it)
            self.done.setdefault(episode["key"], self._kept(episode))
        self._truncate_torn_tail()
        try:
            self._file: IO[bytes] = open_lines(self.path)
        except OSError as error:
            raise no_space(error, self.path) from None
        if not logged_header:
            self._write(json.dumps({"type": "header", **header}, ensure_ascii=False) + "\n")

    def append(self, record: EpisodeRecord) -> None:
        """Log one finished episode (its verdict, when it has one, as the line's last key); on
        DiskFull the line is not in the log and the episode not done (it runs on resume)."""
        if record["key"] in self.done:
            raise RunDirError(f"episode {record['key']} is already logged")
        self._write(episode_line(record))
        self.done[record["key"]] = self._kept(record)

    def _kept(self, record: dict[str, Any]) -> dict[str, Any]:
        return {"key": record["key"], "trial": record.get("trial")} if self._slim else record

    def close(self) -> None:
        """Close the log (every line is already flushed)."""
        self._file.close()

    def drop_oldest(self, count: int) -> list[dict[str, Any]]:
        """Keep the log to a size (a monitor's cap): rewrite it without its `count` oldest
        episodes, whole or not at all, and return them (their traces are the caller's)."""
        dropped = list(self.done.values())[:count]
        gone = {record["key"] for record in dropped}
        scratch = self.path.with_suffix(".jsonl.tmp")
        with scratch.open("wb") as out:
            for number, line in enumerate(log_lines(self.path)):
                if number == 0 or json.loads(line).get("key") not in gone:
                    out.write(line)
            out.flush()
            os.fsync(out.fileno())
        self._file.close()
        os.replace(scratch, self.path)
        self._file = open_lines(self.path)
        for key in gone:
            del self.done[key]
        return dropped

    def _write(self, line: str) -> None:
        """One line, whole or not at all (unbuffered: a killed runner loses nothing written)."""
        append_line(self._file, line, self.path)

    def _truncate_torn_tail(self) -> None:
        """Cut a torn last line so the next record starts on a line of its own."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as file:
                file.truncate(data.rfind(b"\n") + 1)


def check_log_against_plan(run_dir: Path, plan: Plan) -> None:
    """Refuse to read a log whose header names another plan than plan.json (RunDirError naming
    both files and what differs), as a resumed run refuses to append to it."""
    path = Path(run_dir) / LOG_FILE
    first = next(log_lines(path), None)
    try:
        header = json.loads(first) if first else None
    except ValueError:
        return  # a damaged header is the line reader's to report, with its number
    if not isinstance(header, dict) or header.get("type") != "header":
        return
    document = plan.document
    wanted = {"faultproxy_version": document.get("faultproxy_version"),
              "scenario_digest": (document.get("scenario") or {}).get("digest"),
              "tasks_digest": (document.get("tasks") or {}).get("digest"),
              "k": document.get("k"), "grid": document.get("grid"), "command": document.get("command"),
              "chat": document.get("chat")}
    differs = [field for field in PLAN_IDENTITY if header.get(field) != wanted.get(field)]
    if differs:
        raise RunDirError(f"{path} was written for another plan than {plan.path} "
                          f"(differs in: {', '.join(differs)}); it cannot be read against this plan")


def _refuse_other_plan(path: Path, logged: dict[str, Any], wanted: dict[str, Any]) -> None:
    differs = [field for field in PLAN_IDENTITY if logged.get(field) != wanted.get(field)]
    if differs:
        raise RunDirError(
            f"{path} was written for another plan (differs in: {', '.join(differs)}); "
            "use another --out, or delete the run directory to start over"
        )


def first_cause_detail(path: Path, cause: str) -> str | None:
    """The cause_detail of the first logged episode whose verdict has this cause (a report's
    headline names the first reason; only that one line is decoded)."""
    mark = f'"cause": {json.dumps(cause)}'.encode()
    for line in log_lines(path):
        if mark in line:
            verdict = json.loads(line).get("verdict") or {}
            if verdict.get("cause") == cause:
                return verdict.get("cause_detail")
    return None
