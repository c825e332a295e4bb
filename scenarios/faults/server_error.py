"""server_error: a provider-shaped 5xx answered by the proxy; nothing is forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_RETRY_AFTER_S, FaultKind, ParamSpec
from faultproxy.scenarios.faults.provider_error import MESSAGE, OVER_STDIO, PROVIDER

KIND = FaultKind(
    name="server_error",
    description="500/502/503/504/529, provider-shaped",
    params={
        "status": ParamSpec("integer", 500, "HTTP status", choices=(500, 502, 503, 504, 529)),
        "provider": PROVIDER,
        "retry_after": ParamSpec("number", None, "Retry-After, seconds", minimum=0,
                                  maximum=MAX_RETRY_AFTER_S, nullable=True),
        "message": MESSAGE,
    },
    forwards=False,
    over_stdio=OVER_STDIO,
)
