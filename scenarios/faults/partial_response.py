"""partial_response: the upstream's answer cut at a byte count, a fraction or an SSE event."""

from __future__ import annotations

from typing import Any

from faultproxy.scenarios.faults.base import MAX_CUT_BYTES, MAX_CUT_EVENTS, FaultKind, ParamProblem, ParamSpec

CUT_POINTS = ("bytes", "fraction", "events")


def _one_cut_point(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    chosen = [key for key in CUT_POINTS if params[key] is not None]
    if len(chosen) > 1:
        raise ParamProblem(chosen[1], f"give only one of bytes, fraction, events (got {' and '.join(chosen)})")
    return params if chosen else {**params, "events": 1}


KIND = FaultKind(
    name="partial_response",
    params={
        "bytes": ParamSpec("integer", None, "cut after this many body bytes (one of bytes, fraction, events)",
                           minimum=0, maximum=MAX_CUT_BYTES, nullable=True),
        "fraction": ParamSpec("number", None, "cut after this fraction of the body",
                              minimum=0, maximum=1, nullable=True),
        "events": ParamSpec("integer", None, "cut after this many SSE events (1 if no cut point is given)",
                            minimum=0, maximum=MAX_CUT_EVENTS, nullable=True),
        "end": ParamSpec("string", "clean", "how the cut stream ends", choices=("clean", "reset")),
    },
    forwards=True,
    cross_check=_one_cut_point,
)
