"""One episode as a tree of spans to export: the root carries the verdict and the judged findings,
one child per exchange of the trace (model calls as GenAI inference spans, MCP calls as MCP
client spans, other tool calls as HTTP client spans; a live WebSocket session's turns as chat
spans and its function calls as execute_tool spans; a conversation's turns as INTERNAL spans
named for their direction, "user to agent" or "agent to user", the text only with content), each injected fault an event on the
exchange it hit (on a session's turn or call, every fault on its messages, at the message's
time). Times are the proxy's, from the trace; nothing here talks to a collector
(otel/export.py sends what this plans), so it is as testable as the evaluator.

Every string that leaves goes through the run's Redactor once more (traces on disk are redacted
already; this also covers a record or trace written before a secret was configured).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.traces import TracedExchange, Turn, parse_trace, parse_turns
from faultproxy.formats.model_answers import dig
from faultproxy.formats.model_apis import LiveApi, detect_api
from faultproxy.formats.redact import MASK, Redactor
from faultproxy.formats.trace import AGENT_TO_USER, USER_TO_AGENT
from faultproxy.proxy.stdio.route import STDIO_SUFFIX
from faultproxy.otel import genai as G
from faultproxy.otel import names as N
from faultproxy.tasks.task_model import SEVERITY_RANK

_TRACEPARENT = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}")
_CONTENT = frozenset({N.INPUT_MESSAGES, N.OUTPUT_MESSAGES, N.SYSTEM_INSTRUCTIONS, N.TOOL_CALL_ARGUMENTS, N.TURN_TEXT,
                      N.TOOL_CALL_RESULT})


@dataclass
class SpanPlan:
    """A span to export: times in unix seconds; `error` set means status ERROR with that text."""

    name: str
    client: bool  # kind CLIENT, else INTERNAL
    start: float
    end: float
    attributes: dict[str, Any]
    events: list[tuple[str, float, dict[str, Any]]] = field(default_factory=list)
    error: str | None = None
    children: list[SpanPlan] = field(default_factory=list)
    parent: tuple[int, int] | None = None  # (trace id, span id) of a span elsewhere this one continues

    def count(self) -> int:
        return 1 + sum(child.count() for child in self.children)


def episode_spans(record: Mapping[str, Any], trace: Iterable[Mapping[str, Any]], redactor: Redactor,
                  content: bool = False, extra: Mapping[str, Any] | None = None) -> SpanPlan:
    """The span tree of one judged episode (its log line) and its trace lines."""
    lines = list(trace)
    exchanges = parse_trace(lines)
    key = str(record.get("key") or "")
    turns = parse_turns(lines)
    children = [exchange_span(ex, key, content) for ex in exchanges]
    if turns:  # in the order the proxy numbered them: what the user said, then what the agent did about it
        children = sorted([*children, *(turn_span(t, content) for t in turns)], key=lambda span: span.attributes[N.SEQ])
    root = _root(record, children, {**({N.TURNS: len(turns)} if turns else {}), **(extra or {})})
    root.parent = agent_parent(exchanges)
    _redact(root, redactor)
    return root


def agent_parent(exchanges: Iterable[TracedExchange]) -> tuple[int, int] | None:
    """The W3C trace context the agent sent first (`traceparent`), if any: the episode's root
    continues that trace, so an instrumented agent's own spans and faultproxy's meet in one."""
    for ex in exchanges:
        for value in ex.headers.get("traceparent", ()):
            found = _TRACEPARENT.fullmatch(value.strip().lower())
            if found and found.group(1).strip("0") and found.group(2).strip("0"):
                return int(found.group(1), 16), int(found.group(2), 16)
    return None


def _root(record: Mapping[str, Any], children: list[SpanPlan], extra: dict[str, Any]) -> SpanPlan:
    verdict = record.get("verdict") or {}
    started = float(record.get("started") or 0.0)
    start = min([started, *(c.start for c in children)]) if started else min((c.start for c in children), default=0.0)
    end = max([started + float(record.get("duration_s") or 0.0), *(c.end for c in children)])
    failed = [c for c in verdict.get("failed") or () if isinstance(c, Mapping)]
    status = verdict.get("status") or ("pass" if record.get("completed") else "incomplete")
    attributes = {N.EPISODE: record.get("key"), N.TASK: record.get("task_id"), N.TRIAL: record.get("trial"),
                  N.VARIANT: record.get("variant"), N.GRID_LABEL: record.get("grid_label") or None,
                  N.MODEL: record.get("model"), N.VERDICT: status, N.FAILED_CHECKS: [str(c.get("name")) for c in failed],
                  N.SEVERITY: _highest([c.get("severity") for c in failed]), N.CAUSE: verdict.get("cause"),
                  N.CAUSE_DETAIL: verdict.get("cause_detail") or record.get("cause_detail"),
                  N.FAULT_COUNT: len(verdict.get("faults") or ()), N.REPLAY_OF: record.get("replay_of"), **extra}
    events = [(N.FINDING_EVENT, end, {N.CHECK_NAME: c.get("name"), N.CHECK_SEVERITY: c.get("severity"),
                                      N.CHECK_DETAIL: c.get("detail")}) for c in failed]
    error = None
    if status != "pass":
        error = f"{status}: " + (", ".join(str(c.get("name")) for c in failed) or str(verdict.get("cause") or ""))
    return SpanPlan(f"episode {record.get('key')}", False, start, end, _clean(attributes), _clean_events(events),
                    error, children)


def _highest(severities: list[Any]) -> str | None:
    known = [s for s in severities if s in SEVERITY_RANK]
    return max(known, key=SEVERITY_RANK.__getitem__) if known else None


def exchange_span(ex: TracedExchange, episode: str, content: bool) -> SpanPlan:
    """The span of one traced exchange, with its fault and perturbation as events."""
    headers = {name: values[0] for name, values in ex.headers.items()}
    api = detect_api(ex.host, ex.route, headers)
    if ex.session_kind is not None:
        span = _session_span(ex, content)
    elif api is not None:
        span = _model_span(ex, api, content)
    elif ex.rpc_method is not None:
        span = _mcp_span(ex, content)
    else:
        span = SpanPlan(ex.endpoint(episode), True, ex.started, ex.started + ex.duration_s, _http_attributes(ex))
    span.attributes.update({N.SEQ: ex.seq, N.OUTCOME: ex.client_outcome, N.FORWARDED: ex.forwarded})
    error = span.attributes.get(N.ERROR_TYPE) or _error_type(ex)
    if error:
        span.attributes[N.ERROR_TYPE] = error
        span.error = ex.infra_error or ex.error or f"{ex.client_outcome} {ex.client_status or ''}".strip()
    span.events += _fault_events(ex)
    span.attributes = _clean(span.attributes)
    return span


def turn_span(turn: Turn, content: bool) -> SpanPlan:
    """A conversation's turn: an INTERNAL span (the harness and the agent talking, not a call)."""
    direction = USER_TO_AGENT if turn.speaker == "user" else AGENT_TO_USER
    attributes = {N.SEQ: turn.seq, N.TURN_DIRECTION: direction, **({N.TURN_TEXT: turn.text} if content else {})}
    return SpanPlan(direction, False, turn.started, turn.started, attributes)


