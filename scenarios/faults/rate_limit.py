"""rate_limit: a 429 with the provider's retry headers and error body; nothing is forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_RETRY_AFTER_S, FaultKind, ParamSpec
from faultproxy.scenarios.faults.provider_error import MESSAGE, OVER_STDIO, PROVIDER

KIND = FaultKind(
    name="rate_limit",
    description=("429 with `retry-after`, `retry-after-ms`, the provider's error body and rate-limit headers "
                 "(Gemini: the wait as a `RetryInfo` detail in the body, as Google sends it)"),
    params={
        "provider": PROVIDER,
        "retry_after": ParamSpec("number", 1, "Retry-After, seconds", minimum=0, maximum=MAX_RETRY_AFTER_S),
        "retry_after_ms": ParamSpec(
            "integer", None, "retry-after-ms header; null means retry_after * 1000",
            minimum=0, maximum=MAX_RETRY_AFTER_S * 1000, nullable=True,
        ),
        "limit": ParamSpec("string", "requests", "which limit is exhausted", choices=("requests", "tokens")),
        "message": MESSAGE,
    },
    forwards=False,
    over_stdio=OVER_STDIO,
)
