"""elicitation_declined: MCP's elicitation/create answered in the client's place as if the user
said no (decline) or dismissed it (cancel); the agent's client never sees the request."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="elicitation_declined",
    description=("an MCP server's `elicitation/create` answered in the client's place as a user who says no "
                 "(`decline`) or dismisses it (`cancel`); the agent's client never sees it (see [MCP servers "
                 "over stdio](mcp-stdio.md))"),
    params={
        "action": ParamSpec("string", "decline", "the user's answer: refused (decline) or dismissed (cancel)",
                            choices=("decline", "cancel")),
    },
    forwards=False,
)
