"""A task's secret values: those its `secrets` names and its secret-looking `env:` entries hold.

The runner adds them to a run's redactor before an episode starts, the monitor to its own before it
listens, so both keep the same values off disk.
"""

from __future__ import annotations

from collections.abc import Mapping

from faultproxy.formats.redact import Redactor
from faultproxy.formats.secret_names import is_secret_name
from faultproxy.tasks.task_model import Task
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
