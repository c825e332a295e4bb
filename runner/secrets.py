"""The secret values a run must keep off disk, gathered once and checked up front.

They come from `--secret-env` variables, each task's `secrets` (the variable's value from the
task's `env:` when it sets one, else from the environment) and the task `env:` entries whose names
look secret. A value shorter than formats.redact.MIN_SECRET_LENGTH is refused before anything
runs (SecretTooShort, a UserError: one line, exit status 2).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from faultproxy.formats.errors import DiskFull
from faultproxy.formats.files import write_whole
from faultproxy.formats.redact import Redactor
from faultproxy.formats.secret_names import is_secret_name
from faultproxy.runner.options import RunOptions
from faultproxy.tasks.model import Task
from faultproxy.tasks.templates import UnsetVariable, expand


def task_secrets(task: Task, env: Mapping[str, str], redactor: Redactor, where: str = "") -> Redactor:
    """`redactor` plus the task's secret values: its `secrets` and its secret-looking `env:`
    entries, expanded with `env` (entries whose variables are unset there add nothing)."""
    for name in sorted({*task.secrets, *(n for n in task.env if is_secret_name(n))}):
        if name in task.env:
            try:
                value = expand(task.env[name], env)
            except (UnsetVariable, ValueError):
                continue
        else:
            value = env.get(name, "")
        redactor = redactor.with_values([value], source=f"{where or 'tasks'}: task {task.id}: env {name}")
    return redactor


def run_redactor(options: RunOptions) -> Redactor:
    """The redactor for everything a run writes; refuses a too-short secret before anything runs."""
    redactor = Redactor.from_env(options.secret_env)
    for task in options.tasks.tasks:
        redactor = task_secrets(task, os.environ, redactor, options.tasks.path)
    return redactor


def redact_output_file(path: Path, redactor: Redactor) -> None:
    """The agent's FAULTPROXY_OUTPUT file, once read: its answer may quote a secret."""
    if path.exists():
        try:
            write_whole(path, redactor.body(path.read_text(encoding="utf-8", errors="replace")))
        except DiskFull:
            path.unlink()  # no room for the redacted copy: the unredacted one must not stay either
            raise
