"""The provider-shaped error answers that rate_limit, server_error and auth_failure make."""

from __future__ import annotations

from faultproxy.formats.model_apis import provider_of
from faultproxy.proxy import responses
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer, request_id
from mitmproxy import http


class ProviderErrorFault(Fault):
    """Answer with the provider's own error (status, headers, body) instead of forwarding."""

    def status(self) -> int:
        return self.params["status"]

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        provider = self.params.get("provider", "auto")
        if provider == "auto":
            provider = provider_of(flow.request.host, flow.request.path, flow.request.headers)
        error = responses.error_response(
            provider,
            self.status(),
            request_id(ex),
            message=self.params.get("message"),
            retry_after_s=self.params.get("retry_after"),
            retry_after_ms=self.params.get("retry_after_ms"),
            limit=self.params.get("limit", "requests"),
        )
        answer(flow, ex, error.status, error.headers, error.body)
        ex.deliver(f"{error.status} {provider}")
