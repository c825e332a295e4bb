"""Parameters the provider-shaped error faults (rate_limit, server_error, auth_failure) share."""

from __future__ import annotations

from faultproxy.formats.model_apis import PROVIDERS as NAMED_PROVIDERS
from faultproxy.scenarios.faults.base import ParamSpec

PROVIDERS = ("auto", *NAMED_PROVIDERS)

PROVIDER = ParamSpec("string", "auto", "error body and header dialect; auto: the API the request talks to "
                     "(formats.model_apis), else generic", choices=PROVIDERS)
MESSAGE = ParamSpec("string", None, "error message (a provider-style default if null)", nullable=True)
