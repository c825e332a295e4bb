"""timeout: the request is held, never forwarded, then closed or answered 504."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_HOLD_S, FaultKind, ParamSpec

KIND = FaultKind(
    name="timeout",
    description="the request is held, never forwarded, then closed or answered 504",
    params={
        "hold_s": ParamSpec("number", 30, "seconds to hold the request unanswered", minimum=0,
                            maximum=MAX_HOLD_S),
        "then": ParamSpec("string", "close", "what ends the hold", choices=("close", "504")),
    },
    forwards=False,
    over_stdio=('nothing for `hold_s`, then a JSON-RPC error naming a 504 (`then: "504"`) or never an answer '
                "(`close`); the server never sees the call"),
)
