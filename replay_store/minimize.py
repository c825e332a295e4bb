"""`faultproxy minimize`: the smallest set of injected faults that still reproduces a failure.

Delta debugging (Zeller and Hildebrandt's ddmin) over the fault decisions that fired in the
frozen episode, each trial a replay in which exactly a subset of those decisions is forced on
and every other decision is off. A trial reproduces the failure when its replay does not
diverge and fails at least the target checks (by default the entry's `expect_failed`; more
failures still reproduce it). The result is 1-minimal: removing any one fault from it no
longer reproduces the failure. It is written into the entry as `minimal_faults`.

Trials whose agent takes a path the recording does not cover diverge; they count as "does not
reproduce", which can only make the result larger, never wrong.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from faultproxy.replay_store import entry_writer, har
from faultproxy.replay_store.har import Decision, Entry, StoreError
from faultproxy.replay_store.replay_proxy import ReplayResult

T = TypeVar("T")
# Replays the entry with exactly these (rule, index) fault decisions forced on.
ReplayForced = Callable[[Entry, list[tuple[str, int]]], ReplayResult]


def ddmin(items: Sequence[T], reproduces: Callable[[list[T]], bool]) -> list[T]:
    """A 1-minimal sublist of `items` for which `reproduces` holds (it must hold for `items`).
    `reproduces` is called at most once per distinct subset."""
    cache: dict[tuple[int, ...], bool] = {}
    positions = list(range(len(items)))

    def test(subset: list[int]) -> bool:
        key = tuple(subset)
        if key not in cache:
            cache[key] = reproduces([items[i] for i in subset])
        return cache[key]

    current, n = positions, 2
    if test([]):
        return []
    while len(current) >= 2:
        chunks = _split(current, n)
        for chunk in chunks:
            if test(chunk):
                current, n = chunk, 2
                break
        else:
            for chunk in chunks if n > 2 else ():  # with two chunks, each complement is the other chunk
                complement = [i for i in current if i not in chunk]
                if test(complement):
                    current, n = complement, max(n - 1, 2)
                    break
            else:
                if n >= len(current):
                    break
                n = min(n * 2, len(current))
    return [items[i] for i in current]


def _split(items: list[int], n: int) -> list[list[int]]:
    size, extra = divmod(len(items), n)
    chunks, start = [], 0
    for i in range(n):
        end = start + size + (1 if i < extra else 0)
        if end > start:
            chunks.append(items[start:end])
        start = end
    return chunks


@dataclass
class Trial:
    faults: list[tuple[str, int]]
    reproduced: bool
    status: str
    failed: list[str]
    diverged: int
    duration_s: float


@dataclass
class MinimizeResult:
    entry: Entry
    target: list[str]
    fired: list[Decision]
    minimal: list[Decision]
    trials: list[Trial] = field(default_factory=list)


def minimize(entry: Entry, replay_forced: ReplayForced,
             checks: Sequence[str] = (), progress: Callable[[Trial], None] | None = None,
             write: bool = True) -> MinimizeResult:
    if entry.expect != "fail" and not checks:
        raise StoreError(str(entry.path / har.EPISODE_FILE), None, "expect",
                         "the entry expects pass: there is no failure to minimize (name checks with --check)")
    target = list(checks or entry.expect_failed)
    if not target:
        raise StoreError(str(entry.path / har.EPISODE_FILE), None, "expect_failed",
                         "no failed check that replay can judge; nothing to reproduce")
    fired = entry.fired
    result = MinimizeResult(entry, target, fired, fired)

    def reproduces(subset: list[Decision]) -> bool:
        started = time.monotonic()
        replayed = replay_forced(entry, [d.ident for d in subset])
        trial = Trial([d.ident for d in subset], replayed.fails_like(target, exactly=False), replayed.status,
                      replayed.failed, len(replayed.diverged), round(time.monotonic() - started, 3))
        result.trials.append(trial)
        if progress:
            progress(trial)
        return trial.reproduced

    if not reproduces(list(fired)):
        raise StoreError(str(entry.path), None, None,
                         f"with all {len(fired)} recorded fault(s) forced on, the replay does not fail "
                         f"{', '.join(target)}: nothing to minimize (see `faultproxy replay`)")
    result.minimal = ddmin(fired, reproduces)
    if write:
        entry_writer.update_episode(entry.path, {
            "minimal_faults": [{"rule": d.rule, "index": d.index, "type": d.type, "seq": d.seq}
                               for d in result.minimal],
            "minimize": {"checks": target, "trials": len(result.trials), "from": len(fired),
                         "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())},
        })
    return result
