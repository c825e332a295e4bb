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

episodes.jsonl header: {"type": "header", "faultproxy_version", "scenario_digest", "tasks_digest",
  "k", "grid", "command", "created"}

A monitor's run directory (faultproxy.monitor) is one of these too: its plan has one task, its
policy (Task.online), k the log's cap (`--max-episodes`: each episode's trial is its number
modulo k, and once full the oldest are dropped, EpisodeLog.drop_oldest), and `"monitor":
{"policy", "policy_digest", "episode_by", "idle_s", "sample", "max_episodes"}` in the plan and
the log's header; such a plan is open-ended (Plan.open_ended): a slot not logged is no episode
missed. Its episode lines add "monitor": {"id" (the session), "rule", "ended": "idle" | "stopped" |
"recovered"} (recovered: open when an earlier monitor died, judged at the next start).

An episode line: {"type": "episode", "key", "task_id", "trial", "variant", "seed", "prompt",
  "state", "shape", "grid_label", "params", "model",
  "completed": bool,            # false: incomplete, and `cause` says why
  "cause": null | "crash" | "budget_wall" | "budget_requests" | "budget_tokens" | "budget_reply" | "harness_error"
           | "reset_failed" (the agent was not launched) | "infra_error" (the judge's, from the trace)
           | "no_traffic" (the judge's: the agent finished, its task expects traffic, the trace is empty)
           | "diverged" (replay) | "worker_lost" (dask),
  "cause_detail": str (only on lines the runner wrote without an agent result: what went wrong),        # NotRun is never logged: it is what a planned, unlogged key is
  "exit_code": int | null, "started": unix s, "duration_s",
  "output": the JSON the agent wrote to FAULTPROXY_OUTPUT, or null; "output_error": str | null,
  "end_state": JSON fetched from the task's state URL after the episode, or null;
  "state_error": str | null,
  "stats": {"exchanges", "tokens", "faults", and "turns" in a conversation (the user's and the agent's)},
  "trace": "flows/<file>.jsonl", "log_tail": str,
  "rewrites": {field: value} the proxy set in its model API requests (plan's templates, resolved),
  "task_hosts": ["host:port", ...] the hosts the task depends on (its reset_url, state_url and the
                URLs of its env): work shown done that one of them never saw is a bypass (evaluator.judging.bypass),
  "side_channels": ["[METHOD ]HOST[/PATH]", ...] (only when given) the run's --side-channel patterns:
                   a failed request they name leaves the verdict standing (evaluator.judging.side_channels),
  "faults_possible": bool (could some rule fire at the episode's grid point; false for a function
                     agent, whose returned outcome is its own): with it, an empty trace is no_traffic,
  "verdict": evaluator.judging.judge's verdict}     # always the line's last key: see "The verdict's layout"

The verdict's layout. A report over a million episodes must not decode each whole line (the
prompt, output and end state are most of it), so EpisodeLog writes every line in one layout:
json.dumps with its default separators, the verdict as the record's last key, the verdict's
keys in VERDICT_KEYS order up to REPORT_CUT_KEY and its `checks` (the bulk) last. read_verdict
then reads the fields a report needs straight from the line's bytes with one compiled pattern.
A line of any other shape (an older verdict, no verdict, a hand-edited log) gets None: parse
it whole. This module alone knows that layout; whoever builds a verdict only names its keys.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from faultproxy.formats.errors import UserError
from faultproxy.formats.files import append_line, no_space, open_lines, write_whole
from faultproxy.formats.paths import refuse_links_out, relative_file
from faultproxy.formats.trace import trace_path

PLAN_FILE = "plan.json"
LOG_FILE = "episodes.jsonl"
FLOWS_DIR = "flows"
# The header fields that identify a plan: a resumed log must agree on every one.
PLAN_IDENTITY = ("faultproxy_version", "scenario_digest", "tasks_digest", "k", "grid", "command", "chat")  # chat: absent unless --chat

VERDICT_VERSION = 1
# The record fields a verdict repeats under "episode", so that a report needs nothing else.
EPISODE_FIELDS = ("key", "task_id", "trial", "grid_label", "duration_s")
# A report reads each verdict only up to this key: everything it needs comes before it.
REPORT_CUT_KEY = "escalated"
# A verdict's leading keys, in the order a log line carries them; the rest follow, `checks` last.
VERDICT_KEYS = ("v", "status", "cause", "episode", "confidence", "violations", "failed", "faults", "endpoints",
                "tokens", "requests", "turns", "usage", REPORT_CUT_KEY)  # turns: conversations only
STATUSES = ("pass", "fail", "incomplete")  # VerdictFields.status indexes this
FUNCTION_PREFIX = "python-function:"  # the plan's `command` of a function agent: [python-function:module.name]
MONITOR_KEY = "monitor"  # plan.json and the log's header of a monitor's run directory: its policy and settings


class RunDirError(UserError):
    """A run directory that cannot be used as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Run:
    """A whole run directory in memory: for runs that fit (replay, freeze, tests), not for reports."""

    path: Path
    plan: dict[str, Any]
    header: dict[str, Any]
    episodes: list[dict[str, Any]]


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
    """The plan, the log's header and every logged episode."""
    plan = read_plan(run_dir)
    header, episodes = read_log(Path(run_dir) / LOG_FILE)
    return Run(Path(run_dir), plan.document, header, episodes)


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
        file = path.open("rb")
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


def episode_line(record: Mapping[str, Any]) -> str:
    """One episode's log line, in the layout read_verdict reads (see the module docstring)."""
    rest = {name: value for name, value in record.items() if name != "verdict"}
    verdict = record.get("verdict")
    tail = {} if verdict is None else {"verdict": _laid_out(verdict) if isinstance(verdict, Mapping) else verdict}
    return json.dumps({"type": "episode", **rest, **tail}, ensure_ascii=False) + "\n"


def _laid_out(verdict: Mapping[str, Any]) -> dict[str, Any]:
    """The verdict with VERDICT_KEYS first in order and `checks` last; within the episode and the
    failed checks and faults, the keys the reader's pattern expects where it expects them."""
    laid = {key: verdict[key] for key in VERDICT_KEYS if key in verdict}
    laid.update((key, value) for key, value in verdict.items() if key not in laid and key != "checks")
    if "checks" in verdict:
        laid["checks"] = verdict["checks"]
    if isinstance(laid.get("episode"), Mapping):
        laid["episode"] = _keys_first(laid["episode"], EPISODE_FIELDS)
    for name, first, last in (("failed", ("name", "severity"), ()), ("faults", (), ("type", "delivered"))):
        if isinstance(laid.get(name), list):
            laid[name] = [_keys_first(item, first, last) if isinstance(item, Mapping) else item
                          for item in laid[name]]
    return laid


def _keys_first(item: Mapping[str, Any], first: tuple[str, ...], last: tuple[str, ...] = ()) -> dict[str, Any]:
    """item with the `first` keys it has leading and the `last` ones ending it, the rest between."""
    ordered = {key: item[key] for key in first if key in item}
    ordered.update((key, value) for key, value in item.items() if key not in first and key not in last)
    ordered.update((key, item[key]) for key in last if key in item)
    return ordered


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

    def append(self, record: dict[str, Any]) -> None:
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


# --- the verdict's fast reader -------------------------------------------------------------------


@dataclass(slots=True)
class VerdictFields:
    """What a report reads of one episode's verdict.

    From read_verdict, the names (cause, key, task_id, grid_label) are JSON text as bytes
    (b'"crash"', b"null") and failed, faults, endpoints and usage are the lists' and object's
    JSON text: a report keys its counters on them and decodes each distinct value once (decode_name,
    failed_pairs, fault_pairs, usage_items). Built from a parsed verdict, names are str or
    None and failed and faults tuples of (name, severity) and (type, delivered) pairs.
    """

    status: int  # index into STATUSES
    cause: bytes | str | None
    key: bytes | str | None
    task_id: bytes | str | None
    grid_label: bytes | str
    trial: Any  # an int, unless the log was edited by hand
    duration_s: float | None
    confidence: float | None
    failed: bytes | tuple[tuple[Any, Any], ...]
    faults: bytes | tuple[tuple[Any, bool], ...]
    endpoints: bytes  # JSON text of the endpoint list
    tokens: int
    requests: int
    usage: bytes  # JSON text of {model: {"input", "output"}}
    turns: int = 0  # a conversation's turns (the user's and the agent's); 0 without one


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
    rb'(?:"turns": ([0-9]+), )?"usage": (\{(?:' + _STR + rb': ' + _FLAT + rb'(?:, )?)*\}), "' + REPORT_CUT_KEY.encode() + rb'": ')
_USAGE_ITEM = re.compile(rb'(' + _STR + rb'): \{"input": ([0-9]+), "output": ([0-9]+)\}')
_FAULT_ITEM = re.compile(rb'"type": (null|' + _STR + rb'), "delivered": (true|false)\}')
_FAILED_ITEM = re.compile(rb'"name": (null|' + _STR + rb'), "severity": (null|' + _STR + rb')')
_FAST_MARK = b'"verdict": {"v": '
SIDE_CHANNEL_MARK = b'"side_channel_errors": [{'  # in a line whose verdict lists side-channel errors
UNCLASSIFIED_MARK = b'"unclassified_tools": ["'  # in a line whose verdict lists unclassified MCP tools
_TAIL = b"]}}\n"  # ...the checks list, the verdict, the record
_STATUS = {b"pass": 0, b"fail": 1, b"incomplete": 2}


def read_verdict(line: bytes) -> VerdictFields | None:
    """The report's fields of a log line's verdict, read from its bytes without decoding the line;
    None when the line is not in the layout EpisodeLog writes (parse it whole then)."""
    if not line.endswith(_TAIL):
        return None
    at = line.rfind(_FAST_MARK)
    m = _FAST.match(line, at) if at >= 0 else None
    if m is None:
        return None
    (status, cause, key, task_id, trial, label, duration, confidence, failed, faults, endpoints, tokens,
     requests, turns, usage) = m.groups()
    return VerdictFields(_STATUS[status], None if cause == b"null" else cause, key, task_id, label,
                         None if trial == b"null" else int(trial), None if duration == b"null" else float(duration),
                         None if confidence == b"null" else float(confidence), failed, faults, endpoints,
                         int(tokens), int(requests), usage, int(turns or 0))


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


def decode_name(value: bytes | str | None) -> str | None:
    """A name from VerdictFields as text: JSON text (bytes) decoded, str and None as they are."""
    if not isinstance(value, bytes):
        return value
    if value == b"null":
        return None
    if b"\\" in value:
        return json.loads(value)
    return value[1:-1].decode("utf-8")


def failed_pairs(failed: bytes) -> list[tuple[str | None, str | None]]:
    """(name, severity) of each failed check in read_verdict's `failed`."""
    return [(decode_name(name), decode_name(severity)) for name, severity in _FAILED_ITEM.findall(failed)]


def fault_pairs(faults: bytes) -> list[tuple[str | None, bool]]:
    """(type, delivered) of each fault in read_verdict's `faults`."""
    return [(decode_name(kind), delivered == b"true") for kind, delivered in _FAULT_ITEM.findall(faults)]


def usage_items(usage: bytes) -> list[tuple[str | None, int, int]]:
    """(model, input tokens, output tokens) in read_verdict's `usage`; models counted otherwise
    than {"input", "output"} are left out (decode the JSON for those)."""
    return [(decode_name(model), int(tokens_in), int(tokens_out))
            for model, tokens_in, tokens_out in _USAGE_ITEM.findall(usage)]
