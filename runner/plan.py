"""The plan: which episodes a run consists of, in which order, under which keys.

Trial-major order across the whole grid (trial 0 of every task at every grid point, then
trial 1, ...), so a run stopped early has run every task about equally often.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from faultproxy.evaluator.sweeps import level_label, level_text
from faultproxy.runner.variants import Variant
from faultproxy.tasks.task_model import Task

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class GridPoint:
    """One combination of param overrides and model; a plain run has exactly one."""

    params: tuple[tuple[str, float | str], ...] = ()  # a level is a number, or a word (a categorical level)
    model: str | None = None

    @property
    def label(self) -> str:
        parts = [level_label(name, value) for name, value in self.params]
        if self.model:
            parts.append(f"model={self.model}")
        return ",".join(parts)

    @property
    def numeric_params(self) -> dict[str, float]:
        """The params with numeric levels: the ones a scenario can take (a categorical one is the agent's)."""
        return {name: value for name, value in self.params if not isinstance(value, str)}

    @property
    def key_suffix(self) -> str:
        parts = [f"{name}-{level_text(value)}" for name, value in self.params] + ([f"m-{self.model}"] if self.model else [])
        return "".join("." + _UNSAFE.sub("_", part) for part in parts)

    def to_json(self) -> dict:
        return {"label": self.label, "params": dict(self.params), "model": self.model}


def build_grid(param_levels: Mapping[str, Sequence[float | str]], models: Sequence[str]) -> list[GridPoint]:
    names = sorted(param_levels)
    combos = itertools.product(*(param_levels[n] for n in names)) if names else [()]
    return [
        GridPoint(tuple(zip(names, combo)), model)
        for combo in combos
        for model in (models or [None])
    ]


@dataclass(frozen=True)
class PlannedEpisode:
    key: str
    task: Task
    trial: int
    point: GridPoint
    variant: Variant


def episode_key(task_id: str, trial: int, point: GridPoint) -> str:
    """URL- and file-safe: it travels as proxy credentials and names the trace file."""
    return f"{task_id}.t{trial}{point.key_suffix}"


def plan_episodes(tasks: Sequence[Task], k: int, grid: Sequence[GridPoint], variants) -> list[PlannedEpisode]:
    """`variants(task, trial) -> Variant`; trial i of a task is its variant i at every grid point."""
    return [
        PlannedEpisode(episode_key(task.id, trial, point), task, trial, point, variants(task, trial))
        for trial in range(k)
        for point in grid
        for task in tasks
    ]
