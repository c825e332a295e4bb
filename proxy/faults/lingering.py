"""What some faults leave behind them, for the rest of the episode: an MCP session the server has
forgotten (session_expired), an access token that has expired (token_expired), a server's tool
that is gone or renamed (tools_changed).

A session a fault ended: every later request carrying it is answered 404, as the official SDK's
server answers an unknown session, for the rest of the episode. It is known by the server's URL
and its id, so the other sessions with that server go on (a second client of the agent's, a new
session the client initialized after the 404), and a request with no session header (an
initialize, a health check) changes nothing. In replay, where traces redact session ids, the
replay proxy gives each recorded session an id of its own (replay_store.stand_in.stand_in_session).
An episode keeps at most `EpisodeLimits.ended_sessions` ended sessions (the oldest forgotten:
its requests reach the server again) and forgets them all when it ends. A server that restarts
loses every session it held: the episode knows those it gave from its answers' `Mcp-Session-Id`
(`note_session`, at most `EpisodeLimits.mcp_sessions`, the oldest forgotten), and a restart ends
them all (`end_server_sessions`); a session the server gives afterwards is a new one and goes on.
The restart also drops the streams the episode's exchanges still have open from that server
(`drop_server_streams`): they end unfinished, as a dropped connection ends them, and their lines
say `cut`, naming the fault in `consequence_of`.

A token a fault expired: every later request carrying the same Authorization header is answered
the fault's 401, until the client presents another (it refreshed or re-authenticated). Only a
hash of the header is kept.

A tool a fault removed or renamed on a server: a call to it gets the official SDK server's result
for an unknown tool; a call by its new name reaches the server under the old one; the server's
`tools/list` answers are rewritten to match (REWRITE_KEY: the injector buffers and rewrites them).
A tool whose input schema a fault changed (schema_drift's ops on the schema the server listed):
a call whose arguments do not fit the new schema gets the SDK server's result for invalid
arguments, in the server's place — the server behind the proxy still has the old schema and
would accept the call the changed server rejects, as a real server that changed its schema
does (it validates against the schema it has now). A call that fits reaches the server, with the
properties the ops renamed under their old names.

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

from faultproxy.formats.tool_arguments import call_arguments, schema_problems
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import answer, replace_body, rewritten_documents
from faultproxy.proxy.faults.schema_drift import apply_drift
from faultproxy.scenarios.faults.schema_drift import DriftOp
from faultproxy.scenarios.scenario_model import value_at
from mitmproxy import http

SESSION_HEADER = "mcp-session-id"
REWRITE_KEY = "faultproxy_lingering_rewrite"  # flow.metadata: rewrite the answer (flow, ex) once it is in
_INVALID_REQUEST = -32600  # the JSON-RPC code the SDK's server gives an unknown session

# (status, headers, body) of an answer the proxy makes again for each request the fault still holds
Answer = tuple[int, dict[str, str], bytes]


def session_of(flow: http.HTTPFlow) -> str | None:
    return flow.request.headers.get(SESSION_HEADER) or None


def session_gone(message: str) -> Answer:
    """404 with the SDK server's body for an unknown session (a JSON-RPC error with no id)."""
    body = {"jsonrpc": "2.0", "id": None, "error": {"code": _INVALID_REQUEST, "message": message}}
    return 404, {"content-type": "application/json"}, json.dumps(body).encode()


def _token(flow: http.HTTPFlow) -> str | None:
    value = flow.request.headers.get("authorization")
    return hashlib.sha256(value.encode()).hexdigest() if value else None


def _cause(ex: FlowExchange) -> dict[str, Any]:
    """The fault whose exchange this is, as the later exchanges' `consequence_of` names it."""
    return {"rule": ex.rule.name if ex.rule else None, "type": ex.fault_type, "seq": ex.seq}


def _left(ex: FlowExchange, holds: str, answer_again: Answer) -> dict[str, Any]:
    return {"holds": holds, "answer": answer_again, "cause": _cause(ex)}


def end_session(ex: FlowExchange, session: str, answer_again: Answer) -> None:
    """From now on, the episode's requests in `session` to this request's server get `answer_again`;
    beyond the episode's limit, the session it ended first is forgotten."""
    lingering, key = ex.episode.lingering, _session_key(ex, session)
    lingering[key] = _left(ex, session, answer_again)
    ended = [name for name in lingering if name.startswith("session ")]  # oldest first, as dicts keep order
    for name in ended[:max(0, len(ended) - ex.episode.limits.ended_sessions)]:
        del lingering[name]


