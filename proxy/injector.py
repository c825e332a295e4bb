"""The fault injector: match, decide, inject, record — one mitmproxy addon.

Its hooks carry each request through: the exchange is opened, the scenario's rules matched and
their faults decided (proxy.rule_matching), the fault that fired applied at each phase, and the
exchange's line written to its episode's trace (proxy.episode_lifecycle). An error the proxy met
reaching the upstream that no fault made is marked `infra_error` in the line (proxy.exchange_end).
"""

from __future__ import annotations

import collections.abc
import time
from pathlib import Path

from faultproxy.formats.errors import UserError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import SERVER_TO_CLIENT
from faultproxy.proxy import decide
from faultproxy.proxy.attribution import PASS_THROUGH_KEY, episode_of
from faultproxy.proxy.episode_lifecycle import EpisodeLifecycle
from faultproxy.proxy.episodes import EpisodeLimits, Episodes
from faultproxy.proxy.exchange import EXCHANGE_KEY, FlowExchange
from faultproxy.proxy.exchange_end import CLIENT_GONE_ERROR, client_left, header_pairs, infrastructure_error
from faultproxy.proxy.faults import SUPPLIED_KEY, Fault, answer
from faultproxy.proxy.faults.lingering import REWRITE_KEY, answer_lingering, note_session
from faultproxy.proxy.models import rewrite_request
from faultproxy.proxy.perturb import perturb_response
from faultproxy.proxy.relay import Relay
from faultproxy.proxy.rule_matching import REMEMBER_KEY, RuleMatching
from faultproxy.proxy.flow_kinds import is_plumbing, remembers_reads, writes
from faultproxy.proxy.sse import is_event_stream, split_events
from faultproxy.proxy.stream_tap import WATCH_KEY, StreamTap, pump
from faultproxy.proxy.answer_tokens import tokens_used
from faultproxy.proxy.websocket import open_session
from faultproxy.proxy.websocket_hooks import WebSocketHooks
from faultproxy.scenarios import Scenario, ScenarioError, load_scenario, parse_params
from faultproxy.tasks.request_class import Declared
from mitmproxy import ctx, exceptions, http

FORCE_HEADER = "x-faultproxy-force"
DIRECTION_KEY = "faultproxy_direction"  # flow.metadata: who sent the request, when not simply the client (stdio MCP)


class FaultInjector(RuleMatching, EpisodeLifecycle, WebSocketHooks):
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
        if ex.outcome == "error" and ex.error and ex.error.startswith(CLIENT_GONE_ERROR):
            client_left(ex)
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
