"""What some faults leave behind them, for the rest of the episode: an MCP session the server has
forgotten (session_expired), an access token that has expired (token_expired).

A session a fault ended: every later request carrying it is answered 404, as the official SDK's
server answers an unknown session, until the client initializes a new session with that server
(a request with no session header to the same URL). It is known by its URL as well as its id:
traces redact session ids, so in replay every session of a server has the same one.

A token a fault expired: every later request carrying the same Authorization header is answered
the fault's 401, until the client presents another (it refreshed or re-authenticated). Only a
hash of the header is kept.

The injector asks `answer_lingering` for each request of an episode that has something
lingering. Such an answer is no fault decision of its own (it is not drawn, and minimize cannot
take it out apart from the fault that left it): the request is not forwarded and its trace line
names that fault in `consequence_of`. In replay the same fault leaves the same thing again, so the
requests after it are answered here again, with no server.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import answer
from mitmproxy import http

SESSION_HEADER = "mcp-session-id"
_INVALID_REQUEST = -32600  # the JSON-RPC code the SDK's server gives an unknown session

# (status, headers, body) of an answer the proxy makes again for each request the fault still holds
Answer = tuple[int, dict[str, str], bytes]


def session_of(flow: http.HTTPFlow) -> str | None:
    return flow.request.headers.get(SESSION_HEADER) or None


def session_gone(message: str) -> Answer:
    """404 with the SDK server's body for an unknown session (a JSON-RPC error with no id)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": _INVALID_REQUEST, "message": message}}
    return 404, {"content-type": "application/json"}, json.dumps(body).encode()


def _server(ex: FlowExchange) -> str:
    return ex.url.split("?")[0]  # as the client asked: a stream's flow may be routed through the relay by now


def _token(flow: http.HTTPFlow) -> str | None:
    value = flow.request.headers.get("authorization")
    return hashlib.sha256(value.encode()).hexdigest() if value else None


def _left(ex: FlowExchange, holds: str, answer_again: Answer) -> dict[str, Any]:
    rule = ex.rule
    return {"holds": holds, "answer": answer_again,
            "cause": {"rule": rule.name if rule else None, "type": ex.fault_type, "seq": ex.seq}}


def end_session(ex: FlowExchange, session: str, answer_again: Answer) -> None:
    """From now on, the episode's requests in `session` get `answer_again`."""
    ex.episode.lingering[f"session {_server(ex)}"] = _left(ex, session, answer_again)


def expire_token(flow: http.HTTPFlow, ex: FlowExchange, answer_again: Answer) -> bool:
    """From now on, the episode's requests with this request's Authorization get `answer_again`;
    False when it carries none (there is no token to expire)."""
    token = _token(flow)
    if token is not None:
        ex.episode.lingering[f"token {token}"] = _left(ex, token, answer_again)
    return token is not None


def _held(flow: http.HTTPFlow, ex: FlowExchange) -> dict[str, Any] | None:
    """What a fault left that this request meets, if anything; a new session forgets the old."""
    session = session_of(flow)
    lingering = ex.episode.lingering
    if session is None:
        lingering.pop(f"session {_server(ex)}", None)
    else:
        ended = lingering.get(f"session {_server(ex)}")
        if ended is not None and ended["holds"] == session:
            return ended
    token = _token(flow)
    return lingering.get(f"token {token}") if token is not None else None


def answer_lingering(flow: http.HTTPFlow, ex: FlowExchange) -> bool:
    """Answer a request that meets what an earlier fault left; False when it meets nothing."""
    held = _held(flow, ex)
    if held is None:
        return False
    status, headers, body = held["answer"]
    answer(flow, ex, status, headers, body)
    ex.consequence_of = dict(held["cause"])
    return True


__all__ = ["Answer", "SESSION_HEADER", "answer_lingering", "end_session", "expire_token",
           "session_gone", "session_of"]
