"""reset: the connection closes before the request is forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind

KIND = FaultKind(
    name="reset",
    description="the connection closes without a response",
    params={},
    forwards=False,
)
