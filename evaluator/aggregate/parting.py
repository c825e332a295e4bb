"""Where a failing trial parted from the passing ones of the same task.

    trials = PassingTrials(); trials.add(label, task_id, {endpoints_json: count, ...})
    parting = trials.parting(label, task_id, failing_endpoints, fault_index, cause)
    parting_summary([parting, ...])   # what a cluster shows

Each trial is its sequence of endpoint classes ("POST /v1/chat/completions", "GET
/orders/{id}", ...: the verdict's `endpoints`). A failing trial is aligned with the closest
passing trial of the same task at the same grid label: the smallest Levenshtein distance over
the two sequences, ties to the most frequent passing sequence, then the smaller one in sort
order (deterministic). An optimal alignment can always match the two sequences' common prefix,
so the first step where they differ is the prefix's length: there the passing trial did X (or
finished) and the failing one did Y (or stopped). What happened just before is the fault the
cause names when it reached the agent at or before that step, else the failing trial's previous
call.

Cost: per (task, distinct failing sequence) one distance per distinct passing sequence (at most
MAX_CANDIDATES of them, the most frequent), memoised.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MAX_CANDIDATES = 200  # distinct passing sequences of one task compared with a failing one


def edit_distance(a: Sequence[str], b: Sequence[str]) -> int:
    """Levenshtein distance between two sequences (insert, delete, substitute: 1 each)."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        current = [i]
        for j, y in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (x != y)))
        previous = current
    return previous[-1]


def common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    """How many leading steps two sequences share."""
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


class PassingTrials:
    """The passing trials' endpoint sequences per (grid label, task), with their counts."""

    def __init__(self) -> None:
        self._raw: dict[tuple[str, str], Counter[bytes | str]] = {}
        self._decoded: dict[tuple[str, str], list[tuple[tuple[str, ...], int]]] = {}
        self._memo: dict[tuple[Any, ...], dict[str, Any] | None] = {}

    def add(self, label: str, task_id: str, counts: Mapping[bytes | str, int]) -> None:
        """Passing sequences (JSON text of the endpoint list) of one task at one label."""
        self._raw.setdefault((label, task_id), Counter()).update(counts)

    def _candidates(self, label: str, task_id: str) -> list[tuple[tuple[str, ...], int]]:
        key = (label, task_id)
        if key not in self._decoded:
            merged: Counter[tuple[str, ...]] = Counter()
            for text, n in (self._raw.get(key) or {}).items():
                merged[tuple(json.loads(text) if isinstance(text, (bytes, str)) else text)] += n
            ranked = sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))
            self._decoded[key] = ranked[:MAX_CANDIDATES]
        return self._decoded[key]

    def parting(self, label: str, task_id: str, failing: Sequence[str], fault_at: int | None,
                cause: Any) -> dict[str, Any] | None:
        """Where this failing trial parted from the closest passing one; None without passing trials."""
        memo_key = (label, task_id, tuple(failing), fault_at, cause.fault_type, cause.fault_rule)
        if memo_key not in self._memo:
            self._memo[memo_key] = self._parting(label, task_id, tuple(failing), fault_at, cause)
        return self._memo[memo_key]

    def _parting(self, label: str, task_id: str, failing: tuple[str, ...], fault_at: int | None,
                 cause: Any) -> dict[str, Any] | None:
        candidates = self._candidates(label, task_id)
        if not candidates:
            return None
        closest = min(candidates, key=lambda c: (edit_distance(failing, c[0]), -c[1], c[0]))[0]
        step = common_prefix(failing, closest)
        passing_did = closest[step] if step < len(closest) else None
        failing_did = failing[step] if step < len(failing) else None
        if fault_at is not None and fault_at <= step:
            before = f"fault {cause.fault_type} ({cause.fault_rule}) on {failing[fault_at]}"
        else:
            before = failing[step - 1] if step else None
        return {"step": step + 1, "passing": passing_did, "failing": failing_did, "after": before,
                "text": parting_text(step + 1, passing_did, failing_did, before)}


def parting_text(step: int, passing: str | None, failing: str | None, before: str | None) -> str:
    """"passing trials did X at step N; failing trials did Y after F"."""
    did = f"did {passing}" if passing else "finished"
    failed = f"did {failing}" if failing else "stopped"
    return (f"passing trials {did} at step {step}; failing trials {failed}"
            + (f" after {before}" if before else " at the start"))


def parting_summary(partings: Iterable[tuple[dict[str, Any] | None, int]]) -> dict[str, Any] | None:
    """A cluster's parting from (parting, episodes) pairs: the most common one among its episodes
    (ties: the earliest step, then the text), with how many of them parted there."""
    counts: Counter[str] = Counter()
    first: dict[str, dict[str, Any]] = {}
    compared = 0
    for parting, episodes in partings:
        if parting is None:
            continue
        compared += episodes
        counts[parting["text"]] += episodes
        first.setdefault(parting["text"], parting)
    if not counts:
        return None
    text = min(counts, key=lambda t: (-counts[t], first[t]["step"], t))
    return {**first[text], "episodes": counts[text], "compared": compared}