def _session_key(ex: FlowExchange, session: str) -> str:
    return f"session {ex.server()} {session}"


def note_session(flow: http.HTTPFlow, ex: FlowExchange) -> None:
    """Keep the session a server gives (its answer to a request in no session, an initialize, names
    it), so that a restart of that server can end it; beyond the episode's limit, the oldest is
    forgotten."""
    session = flow.response.headers.get(SESSION_HEADER) if session_of(flow) is None else None
    if session:
        seen = ex.episode.mcp_sessions
        seen[(ex.server(), session)] = None
        if len(seen) > ex.episode.limits.mcp_sessions:
            del seen[next(iter(seen))]


def end_server_sessions(ex: FlowExchange, session: str, answer_again: Answer) -> None:
    """The server restarted: `session`, and every other session of the episode's it had given,
    get `answer_again` from now on (end_session); those it gives later are new."""
    server, seen = ex.server(), ex.episode.mcp_sessions
    held = [known for (at, known) in seen if at == server]
    for known in held:
        del seen[(server, known)]
    for known in dict.fromkeys([*held, session]):
        end_session(ex, known, answer_again)


def drop_server_streams(ex: FlowExchange) -> None:
    """The server restarted and dropped every connection it had: the episode's other answers
    still open from it (a GET stream, a slow call's stream) end unfinished (FlowExchange.drop),
    each line's client outcome `cut` and its `consequence_of` naming this fault."""
    cause = _cause(ex)
    why = f"the server restarted (rule {cause['rule']}) and dropped the connection"
    for other in list(ex.episode.inflight.values()):
        if other is not ex and other.drop is not None and other.server() == ex.server() and other.drop(why):
            other.outcome, other.consequence_of = "cut", dict(cause)


def expire_token(flow: http.HTTPFlow, ex: FlowExchange, answer_again: Answer) -> bool:
    """From now on, the episode's requests with this request's Authorization get `answer_again`;
    False when it carries none (there is no token to expire)."""
    token = _token(flow)
    if token is not None:
        ex.episode.lingering[f"token {token}"] = _left(ex, token, answer_again)
    return token is not None


def change_tool(ex: FlowExchange, tool: str, renamed: str | None, ops: tuple[DriftOp, ...] | None = None) -> None:
    """From now on, the server at this request's URL has no tool `tool` (or calls it `renamed`, or
    has its input schema changed by `ops`)."""
    ex.episode.lingering[f"tools {ex.server()}"] = {"holds": tool, "renamed": renamed, "ops": ops,
                                                     "cause": _cause(ex)}


def unknown_tool(ex: FlowExchange, tool: str, notify: bool) -> Answer:
    """The SDK server's answer to a call of a tool it does not have (a tool result with isError)."""
    return tool_error(ex, f"Unknown tool: {tool}", notify)


def unfit_call(ex: FlowExchange, tool: str, ops: tuple[DriftOp, ...], notify: bool) -> Answer | None:
    """The SDK server's answer to a call whose arguments do not fit the tool's schema as `ops`
    changed it (MCPServer: pydantic's validation error, after "Error executing tool NAME: ");
    None when they fit, or when no listing gave the tool's schema (nothing to check against)."""
    schema = ex.episode.tool_schemas.get((ex.server(), tool))
    problems = schema_problems(apply_drift(schema, ops)[0], call_arguments(ex.body_json())) \
        if isinstance(schema, dict) else []
    if not problems:
        return None
    count = f"{len(problems)} validation error{'s' if len(problems) > 1 else ''} for {tool}Arguments"
    return tool_error(ex, f"Error executing tool {tool}: {count}\n" + "\n".join(problems), notify)


def tool_error(ex: FlowExchange, text: str, notify: bool) -> Answer:
    """A tool result with isError and `text`, as the SDK's server gives it, as JSON, or as an
    event stream after `notifications/tools/list_changed` when `notify`."""
    body = ex.body_json()
    result = {"jsonrpc": "2.0", "id": body.get("id") if isinstance(body, dict) else None,
              "result": {"content": [{"type": "text", "text": text}], "isError": True}}
    if not notify:
        return 200, {"content-type": "application/json"}, json.dumps(result).encode()
    changed = {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}
    events = b"".join(b"event: message\ndata: " + json.dumps(message).encode() + b"\n\n" for message in (changed, result))
    return 200, {"content-type": "text/event-stream", "cache-control": "no-cache"}, events


