"""Hostile input files are refused quickly, in one line naming file and line: YAML alias bombs,
nesting without end, files too large. Every YAML faultproxy reads goes through one reader."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from faultproxy.formats.yaml_input import MAX_DEPTH, MAX_DOCUMENT_CHARS
from faultproxy.scenarios import ScenarioError, load_scenario
from faultproxy.tasks.tasks_file import TaskError, load_tasks
from tests.support.processes import FAULTPROXY

LEVELS = "abcdefghi"


def alias_bomb(indent: str) -> str:
    """Nine levels of anchors, each a list of nine aliases of the one before: 9**9 strings."""
    lines = [f'{indent}a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    for before, level in zip(LEVELS, LEVELS[1:]):
        lines.append(f"{indent}{level}: &{level} [{', '.join(['*' + before] * 9)}]")
    return "\n".join(lines) + "\n"


SCENARIO_BOMB = """\
name: bomb
description: d
rules:
  - name: drift
    match: {path: "*"}
    fault:
      type: schema_drift
      ops:
        - op: add
          path: extra
          value:
""" + alias_bomb(" " * 12)  # level g (line 18) is the first to pass a million values

TASKS_BOMB = """\
tasks:
  - id: t
    prompt: p
    expected:
      state:
""" + alias_bomb(" " * 8)  # level g on line 12


def test_a_scenario_alias_bomb_is_refused_in_one_line(tmp_path):
    path = tmp_path / "bomb.yaml"
    path.write_text(SCENARIO_BOMB)
    started = time.monotonic()
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert time.monotonic() - started < 5  # unbounded, it ran past a minute and a gigabyte
    assert str(caught.value).startswith(f"{path}:18: rules[0].fault.ops[0].value.g: expands to more than 1,000,000")

    result = subprocess.run([*FAULTPROXY, "check", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"faultproxy: {caught.value}"]


def test_a_tasks_alias_bomb_is_refused_before_a_run_starts(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text(TASKS_BOMB)
    with pytest.raises(TaskError) as caught:
        load_tasks(path)
    assert str(caught.value).startswith(f"{path}:12: tasks[0].expected.state.g: expands to more than")

    result = subprocess.run([*FAULTPROXY, "run", "--scenario", "rate_limit", "--tasks", str(path),
                             "--out", str(tmp_path / "run"), "--", "true"], capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stderr.splitlines()) == (2, [f"faultproxy: {caught.value}"])
    assert not (tmp_path / "run").exists()


def test_aliases_within_the_bounds_still_work(tmp_path):
    path = tmp_path / "tasks.yaml"
    path.write_text("tasks:\n  - id: t\n    prompt: p\n    expected:\n      state:\n" + alias_bomb(" " * 8)
                    .split("\n        d:")[0] + "\n")  # three levels: 819 values
    [task] = load_tasks(path).tasks
    assert len(task.expected.state["c"]) == 9 and task.expected.state["c"][0][0] == ["lol"] * 9


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5000])
def test_nesting_without_end_is_refused(tmp_path, depth):
    yaml_path, jsonl_path = tmp_path / "tasks.yaml", tmp_path / "tasks.jsonl"
    yaml_path.write_text("tasks:\n  - id: t\n    prompt: p\n    expected:\n      state: " + "[" * depth + "]" * depth + "\n")
    jsonl_path.write_text('{"id": "t", "prompt": "p", "expected": {"state": ' + "[" * depth + "]" * depth + "}}\n")
    for path, line in ((yaml_path, 5), (jsonl_path, 1)):
        with pytest.raises(TaskError, match=f"nested more than {MAX_DEPTH} levels deep") as caught:
            load_tasks(path)
        assert caught.value.path == str(path) and caught.value.line in (line, None)


def test_a_file_too_large_is_refused(tmp_path):
    path = tmp_path / "big.yaml"
    path.write_text("name: big\ndescription: d\nrules: []\n# " + "x" * MAX_DOCUMENT_CHARS + "\n")
    with pytest.raises(ScenarioError, match="larger than 16,777,216 characters"):
        load_scenario(path)
