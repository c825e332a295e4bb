"""The secret values a run must keep off disk, gathered once and checked up front.

They come from `--secret-env` variables, each task's `secrets` (the variable's value from the
task's `env:` when it sets one, else from the environment) and the task `env:` entries whose names
look secret. A value shorter than formats.redact.MIN_SECRET_LENGTH is refused before anything
runs (SecretTooShort, a UserError: one line, exit status 2).
"""

from __future__ import annotations

import os
from pathlib import Path

from faultproxy.formats.errors import DiskFull
from faultproxy.formats.files import write_whole
from faultproxy.formats.redact import Redactor
from faultproxy.runner.run_options import RunOptions
from faultproxy.tasks.secret_values import task_secrets


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
