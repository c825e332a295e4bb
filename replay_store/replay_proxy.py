"""Replay mode: the proxy answers from a frozen episode and never opens an upstream connection.

The agent (run by runner/replay_agents.py's Replayer) sends its traffic through the same FaultInjector with the entry's scenario, seed and episode key —
so the keyed-hash fault decisions come out the same — but where a live proxy would forward a
request, `ReplayInjector.supply_response` answers it with the recorded upstream response
(replay_matching.py says which). Response-phase faults (response_lost, partial_response, schema_drift,
delay) then act on that response exactly as they acted on the live one. A request with nothing
recorded gets a 599 naming it and the episode's cause becomes "diverged"; it is never
forwarded. A recorded WebSocket upgrade goes to the session server (replay_store.ws_replay),
which plays the recorded upstream's side of the session while the injector re-applies the
message faults. As a second guard, the `NoUpstream` addon refuses every server connection mitmproxy
would open and counts the attempts (there should be none).

The replayed trace is judged by evaluator.judging.judge.judge_episode with no end state (the tool
service is not there), so effects, idempotency, policy, retry etiquette, outcome and escalation
are judged; end_state is not.

A stdio MCP episode replays with no server: replay_store.stand_in sends the client the recorded
server's requests and notifications at their place, and a client's answer to one that differs
from the recorded answer is a divergence too.

An MCP server's messages over Streamable HTTP come in the recorded event streams, each through
the injector as the server's own (proxy/mcp_http.py): the same faults act on them, the client's
answer to a request that differs from the recorded one is a divergence, and those on the
standalone GET stream wait for the client message they followed in the recording.

What replay does not reproduce: upstream timing (responses come at once; SSE events in one
piece, after the same shaping). Timing that is the faults' own is: delays, slow_stream's pacing
(through the pacing relay), and a stream cut with `end: reset` breaks after the kept events.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
from faultproxy.formats.run_records import EpisodeRecord, Verdict
from faultproxy.proxy import decide
from faultproxy.proxy.faults import answer
from faultproxy.proxy.faults.base import RECORDED_FAULT_KEY
from faultproxy.proxy.exchange import EXCHANGE_KEY, FlowExchange
from faultproxy.proxy.injector import FaultInjector
from faultproxy.proxy.relay import Relay
from faultproxy.proxy.stdio.passage import SERVER_TO_CLIENT, STAND_IN_KEY
from faultproxy.proxy.sse import is_event_stream, map_json_data, split_events
from faultproxy.replay_store.har import Entry
from faultproxy.replay_store.replay_matching import Pool
from faultproxy.replay_store.ws_replay import Session, SessionServer
from faultproxy.replay_store.stand_in import answer_difference, server_messages_after, stand_in_session
from faultproxy.scenarios import Scenario
from faultproxy.tasks.request_class import Declared
from mitmproxy import http

log = structlog.get_logger("faultproxy.replay")

DIVERGED_STATUS = 599
DIVERGED_HEADER = "x-faultproxy-replay"
DEFAULT_WALL_S = 300.0  # a replay that hangs must not hang CI
NO_END_STATE = "replay: no tool service, so no end state; judged by effects"
UNJUDGEABLE = frozenset({"end_state"})  # checks replay cannot judge; expectations ignore them
# A placeholder scenario: the injector acts only on requests of an episode it knows, and each
# replayed episode brings its own scenario.
REPLAY_SCENARIO = Scenario("replay", "replay mode", "0", {}, (), {}, "", "")
RECORDED_ANSWER_KEY = "faultproxy_recorded_answer"  # flow.metadata: a replayed server request's recording


# --- the addons ---------------------------------------------------------------------------------


@dataclass
class EpisodeReplay:
    """What one replayed episode serves and what it saw."""

    decision_key: str  # the recorded episode key: fault decisions are keyed hashes of it
    pool: Pool
    forced: frozenset[tuple[str, int]] | None = None  # minimize: exactly these decisions fire
    served: list[dict[str, Any]] = field(default_factory=list)
    diverged: list[dict[str, Any]] = field(default_factory=list)
    progressed: asyncio.Event = field(default_factory=asyncio.Event)  # set as each recording is served

    def __post_init__(self) -> None:
        self.server_messages = server_messages_after(self.pool.recordings)  # stdio: what the server sent, when
        self.server_pool = Pool(self.pool.recordings, from_server=True)  # and the client's recorded answers


class ReplayInjector(FaultInjector):
    replays = True

    def __init__(self) -> None:
        super().__init__(REPLAY_SCENARIO)
        self.sessions = SessionServer()  # plays frozen WebSocket sessions (replay_store.ws_replay)
        self._lock = threading.Lock()
        self._staged: dict[str, EpisodeReplay] = {}
        self._active: dict[int, EpisodeReplay] = {}  # id(EpisodeState) -> its replay; proxy loop only

    def stage(self, attribution_key: str, replay: EpisodeReplay) -> None:
        """Hand over what an episode will serve; begin_episode (on the proxy's loop) takes it."""
        with self._lock:
            self._staged[attribution_key] = replay

    def begin_episode(self, key: str, scenario: Scenario | None = None,
                      rewrites: dict[str, str | int] | None = None, declared: Declared | None = None) -> None:
        with self._lock:
            replay = self._staged.pop(key, None)
        super().begin_episode(key, scenario, rewrites, declared)
        if replay is not None:
            state = self.episodes.peek(key)
            # Attribution uses a key of this replay's own (replays may run side by side), but
            # decisions, delays and request ids are keyed on the recorded episode.
            state.key = replay.decision_key
            replay.pool.redactor = replay.server_pool.redactor = self.redactor
            self._active[id(state)] = replay

    async def done(self) -> None:
        await super().done()
        await self.sessions.close()

    def end_episode(self, key: str):
        state = super().end_episode(key)
        if state is not None:
            self._active.pop(id(state), None)
        return state

    def _decide(self, rule, index: int, ex: FlowExchange, forced: str | None) -> None:
        replay = self._active.get(id(ex.episode))
        if forced or replay is None or replay.forced is None:
            super()._decide(rule, index, ex, forced)
            return
        if (rule.name, index) in replay.forced:
            ex.rule, ex.forced = rule, True
            ex.decision = decide.decision_value(ex.scenario.seed, ex.episode.key, rule.name, index)

    def _message_decision(self, ex: FlowExchange, rule, index: int) -> float | None:
        replay = self._active.get(id(ex.episode))
        if replay is None or replay.forced is None:
            return super()._message_decision(ex, rule, index)
        if (rule.name, index) not in replay.forced:
            return None
        return decide.decision_value(ex.scenario.seed, ex.episode.key, rule.name, index)

    async def supply_response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        replay = self._active.get(id(ex.episode))
        if replay is None:
            self._diverge(flow, ex, None, "no replay is running for this episode")
            return
        if ex.direction == SERVER_TO_CLIENT:
            self._to_client(flow, ex, replay)
            return
        match = replay.pool.take(ex.method, ex.url, ex.request_headers, ex.request_body)
        if match is None:
            why = replay.pool.explain_miss(ex.method, ex.url, ex.request_headers, ex.request_body)
            self._diverge(flow, ex, replay, why)
            return
        recorded = match.recorded
        replay.progressed.set()
        if "response" in recorded.truncated:  # serving the cut part would be a wrong answer, not a replay
            whole = recorded.truncated["response"].get("length")
            self._diverge(flow, ex, replay, f"recording #{recorded.seq}'s response body ({whole} bytes) was cut "
                                            "by the trace body limit when recorded; re-record with a larger limit")
            return
        if recorded.status == 101 and recorded.websocket is None:
            self._diverge(flow, ex, replay, f"recording #{recorded.seq} is a WebSocket upgrade frozen without its "
                                            "messages (before faultproxy kept them); freeze the episode again")
            return
        replay.served.append({"seq": ex.seq, "recorded": recorded.seq, "how": match.how})
        flow.metadata[RECORDED_FAULT_KEY] = recorded.fault  # a fault that met the upstream again (duplicate_delivery)
        if recorded.websocket is not None:
            await self._play_session(flow, ex, replay, recorded.websocket)
            return
        if match.how in ("exact", "endpoint") and recorded.seq in replay.server_messages:
            flow.metadata[STAND_IN_KEY] = [r.request_body or b"" for r in replay.server_messages[recorded.seq]]
        if recorded.status is None:  # forwarded, but the upstream never answered: neither does replay
            flow.kill()
            return
        response = recorded_response(recorded, ex.body_json())
        stand_in_session(response, flow.request, recorded)
        if self.relay.routes(flow):  # slow_stream sent it to the pacing relay: pace the recording there
            self.relay.supply(flow, response)
            return
        flow.response = response

    async def _play_session(self, flow: http.HTTPFlow, ex: FlowExchange, replay: EpisodeReplay,
                            recording: Mapping[str, Any]) -> None:
        """Hand the upgrade to the session server, which plays the recorded upstream; a client
        message the recording does not hold is a divergence of this exchange."""
        url = self.redactor.url(ex.url)

        def diverged(why: str) -> None:
            replay.diverged.append({"seq": ex.seq, "method": ex.method, "url": url, "why": why, "websocket": True})
            log.warning("replay diverged", episode=ex.episode.key, seq=ex.seq, url=url, why=why)

        await self.sessions.route(flow, Session(recording, self.redactor, self.limits.trace_body_bytes, diverged))

    def _to_client(self, flow: http.HTTPFlow, ex: FlowExchange, replay: EpisodeReplay) -> None:
        """A recorded server's message the stand-in sends: forwarded to the client (left unanswered
        here), its recorded answer kept to check the client's against."""
        match = replay.server_pool.take(ex.method, ex.url, ex.request_headers, ex.request_body)
        if match is None:  # the server got a fault's answer when recorded; the client is asked now
            self._note_divergence(ex, replay, "the recorded server never asked the client this "
                                              "(a fault answered in its place)")
            return
        replay.served.append({"seq": ex.seq, "recorded": match.recorded.seq, "how": match.how})
        flow.metadata[RECORDED_ANSWER_KEY] = match.recorded
        fault = match.recorded.fault
        if fault and (ex.rule is None or ex.rule.name != fault.get("rule")):  # minimize took it out
            self._note_divergence(ex, replay, f"the recorded {fault.get('type')} ({fault.get('rule')}) on it did not "
                                              "fire: the recorded server got another answer than it will now")

    async def response(self, flow: http.HTTPFlow) -> None:
        recorded = flow.metadata.pop(RECORDED_ANSWER_KEY, None)
        ex = flow.metadata.get(EXCHANGE_KEY)
        if recorded is not None and ex is not None and ex.upstream is not None and recorded.status == 200:
            # the client's answer, as the server would get it, before a fault acts on it
            why = answer_difference(recorded, flow.response.get_content(strict=False) or b"", self.redactor)
            if why:
                self._note_divergence(ex, self._active.get(id(ex.episode)), f"{why} (recording #{recorded.seq})")
        await super().response(flow)

    async def server_turn(self, ex: FlowExchange, message: bytes) -> None:
        """A recorded server's message on the stream `ex` (MCP's standalone GET stream, which
        opened before them) waits until the client message that preceded it in the recording
        has been served, so it comes when it came."""
        replay = self._active.get(id(ex.episode))
        before = replay.server_pool.client_before(ex.url, message) if replay is not None else None
        while before is not None and before not in replay.pool.served:
            replay.progressed.clear()
            await replay.progressed.wait()

    def _diverge(self, flow: http.HTTPFlow, ex: FlowExchange, replay: EpisodeReplay | None, why: str) -> None:
        url = self.redactor.url(ex.url)
        message = f"faultproxy replay: no recorded response for {ex.method} {url} ({why}); it was not forwarded"
        body = json.dumps({"error": {"type": "faultproxy_replay_diverged", "code": "diverged", "message": message}})
        answer(flow, ex, DIVERGED_STATUS, {"content-type": "application/json", DIVERGED_HEADER: "diverged",
                                           "x-should-retry": "false"}, body.encode())
        self._note_divergence(ex, replay, why)

    def _note_divergence(self, ex: FlowExchange, replay: EpisodeReplay | None, why: str) -> None:
        url = self.redactor.url(ex.url)
        if replay is not None:
            replay.diverged.append({"seq": ex.seq, "method": ex.method, "url": url, "why": why})
        log.warning("replay diverged", episode=ex.episode.key, seq=ex.seq, method=ex.method, url=url, why=why)


def recorded_response(recorded, request_json: Any) -> http.Response:
    """The recorded upstream response as mitmproxy's, framed afresh (Content-Length, encoding)."""
    pairs = [(k, v) for k, v in recorded.response_headers if k.lower() not in ("content-length", "transfer-encoding")]
    stream = is_event_stream(next((v for k, v in pairs if k.lower() == "content-type"), None))
    if stream:  # events are served as identity, so the stream tap sees them whole (they were stored decoded)
        pairs = [(k, v) for k, v in pairs if k.lower() != "content-encoding"]
    headers = http.Headers([(k.encode("utf-8", "surrogateescape"), v.encode("utf-8", "surrogateescape"))
                            for k, v in pairs])
    now = time.time()
    response = http.Response(b"HTTP/1.1", recorded.status, (recorded.reason or "").encode(), headers, b"", None,
                             now, now)
    response.content = _same_rpc_id(recorded.response_body or b"", request_json, stream)
    return response


def _same_rpc_id(body: bytes, request_json: Any, stream: bool) -> bytes:
    """A JSON-RPC answer carries the id of the request it answers, whatever id was recorded."""
    if not (isinstance(request_json, dict) and request_json.get("jsonrpc") == "2.0" and "id" in request_json):
        return body
    rpc_id = request_json["id"]

    def fix(document: Any) -> Any:  # answers only: a server's own request on the stream keeps its id
        if isinstance(document, dict) and document.get("jsonrpc") == "2.0" and "id" in document \
                and "method" not in document:
            return {**document, "id": rpc_id}
        return document

    if stream:
        return b"".join(map_json_data(event, fix) for event in split_events(body))
    try:
        document = json.loads(body)
    except ValueError:
        return body
    fixed = fix(document)
    return body if fixed is document else json.dumps(fixed, separators=(",", ":")).encode()


class NoUpstream:
    """Refuses every upstream connection mitmproxy is about to open, and counts the attempts;
    the proxy's own loopback servers (the pacing relay and the session server, serving
    recordings) excepted."""

    def __init__(self, relay: Relay, sessions: SessionServer) -> None:
        self.relay, self.sessions = relay, sessions
        self.attempts: list[str] = []

    def server_connect(self, data) -> None:
        address = data.server.address
        if address and address[0] == "127.0.0.1" and address[1] in (self.relay.port, self.sessions.port):
            return
        self.attempts.append(f"{address[0]}:{address[1]}" if address else "?")
        data.server.error = "faultproxy replay: upstream connections are disabled"
        log.error("replay refused an upstream connection", address=self.attempts[-1])


# --- replaying episodes --------------------------------------------------------------------------


@dataclass
class ReplayOptions:
    """How `replay` runs a store's entries: the agent, its environment, where traces go, limits."""

    command: list[str] | None = None  # None: each entry's own command
    env: dict[str, str] = field(default_factory=dict)  # on top of the environment and the entry's env
    out: Path | None = None  # traces and agent files; None: a temporary folder, removed on close
    upstreams: dict[str, str] = field(default_factory=dict)  # reverse-mode names; default: the entries' own
    secret_env: list[str] = field(default_factory=list)
    budget_s: float | None = None
    parallel: int = 1


@dataclass
class ReplayResult:
    """One replayed entry: its verdict, the requests that diverged from the recording, the
    recordings it served or left unserved, and upstream connections the proxy refused."""

    entry: Entry
    record: EpisodeRecord
    verdict: Verdict
    diverged: list[dict[str, Any]]
    served: list[dict[str, Any]]
    unserved: list[int]
    blocked: list[str]
    trace: Path
    forced: list[tuple[str, int]] | None = None

    @property
    def failed(self) -> list[str]:
        """Failed checks that replay can judge."""
        return [c["name"] for c in self.verdict["failed"] if c["name"] not in UNJUDGEABLE]

    @property
    def status(self) -> str:
        """pass | fail | incomplete, as far as replay can judge (end_state left out)."""
        if self.verdict["status"] == "incomplete":
            return "incomplete"
        return "fail" if self.failed else "pass"

    def fails_like(self, checks: Iterable[str], exactly: bool = True) -> bool:
        """Failed, without diverging, on exactly `checks` (or on at least them when not `exactly`)."""
        wanted = set(checks)
        got = set(self.failed)
        return self.status == "fail" and not self.diverged and (got == wanted if exactly else wanted <= got)

    @property
    def meets_expectation(self) -> bool:
        """The replay shows what the entry expects (explain() has nothing to say)."""
        return self.explain() is None

    def explain(self) -> str | None:
        """None when the replay shows what the entry expects; else why not, in one line."""
        if self.blocked:
            return f"the proxy refused {len(self.blocked)} upstream connection(s): {', '.join(self.blocked[:3])}"
        if self.diverged:
            first = self.diverged[0]
            return (f"diverged: {len(self.diverged)} request(s) not in the recording, first {_request(first)}"
                    f" ({first['why']})")
        if self.status == "incomplete":
            return f"incomplete ({self.verdict.get('cause')})"
        expect = self.entry.expect
        if expect == "pass":
            return None if self.status == "pass" else f"expected pass, got fail ({', '.join(self.failed)})"
        wanted = self.entry.expect_failed
        if self.status == "pass":
            return f"expected fail ({', '.join(wanted)}), got pass: the failure no longer reproduces"
        if set(self.failed) != set(wanted):
            return f"expected fail ({', '.join(wanted)}), failed differently ({', '.join(self.failed)})"
        return None

    def to_json(self) -> dict[str, Any]:
        """This entry's result as `faultproxy replay --json FILE` writes it."""
        return {"entry": str(self.entry.path), "name": self.entry.name, "episode": self.entry.key,
                "expect": self.entry.expect, "expect_failed": self.entry.expect_failed,
                "status": self.status, "failed": self.failed, "meets_expectation": self.meets_expectation,
                "why": self.explain(), "diverged": self.diverged, "served": self.served, "unserved": self.unserved,
                "blocked_connections": self.blocked, "forced": self.forced, "trace": str(self.trace),
                "duration_s": self.record.get("duration_s"), "verdict": self.verdict}


def _request(d: Mapping[str, Any]) -> str:
    # a session that diverged by a message names it: the upgrade itself was in the recording
    return f"#{d['seq']} {d['method']} {d['url']}" + (f" ({d['why']})" if d.get("websocket") else "")
