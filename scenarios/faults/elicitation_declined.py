"""elicitation_declined: MCP's elicitation/create answered in the client's place as if the user
said no (decline) or dismissed it (cancel); the agent's client never sees the request."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="elicitation_declined",
    params={
        "action": ParamSpec("string", "decline", "the user's answer: refused (decline) or dismissed (cancel)",
                            choices=("decline", "cancel")),
    },
    forwards=False,
)
