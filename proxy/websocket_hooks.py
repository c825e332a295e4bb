"""The injector's WebSocket hooks: each message of a session the proxy let through is recorded,
counted for the scenario's message rules, and handed to the fault that fires on it; the
session's end writes its trace line.

A base of FaultInjector (proxy.injector), kept apart because message rules decide per message
rather than per request; replay overrides `_message_decision` to force recorded decisions.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import encode_ws_message
from faultproxy.proxy import decide
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.proxy.exchange import EXCHANGE_KEY, FlowExchange
from faultproxy.proxy.faults import Fault
from faultproxy.proxy.websocket import MessageFault, WsSession, message_json
from faultproxy.scenarios import Rule, Scenario
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage


class WebSocketHooks(ABC):
    """What the hooks need of the injector they are part of: its redactor, its limits, the fault
    object of a rule, and how an exchange's line is finished."""

    redactor: Redactor
    limits: EpisodeLimits

    @abstractmethod
    def fault(self, scenario: Scenario, rule: Rule) -> Fault:
        """The fault object that delivers `rule`'s fault."""

    @abstractmethod
    def _finish(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """Write the exchange's trace line, once."""

    async def websocket_message(self, flow: http.HTTPFlow) -> None:
        ex = flow.metadata.get(EXCHANGE_KEY)
        session = ex.websocket if ex is not None and not ex.written else None
        if session is None:
            return
        message = flow.websocket.messages[-1]
        entry = session.record(message, self.redactor, self.limits.trace_body_bytes)
        if message.injected:
            session.injected_arrived(message, entry)
            return
        if spent := session.tokens(message):  # counted as the turn's usage arrives: the live budget sees it now
            ex.tokens += spent
            ex.episode.tokens += spent
        if session.closing is not None:  # the proxy is ending the session: nothing more goes through
            message.drop()
            entry["dropped"] = True
            return
        fault = self._decide_message(ex, session, message)
        if fault is not None:
            session.fired(entry, fault)
            ex.episode.fired[fault.rule.name] += 1
            received = message.content
            await self.fault(ex.scenario, fault.rule).message(flow, session, message, fault)
            if message.content != received:  # rewritten (schema_drift): the trace keeps both
                entry["sent"] = encode_ws_message(message.content, message.is_text, self.redactor,
                                                  self.limits.trace_body_bytes).get("text")
        if message.dropped:
            if not entry.get("held"):  # held: withheld only to be sent again behind an injection
                entry["dropped"] = True
        elif session.expected:  # injections on their way: this message goes behind them
            session.resend(flow, message)

    def _decide_message(self, ex: FlowExchange, session: WsSession,
                         message: WebSocketMessage) -> MessageFault | None:
        """Count the message for every message rule it matches; the first that the rule's `when`
        admits and whose keyed-hash draw falls under its probability fires."""
        chosen = None
        body = None
        for rule in session.rules:
            if body is None:
                body = message_json(message)
            if not rule.match.websocket.matches(message.from_client, body):
                continue
            index = ex.episode.calls[rule.name] = ex.episode.calls[rule.name] + 1
            if chosen is None and (value := self._message_decision(ex, rule, index)) is not None:
                chosen = MessageFault(rule, ex.episode.key, index, value)
        return chosen

    def _message_decision(self, ex: FlowExchange, rule: Rule, index: int) -> float | None:
        """The decision value if the rule fires on its index-th matching message, else None (replay
        overrides it to force exactly the decisions `minimize` asks for)."""
        if not rule.when.admits(index, ex.episode.fired[rule.name]):
            return None
        value = decide.decision_value(ex.scenario.seed, ex.episode.key, rule.name, index)
        return value if decide.fires(ex.scenario.probability(rule), value) else None

    def websocket_end(self, flow: http.HTTPFlow) -> None:
        ex = flow.metadata.get(EXCHANGE_KEY)
        session = ex.websocket if ex is not None else None
        if session is None or ex.written:
            return
        if session.closing is not None:
            session.closing.deliver(f"the proxy ended the session ({'abort' if session.close['code'] is None else 'close ' + str(session.close['code'])})")
        else:
            ws = flow.websocket
            session.close = {"by": "client" if ws.closed_by_client else "server", "code": ws.close_code,
                             "reason": ws.close_reason or "", "t": session.offset()}
        self._finish(flow, ex)
