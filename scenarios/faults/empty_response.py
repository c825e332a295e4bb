"""empty_response: a well-formed model answer with no text and no tool call; forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind

KIND = FaultKind(
    name="empty_response",
    description="a well-formed model answer with no text and no tool call",
    params={},
    forwards=True,
)
