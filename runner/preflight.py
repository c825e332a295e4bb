"""Before the first episode: refuse a run whose configuration leaves nothing to judge.

An agent command that cannot start, a `${VAR}` nothing sets, a checker that does not exist:
every episode would end incomplete (or not run at all) and the run would still look finished.
`check_can_start` says which, in one line (exit status 2), before anything runs. It checks what
this machine runs (the local executor); a Dask cluster's workers check their own side.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from faultproxy.formats.errors import UsageError
from faultproxy.runner.agent import AgentEnvironment
from faultproxy.runner.episode import EpisodeRunner
from faultproxy.runner.run_options import RunOptions
from faultproxy.tasks.task_model import Task, load_checker
from faultproxy.tasks.templates import TemplateError, UnsetVariable, expand

_BRACED_VARIABLE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class CannotStart(UsageError):
    """No episode of this run could be run or judged: one line, exit 2."""


def check_can_start(options: RunOptions, runner_class: type[EpisodeRunner]) -> None:
    """Raise CannotStart when the run's configuration leaves nothing to judge."""
    if options.executor != "local":
        return
    if runner_class.launch is EpisodeRunner.launch:  # a runner of its own may not run a command at all
        _check_command(options)
    _check_templates(options)
    _check_checkers(options)


def _check_command(options: RunOptions) -> None:
    program = options.command[0]
    if "{" in program:  # a placeholder, filled per episode
        return
    if os.sep in program:
        if not (os.path.isfile(program) and os.access(program, os.X_OK)):
            raise CannotStart(f"the agent command {program!r} cannot start: it is not an executable file")
    elif shutil.which(program) is None:
        raise CannotStart(f"the agent command {program!r} cannot start: no such program on PATH")
    given = set(os.environ) | set(options.tasks.env) | {n for task in options.tasks.tasks for n in task.env}
    given |= set(_contract_variables(options))
    for arg in options.command:
        for name in _BRACED_VARIABLE.findall(arg):
            if name not in given:
                raise CannotStart(f"the agent command uses ${{{name}}}, which is not set here and which neither "
                                  "the tasks file's env nor faultproxy gives the agent")


def _contract_variables(options: RunOptions) -> list[str]:
    """The names faultproxy sets in every agent's environment for this run."""
    params = {name: 0.0 for point in options.grid for name, _ in point.params}
    return list(AgentEnvironment(
        proxy_url="", ca_bundle=Path(), episode="", task_file=Path(), output_file=Path(), prompt="", seed=0,
        model="model", base_urls={name: "" for name in options.upstreams}, params=params,
    ).build({}))


def _check_templates(options: RunOptions) -> None:
    """The templates each episode expands, expanded now as the first episode will (episode.py), and
    the secrets each task names, which must be set to be redacted."""
    harness_env = {**os.environ, "FAULTPROXY_EPISODE": "preflight"}
    for task in options.tasks.tasks:
        try:
            task_env = {name: expand(value, harness_env) for name, value in {**options.tasks.env, **task.env}.items()}
            for name, url in (("reset_url", task.reset_url), ("state_url", task.state_url)):
                if url and not expand(url, {**harness_env, **task_env}).startswith(("http://", "https://")):
                    raise CannotStart(f"{_where(options, task)}: task {task.id}: {name} {url!r} does not expand "
                                      "to an http(s) URL")
        except (UnsetVariable, TemplateError) as error:
            raise CannotStart(f"{_where(options, task)}: task {task.id}: {error}; set it before the run") from None
        unset = [name for name in task.secrets if not (task_env.get(name) or os.environ.get(name))]
        if unset:  # the task says this value must never reach disk: unset, there is nothing to redact
            raise CannotStart(f"{_where(options, task)}: task {task.id}: secrets: {unset[0]} is not set here, so "
                              "there is nothing to redact; set it before the run")


def _check_checkers(options: RunOptions) -> None:
    for task in options.tasks.tasks:
        output = task.expected.output
        if output is not None and output.kind == "checker":
            try:
                load_checker(output.value)
            except (ImportError, AttributeError) as error:
                raise CannotStart(f"{_where(options, task)}: task {task.id}: expected.output checker {output.value} cannot be "
                                  f"loaded: {error}") from None


def _where(options: RunOptions, task: Task) -> str:
    path = options.tasks.path or "the command line"
    return f"{path}:{task.line}" if task.line and options.tasks.path else path
