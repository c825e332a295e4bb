"""partial_response: the upstream's answer cut at a byte count, a fraction or an SSE event,
ending cleanly, with a broken read, or with the API's own mid-stream error event."""

from __future__ import annotations

from typing import Any

from faultproxy.scenarios.faults.base import (
    MAX_CUT_BYTES,
    MAX_CUT_EVENTS,
    AgentAnswer,
    FaultKind,
    ParamProblem,
    ParamSpec,
)

CUT_POINTS = ("bytes", "fraction", "events")


def _one_cut_point(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    chosen = [key for key in CUT_POINTS if params[key] is not None]
    if len(chosen) > 1:
        raise ParamProblem(chosen[1], f"give only one of bytes, fraction, events (got {' and '.join(chosen)})")
    if params["end"] == "error" and chosen and chosen[0] != "events":
        raise ParamProblem("end", f"end: error ends an event stream, so it needs events, not {chosen[0]}")
    return params if chosen else {**params, "events": 1}


KIND = FaultKind(
    name="partial_response",
    description=("a body cut at N bytes or a fraction; an SSE stream cut after N events, ending cleanly, with a "
                 "reset, or (`end: error`) with the error event its model API sends when it fails mid-stream "
                 "(below)"),
    params={
        "bytes": ParamSpec("integer", None, "cut after this many body bytes (one of bytes, fraction, events)",
                           minimum=0, maximum=MAX_CUT_BYTES, nullable=True),
        "fraction": ParamSpec("number", None, "cut after this fraction of the body",
                              minimum=0, maximum=1, nullable=True),
        "events": ParamSpec("integer", None, "cut after this many SSE events (1 if no cut point is given)",
                            minimum=0, maximum=MAX_CUT_EVENTS, nullable=True),
        "end": ParamSpec("string", "clean", "how the cut stream ends: cleanly, with a broken read, or (events "
                         "only) with the error event its model API sends when it fails mid-stream",
                         choices=("clean", "reset", "error")),
    },
    forwards=True,
    cross_check=_one_cut_point,
    went_on=AgentAnswer("went on after a cut stream",
                        "treat a stream that ends without its final event as failed"),
)
