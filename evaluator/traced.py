"""The trace of one episode, parsed once: each line as a TracedExchange with what the checks ask
of it (model or tool call, MCP tool, committed, failed, idempotency key, identity, Retry-After).

Vocabulary (the checks' own, see evaluator.checks):
- model call: a request whose path ends in /chat/completions, /v1/messages or /responses;
  every other exchange is a tool call (MCP protocol messages other than tools/call excepted);
- committed: the upstream answered 2xx (the trace's `upstream` is not null) and did not say it
  replayed an earlier answer (Idempotent-Replayed: true);
- maybe committed: the request was forwarded (the trace's `forwarded`) but no upstream answer
  was recorded (the upstream dropped the connection): the client cannot know;
- failed (from the client's view): reset, cut, error or an injected answer, a status >= 400, or
  client_gone (the episode ended while the proxy still held the exchange);
- the same request: the same identity (evaluator.identity, the definition replay matching
  uses too): method, host, path, query and canonical body, volatile keys such as timestamps,
  request ids and idempotency keys removed.

MCP: the trace's tools/list answers give each tool's annotations (mcp_tool_hints). Endpoint
patterns name an MCP tool call only when their glob contains "tools/" (matches_any).

Live model sessions (OpenAI Realtime, Gemini Live over a WebSocket): parse_trace adds the model
calls (one per turn) and the function calls of each session as exchanges of their own
(evaluator.sessions); a function call is named by tool patterns as an MCP tool call is.
"""

from __future__ import annotations

import base64
import json
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from functools import cached_property
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.identity import Identity, identity_of, idempotency_key_of
from faultproxy.evaluator.metrics import endpoint_class
from faultproxy.evaluator.sessions import session_api, session_lines
from faultproxy.formats.model_apis import is_model_call
from faultproxy.formats.trace import SERVER_TO_CLIENT
from faultproxy.scenarios import trace_forwarded

_FAILED_OUTCOMES = frozenset({"reset", "cut", "error", "injected", "client_gone"})

_NOT_JSON = object()


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

    @cached_property
    def session_kind(self) -> str | None:
        """For an exchange derived from a live session (evaluator.sessions): model_call or function_call."""
        session = self.raw.get("session")
        return session.get("kind") if isinstance(session, dict) else None

    @property
    def from_server(self) -> bool:
        """An MCP server's own request or notification (with the client's answer): not the agent's."""
        return self.raw.get("direction") == SERVER_TO_CLIENT

    @property
    def is_request(self) -> bool:
        """One of the agent's requests, as a `requests` budget counts them: not a live session's
        turn or call (they travel on its one upgrade), nor an MCP server's own message."""
        return self.session_kind is None and not self.from_server

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
        body = self.body_json
        if isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(body.get("method"), str):
            return body["method"]
        return None

    @property
    def is_protocol(self) -> bool:
        """An MCP message that is not a tool call (initialize, tools/list, notifications, ...), or
        the upgrade of a live model session (its turns and function calls are exchanges of their own)."""
        method = self.rpc_method
        if self.session_kind is None and session_api(self.raw) is not None:
            return True
        return method is not None and method != "tools/call"

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
        if self.rpc_method != "tools/call":
            return None
        params = self.body_json.get("params")
        name = params.get("name") if isinstance(params, dict) else None
        return name if isinstance(name, str) else "?"

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

    @property
    def committed(self) -> bool:
        status = self.upstream_status
        if status is None or not 200 <= status < 300:
            return False
        if self._reported_failure:
            return False
        return not any(v.strip().lower() == "true" for v in self.upstream_headers.get("idempotent-replayed", ()))

    @property
    def tool_path(self) -> str | None:
        """For an MCP tool call or a live session's function call, <path>/tools/<name>: what tool
        patterns match."""
        name = self.tool_name
        return None if name is None else f"{self.route.rstrip('/')}/tools/{name}"

    @property
    def maybe_committed(self) -> bool:
        if self.upstream_status is not None or not self.forwarded:
            return False
        return self.client_outcome in ("reset", "error", "cut", "client_gone") or self.error is not None

    @property
    def infra_error(self) -> str | None:
        """The proxy's own failure to reach the upstream (refused, DNS, TLS, reset), no fault's."""
        reason = self.raw.get("infra_error")
        return str(reason) if reason else None

    @property
    def failed(self) -> bool:
        status = self.client_status
        if self.client_outcome in _FAILED_OUTCOMES or status is None or status >= 400:
            return True
        return self._reported_failure

    @cached_property
    def resource_id(self) -> str | None:
        """The id of the resource the upstream's answer names (a JSON body's top-level "id", or
        that of an MCP tool result's JSON text), or None."""
        for document in self._answer_documents():
            if isinstance(document, dict) and isinstance(document.get("id"), (str, int)):
                return str(document["id"])
        return None

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
        """What makes two sends the same request: evaluator.identity's, as replay matches them."""
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
    calls among them (evaluator.sessions)."""
    exchanges = [parse_exchange(derived) for line in trace for derived in (line, *session_lines(line))]
    exchanges.sort(key=lambda ex: (ex.started, ex.seq))
    return exchanges


def matches_any(patterns: Iterable[Any], ex: TracedExchange) -> Any:
    """The first pattern naming this call. An MCP tool call (always POST to one URL) is named
    only by tool patterns — globs containing "tools/", tried on <path>/tools/<name>, e.g.
    "POST */tools/refund_order" — so that "POST *" keeps meaning HTTP writes."""
    tool_path = ex.tool_path
    for pattern in patterns:
        if tool_path is None:
            if pattern.matches(ex.method, ex.host, ex.path):
                return pattern
        elif "tools/" in pattern.path and pattern.matches(ex.method, ex.host, tool_path):
            return pattern
    return None


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


def mcp_tool_hints(exchanges: Sequence[TracedExchange]) -> dict[str, Mapping[str, Any]]:
    """{tool: annotations} from every MCP tools/list answer in the trace (readOnlyHint,
    destructiveHint, ...: the MCP spec's own way for a server to say what a tool does)."""
    hints: dict[str, Mapping[str, Any]] = {}
    for ex in exchanges:
        if ex.rpc_method != "tools/list" or ex.rpc_answer is None:
            continue
        result = ex.rpc_answer.get("result")
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                annotations = tool.get("annotations")
                hints[tool["name"]] = annotations if isinstance(annotations, dict) else {}
    return hints


def is_irreversible(task: Any, ex: TracedExchange, hints: Mapping[str, Mapping[str, Any]]) -> bool:
    """Named by the task's irreversible patterns, or an MCP tool its server marks destructive."""
    if matches_any(task.irreversible, ex):
        return True
    return ex.mcp_tool is not None and hints.get(ex.mcp_tool, {}).get("destructiveHint") is True


def seqs(exchanges: Iterable[TracedExchange], limit: int = 6) -> str:
    seqs = [str(ex.seq) for ex in exchanges]
    return ", ".join(seqs[:limit]) + (", …" if len(seqs) > limit else "")

