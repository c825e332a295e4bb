"""auth_failure: a provider-shaped 401 or 403 answered by the proxy; nothing is forwarded."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec
from faultproxy.scenarios.faults.provider_error import MESSAGE, OVER_STDIO, PROVIDER

KIND = FaultKind(
    name="auth_failure",
    description="401/403, provider-shaped",
    params={
        "status": ParamSpec("integer", 401, "HTTP status", choices=(401, 403)),
        "provider": PROVIDER,
        "message": MESSAGE,
    },
    forwards=False,
    over_stdio=OVER_STDIO,
)
