"""The fault injector: match, decide, inject, record — one mitmproxy addon.

Per request: every rule whose match block selects it advances its call counter for the
episode; the first rule whose `when` admits this call and whose keyed-hash draw falls under its
probability is applied. Every exchange, faulted or not, is appended to the episode's trace,
including those still held when the episode ends (settle_episode, end_episode): what the
upstream answered is a fact even if the client left before hearing it. An error the proxy met
reaching the upstream that no fault made is marked `infra_error` in the line.
"""

from __future__ import annotations

import asyncio
import collections.abc
import time
from pathlib import Path

import structlog
from faultproxy.formats.errors import UserError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import SERVER_TO_CLIENT, trace_time, turn_record
from faultproxy.proxy import decide
from faultproxy.proxy.attribution import PASS_THROUGH_KEY, episode_of
from faultproxy.proxy.episodes import EpisodeLimits, Episodes, EpisodeState
from faultproxy.proxy.exchange import EXCHANGE_KEY, FlowExchange
from faultproxy.proxy.faults import FAULT_CLASSES, SUPPLIED_KEY, Fault, answer
from faultproxy.proxy.faults.lingering import REWRITE_KEY, answer_lingering, note_session
from faultproxy.scenarios.selection import request_matches
from faultproxy.proxy.models import rewrite_request
from faultproxy.proxy.perturb import perturb_response
from faultproxy.proxy.relay import Relay
from faultproxy.proxy.flow_kinds import is_plumbing, kinds_of, learn_tools, remembers_reads, uses_kinds, writes
from faultproxy.proxy.sse import is_event_stream, split_events
from faultproxy.proxy.stream_tap import WATCH_KEY, StreamTap, pump
from faultproxy.proxy.answer_tokens import tokens_used
from faultproxy.proxy.websocket import open_session
from faultproxy.proxy.websocket_hooks import WebSocketHooks
from faultproxy.scenarios import FAULT_KINDS, Rule, Scenario, ScenarioError, load_scenario, parse_params
from faultproxy.tasks.request_class import Declared
from mitmproxy import ctx, exceptions, http
from mitmproxy import flow as flow_module

FORCE_HEADER = "x-faultproxy-force"
DIRECTION_KEY = "faultproxy_direction"  # flow.metadata: who sent the request, when not simply the client (stdio MCP)
REMEMBER_KEY = "faultproxy_remember"  # flow.metadata: the fault that keeps this read's answer, if any
SETTLE_S = 5.0  # at an episode's end, how long exchanges still waiting for their upstream are given
_SETTLE_POLL_S = 0.05
_CLIENT_GONE_ERROR = "Client disconnected"  # mitmproxy's message when the client closed first

log = structlog.get_logger("faultproxy")


