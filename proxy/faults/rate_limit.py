"""rate_limit: a 429 in the provider's dialect."""

from __future__ import annotations

from faultproxy.proxy.faults.provider_error import ProviderErrorFault
from faultproxy.scenarios.faults import rate_limit


class RateLimitFault(ProviderErrorFault):
    kind = rate_limit.KIND

    def status(self) -> int:
        return 429
