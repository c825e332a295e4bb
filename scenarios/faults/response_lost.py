"""response_lost: the upstream commits the request; the client never hears back."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_HOLD_S, FaultKind, ParamSpec

KIND = FaultKind(
    name="response_lost",
    description="the upstream commits the request; the response is dropped",
    params={
        "mode": ParamSpec("string", "reset", "the upstream commits; the client sees this instead",
                          choices=("reset", "hang", "504")),
        "hang_s": ParamSpec("number", 10, "seconds to hang in mode hang", minimum=0, maximum=MAX_HOLD_S),
    },
    forwards=True,
    over_stdio="the server runs the call; its answer never comes (`504`: a JSON-RPC error instead)",
)
