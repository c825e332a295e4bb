"""ws_delay: a WebSocket message is held `ms` before it is delivered (later messages of the
session wait behind it: a WebSocket keeps its order)."""

from __future__ import annotations

from faultproxy.scenarios.faults import delay
from faultproxy.scenarios.faults.base import FaultKind

KIND = FaultKind(
    name="ws_delay",
    description=("a WebSocket message held before delivery; later messages wait behind it; a drawn delay is "
                 "capped at 600,000 ms"),
    params={name: spec for name, spec in delay.KIND.params.items() if name != "at"},
    forwards=True,
    cross_check=delay.KIND.cross_check,
    on_messages=True,
)
