"""The trace of one episode, parsed once: each line as a TracedExchange (evaluator.traces.traced),
a live session's turns and function calls as exchanges of their own (evaluator.traces.model_sessions).
"""

from __future__ import annotations

import dataclasses
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.traces.model_sessions import session_lines
from faultproxy.evaluator.traces.traced import TracedExchange, answers
from faultproxy.formats.trace import is_turn
from faultproxy.scenarios import trace_forwarded

_NOT_JSON = object()  # body_json of a body that is not JSON (None is JSON's null)


def _header_map(pairs: Any) -> dict[str, tuple[str, ...]]:
    result: dict[str, list[str]] = defaultdict(list)
    for pair in pairs or ():
        if isinstance(pair, (list, tuple)) and len(pair) == 2:
            result[str(pair[0]).lower()].append(str(pair[1]))
    return {k: tuple(v) for k, v in result.items()}


def parse_exchange(line: Mapping[str, Any]) -> TracedExchange:
    request = line.get("request") or {}
    url = request.get("url") or ""
    parts = urlsplit(url)
    route = parts.path or "/"
    path = route + (f"?{parts.query}" if parts.query else "")
    body = request.get("body")
    body_json: Any = _NOT_JSON
    if isinstance(body, str) and request.get("body_encoding") != "base64":
        try:
            body_json = json.loads(body)
        except ValueError:
            pass
    else:
        body = None if request.get("body_encoding") == "base64" else body
    upstream = line.get("upstream")
    client = line.get("client") or {}
    upstream_headers = _header_map(upstream.get("headers")) if upstream else {}
    client_headers = _header_map(client["headers"]) if client.get("headers") is not None else upstream_headers
    host = (parts.hostname or "").lower()
    return TracedExchange(
        seq=int(line.get("seq") or 0),
        started=float(line.get("started") or 0.0),
        duration_s=float(line.get("duration_s") or 0.0),
        method=str(request.get("method") or "GET").upper(),
        url=url,
        host=host,
        netloc=parts.netloc.rsplit("@", 1)[-1].lower(),
        path=path,
        route=route,
        headers=_header_map(request.get("headers")),
        body=body,
        body_json=body_json,
        upstream_status=upstream.get("status") if upstream else None,
        upstream_headers=upstream_headers,
        client_outcome=str(client.get("outcome") or ("response" if upstream else "error")),
        client_status=client.get("status"),
        client_headers=client_headers,
        forwarded=trace_forwarded(line),
        fault=line.get("fault"),
        tokens=int(line.get("tokens") or 0),
        error=line.get("error"),
        raw=line,
    )


def parse_trace(trace: Iterable[Mapping[str, Any]]) -> list[TracedExchange]:
    """The trace's exchanges in the order they started, a live session's turns and function
    calls among them (evaluator.traces.model_sessions); a conversation's turns are not exchanges
    (evaluator.traces.conversation_turns reads them)."""
    exchanges = [parse_exchange(derived) for line in trace if not is_turn(line)
                 for derived in (line, *session_lines(line))]
    exchanges.sort(key=lambda ex: (ex.started, ex.seq))
    return _answered_on_resume(exchanges)


def _answered_on_resume(exchanges: list[TracedExchange]) -> list[TracedExchange]:
    """A JSON-RPC call whose event stream ended before its answer, answered on a stream the client
    resumed later (MCP's resumability: a GET to the same server with Last-Event-ID, which the
    server answers with what followed on the lost stream): the answer did arrive."""
    resumed = [ex for ex in exchanges if ex.method == "GET" and "last-event-id" in ex.headers]
    if not resumed:
        return exchanges
    return [dataclasses.replace(ex, answered_on_resume=True) if ex.unanswered and _resumed_answer(ex, resumed) else ex
            for ex in exchanges]


def _resumed_answer(call: TracedExchange, resumed: list[TracedExchange]) -> bool:
    return call.rpc_id is not None and any(
        stream.url == call.url and stream.started >= call.started
        and answers(stream.raw.get("upstream") or {}, call.rpc_id) for stream in resumed)
