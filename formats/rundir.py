"""The run directory: `plan.json` and the append-only `episodes.jsonl`.

This module owns both formats; the runner writes through it and the evaluator reads through
it. The log is JSON Lines: a header naming the plan, then one line per finished episode,
flushed as it is written. A torn last line (a crash mid-write) is dropped on reading; a log
written for another plan is refused rather than mixed.

`flows/<episode>.jsonl`, the traces, belong to proxy.trace.

plan.json: {"faultproxy_version", "scenario": {"name", "digest", "path", "params"},
  "tasks": {"path", "digest", "severity", "prices", "items": [Task.to_json(), ...]},
  "k", "grid": [{"label", "params": {name: value}, "model"}], "command": [...], "created",
  "upstreams": {name: url} (reverse mode, `--upstream`),
  "rewrite_model": bool (the proxy set model API requests' `model` to each episode's)}

episodes.jsonl header: {"type": "header", "faultproxy_version", "scenario_digest", "tasks_digest",
  "k", "grid", "command", "created"}

An episode line: {"type": "episode", "key", "task_id", "trial", "variant", "seed", "prompt",
  "state", "shape", "grid_label", "params", "model",
  "completed": bool,            # false: incomplete, and `cause` says why
  "cause": null | "crash" | "budget_wall" | "budget_requests" | "budget_tokens" | "harness_error"
           | "diverged" (replay) | "worker_lost" (dask),        # NotRun is never logged: it is what a planned, unlogged key is
  "exit_code": int | null, "started": unix s, "duration_s",
  "output": the JSON the agent wrote to FAULTPROXY_OUTPUT, or null; "output_error": str | null,
  "end_state": JSON fetched from the task's state URL after the episode, or null;
  "state_error": str | null,
  "stats": {"exchanges", "tokens", "faults"}, "trace": "flows/<file>.jsonl", "log_tail": str}
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from faultproxy.formats.errors import UserError

PLAN_FILE = "plan.json"
LOG_FILE = "episodes.jsonl"
FLOWS_DIR = "flows"
# The header fields that identify a plan: a resumed log must agree on every one.
PLAN_IDENTITY = ("faultproxy_version", "scenario_digest", "tasks_digest", "k", "grid", "command")


class RunDirError(UserError):
    """A run directory that cannot be used as asked; the message says why and what to do."""


@dataclass(frozen=True)
class Run:
    path: Path
    plan: dict[str, Any]
    header: dict[str, Any]
    episodes: list[dict[str, Any]]


def write_plan(run_dir: Path, plan: dict[str, Any]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    target = run_dir / PLAN_FILE
    scratch = target.with_suffix(".tmp")
    scratch.write_text(json.dumps(plan, indent=2, sort_keys=True))
    os.replace(scratch, target)  # never a half-written plan


def read_run(run_dir: Path) -> Run:
    run_dir = Path(run_dir)
    if not (run_dir / PLAN_FILE).exists():
        raise RunDirError(f"{run_dir} is not a run directory (no {PLAN_FILE})")
    plan = json.loads((run_dir / PLAN_FILE).read_text())
    header, episodes = read_log(run_dir / LOG_FILE)
    return Run(run_dir, plan, header, episodes)


def read_log(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    lines = list(_complete_lines(path))
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


def _complete_lines(path: Path) -> Iterator[str]:
    if not path.exists():
        return
    with path.open(encoding="utf-8") as file:
        for line in file:
            if line.endswith("\n"):
                yield line
            # else: torn by a crash mid-write; that episode will run again


class EpisodeLog:
    """Appends finished episodes; opening an existing log resumes it, for the same plan only."""

    def __init__(self, run_dir: Path, header: dict[str, Any]) -> None:
        self.path = Path(run_dir) / LOG_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        logged_header, episodes = read_log(self.path)
        if logged_header:
            _refuse_other_plan(self.path, logged_header, header)
        self.done: dict[str, dict[str, Any]] = {e["key"]: e for e in episodes}
        self._truncate_torn_tail()
        self._file: IO[str] = self.path.open("a", encoding="utf-8")
        if not logged_header:
            self._write({"type": "header", **header})

    def append(self, record: dict[str, Any]) -> None:
        if record["key"] in self.done:
            raise RunDirError(f"episode {record['key']} is already logged")
        self.done[record["key"]] = record
        # The verdict is always the line's last key: evaluator.report reads it from the tail of a
        # line without parsing the rest (a million episodes would take seconds more).
        rest = {name: value for name, value in record.items() if name != "verdict"}
        self._write({"type": "episode", **rest, **({"verdict": record["verdict"]} if "verdict" in record else {})})

    def close(self) -> None:
        self._file.close()

    def _write(self, record: dict[str, Any]) -> None:
        self._file.write(json.dumps(record, ensure_ascii=False) + "\n")
        self._file.flush()  # a killed runner loses nothing written; the OS holds the page

    def _truncate_torn_tail(self) -> None:
        """Cut a torn last line so the next record starts on a line of its own."""
        if not self.path.exists():
            return
        data = self.path.read_bytes()
        if data and not data.endswith(b"\n"):
            with self.path.open("r+b") as file:
                file.truncate(data.rfind(b"\n") + 1)


def _refuse_other_plan(path: Path, logged: dict[str, Any], wanted: dict[str, Any]) -> None:
    differs = [field for field in PLAN_IDENTITY if logged.get(field) != wanted.get(field)]
    if differs:
        raise RunDirError(
            f"{path} was written for another plan (differs in: {', '.join(differs)}); "
            "use another --out, or delete the run directory to start over"
        )
