"""The tasks file: its format and its validation. This module owns the format.

A tasks file is YAML (`.yaml`, `.yml`: a mapping with `tasks` and optional `env`, `severity`,
`prices`, `side_channels`) or JSON Lines (`.jsonl`: one task object per line, blank lines
allowed). Every problem raises one TaskError whose str is "FILE:LINE: FIELD: message"; in a JSON Lines file the line is
the task's line and fields are named from the task (`expected.output.regex`), in YAML from the top
(`tasks[2].expected.output.regex`). An explicit null in an optional field means "not given".

This module reads the file around the tasks; one task's fields are read by tasks.task_entry, and
its `user:`, `expected:` and `budgets:` blocks by tasks.user_block, tasks.expected_block and
tasks.budget_block.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import InputError
from faultproxy.formats.paths import path_component
from faultproxy.formats.yaml_input import YamlReader
from faultproxy.tasks.budget_block import read_prices
from faultproxy.tasks.side_channel import SideChannel
from faultproxy.tasks.task_entry import read_env, read_severity, read_side_channels, read_task
from faultproxy.tasks.task_model import OUTPUT_KINDS, Task, TaskSet, content_digest
from yaml.nodes import MappingNode, ScalarNode

TOP_FIELDS = ("env", "tasks", "severity", "prices", "side_channels")
# A policy file (faultproxy monitor): the task fields that judge traffic without an expected end
# state, under the same names and patterns as in a tasks file, plus the file-level prices.
POLICY_FIELDS = ("id", "shape", "irreversible", "forbidden", "read_only", "secrets", "secret_hosts", "max_tool_calls",
                 "max_retries", "budgets", "severity", "prices", "side_channels")
POLICY_ID = "live"
POLICY_PROMPT = "live traffic"

class TaskError(InputError):
    """A bad tasks file."""


def load_tasks(path: str | Path) -> TaskSet:
    """Load and validate a tasks file (.yaml, .yml or .jsonl); TaskError on any problem."""
    path = Path(path)
    shown = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".jsonl"):
        raise TaskError(shown, None, None, f"unsupported tasks file type '{suffix or path.name}'; "
                                           "use .yaml or .yml (a mapping with 'tasks') or .jsonl (one task per line)")
    text = _read_text(path)
    r = YamlReader(shown, TaskError)
    if suffix == ".jsonl":
        tasks = _read_jsonl(r, text)
        env: dict[str, str] = {}
        severity: dict[str, str] = {}
        prices: dict[str, dict[str, float]] = {}
        side_channels: tuple[SideChannel, ...] = ()
    else:
        root = r.compose(text, empty="the file is empty; expected a mapping with a 'tasks' list")
        if not isinstance(root, MappingNode):
            raise r.error(root, None, "a tasks file must be a mapping with a 'tasks' list (and optional env, "
                                      f"severity, prices); got {r.describe(root)}")
        top = r.mapping(root, None, TOP_FIELDS, required=("tasks",))
        env = read_env(r, top["env"], "env") if r.given(top, "env") else {}
        severity = read_severity(r, top["severity"], "severity") if r.given(top, "severity") else {}
        prices = read_prices(r, top["prices"]) if r.given(top, "prices") else {}
        side_channels = read_side_channels(r, top, None)
        items = r.sequence(top["tasks"], "tasks", "tasks")
        seen: dict[str, int] = {}
        tasks = tuple(read_task(r, item, f"tasks[{i}]", seen, prices) for i, item in enumerate(items))
    tasks = tuple(_with_defaults(task, env, severity, side_channels) for task in tasks)
    digest = content_digest(tasks, env, severity, prices)
    return TaskSet(tasks, env, severity, prices, str(path.resolve()), digest)


def load_policy(path: str | Path | None) -> TaskSet:
    """A monitor's policy file (YAML: POLICY_FIELDS, each as in a tasks file's task) as a TaskSet
    of one online task (Task.online); None: the empty policy. TaskError on any problem."""
    if path is None:
        task = Task(POLICY_ID, POLICY_PROMPT, "live", online=True)
        return TaskSet((task,), {}, {}, {}, "<no policy>", content_digest((task,), {}, {}, {}))
    path = Path(path)
    r = YamlReader(str(path), TaskError)
    root = r.compose(_read_text(path), empty="the file is empty; expected a mapping of policy fields")
    if not isinstance(root, MappingNode):
        raise r.error(root, None, f"a policy file is a mapping of {', '.join(POLICY_FIELDS)}; got {r.describe(root)}")
    present = r.mapping(root, None, POLICY_FIELDS)
    prices = read_prices(r, present["prices"]) if r.given(present, "prices") else {}
    task_fields = {key: node for key, node in present.items() if key != "prices"}
    defaults = {"id": POLICY_ID, "prompt": POLICY_PROMPT, "shape": "live"}
    mark = root.start_mark  # the fields a policy does not give are read as if written at its top
    node = MappingNode("tag:yaml.org,2002:map", [
        *((ScalarNode("tag:yaml.org,2002:str", key, mark, mark), ScalarNode("tag:yaml.org,2002:str", value, mark, mark))
          for key, value in defaults.items() if key not in task_fields),
        *((ScalarNode("tag:yaml.org,2002:str", key, k.start_mark, k.end_mark), value)
          for k, value in root.value if (key := k.value) in task_fields),
    ], root.start_mark, root.end_mark)
    task = replace(read_task(r, node, None, {}, prices), online=True)
    return TaskSet((task,), {}, dict(task.severity), prices, str(path.resolve()),
                   content_digest((task,), {}, dict(task.severity), prices))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(str(path), None, None, f"cannot read the file: {exc}") from exc


def task_set_from_json(entries: Sequence[Task | Mapping[str, Any]], path: str = "<tasks>") -> TaskSet:
    """A TaskSet from tasks given in code: Task objects, or dicts as a tasks file writes them (or as
    Task.to_json() does). Dicts are validated like the lines of a JSON Lines file, entry i (from 1)
    standing for line i: TaskError("<tasks>:2: prompt: missing required field 'prompt'")."""
    r = YamlReader(path, TaskError)
    seen: dict[str, int] = {}
    tasks = []
    for number, entry in enumerate(entries, start=1):
        if isinstance(entry, Task):
            path_component(entry.id, path, "id", number)
            if entry.id in seen:
                raise TaskError(path, number, "id", f"duplicate task id '{entry.id}' (first on line {seen[entry.id]})")
            seen[entry.id] = number
            tasks.append(entry)
            continue
        if not isinstance(entry, Mapping):
            raise TaskError(path, number, None, f"each task must be a dict or a Task, got {type(entry).__name__}")
        try:
            text = json.dumps(_file_form(entry), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TaskError(path, number, None, f"the task is not plain JSON data: {exc}") from exc
        tasks.append(read_task(r, r.compose_json(text, number), None, seen))
    if not tasks:
        raise TaskError(path, None, None, "no tasks given")
    result = tuple(tasks)
    return TaskSet(result, {}, {}, {}, path, content_digest(result, {}, {}, {}))


def single_task(prompt: str, task_id: str = "task") -> TaskSet:
    """A TaskSet of one task with this prompt and nothing expected (a run without a tasks file)."""
    return task_set_from_json([{"id": task_id, "prompt": prompt}], path="<command line>")


def _file_form(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Task.to_json()'s extras in tasks-file form: no `line`, output {"kind": k, "value": v} as {k: v}."""
    entry = {key: value for key, value in entry.items() if key != "line"}
    expected = entry.get("expected")
    if isinstance(expected, Mapping):
        output = expected.get("output")
        if isinstance(output, Mapping) and set(output) == {"kind", "value"} and output["kind"] in OUTPUT_KINDS:
            entry["expected"] = {**expected, "output": {output["kind"]: output["value"]}}
    return entry


def _with_defaults(task: Task, env: Mapping[str, str], severity: Mapping[str, str],
                   side_channels: tuple[SideChannel, ...]) -> Task:
    extra = tuple(channel for channel in side_channels if channel not in task.side_channels)
    return replace(task, env={**env, **task.env}, severity={**severity, **task.severity},
                   side_channels=task.side_channels + extra)


def _read_jsonl(r: YamlReader, text: str) -> tuple[Task, ...]:
    r.check_size(text)
    seen: dict[str, int] = {}
    tasks = []
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON strings may hold U+2028
        if not line.strip():
            continue
        node = r.compose_json(line, number)
        if not isinstance(node, MappingNode):
            raise r.error(node, None, f"each line must be a JSON object (one task), got {r.describe(node)}")
        tasks.append(read_task(r, node, None, seen))
    if not tasks:
        raise TaskError(r.path, 1, None, "the file has no tasks; expected one JSON object per line")
    return tuple(tasks)


__all__ = ["TaskError", "load_tasks", "single_task", "task_set_from_json"]
