"""Per-episode state inside one proxy: call counters, stale-state memory, the trace writer.

Everything here is touched only from the proxy's event loop, so no locks.

Memory is bounded (EpisodeLimits): an episode keeps the answers of its most recent reads and the
last write of its most recently written resources (least recently used go first), and an
episode nobody began (`faultproxy proxy`, where episodes never end) is forgotten once idle — no
request for `idle_s` and none in flight — so the proxy's memory stays flat however long it runs.
An episode a runner began is never forgotten: the runner ends it.
"""

from __future__ import annotations

import time
from collections import Counter, OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.formats.trace import DEFAULT_BODY_LIMIT, TraceWriter, trace_path
from faultproxy.scenarios import Scenario
from faultproxy.tasks.request_class import Declared

ReadKey = tuple[str, str, bytes]
Resource = tuple[str, str]  # what a write touches: (host[:port] as FlowExchange.host names it, path)


@dataclass(frozen=True)
class EpisodeLimits:
    """How much the proxy keeps per episode, and for how long it keeps an episode nobody began."""

    reads: int = 256  # stale_state: answers kept per episode (20 busy episodes fill theirs in ~5,000 requests)
    writes: int = 1_000  # resources whose last write is kept per episode (stale_state's after_write)
    idle_s: float = 1_800.0  # 30 min
    trace_body_bytes: int = DEFAULT_BODY_LIMIT  # formats.trace: longer bodies are cut in the trace
    notifications: int = 100  # progress and logging notifications recorded per episode, each method; the rest counted
    ended_sessions: int = 1_000  # MCP sessions a fault ended, kept per episode (proxy.faults.lingering)
    mcp_sessions: int = 1_000  # MCP sessions servers' answers gave, kept per episode: a server_restart ends them


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
    declared: Declared | None = None  # its task's irreversible, effects, read_only: for rules with `kind:`
    tool_hints: dict[tuple[str, str], Any] = field(default_factory=dict)  # (server, MCP tool) -> its listed annotations
    tool_schemas: dict[tuple[str, str], Any] = field(default_factory=dict)  # (server, tool) -> inputSchema, as listed
    exchanges: int = 0
    tokens: int = 0
    faults: int = 0
    calls: Counter[str] = field(default_factory=Counter)
    fired: Counter[str] = field(default_factory=Counter)
    notifications: Counter[str] = field(default_factory=Counter)  # capped notifications seen, by method
    from_server: int = 0  # exchanges an MCP server began (its requests, notifications): not the agent's requests
    turns: int = 0  # a conversation's turns in the trace (FaultInjector.record_turn): not requests either
    plumbing: int = 0  # the MCP session's plumbing (initialize, notifications, the GET stream...): not either
    limits: EpisodeLimits = field(default_factory=EpisodeLimits)
    begun: bool = False  # begun by a runner (never forgotten when idle)
    last_used: float = field(default_factory=time.monotonic)
    reads: OrderedDict[ReadKey, StoredResponse] = field(default_factory=OrderedDict)
    writes: OrderedDict[Resource, int] = field(default_factory=OrderedDict)  # resource -> seq of its last write
    inflight: dict[int, Any] = field(default_factory=dict)  # seq -> the FlowExchange not yet written
    lingering: dict[str, dict[str, Any]] = field(default_factory=dict)  # what faults left for later requests (proxy.faults.lingering)
    # (server URL, Mcp-Session-Id) of the sessions servers' answers gave, oldest first (proxy.faults.lingering)
    mcp_sessions: dict[tuple[str, str], None] = field(default_factory=dict)

    def next_seq(self) -> int:
        self.exchanges += 1
        return self.exchanges

    def remember_read(self, key: ReadKey, response: StoredResponse) -> None:
        """Keep the first answer to a read; the least recently used goes beyond `limits.reads`."""
        if key in self.reads:
            return
        self.reads[key] = response
        if len(self.reads) > self.limits.reads:
            self.reads.popitem(last=False)

    def recall_read(self, key: ReadKey) -> StoredResponse | None:
        response = self.reads.get(key)
        if response is not None:
            self.reads.move_to_end(key)
        return response

    def note_write(self, seq: int, host: str, paths: Iterable[str]) -> None:
        """A write at exchange `seq` to the server at `host` touched these paths on it."""
        for path in paths:
            self.writes.pop((host, path), None)
            self.writes[host, path] = seq
            if len(self.writes) > self.limits.writes:
                self.writes.popitem(last=False)

    def written_since(self, seq: int, host: str, path: str) -> bool:
        """Was the resource at `path` on `host` (or one it contains or belongs to) written after
        `seq`? Another server's paths are its own, however alike (many MCP servers are at /mcp)."""
        return any(s > seq and h == host and _related(path, p) for (h, p), s in self.writes.items())

    def writes_since(self, seq: int) -> list[Resource]:
        """The resources written after `seq`, oldest first."""
        return [resource for resource, s in self.writes.items() if s > seq]

    def in_flight(self) -> bool:
        """Has an exchange begun that its trace has not seen end? (Forgetting it would close the trace under it.)"""
        trace = self.trace  # a trace that stopped (the disk filled) writes no more: nothing to wait for
        return trace is not None and not trace.stopped and trace.lines < self.exchanges


def _related(a: str, b: str) -> bool:
    a, b = a.rstrip("/") + "/", b.rstrip("/") + "/"
    return a.startswith(b) or b.startswith(a)


class Episodes:
    def __init__(self, trace_dir: Path | None, limits: EpisodeLimits | None = None) -> None:
        self.trace_dir = trace_dir
        self.limits = limits or EpisodeLimits()
        self._live: dict[str, EpisodeState] = {}
        self._unbegun: OrderedDict[str, None] = OrderedDict()  # episodes nobody began, least recently used first

    def get(self, key: str) -> EpisodeState:
        """The episode's state, made on its first request; forgets episodes idle too long."""
        now = time.monotonic()
        state = self._live.get(key)
        if state is None:
            writer = TraceWriter(trace_path(self.trace_dir, key)) if self.trace_dir else None
            state = self._live[key] = EpisodeState(key, writer, limits=self.limits)
        state.last_used = now
        if not state.begun:
            self._unbegun.pop(key, None)
            self._unbegun[key] = None
        self._forget_idle(now)
        return state

    def _forget_idle(self, now: float) -> None:
        while self._unbegun:
            key = next(iter(self._unbegun))
            state = self._live[key]
            if now - state.last_used < self.limits.idle_s:
                return
            if state.in_flight():  # look again one idle period from now
                state.last_used = now
                self._unbegun.move_to_end(key)
                continue
            self.end(key)

    def begin(self, key: str, scenario: Scenario | None, rewrites: dict[str, str | int] | None = None,
              declared: Declared | None = None) -> None:
        """Start an episode afresh: a trace left by an interrupted earlier attempt is replaced."""
        self.end(key)
        if self.trace_dir:
            trace_path(self.trace_dir, key).unlink(missing_ok=True)
        state = self.get(key)
        state.scenario, state.rewrites, state.declared, state.begun = scenario, rewrites, declared, True
        self._unbegun.pop(key, None)

    def peek(self, key: str) -> EpisodeState | None:
        return self._live.get(key)

    def end(self, key: str) -> EpisodeState | None:
        """Forget an episode and close its trace; a later request under the key starts afresh."""
        state = self._live.pop(key, None)
        self._unbegun.pop(key, None)
        if state and state.trace:
            state.trace.close()
        return state

    def keys(self) -> list[str]:
        """The live episodes' keys."""
        return list(self._live)

    def end_all(self) -> None:
        for key in list(self._live):
            self.end(key)
