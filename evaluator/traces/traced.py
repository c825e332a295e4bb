"""One exchange of an episode's trace as the checks read it: a TracedExchange, with what the checks
ask of it (model or tool call, MCP tool, committed, failed, idempotency key, identity, Retry-After).
evaluator.traces.trace_parsing parses a trace into them, once.

Vocabulary (the checks' own, see evaluator.checks):
- what a request is (model call, read, write, irreversible, MCP plumbing, MCP tool call read /
  write / unclassified) is tasks.request_class's word (`request_class`); every exchange that is
  no model call and no MCP plumbing (initialize, notifications, lists, the GET stream, DELETE) is
  a tool call;
- committed: the upstream answered 2xx (the trace's `upstream` is not null), its answer reached
  its end (a body that broke off midway, or an event stream answering a JSON-RPC request that
  ended before the answer with the request's id, is no commit the client heard of: `unanswered`),
  and it did not say it replayed an earlier answer (Idempotent-Replayed: true);
- maybe committed: the request was forwarded (the trace's `forwarded`) and ended in a way that
  leaves its commit unknown (evaluator.traces.ambiguity: no answer, 408 or 5xx, a 2xx that never
  reached its end, an MCP error);
- failed (from the client's view): reset, cut, error or an injected answer, a status >= 400,
  client_gone (the episode ended while the proxy still held the exchange), or an event stream
  that ended without the JSON-RPC answer the request waited for;
- the same request: the same identity (evaluator.traces.identity, the definition replay matching
  uses too): method, host, path, query and canonical body, volatile keys such as timestamps,
  request ids and idempotency keys removed.

MCP: which pattern names a call, the tools' annotations, unclassified tools: evaluator.traces.call_classes.

Live model sessions (OpenAI Realtime, Gemini Live over a WebSocket): parse_trace adds the model
calls (one per turn) and the function calls of each session as exchanges of their own
(evaluator.traces.model_sessions); a function call is named by tool patterns as an MCP tool call is.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import cached_property
from typing import Any

from faultproxy.evaluator.statistics import endpoint_class
from faultproxy.evaluator.traces.ambiguity import ambiguous_outcome
from faultproxy.evaluator.traces.identity import Identity, idempotency_key_of, identity_of
from faultproxy.evaluator.traces.resources import resource_of
from faultproxy.evaluator.traces.model_sessions import session_api
from faultproxy.formats.model_apis import is_model_call
from faultproxy.formats.request_kinds import ToolHints, is_mcp_plumbing, mcp_server, mcp_tool_name, rpc_method
from faultproxy.formats.trace import SERVER_TO_CLIENT
from faultproxy.tasks.request_class import MODEL_CALL, PLUMBING, Declared, RequestClass, http_class, tool_class

_FAILED_OUTCOMES = frozenset({"reset", "cut", "error", "injected", "client_gone"})

_CLOCK_SLACK_S = 0.001  # trace times are rounded to the microsecond, and two clocks measure them


@dataclass(frozen=True)
class TracedExchange:
    """One trace line, with what the checks ask of it precomputed (the proxy's live exchange,
    FlowExchange, wrote it)."""

    seq: int
    started: float
    duration_s: float
    method: str
    url: str
    host: str  # lower-case host name, no port
    netloc: str  # host[:port], lower-case
    path: str  # path with ?query
    route: str  # path without query
    headers: Mapping[str, tuple[str, ...]]  # request headers, lower-case names
    body: str | None
    body_json: Any
    upstream_status: int | None
    upstream_headers: Mapping[str, tuple[str, ...]]
    client_outcome: str
    client_status: int | None
    client_headers: Mapping[str, tuple[str, ...]]  # what the client saw
    forwarded: bool  # the request reached the upstream (scenarios.trace_forwarded)
    fault: Mapping[str, Any] | None
    tokens: int
    error: str | None
    raw: Mapping[str, Any]
    answered_on_resume: bool = False  # its answer came on a stream the client resumed (parse_trace)

    @cached_property
    def session_kind(self) -> str | None:
        """For an exchange derived from a live session (evaluator.traces.model_sessions): model_call or function_call."""
        session = self.raw.get("session")
        return session.get("kind") if isinstance(session, dict) else None

    @property
    def from_server(self) -> bool:
        """An MCP server's own request or notification (with the client's answer): not the agent's."""
        return self.raw.get("direction") == SERVER_TO_CLIENT

    @property
    def is_request(self) -> bool:
        """One of the agent's requests, as a `requests` budget counts them: not a live session's
        turn or call (they travel on its one upgrade), nor an MCP server's own message, nor the
        MCP session's plumbing."""
        return self.session_kind is None and not self.from_server and not self.mcp_plumbing

    @cached_property
    def is_model(self) -> bool:
        if self.session_kind is not None:
            return self.session_kind == "model_call"
        return is_model_call(self.route)

    @property
    def function_call(self) -> str | None:
        """The function a live session's function call names, else None."""
        return str(self.raw["session"].get("name") or "?") if self.session_kind == "function_call" else None

    @property
    def tool_name(self) -> str | None:
        """The tool an MCP tools/call or a live session's function call names, else None."""
        return self.mcp_tool or self.function_call

    @cached_property
    def rpc_method(self) -> str | None:
        """The JSON-RPC method of an MCP request, else None."""
        return rpc_method(self.body_json)

    @cached_property
    def mcp_plumbing(self) -> bool:
        """MCP session plumbing (formats.request_kinds): initialize, notifications, lists, the
        client's answers, the GET stream and DELETE of a session, however answered."""
        return self.session_kind is None and is_mcp_plumbing(self.headers, self.body_json)

    @property
    def is_protocol(self) -> bool:
        """MCP plumbing, or the upgrade of a live model session (its turns and function calls
        are exchanges of their own)."""
        return self.mcp_plumbing or (self.session_kind is None and session_api(self.raw) is not None)

    @property
    def _reported_failure(self) -> bool:
        """An MCP answer that is an error, or a function call whose output reports one."""
        if self.session_kind == "function_call":
            return self.raw["session"].get("failed") is True
        return self.mcp_tool is not None and self.rpc_failed

    @property
    def is_tool_call(self) -> bool:
        return not self.is_model and not self.is_protocol

    @cached_property
    def mcp_tool(self) -> str | None:
        """The tool an MCP tools/call names, else None."""
        return mcp_tool_name(self.body_json) if self.session_kind is None else None

    @cached_property
    def server(self) -> str:
        """The MCP server the request went to (formats.request_kinds.mcp_server, as the proxy names it)."""
        return mcp_server(self.url)

    def request_class(self, declared: Declared, hints: ToolHints) -> RequestClass:
        """What this exchange is (tasks.request_class), given what the task declares and the
        tools' annotations by server (evaluator.traces.call_classes.mcp_tool_hints)."""
        if self.is_model:
            return MODEL_CALL
        if self.is_protocol:
            return PLUMBING
        if self.tool_name is not None:
            return tool_class(self.tool_name, self.server, self.method, self.host, self.route, declared, hints)
        return http_class(self.method, self.host, self.path, declared)

    @cached_property
    def rpc_answer(self) -> dict | None:
        """The JSON-RPC message the upstream answered an MCP request with (body or SSE), or None."""
        upstream = self.raw.get("upstream") or {}
        for document in documents(upstream):
            if isinstance(document, dict) and document.get("jsonrpc") == "2.0" and ("result" in document
                                                                                 or "error" in document):
                return document
        return None

    @property
    def rpc_failed(self) -> bool:
        """An MCP answer that is a JSON-RPC error or a tool result flagged isError."""
        answer = self.rpc_answer
        if answer is None:
            return False
        result = answer.get("result")
        return "error" in answer or (isinstance(result, dict) and result.get("isError") is True)

    @cached_property
    def rpc_id(self) -> Any:
        """The id of a JSON-RPC request (the one its answer carries), else None."""
        return self.body_json.get("id") if self.rpc_method is not None else None

    @cached_property
    def unanswered(self) -> str | None:
        """How a 2xx answer fell short of its end, or None. Any answer: "its answer broke off"
        (the upstream's body or event stream failed midway: the client outcome is error). An
        event stream answering a JSON-RPC request, with no event carrying the answer with the
        request's id: "the client left before the answer came" (client_gone), else "its event
        stream ended without the answer". A stream with no event at all is one of these: every
        trace records each event the upstream sent, so none recorded is none sent. None when the
        answer came on a stream the client resumed (`answered_on_resume`)."""
        status = self.upstream_status
        if status is None or not 200 <= status < 300 or self.answered_on_resume:
            return None
        if self.client_outcome == "error":
            return "its answer broke off"
        if self.rpc_id is None or not _is_event_stream(self.upstream_headers):
            return None
        if answers(self.raw.get("upstream") or {}, self.rpc_id):
            return None
        if self.client_outcome == "client_gone":
            return "the client left before the answer came"
        return "its event stream ended without the answer"

    @property
    def committed(self) -> bool:
        status = self.upstream_status
        if status is None or not 200 <= status < 300:
            return False
        if self._reported_failure or self.unanswered:
            return False
        return not any(v.strip().lower() == "true" for v in self.upstream_headers.get("idempotent-replayed", ()))

    @cached_property
    def ambiguity(self) -> str | None:
        """How this request ended if it may have committed unseen (evaluator.traces.ambiguity), else None."""
        return ambiguous_outcome(self)

    @property
    def maybe_committed(self) -> bool:
        return self.ambiguity is not None

    @property
    def infra_error(self) -> str | None:
        """The proxy's own failure to reach the upstream (refused, DNS, TLS, reset), no fault's."""
        reason = self.raw.get("infra_error")
        return str(reason) if reason else None

    @property
    def failed(self) -> bool:
        status = self.client_status
        if self.client_outcome == "client_gone" and self._answered_before_gone:
            return status is None or status >= 400 or self._reported_failure
        if self.client_outcome in _FAILED_OUTCOMES or status is None or status >= 400:
            return True
        return self._reported_failure or self._client_unanswered

    @property
    def _client_unanswered(self) -> bool:
        """Did the client's event stream (its own, when a fault changed it) end without the
        JSON-RPC answer its request waited for?"""
        if self.rpc_id is None or self.answered_on_resume or not _is_event_stream(self.client_headers):
            return False
        client = self.raw.get("client") or {}
        seen = client if client.get("sse") or client.get("body") is not None else (self.raw.get("upstream") or {})
        return not answers(seen, self.rpc_id)

    @property
    def _answered_before_gone(self) -> bool:
        """Did the JSON-RPC answer to this MCP request reach the client before it left? The SDK
        closes a call's event stream once it has the result, and the trace then says the client
        disconnected: the answer was delivered, and the next call is no retry of this one."""
        client = self.raw.get("client") or {}
        gone, headers_after = client.get("gone_after_s"), self.raw.get("response_after_s")
        if gone is None or headers_after is None or self.rpc_id is None:
            return False
        sent = client if client.get("sse") else (self.raw.get("upstream") or {})  # the client's, when it differs
        for offset, event in sent.get("sse") or ():
            if headers_after + offset > gone + _CLOCK_SLACK_S:
                return False
            if answers({"sse": [[offset, event]]}, self.rpc_id):
                return True
        return False

    def resource(self, id_path: str | None = None) -> str:
        """The resource the upstream's answer names (evaluator.traces.resources): at `id_path` when the
        irreversible pattern declares one, else the usual id fields, else the answer itself."""
        answer = self.rpc_answer
        if answer is not None:  # the result, without the JSON-RPC id that differs per call
            body = json.dumps(answer.get("result", answer.get("error")), sort_keys=True)
        else:
            upstream = self.raw.get("upstream") or {}
            body = upstream.get("body") if isinstance(upstream.get("body"), str) else None
        return resource_of(self._answer_documents, body, id_path)

    @cached_property
    def _answer_documents(self) -> list[Any]:
        answer = self.rpc_answer
        if answer is None:
            return documents(self.raw.get("upstream") or {})
        result = answer.get("result")
        content = result.get("content") if isinstance(result, dict) else None
        texts = [c.get("text") for c in content if isinstance(c, dict)] if isinstance(content, list) else []
        parsed = []
        for text in texts:
            try:
                parsed.append(json.loads(text))
            except (TypeError, ValueError):
                pass
        return parsed

    @cached_property
    def idempotency_key(self) -> str | None:
        return idempotency_key_of(self.headers, self.body_json)

    @cached_property
    def identity(self) -> Identity:
        """What makes two sends the same request: evaluator.traces.identity's, as replay matches them."""
        request = self.raw.get("request") or {}
        body = request.get("body")
        if isinstance(body, str):
            raw = base64.b64decode(body) if request.get("body_encoding") == "base64" else body.encode("utf-8")
        else:
            raw = None
        content_type = self.headers.get("content-type", ("",))[0]
        # a live session's function calls share the upgrade's URL: the function's name tells them apart
        url = self.url if self.function_call is None else f"{self.url.split('?')[0]}/tools/{self.function_call}"
        return identity_of(self.method, url, (("content-type", content_type),), raw)

    def endpoint(self, episode: str | None = None) -> str:
        """The endpoint class (metrics.endpoint_class) of this call, for trajectory consistency.
        A path segment equal to the episode's key (worlds that give each episode its own tenant
        put it in the URL) becomes {episode}, so trials of one task compare as the same calls."""
        route = self.route
        if episode and episode in route:
            route = "/".join("{episode}" if part == episode else part for part in route.split("/"))
        cls = endpoint_class(self.method, route)
        if self.mcp_tool is not None:
            return f"{cls} tools/call:{self.mcp_tool}"
        if self.function_call is not None:
            return f"{cls} function_call:{self.function_call}"
        return f"{cls} {self.rpc_method}" if self.rpc_method else cls

    @property
    def retry_after_s(self) -> float | None:
        """The wait the response the client saw asked for: retry-after-ms, then Retry-After
        (seconds or an HTTP date, relative to the response's Date or else this send)."""
        headers = self.client_headers
        for value in headers.get("retry-after-ms", ()):
            try:
                return float(value) / 1000
            except ValueError:
                pass
        for value in headers.get("retry-after", ()):
            try:
                return float(value)
            except ValueError:
                pass
            try:
                when = parsedate_to_datetime(value).timestamp()
            except (TypeError, ValueError, IndexError):
                continue
            base = self.started
            for date in headers.get("date", ()):
                try:
                    base = parsedate_to_datetime(date).timestamp()
                    break
                except (TypeError, ValueError, IndexError):
                    pass
            return max(0.0, when - base)
        return None


def _is_event_stream(headers: Mapping[str, tuple[str, ...]]) -> bool:
    return any(v.split(";")[0].strip().lower() == "text/event-stream" for v in headers.get("content-type", ()))


def answers(message: Mapping[str, Any], request_id: Any) -> bool:
    """Does a recorded response carry the JSON-RPC answer (result or error) to `request_id`?"""
    if not message.get("sse") and isinstance(message.get("body"), str):
        message = {"sse": [[0, message["body"]]]}  # a buffered stream's body, its data lines read alike
    return any(isinstance(document, dict) and document.get("id") == request_id
               and ("result" in document or "error" in document) for document in documents(message))


def documents(message: Mapping[str, Any]) -> list[Any]:
    """The JSON documents of a recorded response: its body, or each SSE event's data."""
    documents = []
    if message.get("sse"):
        for _, event in message["sse"]:
            for line in str(event).splitlines():
                if line.startswith("data:"):
                    try:
                        documents.append(json.loads(line[5:].strip()))
                    except ValueError:
                        pass
    elif isinstance(message.get("body"), str) and message.get("body_encoding") != "base64":
        try:
            documents.append(json.loads(message["body"]))
        except ValueError:
            pass
    return documents
