"""Which rule a request meets and whether its fault fires: a base of FaultInjector (proxy.injector).

Every rule whose match block selects the request advances its call counter for the episode;
the first rule whose `when` admits this call and whose keyed-hash draw falls under its
probability is the exchange's. Replay overrides `_decide` to force recorded decisions.
"""

from __future__ import annotations

from faultproxy.proxy import decide
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults import FAULT_CLASSES, Fault
from faultproxy.proxy.flow_kinds import kinds_of, uses_kinds
from faultproxy.proxy.relay import Relay
from faultproxy.scenarios import FAULT_KINDS, Rule, Scenario
from faultproxy.scenarios.selection import request_matches
from faultproxy.tasks.request_class import Declared
from mitmproxy import http

REMEMBER_KEY = "faultproxy_remember"  # flow.metadata: the fault that keeps this read's answer, if any


class RuleMatching:
    """What matching needs of the injector it is part of: the relay faults pace through, what a
    policy declares, and the cache of fault objects (set by FaultInjector.__init__)."""

    relay: Relay
    declared: Declared | None
    _faults: dict[tuple[str, str], Fault]

    def fault(self, scenario: Scenario, rule: Rule) -> Fault:
        """The fault object for a rule, made once per scenario version."""
        key = (scenario.digest, rule.name)
        if key not in self._faults:
            self._faults[key] = FAULT_CLASSES[rule.fault.type](dict(rule.fault.params), scenario.seed, self.relay)
        return self._faults[key]

    def _match_rules(self, flow: http.HTTPFlow, ex: FlowExchange, forced: str | None) -> None:
        """Count this call for every rule that matches it, decide the first that fires, and note
        the fault that remembers this read's answer, if a matching rule's kind remembers reads."""
        request = flow.request
        host, port, path = request.host, request.port, request.path  # mitmproxy decodes these on every read
        kinds = (lambda: kinds_of(flow, ex, self.declared)) if uses_kinds(ex.scenario) else None
        for rule in ex.scenario.rules:
            if rule.name != forced and not request_matches(
                rule.match, ex.method, host, port, path, request.headers, ex.body_for_rules, kinds
            ):
                continue
            if rule.match.websocket is not None:  # it selects this session's messages, not the request
                ex.message_rules.append(rule)
                continue
            ex.matched.append(rule.name)
            index = ex.episode.calls[rule.name] = ex.episode.calls[rule.name] + 1
            if FAULT_KINDS[rule.fault.type].remembers_reads and REMEMBER_KEY not in flow.metadata:
                flow.metadata[REMEMBER_KEY] = self.fault(ex.scenario, rule)
            if ex.rule is None:
                self._decide(rule, index, ex, forced)

    def _decide(self, rule: Rule, index: int, ex: FlowExchange, forced: str | None) -> None:
        if forced:
            if rule.name == forced:
                ex.rule, ex.forced = rule, True
            return
        if not rule.when.admits(index, ex.episode.fired[rule.name]):
            return
        value = decide.decision_value(ex.scenario.seed, ex.episode.key, rule.name, index)
        if decide.fires(ex.scenario.probability(rule), value):
            ex.rule, ex.decision = rule, value

    def _touched(self, flow: http.HTTPFlow, ex: FlowExchange) -> list[str]:
        """The paths a write touches on its server: its own, and what the scenario's read-remembering
        faults say it names (stale_state's write_resources)."""
        faults = [self.fault(ex.scenario, rule) for rule in ex.scenario.rules if FAULT_KINDS[rule.fault.type].remembers_reads]
        return [flow.request.path.split("?")[0], *(path for fault in faults for path in fault.touched(ex))]
