"""Stale tool calls: calls of an MCP tool its server no longer has, as the client could know it.

A server's tools can change under the agent (tools_changed, or a real deployment). Read per server
(its URL), in the order of the trace: a call is stale when its tool was listed before and the
latest `tools/list` answer the client got no longer lists it, or when the server answered it as an
unknown tool (the official SDK's server: a tool result with isError, "Unknown tool: NAME"), or
as one whose arguments do not fit its schema ("Error executing tool NAME: ... validation error")
once its server's tools had changed (told before, or in the same answer, or the arguments fit the
schema the client last listed: the server rejected what its own listing accepts, as over stdio,
where no notification comes): a call with the old schema. The client had been told when, before
the call, it got `notifications/tools/list_changed` (on any of the server's streams), an
unknown-tool answer or such an invalid-arguments one, or a listing that dropped a tool it had
listed or changed one's input schema: a stale call after that is the agent's mistake, which the
`tool_calls` check fails. A rejected call that did not fit the listed schema either is the
agent's own mistake, not a stale call.

Everything is read as the client got it (the client's answer where a fault changed it).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from faultproxy.evaluator.traces.traced import TracedExchange, documents
from faultproxy.formats.tool_arguments import call_arguments, schema_problems

LIST_CHANGED = "notifications/tools/list_changed"
_UNKNOWN_TOOL = "Unknown tool:"


@dataclass(frozen=True)
class StaleCall:
    seq: int
    tool: str
    told: int | None  # the exchange that had told the client its tools changed, if one had


def stale_tool_calls(exchanges: Sequence[TracedExchange]) -> list[StaleCall]:
    listed: dict[str, dict[str, Any]] = {}  # server -> the tools (and their schemas) of the latest listing the client got
    ever: dict[str, set[str]] = {}  # server -> every tool a listing had
    told: dict[str, int] = {}  # server -> the exchange that first told the client its tools changed
    stale = []
    for ex in sorted(exchanges, key=lambda e: e.seq):
        server = ex.url.split("?")[0]
        answers = _client_documents(ex)
        tool = ex.mcp_tool
        if tool is not None:
            unknown = any(_is_tool_error(document, _UNKNOWN_TOOL) for document in answers)
            rejected = any(_is_tool_error(document, f"Error executing tool {tool}:", "validation error")
                           for document in answers)
            unfit = rejected and (server in told or _notifies(answers) or _fitted(ex, listed.get(server, {}).get(tool)))
            if unknown or unfit or (tool in ever.get(server, ()) and tool not in listed.get(server, {tool: None})):
                stale.append(StaleCall(ex.seq, tool, told.get(server)))
            if unknown or unfit:
                told.setdefault(server, ex.seq)
        tools = _listing(ex, answers)
        if tools is not None:
            before = listed.get(server, {})
            if any(name not in tools or tools[name] != schema for name, schema in before.items()):
                told.setdefault(server, ex.seq)
            listed[server] = tools
            ever.setdefault(server, set()).update(tools)
        if ex.rpc_method == LIST_CHANGED or _notifies(answers):
            told.setdefault(server, ex.seq)
    return stale


def _client_documents(ex: TracedExchange) -> list[Any]:
    """The JSON documents of the answer the client got: the client's, where it differs from the upstream's."""
    client = ex.raw.get("client") or {}
    if client.get("sse") or isinstance(client.get("body"), str):
        return documents(client) or _event_documents(client.get("body"))
    return documents(ex.raw.get("upstream") or {})


def _event_documents(text: Any) -> list[Any]:
    """A buffered event stream recorded as a body: each `data:` line's JSON."""
    found = []
    for line in str(text or "").splitlines():
        if line.startswith("data:"):
            try:
                found.append(json.loads(line[5:].strip()))
            except ValueError:
                continue
    return found


def _listing(ex: TracedExchange, answers: Iterable[Any]) -> dict[str, Any] | None:
    """{tool: its inputSchema} of a tools/list answer."""
    if ex.rpc_method != "tools/list":
        return None
    for document in answers:
        result = document.get("result") if isinstance(document, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        if isinstance(tools, list):
            return {tool["name"]: tool.get("inputSchema") for tool in tools
                    if isinstance(tool, dict) and isinstance(tool.get("name"), str)}
    return None


def _fitted(ex: TracedExchange, schema: Any) -> bool:
    """The call's arguments fit `schema`, the tool's input schema as last listed to the client."""
    return isinstance(schema, dict) and not schema_problems(schema, call_arguments(ex.body_json))


def _is_tool_error(document: Any, starts: str, contains: str = "") -> bool:
    """A tool result with isError whose text starts with `starts` (and contains `contains`)."""
    result = document.get("result") if isinstance(document, dict) else None
    if not (isinstance(result, dict) and result.get("isError") is True and isinstance(result.get("content"), list)):
        return False
    return any(isinstance(item, dict) and str(item.get("text", "")).startswith(starts)
               and contains in str(item.get("text", "")) for item in result["content"])


def _notifies(answers: Iterable[Any]) -> bool:
    return any(isinstance(document, dict) and document.get("method") == LIST_CHANGED for document in answers)
