"""The command line's refusals of bad input, as tests check them: exit status 2 and one line on
stderr (`one_line_error`), a command run in this process that must be refused (`refusal`), a one-task
tasks file to refuse (`one_task_file`), and a variable no machine sets (`UNSET`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from faultproxy.cli.main import main

# Named where a refusal says "not set"; tests delete it anyway, so a machine that sets it cannot pass them.
UNSET = "FAULTPROXY_TEST_SURELY_UNSET"


def one_line_error(code: int | str | None, err: str) -> str:
    """The one line a refusal writes, after asserting it is one: exit 2, one line naming faultproxy."""
    assert code == 2, err
    lines = err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("faultproxy: "), err
    return lines[0]


def refusal(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    """Run `faultproxy ARGV` in this process and return its one-line refusal."""
    code = main(argv)
    return one_line_error(code, capsys.readouterr().err)


def one_task_file(folder: Path, **task: object) -> Path:
    """tasks.jsonl with one task `t`, its other fields as given."""
    path = folder / "tasks.jsonl"
    path.write_text(json.dumps({"id": "t", "prompt": "p", **task}) + "\n")
    return path