def _tools_changed(flow: http.HTTPFlow, ex: FlowExchange) -> bool:
    """A tool a fault changed on this request's server: a call of its old name is answered (True);
    a call by its new name is sent on under the old one, and a listing is rewritten (False)."""
    changed = ex.episode.lingering.get(f"tools {ex.server()}")
    body = ex.body_json()
    method = body.get("method") if changed is not None and isinstance(body, dict) else None
    if method == "tools/list":
        flow.metadata[REWRITE_KEY] = lambda flow, ex: _relist(flow, changed)
        ex.consequence_of = dict(changed["cause"])
    if method != "tools/call":
        return False
    tool, renamed, name = changed["holds"], changed["renamed"], value_at(body, ("params", "name"))
    if name == tool and changed["ops"]:
        return _schema_changed(flow, ex, changed)
    if name == tool:
        answer(flow, ex, *unknown_tool(ex, tool, notify=False))
        ex.consequence_of = dict(changed["cause"])
        return True
    if renamed is not None and name == renamed:
        flow.request.content = json.dumps({**body, "params": {**body["params"], "name": tool}}).encode()
        ex.consequence_of = dict(changed["cause"])
    return False


def _schema_changed(flow: http.HTTPFlow, ex: FlowExchange, changed: dict[str, Any]) -> bool:
    """A call of the tool whose schema changed: answered when it does not fit (True), else sent on
    as the server's old schema has it (False)."""
    ex.consequence_of = dict(changed["cause"])
    unfit = unfit_call(ex, changed["holds"], changed["ops"], notify=False)
    if unfit is not None:
        answer(flow, ex, *unfit)
        return True
    fit_to_server(flow, ex, changed["ops"])
    return False


def fit_to_server(flow: http.HTTPFlow, ex: FlowExchange, ops: tuple[DriftOp, ...]) -> None:
    """Send the call with the properties `ops` renamed under their old names, as the server has them."""
    body, back = ex.body_json(), {op.to: op.path[1] for op in ops
                                  if op.op == "rename" and len(op.path) == 2 and op.path[0] == "properties"}
    arguments = value_at(body, ("params", "arguments"))
    if isinstance(arguments, dict) and back.keys() & arguments.keys():
        arguments = {back.get(name, name): value for name, value in arguments.items()}
        flow.request.content = json.dumps({**body, "params": {**body["params"], "arguments": arguments}}).encode()


def _relist(flow: http.HTTPFlow, changed: dict[str, Any]) -> None:
    tool, renamed, ops = changed["holds"], changed["renamed"], changed["ops"]

    def relist(document: Any) -> Any:
        tools = value_at(document, ("result", "tools"))
        if not isinstance(tools, list):
            return document
        kept = [entry for entry in tools if not (isinstance(entry, dict) and entry.get("name") == tool)]
        if renamed is not None:
            kept += [{**entry, "name": renamed} for entry in tools if entry not in kept]
        if ops:
            kept += [{**entry, "inputSchema": apply_drift(entry.get("inputSchema"), ops)[0]}
                     for entry in tools if entry not in kept]
        return {**document, "result": {**document["result"], "tools": kept}}

    body = rewritten_documents(flow, relist)
    if body is not None:
        replace_body(flow, body)


def _held(flow: http.HTTPFlow, ex: FlowExchange) -> dict[str, Any] | None:
    """What a fault left that this request meets, if anything: its session ended, or its token expired."""
    session, token, lingering = session_of(flow), _token(flow), ex.episode.lingering
    ended = lingering.get(_session_key(ex, session)) if session is not None else None
    return ended if ended is not None or token is None else lingering.get(f"token {token}")


def answer_lingering(flow: http.HTTPFlow, ex: FlowExchange) -> bool:
    """Answer a request that meets what an earlier fault left; False when it meets nothing or the
    fault only changes it on its way (then `consequence_of` says so)."""
    held = _held(flow, ex)
    if held is None and f"tools {ex.server()}" in ex.episode.lingering:
        return _tools_changed(flow, ex)
    if held is None:
        return False
    status, headers, body = held["answer"]
    answer(flow, ex, status, headers, body)
    ex.consequence_of = dict(held["cause"])
    return True

