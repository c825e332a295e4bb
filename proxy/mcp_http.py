"""MCP over Streamable HTTP, both ways: the messages a server sends on its event streams.

A server talks back on the SSE stream that answers a client's POST (progress and logging
notifications, elicitation/create, sampling/createMessage, roots/list before the final answer)
and on the standalone GET stream. The client answers a server's request with a POST of its own,
whose body is the JSON-RPC response with the request's id. As over stdio (proxy/stdio/), each of
the server's messages passes the fault injector as an exchange with direction "server to client"
(`Passage`, recorded under the server's MCP URL): a request paired with the client's answer (the
answer POST is taken here and not recorded apart), a notification alone, capped per episode. A
client may answer several at once, with one POST of a JSON array (JSON-RPC batching, in MCP
2025-03-26): each response pairs with its request by id, and the server gets the array of what
the injector made of them (an answer it never gets is left out; none left: the proxy says 202).

mitmproxy's stream function cannot wait, and a server's message may have to (a delay, the
injector's hooks), so a stream whose server's messages a fault may hold goes through the proxy's
loopback relay (proxy/relay.py), which hands each event to a `ServerStream` before the client
gets it; the stream still flows event by event. A stream no fault may hold — none of the
episode's rules can select a server's message at its URL (scenarios.selection), no fault acts on
the request itself, no replay — flows through mitmproxy alone, which costs each request two
parses and writes fewer: the stream function hands each event to its `ServerStream` as it goes on
(`seen`), and the message passes the injector just after, in order, recorded as the relay path
records it. The POST or GET exchange itself is recorded as ever, its upstream events as the
server sent them (the client's, when they differ, as the client's).

What a fault on a server's message does over HTTP, in the client's place:
  answered (jsonrpc_error, elicitation_declined)  -> the event is withheld and the proxy POSTs the
                                                     fault's answer to the server as the client would
  dropped (timeout then close)                    -> the event is withheld
  delay                                           -> the event comes late (or the client's answer
                                                     reaches the server late: at: response)
  response_lost                                   -> the client's answer POST gets 202 from the proxy
                                                     and never reaches the server
In replay the streams are the recordings (a GET stream's messages each wait for their turn:
injector.server_turn); the client's answer, checked against the recorded one by the replay's
response hook, is answered 202, and faults answer no one (no server runs).
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Awaitable
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urlsplit

import structlog
from faultproxy.proxy.attribution import PASS_THROUGH_KEY, episode_of
from faultproxy.proxy.auth import EpisodeGate
from faultproxy.proxy.exchange import EXCHANGE_KEY, FlowExchange
from faultproxy.proxy.faults import FAULT_CLASSES
from faultproxy.proxy.faults.lingering import REWRITE_KEY
from faultproxy.proxy.injector import FaultInjector
from faultproxy.proxy.sse import data_payloads
from faultproxy.proxy.stdio.messages import Message, answer_for, parse_line
from faultproxy.proxy.stdio.passage import SERVER_TO_CLIENT, Passage
from faultproxy.proxy.stream_tap import WATCH_KEY
from faultproxy.scenarios import Scenario
from faultproxy.scenarios.selection import may_select_server_messages
from mitmproxy import http

log = structlog.get_logger("faultproxy.mcp")

UNRECORDED_HEADER = "x-faultproxy-mcp-unrecorded"  # on a stream's upstream headers: notifications past the cap
SESSION_HEADER = "mcp-session-id"
_ANSWER_HEADERS = frozenset({"authorization", "cookie", SESSION_HEADER, "mcp-protocol-version"})
_ACCEPTED = 202  # what a Streamable HTTP server answers a POSTed response with
_SELECTS_KEPT = 1024  # McpStreams._may_hold's answers kept, per scenario and URL


def opens_stream(flow: http.HTTPFlow, ex: FlowExchange) -> bool:
    """May the server answer this request with an event stream it talks back on: a JSON-RPC
    request POSTed by a client that accepts SSE, or a session's standalone GET stream?"""
    if "text/event-stream" not in flow.request.headers.get("accept", ""):
        return False
    if ex.method == "GET":
        return SESSION_HEADER in flow.request.headers
    body = ex.body_json() if ex.method == "POST" else None
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0" and "method" in body and "id" in body