class FaultInjector(WebSocketHooks):
    # Answers from recordings, never an upstream (replay_store.replay_proxy sets it): the stdio lane
    # tells a `faultproxy mcp` shim so, and the shim starts no server.
    replays = False

    def __init__(self, scenario: Scenario | None = None, limits: EpisodeLimits | None = None) -> None:
        self.scenario = scenario
        self.limits = limits or EpisodeLimits()
        self.episodes = Episodes(None, self.limits)
        self.redactor = Redactor()
        self.relay = Relay()
        self.mcp_streams = None  # proxy.mcp_http.McpStreams, when added: MCP servers' event streams pass it
        self.declared: Declared | None = None  # what a policy declares, for episodes that bring none (a monitor)
        self._faults: dict[tuple[str, str], Fault] = {}

    # -- configuration ---------------------------------------------------------------------

    def load(self, loader) -> None:
        loader.add_option("faultproxy_scenario", str, "", "Scenario file, or the name of a bundled one.")
        loader.add_option("faultproxy_params", collections.abc.Sequence[str], [], "Scenario param overrides, NAME=VALUE.")
        loader.add_option("faultproxy_trace_dir", str, "", "Folder for flows/<episode>.jsonl traces; empty: none.")
        loader.add_option(
            "faultproxy_secret_env", collections.abc.Sequence[str], [],
            "Names of environment variables whose values are redacted from traces.",
        )

    def configure(self, updated: set[str]) -> None:
        if updated & {"faultproxy_scenario", "faultproxy_params"} and ctx.options.faultproxy_scenario:
            try:
                self.scenario = load_scenario(ctx.options.faultproxy_scenario, parse_params(ctx.options.faultproxy_params))
            except (ScenarioError, ValueError) as error:
                raise exceptions.OptionsError(str(error)) from None
        if "faultproxy_trace_dir" in updated:
            self.episodes.end_all()
            trace_dir = ctx.options.faultproxy_trace_dir
            self.episodes = Episodes(Path(trace_dir) if trace_dir else None, self.limits)
        if "faultproxy_secret_env" in updated:
            try:
                self.redactor = Redactor.from_env(ctx.options.faultproxy_secret_env)
            except UserError as error:
                raise exceptions.OptionsError(str(error)) from None

    def fault(self, scenario: Scenario, rule: Rule) -> Fault:
        """The fault object for a rule, made once per scenario version."""
        key = (scenario.digest, rule.name)
        if key not in self._faults:
            self._faults[key] = FAULT_CLASSES[rule.fault.type](dict(rule.fault.params), scenario.seed, self.relay)
        return self._faults[key]

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
        while any(_awaits_upstream(ex) for ex in state.inflight.values()) and time.monotonic() < deadline:
            await asyncio.sleep(_SETTLE_POLL_S)
        for ex in state.inflight.values():
            if _awaits_upstream(ex):
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

    # -- hooks -----------------------------------------------------------------------------

    async def request(self, flow: http.HTTPFlow) -> None:
        if flow.response or self.scenario is None or PASS_THROUGH_KEY in flow.metadata:
            return  # already answered (e.g. an unknown upstream), or to pass untouched (proxy.monitor_sessions)
        ex = self._open_exchange(flow)
        forced = flow.request.headers.pop(FORCE_HEADER) if FORCE_HEADER in flow.request.headers else None
        self._match_rules(flow, ex, forced)
        if forced and ex.rule is None:
            answer(flow, ex, 400, {"content-type": "text/plain"}, f"faultproxy: no rule named {forced!r}\n".encode())
            return
        if ex.episode.lingering and answer_lingering(flow, ex):
            ex.rule, ex.decision, ex.forced = None, None, False  # an earlier fault's answer: no fault of this call's own
            return
        if remembers_reads(ex.scenario) and writes(flow, ex, self.declared):
            ex.episode.note_write(ex.seq, ex.host(), self._touched(flow, ex))
        if ex.rule:
            ex.episode.fired[ex.rule.name] += 1
            await self.fault(ex.scenario, ex.rule).request(flow, ex)
        if ex.written:  # the episode ended while the fault held the request: it must not reach the upstream now
            if flow.killable:
                flow.kill()
            return
        if flow.response is None and flow.error is None:  # no fault answered, held or dropped it
            ex.forwarded = True
            if self.mcp_streams is not None:
                await self.mcp_streams.route(flow, ex)
            await self.supply_response(flow, ex)
            flow.metadata[SUPPLIED_KEY] = flow.response is not None

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

    def _touched(self, flow: http.HTTPFlow, ex: FlowExchange) -> list[str]:
        """The paths a write touches on its server: its own, and what the scenario's read-remembering
        faults say it names (stale_state's write_resources)."""
        faults = [self.fault(ex.scenario, rule) for rule in ex.scenario.rules if FAULT_KINDS[rule.fault.type].remembers_reads]
        return [flow.request.path.split("?")[0], *(path for fault in faults for path in fault.touched(ex))]

    async def supply_response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """Hook point: set `flow.response` to answer as the upstream, with no network (replay).

        Called once the request's fault, if any, has acted and still left it to be forwarded.
        A response set here is treated exactly as one from the network: it is recorded as the
        upstream's, event streams run through the same stream tap, and response-phase faults
        apply. Leaving `flow.response` unset forwards the request, as a live proxy does.
        """

    async def server_turn(self, ex: FlowExchange, message: bytes) -> None:
        """Hook point: a server's message on an event stream the proxy itself serves (`ex`'s, in
        replay) waits here until it is its turn; live, it is at once."""

    async def responseheaders(self, flow: http.HTTPFlow) -> None:
        ex = flow.metadata.get(EXCHANGE_KEY)
        if ex is None or ex.outcome != "response":
            # mitmproxy runs this hook for answers set in the request hook too: an answer the
            # proxy made (an injected error, a stale read) is not the upstream's.
            return
        ex.response_started = time.time()
        ex.upstream = {"status": flow.response.status_code, "headers": header_pairs(flow.response.headers)}
        note_session(flow, ex)  # an MCP session the server gave, which its restart ends (lingering)
        fault = self.fault(ex.scenario, ex.rule) if ex.rule else None
        buffered = (fault and fault.buffers_events()) or REWRITE_KEY in flow.metadata
        if is_event_stream(flow.response.headers.get("content-type")) and not buffered:
            # Through the relay an MCP stream's events are recorded as the server sent them there.
            flow.response.stream = StreamTap(ex, fault.event_shaper(ex) if fault else None,
                                             record_upstream=not self.relay.hands_events(flow),
                                             watch=flow.metadata.get(WATCH_KEY))
        if fault:
            await fault.responseheaders(flow, ex)
        if flow.response.stream and flow.metadata.get(SUPPLIED_KEY):
            # mitmproxy never streams a response set in the request hook; run its body through
            # the tap here, so events are recorded and shaped as they would be off the network.
            pump(flow)

    async def response(self, flow: http.HTTPFlow) -> None:
        ex = flow.metadata.get(EXCHANGE_KEY)
        if ex is None:
            return
        if ex.upstream is not None:
            self._take_upstream_body(flow, ex)
            if REWRITE_KEY in flow.metadata:  # what an earlier fault left changes this answer (lingering)
                flow.metadata[REWRITE_KEY](flow, ex)
        if ex.rule:
            await self.fault(ex.scenario, ex.rule).response(flow, ex)
        elif ex.upstream is not None and not flow.response.stream:
            self._perturb(flow, ex)
        if flow.websocket is not None and not ex.written:
            # A WebSocket session follows: the line is written when it ends, with its messages.
            ex.websocket = open_session(tuple(ex.message_rules), flow.request.path)
            return
        self._finish(flow, ex)

    def _perturb(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """epsilon: with that probability, answer with equivalent JSON (key order, layout, number
        forms) — a perturbation that must not change the outcome, unlike a fault."""
        epsilon = ex.scenario.params.get("epsilon", 0.0)
        seed, key = ex.scenario.seed, ex.episode.key
        if epsilon <= 0 or not decide.fires(epsilon, decide.decision_value(seed, key, "epsilon", ex.seq, "perturb")):
            return
        form = decide.decision_value(seed, key, "epsilon", ex.seq, "perturb-form")  # independent of the firing draw
        result = perturb_response(flow.response.headers.get("content-type"), flow.response.get_content(strict=False), form)
        if result:
            flow.response.content = result.body  # re-encodes with the response's Content-Encoding
            ex.perturbation = list(result.changes)

    def error(self, flow: http.HTTPFlow) -> None:
        ex = flow.metadata.get(EXCHANGE_KEY)
        if ex is None:
            return
        ex.error = self.relay.failure(flow) or (flow.error.msg if flow.error else None)  # the relay's reason first
        if ex.outcome == "response":
            ex.outcome = "error"
        if ex.outcome == "error" and ex.error and ex.error.startswith(_CLIENT_GONE_ERROR):
            self._client_left(ex)
        if REMEMBER_KEY in flow.metadata and ex.upstream is not None:  # a client may leave once it has its answer
            flow.metadata[REMEMBER_KEY].remember(flow, ex)
        ex.infra_error = infrastructure_error(ex)
        self._finish(flow, ex)

    # -- steps -----------------------------------------------------------------------------

    def _open_exchange(self, flow: http.HTTPFlow) -> FlowExchange:
        episode = self.episodes.get(episode_of(flow))
        if episode.rewrites:
            rewrite_request(flow.request, episode.rewrites)  # before anything reads or records the request
        raw = flow.request.get_content(strict=False)
        ex = FlowExchange(
            episode=episode,
            seq=episode.next_seq(),
            method=flow.request.method,
            url=flow.request.url,
            request_headers=header_pairs(flow.request.headers),
            request_body=raw or None,
            scenario=episode.scenario or self.scenario,
            direction=flow.metadata.get(DIRECTION_KEY),
        )
        flow.metadata[EXCHANGE_KEY] = ex
        episode.inflight[ex.seq] = ex
        if ex.direction == SERVER_TO_CLIENT:
            episode.from_server += 1
        elif is_plumbing(flow.request, ex):
            episode.plumbing += 1
        return ex

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

    def _take_upstream_body(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if REMEMBER_KEY in flow.metadata:  # a streamed answer too: its events are kept
            flow.metadata[REMEMBER_KEY].remember(flow, ex)
        if flow.response.stream:
            ex.tokens = tokens_used(flow.request.path, None, (e for _, e in ex.upstream_events))
            return
        ex.upstream_body = flow.response.get_content(strict=False)
        if is_event_stream(flow.response.headers.get("content-type")):
            ex.upstream_events = [(0.0, e) for e in split_events(ex.upstream_body)]
            ex.tokens = tokens_used(flow.request.path, None, (e for _, e in ex.upstream_events))
        else:
            ex.tokens = tokens_used(flow.request.path, ex.upstream_body)

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
        if _awaits_upstream(ex) and ex.cut_short is None:
            ex.cut_short = "the episode ended before the upstream answered"
        elif ex.rule and not ex.delivered:
            ex.deliver("the client gave up while the fault held the exchange")
        ex.outcome, ex.client_status = "client_gone", None
        self._write(ex)

    def _client_left(self, ex: FlowExchange) -> None:
        """The client closed its connection first (mitmproxy then abandons the upstream request)."""
        ex.outcome, ex.gone_after_s = "client_gone", trace_time(time.time() - ex.started)
        if ex.forwarded and ex.upstream is None:
            ex.cut_short = "the client left before the upstream answered; the answer was not awaited"

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


def header_pairs(headers: http.Headers) -> list[tuple[str, str]]:
    """Headers as sent, repeated ones kept apart (cheaper than .items(), which folds them)."""
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.fields]


def _awaits_upstream(ex: FlowExchange) -> bool:
    return ex.forwarded and ex.upstream is None and ex.error is None and not ex.written


def infrastructure_error(ex: FlowExchange) -> str | None:
    """The reason, when an exchange's error is the proxy's own failure to reach or hear the
    upstream (refused, DNS, TLS verification, a reset) rather than a fault's doing or the
    client's leaving. An upstream that answered and then broke its answer off is heard: what
    the agent does next is judged (the commit is unknown: evaluator.traces.ambiguity)."""
    message = ex.error or ""
    if not ex.forwarded or ex.outcome != "error" or not message or ex.upstream is not None:
        return None
    if message == flow_module.Error.KILLED_MESSAGE or message.startswith(_CLIENT_GONE_ERROR):
        return None
    return message
