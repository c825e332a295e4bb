"""auth_failure: a 401 or 403 in the provider's dialect."""

from __future__ import annotations

from faultproxy.proxy.faults.provider_error import ProviderErrorFault
from faultproxy.scenarios.faults import auth_failure


class AuthFailureFault(ProviderErrorFault):
    kind = auth_failure.KIND
