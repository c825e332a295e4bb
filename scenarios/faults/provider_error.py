"""What the provider-shaped error faults (rate_limit, server_error, auth_failure) share: parameters,
and what a client over stdio sees."""

from __future__ import annotations

from faultproxy.formats.model_apis import PROVIDERS as NAMED_PROVIDERS
from faultproxy.scenarios.faults.base import ParamSpec

PROVIDERS = ("auto", *NAMED_PROVIDERS)

PROVIDER = ParamSpec("string", "auto", "error body and header dialect; auto: the API the request talks to "
                     "(formats.model_apis), else generic", choices=PROVIDERS)
# Over stdio the client gets the JSON-RPC error the shim makes of any status that is no answer.
OVER_STDIO = "a JSON-RPC error naming the HTTP status"
MESSAGE = ParamSpec("string", None, "error message (a provider-style default if null)", nullable=True)
