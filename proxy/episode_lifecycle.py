"""An episode's life in the proxy and each exchange's trace line: a base of FaultInjector (proxy.injector).

Every exchange, faulted or not, is written to its episode's trace once, including those still
held when the episode ends (settle_episode, end_episode): what the upstream answered is a fact
even if the client left before hearing it. A conversation's turns are numbered with them.
"""

from __future__ import annotations

import asyncio
import time

import structlog
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import trace_time, turn_record
from faultproxy.proxy.episodes import EpisodeLimits, Episodes, EpisodeState
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.exchange_end import awaits_upstream, header_pairs
from faultproxy.proxy.flow_kinds import learn_tools
from faultproxy.proxy.relay import Relay
from faultproxy.scenarios import Scenario
from faultproxy.tasks.request_class import Declared
from mitmproxy import http

SETTLE_S = 5.0  # at an episode's end, how long exchanges still waiting for their upstream are given
_SETTLE_POLL_S = 0.05

log = structlog.get_logger("faultproxy")


class EpisodeLifecycle:
    """What the lifecycle needs of the injector it is part of: its episodes, limits, redactor and
    relay (set by FaultInjector.__init__ and configure)."""

    episodes: Episodes
    limits: EpisodeLimits
    redactor: Redactor
    relay: Relay

    def begin_episode(self, key: str, scenario: Scenario | None = None,
                      rewrites: dict[str, str | int] | None = None, declared: Declared | None = None) -> None:
        self.episodes.begin(key, scenario, rewrites, declared)

    async def settle_episode(self, key: str, wait_s: float = SETTLE_S) -> None:
        """Give the episode's exchanges still waiting for their upstream up to `wait_s` to hear
        back (the agent has gone; what the upstream did is still to be recorded). Those that do
        not are marked cut short; end_episode writes them."""
        state = self.episodes.peek(key)
        if state is None:
            return
        deadline = time.monotonic() + wait_s
        while any(awaits_upstream(ex) for ex in state.inflight.values()) and time.monotonic() < deadline:
            await asyncio.sleep(_SETTLE_POLL_S)
        for ex in state.inflight.values():
            if awaits_upstream(ex):
                ex.cut_short = f"the episode ended; the upstream had not answered within {wait_s:g} s more"

    def end_episode(self, key: str) -> EpisodeState | None:
        """Write every exchange of the episode still in the proxy as one whose client has gone,
        then forget the episode and close its trace."""
        state = self.episodes.peek(key)
        for ex in sorted(state.inflight.values() if state else (), key=lambda e: e.seq):
            self._write_gone(ex)
        return self.episodes.end(key)

    def record_turn(self, key: str, direction: str, text: str, started: float, duration_s: float,
                    reply: int | None = None, end: bool = False, silent: bool = False) -> None:
        """Write a conversation's turn (formats.trace.turn_record) to the episode's trace, numbered
        in order with its exchanges, its text redacted as bodies are."""
        state = self.episodes.get(key)
        state.turns += 1
        if state.trace:
            state.trace.write(turn_record(state.next_seq(), key, direction, self.redactor.body(text), started,
                                          duration_s, reply, end, silent))

    async def done(self) -> None:
        for key in self.episodes.keys():
            self.end_episode(key)
        await self.relay.close()

    def _finish(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.written:
            return
        if flow.response is not None and ex.outcome not in ("reset",):
            ex.client_status = flow.response.status_code
            if ex.upstream is None or ex.rule is not None:
                ex.client_headers = header_pairs(flow.response.headers)
            if (ex.rule is not None or ex.perturbation or ex.consequence_of) and not flow.response.stream:
                body = flow.response.raw_content
                ex.client_body = flow.response.get_content(strict=False) if body is not None else None
        self._write(ex)

    def _write_gone(self, ex: FlowExchange) -> None:
        """Record an exchange whose episode ended while the proxy still held it: the client has
        gone. A fault that was holding it reached the agent (it gave up waiting)."""
        ex.gone_after_s = trace_time(time.time() - ex.started)
        if awaits_upstream(ex) and ex.cut_short is None:
            ex.cut_short = "the episode ended before the upstream answered"
        elif ex.rule and not ex.delivered:
            ex.deliver("the client gave up while the fault held the exchange")
        ex.outcome, ex.client_status = "client_gone", None
        self._write(ex)

    def _write(self, ex: FlowExchange) -> None:
        learn_tools(ex)
        ex.written = True
        ex.episode.inflight.pop(ex.seq, None)
        if ex.websocket is None:  # a session's tokens were counted as its messages arrived
            ex.episode.tokens += ex.tokens
        if ex.rule and ex.delivered:
            ex.episode.faults += 1
        if ex.websocket is not None:
            ex.episode.faults += sum(1 for _, fault in ex.websocket.faults if fault.delivered)
        if ex.rule:
            log.info(
                "fault", episode=ex.episode.key, seq=ex.seq, rule=ex.rule.name, type=ex.rule.fault.type,
                delivered=ex.delivered, detail=ex.detail, method=ex.method, url=self.redactor.url(ex.url),
            )
        if ex.episode.trace:
            ex.episode.trace.write(ex.to_record(self.redactor, self.limits.trace_body_bytes))
