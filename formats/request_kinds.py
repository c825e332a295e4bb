"""What a request is, from the protocol alone: model call, HTTP read or write, MCP plumbing, MCP
tool call (and what its server's annotations say it does).

tasks.request_class adds what a tasks or policy file declares (irreversible, effects,
read_only patterns); the proxy (a rule's `kind:`) and the evaluator (tool calls, writes,
retries) both ask there. Nothing is guessed: an MCP tool its server did not annotate and no
pattern names is *unclassified*, neither a read nor a write.

| kind           | what                                                                             |
|----------------|----------------------------------------------------------------------------------|
| `model`        | a call of a model API (formats.model_apis)                                       |
| `read`         | GET, HEAD, OPTIONS; an MCP tool annotated `readOnlyHint: true`; a `read_only` name |
| `write`        | any other method; an MCP tool annotated `readOnlyHint: false` or `destructiveHint` |
| `irreversible` | a write a task's or policy's `irreversible` pattern names, or a destructive tool |
| `mcp_tool`     | an MCP `tools/call`, whichever transport carries it                              |

MCP plumbing — `initialize`, `notifications/*`, `ping`, `tools/list` and the other lists, the
client's answers to a server's requests, and the requests on a session that are no JSON-RPC
message (the standalone GET stream, the DELETE that ends a session), whatever they are answered
(405 is a valid answer to both) — is none of these: never a tool call, a retry or a budget's request.

A tool's annotations are its server's: two servers may each list a `delete`, one read-only, the
other destructive. They are kept by (server, tool) (`ToolHints`), the server being the endpoint
the tools/list and the tools/call went to (`mcp_server`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

ToolHints = Mapping[tuple[str, str], Mapping[str, Any]]  # (mcp_server, tool) -> what its tools/list gave


class Kind(StrEnum):
    """The classes a scenario rule's `kind:` may select."""

    MODEL = "model"
    READ = "read"
    WRITE = "write"
    IRREVERSIBLE = "irreversible"
    MCP_TOOL = "mcp_tool"


class Access(StrEnum):
    """What a tool call does to the world, as far as anyone said."""

    READ = "read"
    WRITE = "write"
    UNCLASSIFIED = "unclassified"  # an MCP tool nobody annotated or named: not a write, not a read


READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
MCP_SESSION_HEADER = "mcp-session-id"  # Streamable HTTP: sent on every request after initialize
TOOL_CALL = "tools/call"
# What only a client sends (MCP 2025-11-25's ClientRequest and ClientNotification, less what goes
# both ways: ping, tasks/*, notifications/cancelled, progress and tasks/status): never a server's message.
CLIENT_ONLY_METHODS = frozenset({
    "initialize", "tools/list", TOOL_CALL, "resources/list", "resources/templates/list", "resources/read",
    "resources/subscribe", "resources/unsubscribe", "prompts/list", "prompts/get", "completion/complete",
    "logging/setLevel", "notifications/initialized", "notifications/roots/list_changed",
})


def rpc_method(body: Any) -> str | None:
    """The JSON-RPC method of a request body (a parsed JSON document), else None."""
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0" and isinstance(body.get("method"), str):
        return body["method"]
    return None


def is_rpc_message(body: Any) -> bool:
    """A JSON-RPC 2.0 message (request, notification or answer) or a batch of them."""
    if isinstance(body, list):
        return bool(body) and all(is_rpc_message(item) for item in body)
    return isinstance(body, dict) and body.get("jsonrpc") == "2.0"


def mcp_tool_name(body: Any) -> str | None:
    """The tool an MCP tools/call names ("?" when it names none), else None."""
    if rpc_method(body) != TOOL_CALL:
        return None
    params = body.get("params")
    name = params.get("name") if isinstance(params, dict) else None
    return name if isinstance(name, str) else "?"


def is_mcp_plumbing(headers: Mapping[str, Any], body: Any) -> bool:
    """An MCP message that is not a tool call: any JSON-RPC message but tools/call, or a request
    on a Streamable HTTP session that carries none (the GET stream, the DELETE that ends it).
    `headers`: the request's, names in lower case."""
    if is_rpc_message(body):
        return mcp_tool_name(body) is None
    return MCP_SESSION_HEADER in headers


def method_access(method: str) -> Access:
    """An HTTP request's access from its method alone."""
    return Access.READ if method.upper() in READ_METHODS else Access.WRITE


def annotated_access(annotations: Mapping[str, Any] | None) -> Access | None:
    """What an MCP tool's annotations say it does; None when they say nothing (hints are hints:
    their absence says nothing either)."""
    annotations = annotations or {}
    if annotations.get("destructiveHint") is True or annotations.get("readOnlyHint") is False:
        return Access.WRITE
    if annotations.get("readOnlyHint") is True:
        return Access.READ
    return None


def is_destructive(annotations: Mapping[str, Any] | None) -> bool:
    return bool(annotations) and annotations.get("destructiveHint") is True


def mcp_server(url: str) -> str:
    """The MCP server a request went to, as the proxy and the evaluator both name it: the URL's
    host[:port] (lower-case, no credentials) and path, without the query (where older transports
    carry the session). A stdio server's URL is the shim's (its name as host, one path)."""
    parts = urlsplit(url)
    return parts.netloc.rsplit("@", 1)[-1].lower() + parts.path


def listed_tools(server: str, answers: Iterable[Any], key: str = "annotations") -> dict[tuple[str, str], Mapping[str, Any]]:
    """{(server, tool): annotations} (or another `key` of a tool's definition, such as
    inputSchema) from `server`'s JSON-RPC answers to tools/list ({} for a tool without any)."""
    hints: dict[tuple[str, str], Mapping[str, Any]] = {}
    for answer in answers:
        result = answer.get("result") if isinstance(answer, dict) else None
        tools = result.get("tools") if isinstance(result, dict) else None
        for tool in tools if isinstance(tools, list) else ():
            if isinstance(tool, dict) and isinstance(tool.get("name"), str):
                annotations = tool.get(key)
                hints[(server, tool["name"])] = annotations if isinstance(annotations, dict) else {}
    return hints


__all__ = ["Access", "Kind", "MCP_SESSION_HEADER", "READ_METHODS", "TOOL_CALL", "ToolHints", "annotated_access",
           "is_destructive", "is_mcp_plumbing", "is_rpc_message", "listed_tools", "mcp_server", "mcp_tool_name",
           "method_access", "rpc_method"]