class McpStreams:
    """mitmproxy addon, after Attribution and before the FaultInjector: it takes the client's
    answers to servers' requests; the injector routes the streams here (`route`)."""

    def __init__(self, injector: FaultInjector, gate: EpisodeGate) -> None:
        self.injector = injector
        self.gate = gate
        self.asked: dict[tuple[str, str | None, str], Asked] = {}  # (episode, session, id) -> the request
        self._selects: dict[tuple[str, str, int, str], bool] = {}  # (scenario digest, URL) -> may_hold's rules part
        injector.mcp_streams = self

    async def route(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """Called by the injector as it forwards a request: a stream the server may talk back on
        goes through the relay, which hands its events to a ServerStream, when a fault may hold
        them; otherwise mitmproxy's stream function hands them on (WATCH_KEY)."""
        if not opens_stream(flow, ex):
            return
        stream = ServerStream(self, flow, ex)
        if self._may_hold(flow, ex):
            await self.injector.relay.route(flow, events=stream)
            ex.drop = lambda why: self.injector.relay.drop(flow, why)
        else:
            flow.metadata[WATCH_KEY] = stream

    def _may_hold(self, flow: http.HTTPFlow, ex: FlowExchange) -> bool:
        """May a fault hold this stream's events: a rule that may select the server's messages at
        its URL, a fault acting on the request itself (it may buffer or pace its stream, or
        rewrite it: lingering), a fault that may drop it later (server_restart: only the relay
        can end a stream mid-way, FlowExchange.drop), or a replay (the relay plays the recording)?"""
        if ex.rule is not None or REWRITE_KEY in flow.metadata or self.injector.replays:
            return True
        request = flow.request
        key = (ex.scenario.digest, request.host, request.port, request.path.split("?", 1)[0])
        if key not in self._selects:
            if len(self._selects) >= _SELECTS_KEPT:  # a monitor may see endless URLs (a session in the path)
                self._selects.clear()
            self._selects[key] = _selects_server_messages(ex.scenario, *key[1:]) or _drops_streams(ex.scenario)
        return self._selects[key]

    def response(self, flow: http.HTTPFlow) -> Awaitable[None] | None:
        """A stream mitmproxy handed on has ended: its server's messages finish passing the
        injector before the injector writes the exchange that carried them. (None, not a
        coroutine, for every other flow: mitmproxy awaits only what a hook returns.)"""
        stream = flow.metadata.pop(WATCH_KEY, None)
        return stream.settled() if stream is not None else None

    error = response  # the client left, or the upstream broke off: the same

    async def request(self, flow: http.HTTPFlow) -> None:
        if not self.asked or flow.response is not None or flow.request.method != "POST":
            return  # (nothing waits for an answer: no body is read)
        message = parse_line(flow.request.get_content(strict=False) or b"")
        if message.kind == "response":
            given = await self._answer(flow, message)
            if given is not _UNASKED:
                flow.metadata[PASS_THROUGH_KEY] = True  # recorded as the server's request's exchange, not apart
                _forward_one(flow, message.raw, given)
        elif message.kind == "batch":
            await self._answer_batch(flow, message.body)

    async def _answer_batch(self, flow: http.HTTPFlow, batch: list) -> None:
        """A batched answer POST (a JSON array, as JSON-RPC and MCP 2025-03-26 allow): each response
        is its server request's answer; the server gets what is left of the array (none: 202)."""
        left: list = []  # what the server gets
        paired = 0
        for element in batch:
            given = await self._answer(flow, _element(element))
            if given is _UNASKED:
                left.append(element)
                continue
            paired += 1
            if given is not None:
                left.append(json.loads(given))
        if not paired:
            return
        if paired == len(batch):  # each answer is its request's exchange: the POST is not recorded apart
            flow.metadata[PASS_THROUGH_KEY] = True
        if not left:
            flow.response = http.Response.make(_ACCEPTED, b"", {})
        elif left != batch:
            flow.request.content = json.dumps(left, separators=(",", ":"), ensure_ascii=False).encode()

    async def _answer(self, flow: http.HTTPFlow, message: Message) -> bytes | None | object:
        """What the server gets of the client's answer to one of its requests (None: nothing), or
        _UNASKED when it answers no request the proxy waits on."""
        if message.kind != "response":
            return _UNASKED
        key = (episode_of(flow), flow.request.headers.get(SESSION_HEADER), message.id_key)
        asked = self.asked.pop(key, None)
        if asked is None:
            return _UNASKED
        asked.stream.asking.discard(key)
        return await asked.answered(message.raw)


_UNASKED = object()  # McpStreams._answer: the response answers no request waiting here


def _element(element: object) -> Message:
    """One message of a batch, as parse_line reads a message of its own."""
    return parse_line(json.dumps(element, separators=(",", ":"), ensure_ascii=False).encode())


def _forward_one(answer: http.HTTPFlow, body: bytes, given: bytes | None) -> None:
    """A single answer POST: 202 from the proxy when the server gets nothing, else what it gets."""
    if given is None:
        answer.response = http.Response.make(_ACCEPTED, b"", {})
    elif given != body:
        answer.request.content = given


@dataclass
class Asked:
    """A server's request that reached the client; its exchange waits for the client's answer."""

    stream: ServerStream
    flow: http.HTTPFlow  # the request's exchange, through the injector
    message: Message

    async def answered(self, body: bytes) -> bytes | None:
        """The client's answer: the exchange's upstream answer. Returns what the server gets of it,
        as the injector made it (None: nothing, as after response_lost or in replay: no server)."""
        passage = self.stream.passage
        await passage.complete(self.flow, (200, [("content-type", "application/json")], body))
        final = passage.final(self.flow)
        if final is None or self.stream.supplied:
            return None
        status, _, given = final
        return body if given == body else answer_for(self.message.body["id"], status, given).rstrip(b"\n")


class ServerStream:
    """One relayed event stream (a POST's answer, or the GET stream) of an MCP session: each event
    carrying a server's request or notification passes the injector before the client sees it."""

    def __init__(self, streams: McpStreams, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        self.streams = streams
        self.ex = ex
        self.url = flow.request.url
        self.headers = {name: value for name, value in flow.request.headers.items() if name.lower() in _ANSWER_HEADERS}
        self.session = flow.request.headers.get(SESSION_HEADER)
        self.episode = episode_of(flow)
        self.target = (urlsplit(self.url).scheme, flow.request.host, flow.request.port, flow.request.path)
        # Event offsets count from the response's headers (formats.trace), not from the forward:
        # the verdict adds them to response_after_s to tell whether an answer reached the client.
        self.started = time.monotonic()
        self.shown: list[tuple[float, bytes]] = []  # the events the client got
        self.unrecorded = 0
        self.supplied = False
        self.asking: set[tuple[str, str | None, str]] = set()  # keys of its requests in streams.asked
        self._posting: set[asyncio.Task] = set()
        self._passing: asyncio.Future | None = None  # handed on by mitmproxy: the last message on its way

    @cached_property
    def passage(self) -> Passage:
        # Made for the first of the server's messages: most streams carry only the answer.
        return Passage(self.streams.injector, self.streams.gate, self.episode, "", self.target)

    def headers_sent(self) -> None:
        self.started = time.monotonic()

    async def event(self, event: bytes, supplied: bool) -> bytes | None:
        """Through the relay: the event the client gets (None: withheld)."""
        self.supplied = supplied
        offset = time.monotonic() - self.started
        self.ex.upstream_events.append((offset, event))
        message = _message(event)
        shown = await self._pass(event, message) if _from_server(message) else event
        if shown is None and self.ex.client_events is None:  # what the client gets differs from here on
            self.ex.client_events = self.shown
        if shown is not None:
            self.shown.append((time.monotonic() - self.started, shown))
        return shown

    def seen(self, event: bytes) -> None:
        """Handed on by mitmproxy (the stream tap, WATCH_KEY): a server's message passes the
        injector just after the client got it, each after the one before."""
        message = _message(event)
        if _from_server(message):
            self._passing = asyncio.ensure_future(self._pass_after(self._passing, event, message))

    async def _pass_after(self, before: asyncio.Future | None, event: bytes, message: Message) -> None:
        if before is not None:
            await before
        await self._pass(event, message)

    async def settled(self) -> None:
        """Handed on by mitmproxy, the stream has ended: its messages have passed, then `end`."""
        if self._passing is not None:
            await self._passing
        self.end()

    def end(self) -> None:
        """The stream ended: a live server's requests still unanswered wait no more (their
        exchanges are written when the episode ends, as ones whose client left; a recording's
        stream ends at once, before the client answers); the notifications only counted go on
        its upstream headers."""
        for key in () if self.supplied else self.asking:
            self.streams.asked.pop(key, None)
        if self.unrecorded and self.ex.upstream is not None:
            self.ex.upstream["headers"].append((UNRECORDED_HEADER, str(self.unrecorded)))

    async def _pass(self, event: bytes, message: Message) -> bytes | None:
        """A server's request or notification through the injector: the event the client gets."""
        if message.kind == "notification" and not self.passage.records(message.method):
            self.unrecorded += 1
            return event
        if self.supplied and self.ex.method == "GET":
            await self.streams.injector.server_turn(self.ex, message.raw)
        asks = message.kind == "request"
        flow, unchanged = await self.passage.begin(message.raw, SERVER_TO_CLIENT)
        ex = flow.metadata.get(EXCHANGE_KEY)
        if ex is not None and not ex.forwarded:  # a fault answered in the client's place, or dropped it
            answer = self.passage.final(flow)
            if asks and answer is not None and not self.supplied:
                self._answer_server(answer_for(message.body["id"], answer[0], answer[2]).rstrip(b"\n"))
            return None
        if not asks:
            if unchanged is not None:  # no answer comes to a notification
                await self.passage.complete(flow, (_ACCEPTED, [], b""))
        else:
            key = (self.episode, self.session, message.id_key)
            self.streams.asked[key] = Asked(self, flow, message)
            self.asking.add(key)
        return event

    def _answer_server(self, body: bytes) -> None:
        """POST an answer to the server as the client would; the stream goes on meanwhile."""
        headers = {**self.headers, "content-type": "application/json", "accept": "application/json, text/event-stream"}
        task = asyncio.create_task(self._post(headers, body))
        self._posting.add(task)
        task.add_done_callback(self._posting.discard)

    async def _post(self, headers: dict[str, str], body: bytes) -> None:
        try:
            status = await self.streams.injector.relay.post(self.url, headers, body)
        except Exception as error:  # noqa: BLE001 — the server is unreachable: it is as if the answer was lost
            log.warning("mcp_answer_not_delivered", url=self.url, error=str(error))
            return
        if status >= 300:
            log.warning("mcp_answer_refused", url=self.url, status=status)


def _selects_server_messages(scenario: Scenario, host: str, port: int, path: str) -> bool:
    return any(may_select_server_messages(rule.match, host, port, path) for rule in scenario.rules)


def _drops_streams(scenario: Scenario) -> bool:
    return any(FAULT_CLASSES[rule.fault.type].drops_streams for rule in scenario.rules)


def _from_server(message: Message | None) -> bool:
    """A server's request or notification (not the final answer, a comment or a priming event)?"""
    return message is not None and message.kind in ("request", "notification")


def _message(event: bytes) -> Message | None:
    """The JSON-RPC message an event's data carries, or None."""
    data = "\n".join(data_payloads([event]))
    return parse_line(data.encode()) if data else None
