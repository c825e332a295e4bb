"""delay: latency before forwarding or before answering; the request is forwarded."""

from __future__ import annotations

from typing import Any

from faultproxy.scenarios.faults.base import MAX_DELAY_MS, MAX_SIGMA, FaultKind, ParamProblem, ParamSpec


def _bounds_in_order(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    if params["distribution"] == "uniform" and params["min_ms"] > params["max_ms"]:
        raise ParamProblem("max_ms" if "max_ms" in given else "min_ms",
                           f"min_ms ({params['min_ms']}) is greater than max_ms ({params['max_ms']})")
    return params


KIND = FaultKind(
    name="delay",
    description="latency before forwarding or before answering; a drawn delay is capped at 600,000 ms",
    params={
        "at": ParamSpec("string", "request", "delay before forwarding or before answering",
                        choices=("request", "response")),
        "distribution": ParamSpec("string", "fixed", "how the delay is drawn",
                                  choices=("fixed", "uniform", "lognormal")),
        "ms": ParamSpec("number", 1000, "fixed delay", minimum=0, maximum=MAX_DELAY_MS),
        "min_ms": ParamSpec("number", 0, "uniform lower bound (<= max_ms)", minimum=0, maximum=MAX_DELAY_MS),
        "max_ms": ParamSpec("number", 1000, "uniform upper bound", minimum=0, maximum=MAX_DELAY_MS),
        "median_ms": ParamSpec("number", 500, "lognormal median", minimum=0, maximum=MAX_DELAY_MS),
        "sigma": ParamSpec("number", 0.5, "lognormal shape", minimum=0, maximum=MAX_SIGMA),
    },
    forwards=True,
    cross_check=_bounds_in_order,
    over_stdio="the answer comes late (or the call reaches the server late: `at: request`)",
)
