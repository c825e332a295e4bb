"""What a run is asked to do (RunOptions) and how it went (RunResult)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import UsageError
from faultproxy.runner.plan import GridPoint
from faultproxy.runner.rewrites import check_rewrites
from faultproxy.scenarios import Scenario
from faultproxy.tasks.model import TaskSet


@dataclass
class RunOptions:
    """What `run(options)` runs: every task of `tasks`, `k` trials each, at every grid point, with
    `command` as the agent, behind a proxy that follows `scenario`; logged to the run directory `out`.

    A plain run has one grid point (optionally with a model); a sweep has one per combination of
    param levels and models (runner.sweep). `parallel` episodes run at once through one proxy;
    `budget_s` caps each episode's wall time over the task's own budget. `upstreams` are
    reverse-mode upstreams (name -> URL), `no_proxy` hosts the agent reaches directly,
    `variant_function` your own honest rewording of a task's prompt, `secret_env` variables whose
    values are redacted from everything written. `rewrites` (field -> template, runner.rewrites)
    are fields the proxy sets in every model API request, resolved per grid point; a template that
    cannot be resolved at some grid point raises UsageError here, before anything runs.
    """

    scenario: Scenario
    tasks: TaskSet
    command: list[str]
    out: Path
    k: int = 1
    grid: list[GridPoint] = field(default_factory=lambda: [GridPoint()])
    parallel: int = 1
    budget_s: float | None = None
    upstreams: dict[str, str] = field(default_factory=dict)
    no_proxy: list[str] = field(default_factory=list)
    variant_function: Any = None
    secret_env: list[str] = field(default_factory=list)
    insecure_upstream: bool = False
    upstream_ca: Path | None = None
    rewrites: dict[str, str] = field(default_factory=dict)  # e.g. {"reasoning_effort": "{effort}"}
    show_progress: bool = True
    executor: str = "local"  # "local" (a pool of agent processes here) or "dask" (see executors.py)
    scheduler: str | None = None  # the Dask scheduler's address, tcp://HOST:PORT

    def __post_init__(self) -> None:
        check_rewrites(self.rewrites, self.grid)


@dataclass
class RunResult:
    """How a run went: `planned` episodes, `logged` in the run directory (by this call or an
    earlier one it resumed), `ran` by this call; `interrupted` when stopped early (rerun to
    resume); `counts` of verdicts (pass, fail, incomplete) over everything logged; `errors` for
    episodes the harness could not run, which are not logged and run again on resume."""

    planned: int
    logged: int
    ran: int
    interrupted: bool
    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # episodes the harness could not run (not logged)

    @property
    def complete(self) -> bool:
        """Every planned episode is logged."""
        return self.logged == self.planned


def task_secret_names(tasks: TaskSet) -> list[str]:
    return sorted({name for task in tasks.tasks for name in task.secrets})


def parse_pairs(specs: Sequence[str], what: str, once: bool = False) -> dict[str, str]:
    """NAME=VALUE arguments of option `what` -> {NAME: VALUE}; with `once`, a NAME given twice is
    refused rather than the last one winning."""
    pairs = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} {spec!r} is not NAME=VALUE")
        if once and name in pairs:
            raise UsageError(f"{what} {name} is given twice")
        pairs[name] = value
    return pairs
