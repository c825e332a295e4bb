"""What a request is, the protocol's word (formats.request_kinds) with the user's on top.

    declared = Declared.of(task)            # the task's (or policy's) irreversible, effects, read_only
    cls = classify("POST", host, path, headers, lambda: body, declared, hints, server)
    cls.kinds                               # {Kind.MCP_TOOL, Kind.WRITE}: what a rule's `kind:` selects
    cls.access                              # read / write / unclassified (tool calls), None otherwise

`hints` are the MCP tools' annotations as their servers listed them ({(server, name): annotations},
formats.request_kinds.ToolHints); a call takes those of the server it went to (`server`), never
another server's tool of the same name. An MCP tool is a write when a pattern names it (`irreversible`, `effects`) or its annotations say so
(`readOnlyHint: false`, `destructiveHint: true`); a read when `read_only` names it or it is
annotated `readOnlyHint: true`; otherwise *unclassified* — not a write, and shown as such
(`suggested_line`). What the user declares wins over the server's annotations; `irreversible`
wins over `read_only`. An HTTP request is a read or write by its method unless a pattern says
otherwise.

Patterns name MCP tool calls (and a live session's function calls) only when their glob contains
"tools/" (`mcp:NAME` is `*/tools/NAME`): they are tried on <path>/tools/<name>, so that "POST *"
keeps meaning HTTP writes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from faultproxy.formats.model_apis import is_model_call
from faultproxy.formats.request_kinds import (
    Access,
    Kind,
    annotated_access,
    is_destructive,
    is_mcp_plumbing,
    ToolHints,
    mcp_tool_name,
    method_access,
)
from faultproxy.tasks.task_model import MCP_PREFIX


class Pattern(Protocol):
    path: str

    def matches(self, method: str, host: str, path: str) -> bool: ...


def tool_path(route: str, tool: str) -> str:
    """What tool patterns are tried on for a call of `tool` at `route`."""
    return f"{route.split('?', 1)[0].rstrip('/')}/tools/{tool}"


def naming(patterns: Iterable[Pattern], method: str, host: str, path: str, tool: str | None = None) -> Pattern | None:
    """The first pattern naming this request (`tool`: the MCP tool or function it calls, if any)."""
    if tool is None:
        return next((p for p in patterns if p.matches(method, host, path)), None)
    called = tool_path(path, tool)
    return next((p for p in patterns if "tools/" in p.path and p.matches(method, host, called)), None)


@dataclass(frozen=True)
class Declared:
    """What a tasks or policy file says about requests (empty: nothing declared)."""

    irreversible: tuple[Pattern, ...] = ()
    effects: tuple[Pattern, ...] = ()
    read_only: tuple[Pattern, ...] = ()

    @classmethod
    def of(cls, task: Any) -> Declared:
        """A task's declarations (a tasks.task_model.Task, or a policy's online task)."""
        return cls(tuple(task.irreversible), tuple(task.expected.effects), tuple(task.read_only))


NOTHING_DECLARED = Declared()


@dataclass(frozen=True)
class RequestClass:
    """One request's class. `tool`: the MCP tool a tools/call names; `access`: read, write or
    unclassified for a tool call (HTTP or MCP), None for a model call and MCP plumbing."""

    model: bool = False
    plumbing: bool = False
    tool: str | None = None
    access: Access | None = None
    irreversible: bool = False

    @property
    def is_tool_call(self) -> bool:
        return self.access is not None

    @property
    def is_write(self) -> bool:
        return self.access is Access.WRITE

    @property
    def kinds(self) -> frozenset[Kind]:
        """The kinds a scenario rule's `kind:` may select this request by."""
        kinds = set()
        if self.model:
            kinds.add(Kind.MODEL)
        if self.tool is not None:
            kinds.add(Kind.MCP_TOOL)
        if self.access is Access.READ:
            kinds.add(Kind.READ)
        elif self.access is Access.WRITE:
            kinds.add(Kind.WRITE)
        if self.irreversible:
            kinds.add(Kind.IRREVERSIBLE)
        return frozenset(kinds)


MODEL_CALL = RequestClass(model=True)
PLUMBING = RequestClass(plumbing=True)


def tool_class(tool: str, server: str, method: str, host: str, path: str, declared: Declared,
               hints: ToolHints) -> RequestClass:
    """An MCP tool call's (or a live session's function call's) class: see the module docstring.
    `server`: the MCP server the call went to (formats.request_kinds.mcp_server)."""
    annotations = hints.get((server, tool))
    if naming(declared.irreversible, method, host, path, tool) or is_destructive(annotations):
        return RequestClass(tool=tool, access=Access.WRITE, irreversible=True)
    if naming(declared.read_only, method, host, path, tool):
        return RequestClass(tool=tool, access=Access.READ)
    if naming(declared.effects, method, host, path, tool):
        return RequestClass(tool=tool, access=Access.WRITE)
    return RequestClass(tool=tool, access=annotated_access(annotations) or Access.UNCLASSIFIED)


def classify(method: str, host: str, path: str, headers: Mapping[str, Any], body_json: Callable[[], Any],
             declared: Declared = NOTHING_DECLARED,
             hints: ToolHints | None = None, server: str = "") -> RequestClass:
    """What this request is. `headers`: lower-case names; `body_json()` gives the parsed body (any
    value that is not JSON for none), asked only when the path is not a model API's; `server`: the
    MCP server it went to (formats.request_kinds.mcp_server), whose tools' `hints` apply."""
    if is_model_call(path):
        return MODEL_CALL
    body = body_json()
    if is_mcp_plumbing(headers, body):
        return PLUMBING
    tool = mcp_tool_name(body)
    if tool is not None:
        return tool_class(tool, server, method, host, path, declared, hints or {})
    return http_class(method, host, path, declared)


def http_class(method: str, host: str, path: str, declared: Declared) -> RequestClass:
    """A plain HTTP request's class: its method, unless an irreversible or read_only pattern names it."""
    if naming(declared.irreversible, method, host, path):
        return RequestClass(access=Access.WRITE, irreversible=True)
    if naming(declared.read_only, method, host, path):
        return RequestClass(access=Access.READ)
    return RequestClass(access=method_access(method))


def suggested_line(tools: Iterable[str]) -> str:
    """The tasks-file line that would say these unclassified tools only read."""
    names = ", ".join(f'"{MCP_PREFIX}{tool}"' for tool in sorted(set(tools)))
    return f"read_only: [{names}]"


__all__ = ["Declared", "MODEL_CALL", "NOTHING_DECLARED", "PLUMBING", "RequestClass", "classify", "http_class", "naming",
           "suggested_line", "tool_class", "tool_path"]
