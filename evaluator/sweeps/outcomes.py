"""Which trials of each (grid label, task) were logged and which passed: two bit masks each.

A sweep's analysis needs no more of an episode than that, so the memory is one pair of
integers per task and grid point, whatever k is. OutcomeSink collects them from
evaluator.aggregate.report.build_report's stream (in parallel, when the log is read in chunks).
"""

from __future__ import annotations

from typing import Any

from faultproxy.evaluator.aggregate import EpisodeSink, SinkVerdict


class Outcomes:
    """Which trials of each (grid label, task) were logged, and which of them passed."""

    def __init__(self) -> None:
        self.masks: dict[tuple[str, str], list[int]] = {}
        self.outside = 0  # episodes with a trial index the plan does not have

    def add(self, label: str, task_id: str, trial: Any, passed: bool) -> None:
        """One logged episode; a trial that is not a non-negative int counts as outside the plan."""
        if type(trial) is not int or trial < 0:
            self.outside += 1
            return
        masks = self.masks.setdefault((label, task_id), [0, 0])
        masks[0] |= 1 << trial
        if passed:
            masks[1] |= 1 << trial

    def merge(self, other: Outcomes) -> None:
        """Fold in another chunk's outcomes."""
        for key, (logged, passed) in other.masks.items():
            masks = self.masks.setdefault(key, [0, 0])
            masks[0] |= logged
            masks[1] |= passed
        self.outside += other.outside

    def get(self, label: str, task_id: str, k: int) -> tuple[int, int]:
        """(logged, passed) masks limited to trials 0..k-1."""
        logged, passed = self.masks.get((label, task_id), (0, 0))
        full = (1 << k) - 1
        return logged & full, passed & full

    def counts(self, label: str, task_id: str, k: int) -> tuple[int, int]:
        """(n, c): trials logged and trials passed."""
        logged, passed = self.get(label, task_id, k)
        return logged.bit_count(), passed.bit_count()


class OutcomeSink(EpisodeSink):
    """Collects Outcomes from build_report's stream; its shards pickle, for a log read in parallel."""

    def __init__(self) -> None:
        self.outcomes = Outcomes()

    def episode(self, verdict: SinkVerdict) -> None:
        """Record whether this episode's trial was logged and passed."""
        episode = verdict["episode"]
        self.outcomes.add(episode.get("grid_label") or "", str(episode.get("task_id")), episode.get("trial"),
                          verdict["status"] == "pass")

    def shard(self, index: int) -> OutcomeSink:
        """An empty collector for one chunk of the log."""
        return OutcomeSink()

    def absorb(self, shard: EpisodeSink) -> None:
        """Merge a chunk's collector back."""
        assert isinstance(shard, OutcomeSink)
        self.outcomes.merge(shard.outcomes)
