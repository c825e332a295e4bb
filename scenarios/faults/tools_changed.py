"""tools_changed: an MCP server's tools change under the agent, just before the call its rule matches.

The tool (`tool`, default the one the matching `tools/call` names) is removed, renamed `to`
(default its name + `_v2`), or has its input schema changed by `ops` (schema_drift's ops, on the
tool's `inputSchema`: `properties.cents` renamed `amount_cents`, `required` replaced, ...), from
then on for the rest of the episode: later `tools/list` answers from that server no longer list
it (or list it under its new name, or with its new schema), a call to it gets the result the
official SDK's server gives for an unknown tool (`isError`, "Unknown tool: NAME") or, when its
arguments do not fit the new schema, for invalid arguments; a call by its new name, or fitting
the new schema, reaches the server as the old tool's. The matching call itself, when it names
the tool (and, for `schema`, does not fit the new schema), is answered so in the server's place
(not forwarded), after a `notifications/tools/list_changed` on the same answer stream when
`notify` (a server that declared `listChanged`) and the client accepts a stream.
"""

from __future__ import annotations

from typing import Any

from faultproxy.scenarios.faults.base import FaultKind, ParamProblem, ParamSpec
from faultproxy.scenarios.faults.schema_drift import read_ops


def _ops_for_schema(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    if params["change"] == "schema" and not params["ops"]:
        raise ParamProblem("ops", "change: schema needs `ops`, the edits to the tool's inputSchema")
    if params["change"] != "schema" and "ops" in given:
        raise ParamProblem("ops", f"ops applies to change: schema, not {params['change']}")
    return params


KIND = FaultKind(
    name="tools_changed",
    description=("an MCP server's tools change just before the call its rule matches, for the rest of the "
                 "episode: the tool is removed, renamed, or has its `inputSchema` changed (below)"),
    params={
        "change": ParamSpec("string", "remove", "what happens to the tool", choices=("remove", "rename", "schema")),
        "tool": ParamSpec("string", None, "the tool that changes (default: the one the matching call names)",
                          nullable=True),
        "to": ParamSpec("string", None, "its new name, for rename (default: its name + _v2)", nullable=True),
        "ops": ParamSpec("ops", None, "for change: schema, schema_drift's ops on the tool's inputSchema "
                         "(paths from it: properties.NAME, required)", nullable=True, read=read_ops),
        "notify": ParamSpec("boolean", True, "send notifications/tools/list_changed first, as a server that "
                            "declared listChanged does"),
    },
    forwards=False,
    cross_check=_ops_for_schema,
    over_stdio=("the call gets the unknown-tool result, or (`change: schema`) the invalid-arguments one when it "
                "does not fit the new schema (no notification: over stdio the proxy sends the client nothing of "
                "its own); later listings and calls change as over HTTP"),
    over_mcp_http=("the called tool is gone (or renamed): `Unknown tool: NAME` as the official SDK's server "
                   "answers it, after `notifications/tools/list_changed` on the same stream; later listings no "
                   "longer have it (or have it renamed), and the old name stays unknown. With `change: schema` "
                   "its `inputSchema` changed (`ops`, as `schema_drift`'s): a call with the old arguments gets "
                   "the SDK server's invalid-arguments result (`Error executing tool NAME: 1 validation error "
                   "for NAMEArguments` ...) after the notification, later listings show the new schema, and a "
                   "call that fits it reaches the server"),
    robust_client=("re-lists on the notification or on the error and uses the new definition: a call of a tool "
                   "its server no longer has, or with its old schema (answered as invalid arguments), once told, "
                   "fails `tool_calls` (medium); every such call is counted in the verdict's `stale_tool_calls`"),
)