def _server(ex: TracedExchange) -> dict[str, Any]:
    parts = urlsplit(ex.url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return {N.SERVER_ADDRESS: ex.host.removesuffix(STDIO_SUFFIX), N.SERVER_PORT: None if _stdio(ex) else port}


def _stdio(ex: TracedExchange) -> bool:
    return ex.host.endswith(STDIO_SUFFIX)


def _http_attributes(ex: TracedExchange) -> dict[str, Any]:
    return {N.HTTP_METHOD: ex.method, N.URL_FULL: ex.url, N.HTTP_STATUS: ex.client_status, **_server(ex)}


def _model_span(ex: TracedExchange, api: Any, content: bool) -> SpanPlan:
    attributes = {**G.request_attributes(ex, api), **_server(ex), N.URL_FULL: ex.url, N.HTTP_STATUS: ex.client_status}
    if ex.client_status is not None and ex.client_status < 400:
        attributes.update(G.response_attributes(ex, api))
    if attributes.get(N.REQUEST_STREAM):
        attributes[N.TIME_TO_FIRST_CHUNK] = G.time_to_first_chunk(ex)
    if content:
        attributes.update(G.content_attributes(ex, api))
    name = f"{attributes[N.OPERATION]} {attributes.get(N.REQUEST_MODEL) or ''}".strip()
    return SpanPlan(name, True, ex.started, ex.started + ex.duration_s, attributes)


def _session_span(ex: TracedExchange, content: bool) -> SpanPlan:
    """A live session's turn as a chat span of its API's provider (CLIENT), a function call the
    model made over it as an execute_tool span (INTERNAL: the agent carries it out)."""
    session = ex.raw["session"]
    end = ex.started + ex.duration_s
    if ex.function_call is None:
        attributes = {N.OPERATION: N.OP_CHAT, N.PROVIDER: N.LIVE_PROVIDER_OF[LiveApi(session["api"])],
                      N.REQUEST_MODEL: session.get("model"), **_server(ex), N.URL_FULL: ex.url}
        if ex.client_outcome == "cut":  # the session closed mid-answer
            attributes[N.ERROR_TYPE] = ex.client_outcome
        else:
            attributes.update(G.response_attributes(ex, LiveApi(session["api"])))
        return SpanPlan(f"{N.OP_CHAT} {session.get('model') or ''}".strip(), True, ex.started, end, attributes)
    attributes = {N.OPERATION: N.OP_EXECUTE_TOOL, N.TOOL_NAME: ex.function_call, N.TOOL_CALL_ID: session.get("call_id")}
    if session.get("failed"):
        attributes[N.ERROR_TYPE] = N.TOOL_ERROR
    if content:
        attributes[N.TOOL_CALL_ARGUMENTS] = ex.body
        attributes[N.TOOL_CALL_RESULT] = (ex.raw.get("upstream") or {}).get("body")
    return SpanPlan(f"{N.OP_EXECUTE_TOOL} {ex.function_call}", False, ex.started, end, attributes)


def _mcp_span(ex: TracedExchange, content: bool) -> SpanPlan:
    method = ex.rpc_method or ""
    body = ex.body_json if isinstance(ex.body_json, dict) else {}
    attributes = {N.MCP_METHOD: method, N.JSONRPC_REQUEST_ID: None if body.get("id") is None else str(body["id"]),
                  N.MCP_SESSION_ID: _header(ex, "mcp-session-id"), N.MCP_PROTOCOL_VERSION: _header(ex, "mcp-protocol-version"),
                  N.NETWORK_TRANSPORT: N.TRANSPORT_PIPE if _stdio(ex) else N.TRANSPORT_TCP, **_server(ex)}
    if not _stdio(ex):
        attributes.update({N.URL_FULL: ex.url, N.HTTP_STATUS: ex.client_status})
    target = ""
    if ex.mcp_tool is not None:
        target = ex.mcp_tool
        attributes.update({N.OPERATION: N.OP_EXECUTE_TOOL, N.TOOL_NAME: ex.mcp_tool})
    answer = _rpc_answer(ex)
    if content and ex.mcp_tool is not None:
        attributes[N.TOOL_CALL_ARGUMENTS] = json.dumps(dig(body, "params.arguments"), ensure_ascii=False)
        if answer:
            attributes[N.TOOL_CALL_RESULT] = json.dumps(answer.get("result", answer.get("error")), ensure_ascii=False)
    if isinstance(answer.get("error"), Mapping):
        attributes[N.RPC_STATUS] = attributes[N.ERROR_TYPE] = str(answer["error"].get("code"))
    elif ex.mcp_tool is not None and dig(answer, "result.isError") is True:
        attributes[N.ERROR_TYPE] = N.TOOL_ERROR
    return SpanPlan(f"{method} {target}".strip(), True, ex.started, ex.started + ex.duration_s, attributes)


def _rpc_answer(ex: TracedExchange) -> Mapping[str, Any]:
    """The JSON-RPC answer the client got (an injected error included), or {}."""
    return next((d for d in G.answer_of(ex) if isinstance(d, Mapping) and d.get("jsonrpc") == "2.0"
                 and ("result" in d or "error" in d)), {})


def _header(ex: TracedExchange, name: str) -> str | None:
    """A request (else response) header's value; None when absent or masked (a session id is a
    secret-named header, so the trace may hold only the mask)."""
    values = ex.headers.get(name) or ex.client_headers.get(name)
    return values[0] if values and values[0] != MASK else None


def _error_type(ex: TracedExchange) -> str | None:
    """Low-cardinality, as error.type asks: how the client's exchange failed, if it did."""
    if ex.client_outcome not in ("response", "injected", "stale") and ex.client_status is None:
        return ex.client_outcome
    if ex.client_status is not None and ex.client_status >= 400:
        return str(ex.client_status)
    return None


def _fault_events(ex: TracedExchange) -> list[tuple[str, float, dict[str, Any]]]:
    session = ex.raw.get("session")
    if isinstance(session, Mapping):  # a session's turn or call: the faults on its messages, when each fired
        faults = [(f, float(f.get("at") or ex.started)) for f in session.get("faults") or ()]
    else:
        faults = [(ex.fault, ex.started)]
    events = [_fault_event(fault, at) for fault, at in faults if isinstance(fault, Mapping)]
    perturbation = ex.raw.get("perturbation")
    if perturbation:
        events.append((N.PERTURBATION_EVENT, ex.started, {N.PERTURBATION_KINDS: [str(p) for p in perturbation]}))
    return events


def _fault_event(fault: Mapping[str, Any], at: float) -> tuple[str, float, dict[str, Any]]:
    params = fault.get("params") if isinstance(fault.get("params"), Mapping) else {}
    return (N.FAULT_EVENT, at, _clean({
        N.FAULT_TYPE: fault.get("type"), N.FAULT_RULE: fault.get("rule"), N.FAULT_DELIVERED: fault.get("delivered"),
        N.FAULT_DETAIL: fault.get("detail") or None,
        **{N.FAULT_PARAM_PREFIX + str(k): _scalar(v) for k, v in params.items()}}))


def _scalar(value: Any) -> Any:
    """An attribute value: str, bool, int, float or a list of one of them; anything else as JSON."""
    if isinstance(value, (str, bool, int, float)):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _clean(attributes: Mapping[str, Any]) -> dict[str, Any]:
    """Drop unset values (OpenTelemetry has no null) and make every value an attribute type."""
    clean = {}
    for name, value in attributes.items():
        if value is None:
            continue
        if isinstance(value, list):
            value = [v if isinstance(v, str) else str(v) for v in value] if value else None
            if value is None:
                continue
        clean[name] = _scalar(value) if not isinstance(value, list) else value
    return clean


def _clean_events(events: list[tuple[str, float, dict[str, Any]]]) -> list[tuple[str, float, dict[str, Any]]]:
    return [(name, at, _clean(attributes)) for name, at, attributes in events]


def _redact(span: SpanPlan, redactor: Redactor) -> None:
    span.name = redactor.text(span.name)
    span.error = redactor.text(span.error) if span.error else None
    span.attributes = _redacted(span.attributes, redactor)
    span.events = [(name, at, _redacted(attributes, redactor)) for name, at, attributes in span.events]
    for child in span.children:
        _redact(child, redactor)


def _redacted(attributes: Mapping[str, Any], redactor: Redactor) -> dict[str, Any]:
    def one(name: str, value: Any) -> Any:
        if isinstance(value, list):
            return [redactor.text(v) for v in value]
        if not isinstance(value, str):
            return value
        if name == N.URL_FULL:
            return redactor.url(value)
        return redactor.body(value) if name in _CONTENT else redactor.text(value)

    return {name: one(name, value) for name, value in attributes.items()}
