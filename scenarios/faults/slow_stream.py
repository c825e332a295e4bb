"""slow_stream: the upstream's SSE events paced out; the request is forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_DELAY_MS, FaultKind, ParamSpec

KIND = FaultKind(
    name="slow_stream",
    description="SSE events paced out",
    params={
        "first_event_ms": ParamSpec("number", 0, "delay before the first SSE event", minimum=0,
                                    maximum=MAX_DELAY_MS),
        "between_events_ms": ParamSpec("number", 200, "delay between SSE events", minimum=0,
                                       maximum=MAX_DELAY_MS),
    },
    forwards=True,
)
