"""ws_drop: a WebSocket message is not delivered (the other side never sees it)."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind

KIND = FaultKind(
    name="ws_drop",
    description=("a WebSocket message (its rule's match has a `websocket:` block, see [WebSocket "
                 "sessions](websocket.md)) is not delivered"),
    params={},
    forwards=False,
    on_messages=True,
)
