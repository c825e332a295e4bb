"""tools_changed: an MCP server's tools change under the agent, just before the call its rule matches.

The tool (`tool`, default the one the matching `tools/call` names) is removed, or renamed `to`
(default its name + `_v2`), from then on for the rest of the episode: later `tools/list` answers
from that server no longer list it (or list it under its new name), a call to it gets the
result the official SDK's server gives for an unknown tool (`isError`, "Unknown tool: NAME"), and
a call by its new name reaches the server under the old one. The matching call itself, when it
names the tool, is answered so in the server's place (not forwarded), after a
`notifications/tools/list_changed` on the same answer stream when `notify` (a server that
declared `listChanged`) and the client accepts a stream.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="tools_changed",
    params={
        "change": ParamSpec("string", "remove", "what happens to the tool", choices=("remove", "rename")),
        "tool": ParamSpec("string", None, "the tool that changes (default: the one the matching call names)",
                          nullable=True),
        "to": ParamSpec("string", None, "its new name, for rename (default: its name + _v2)", nullable=True),
        "notify": ParamSpec("boolean", True, "send notifications/tools/list_changed first, as a server that "
                            "declared listChanged does"),
    },
    forwards=False,
)
