"""server_error: a 5xx in the provider's dialect."""

from __future__ import annotations

from faultproxy.proxy.faults.provider_error import ProviderErrorFault
from faultproxy.scenarios.faults import server_error


class ServerErrorFault(ProviderErrorFault):
    kind = server_error.KIND
