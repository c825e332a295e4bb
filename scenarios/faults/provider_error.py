"""Parameters the provider-shaped error faults (rate_limit, server_error, auth_failure) share."""

from __future__ import annotations

from faultproxy.scenarios.faults.base import ParamSpec

PROVIDERS = ("auto", "openai", "anthropic", "generic")

PROVIDER = ParamSpec("string", "auto", "error body and header dialect", choices=PROVIDERS)
MESSAGE = ParamSpec("string", None, "error message (a provider-style default if null)", nullable=True)
