"""Tallying per task: what the report keeps about one task at one grid label.

Memory: per task a count per distinct outcome and trajectory and one float per episode per
resource; never a whole record. The episodes arrive as formats.verdict_layout.VerdictFields,
whose names and lists are still JSON text when the log's fast reader read them: they are counted
as they are and each distinct value is decoded once, by finish() and price().
"""

from __future__ import annotations

import json
from array import array
from collections import Counter
from collections.abc import Mapping
from typing import Any

from faultproxy.evaluator.traces import episode_cost
from faultproxy.formats.verdict_layout import VerdictFields, decode_name, failed_pairs, fault_pairs, usage_items
from faultproxy.tasks.task_model import SEVERITIES, SEVERITY_RANK


class TaskAccumulator:
    """Everything the report keeps about one task at one grid label.

    Per episode: one count for its outcome signature — (status, cause, failed checks, faults) —
    one for its trajectory and one for its usage, and one float per resource. finish() expands
    the signatures into the counters the report reads (n, c, failed_checks, fault_types, ...).
    """

    __slots__ = ("task_id", "shape", "k", "trials", "outside", "outcomes", "tokens", "requests", "latency", "turns",
                 "usages", "cost", "unpriced", "trajectories", "conf", "conf_ok",
                 # filled by finish():
                 "n", "c", "fail", "incomplete", "causes", "failed_checks", "check_severity", "worst",
                 "violations", "fault_types", "undelivered", "not_exercised")

    def __init__(self, task_id: str, shape: str, k: int) -> None:
        self.task_id, self.shape, self.k = task_id, shape, k
        self.trials = bytearray(k)  # 1 where that trial index was logged
        self.outside = 0  # logged with a trial index outside the plan
        self.outcomes: dict[tuple, int] = {}
        self.tokens, self.requests, self.latency, self.turns = array("d"), array("d"), array("d"), array("d")
        self.usages: dict[bytes, int] = {}  # usage objects as JSON text -> episodes; priced by price()
        self.cost, self.unpriced = array("d"), 0
        self.trajectories: dict[bytes, int] = {}  # endpoint lists as JSON text -> episodes
        self.conf, self.conf_ok = array("d"), bytearray()
        self.finish()

    @property
    def not_run(self) -> int:
        """Planned trials not in the log."""
        return self.trials.count(0)

    def add(self, v: VerdictFields) -> None:
        """One logged episode of this task."""
        trial = v.trial
        if type(trial) is int and 0 <= trial < self.k:
            self.trials[trial] = 1
        else:
            self.outside += 1
        status = v.status
        key = (status, v.cause, v.failed, v.faults)
        outcomes = self.outcomes
        outcomes[key] = outcomes.get(key, 0) + 1
        self.tokens.append(v.tokens)
        self.requests.append(v.requests)
        self.latency.append(v.duration_s or 0.0)
        self.turns.append(v.turns)
        usages = self.usages
        usages[v.usage] = usages.get(v.usage, 0) + 1
        trajectories = self.trajectories
        trajectories[v.endpoints] = trajectories.get(v.endpoints, 0) + 1
        if v.confidence is not None and status != 2:
            self.conf.append(v.confidence)
            self.conf_ok.append(status == 0)

    def price(self, prices: Mapping[str, Mapping[str, float]]) -> TaskAccumulator:
        """Each episode's cost from its usage (each distinct usage priced once)."""
        self.cost, self.unpriced = array("d"), 0
        if not prices:
            self.unpriced = sum(self.usages.values())
            return self
        for usage, count in self.usages.items():
            cost = _usage_cost(usage, prices)
            if cost is None:
                self.unpriced += count
            else:
                self.cost.extend([cost] * count)
        return self

    def finish(self) -> TaskAccumulator:
        """Expand the outcome signatures into the report's counters."""
        counts = [0, 0, 0]
        self.causes: Counter[str] = Counter()
        self.failed_checks: Counter[str] = Counter()
        self.check_severity: Counter[tuple[str, str]] = Counter()
        self.worst: Counter[str] = Counter()  # severity -> episodes whose worst violation it is
        self.violations: Counter[str] = Counter()  # severity -> violations
        self.fault_types: dict[str, list[int]] = {}  # type -> [pass, fail, incomplete] with it delivered
        self.undelivered = 0  # episodes with faults injected, none delivered
        self.not_exercised = [0, 0, 0]  # [pass, fail, incomplete] with no fault delivered
        for (status, cause, failed, faults), m in self.outcomes.items():
            counts[status] += m
            if status == 2:
                self.causes[decode_name(cause) or "unknown"] += m
            self._count_failed(failed_pairs(failed) if isinstance(failed, bytes) else failed, m)
            self._count_faults(fault_pairs(faults) if isinstance(faults, bytes) else faults, status, m)
        self.c, self.fail, self.incomplete = counts
        self.n = sum(counts)
        return self

    def _count_failed(self, failed: Any, m: int) -> None:
        worst = -1
        for name, severity in failed:
            self.failed_checks[name] += m
            self.check_severity[(name, severity)] += m
            rank = SEVERITY_RANK.get(severity, -1)
            if rank >= 0:
                self.violations[severity] += m
                worst = max(worst, rank)
        if worst >= 0:
            self.worst[SEVERITIES[worst]] += m

    def _count_faults(self, faults: Any, status: int, m: int) -> None:
        delivered = {kind or "unknown" for kind, was in faults if was}
        if faults and not delivered:
            self.undelivered += m
        if delivered:
            for kind in delivered:
                self.fault_types.setdefault(kind, [0, 0, 0])[status] += m
        else:
            self.not_exercised[status] += m

    def merge(self, other: TaskAccumulator) -> None:
        """Fold another grid label's accumulation of the same task into this one (run scope):
        its trials are more trials."""
        self.k += other.k
        self.trials += other.trials
        self._add(other)

    def absorb(self, other: TaskAccumulator) -> None:
        """Fold in the same task at the same label from a later chunk of the log: the same
        trial slots, some filled there."""
        both = int.from_bytes(self.trials, "big") | int.from_bytes(other.trials, "big")
        self.trials = bytearray(both.to_bytes(len(self.trials), "big"))
        self._add(other)

    def _add(self, other: TaskAccumulator) -> None:
        self.outside += other.outside
        for mine, theirs in ((self.outcomes, other.outcomes), (self.trajectories, other.trajectories),
                             (self.usages, other.usages)):
            for key, count in theirs.items():
                mine[key] = mine.get(key, 0) + count
        for name in ("tokens", "requests", "latency", "turns", "conf", "conf_ok"):
            getattr(self, name).extend(getattr(other, name))
        self.finish()

    def copy(self) -> TaskAccumulator:
        """An independent accumulator with the same contents (to merge grid labels into)."""
        twin = TaskAccumulator(self.task_id, self.shape, 0)
        twin.trials = bytearray()
        twin.merge(self)
        return twin


def new_accumulators(task_shapes: Mapping[str, str], labels: list[str], k: int
                     ) -> dict[tuple[str, str], TaskAccumulator]:
    """An empty accumulator per (grid label, task id), for tasks given as id -> shape."""
    return {(label, task_id): TaskAccumulator(task_id, shape, k) for label in labels
            for task_id, shape in task_shapes.items()}


def _usage_cost(raw: bytes, prices: Mapping[str, Mapping[str, float]]) -> float | None:
    """episode_cost of a usage object kept as JSON text, read without building it when it has
    the usual shape."""
    if raw == b"{}":
        return 0.0
    items = usage_items(raw)
    total = 0.0
    for model, tokens_in, tokens_out in items:
        price = prices.get(model) if model is not None else None
        if price is None:
            return episode_cost(json.loads(raw), prices)  # truly unpriced, or a shape the reader skips
        total += (tokens_in * price.get("input_per_mtok", 0.0) + tokens_out * price.get("output_per_mtok", 0.0)) / 1e6
    return total if items else episode_cost(json.loads(raw), prices)
