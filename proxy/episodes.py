"""Per-episode state inside one proxy: call counters, stale-state memory, the trace writer.

Everything here is touched only from the proxy's event loop, so no locks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from faultproxy.formats.trace import TraceWriter, trace_path
from faultproxy.scenarios import Scenario


@dataclass(frozen=True)
class StoredResponse:
    """A read's response, kept so that stale_state can serve it again later."""

    seq: int
    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    content: bytes


@dataclass
class EpisodeState:
    key: str
    trace: TraceWriter | None
    scenario: Scenario | None = None  # this episode's own params (a sweep level), if not the proxy's
    rewrites: dict[str, str | int] | None = None  # fields set in its model API requests (--rewrite)
    exchanges: int = 0
    tokens: int = 0
    faults: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)
    reads: dict[tuple[str, str, bytes], StoredResponse] = field(default_factory=dict)
    writes: list[tuple[int, str]] = field(default_factory=list)

    def next_seq(self) -> int:
        self.exchanges += 1
        return self.exchanges

    def written_since(self, seq: int, path: str) -> bool:
        """Was the resource at `path` (or one it contains or belongs to) written after `seq`?"""
        return any(s > seq and _related(path, p) for s, p in self.writes)


def _related(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


class Episodes:
    def __init__(self, trace_dir: Path | None) -> None:
        self.trace_dir = trace_dir
        self._live: dict[str, EpisodeState] = {}

    def get(self, key: str) -> EpisodeState:
        state = self._live.get(key)
        if state is None:
            writer = TraceWriter(trace_path(self.trace_dir, key)) if self.trace_dir else None
            state = self._live[key] = EpisodeState(key, writer)
        return state

    def begin(self, key: str, scenario: Scenario | None, rewrites: dict[str, str | int] | None = None) -> None:
        """Start an episode afresh: a trace left by an interrupted earlier attempt is replaced."""
        self.end(key)
        if self.trace_dir:
            trace_path(self.trace_dir, key).unlink(missing_ok=True)
        state = self.get(key)
        state.scenario, state.rewrites = scenario, rewrites

    def peek(self, key: str) -> EpisodeState | None:
        return self._live.get(key)

    def end(self, key: str) -> EpisodeState | None:
        """Forget an episode and close its trace; a later request under the key starts afresh."""
        state = self._live.pop(key, None)
        if state and state.trace:
            state.trace.close()
        return state

    def end_all(self) -> None:
        for key in list(self._live):
            self.end(key)
