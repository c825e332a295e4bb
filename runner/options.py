"""What a run is asked to do (RunOptions) and how it went (RunResult)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import UsageError
from faultproxy.runner.plan import GridPoint
from faultproxy.scenarios import Scenario
from faultproxy.tasks.model import TaskSet


@dataclass
class RunOptions:
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
    rewrite_model: bool = False  # the proxy sets model API requests' `model` to the grid point's model
    show_progress: bool = True
    executor: str = "local"  # "local" (a pool of agent processes here) or "dask" (see executors.py)
    scheduler: str | None = None  # the Dask scheduler's address, tcp://HOST:PORT


@dataclass
class RunResult:
    planned: int
    logged: int
    ran: int
    interrupted: bool
    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # episodes the harness could not run (not logged)

    @property
    def complete(self) -> bool:
        return self.logged == self.planned


def task_secret_names(tasks: TaskSet) -> list[str]:
    return sorted({name for task in tasks.tasks for name in task.secrets})


def parse_pairs(specs: Sequence[str], what: str) -> dict[str, str]:
    pairs = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} {spec!r} is not NAME=VALUE")
        pairs[name] = value
    return pairs
