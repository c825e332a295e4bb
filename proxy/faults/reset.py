"""reset: close the connection before forwarding."""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault
from faultproxy.scenarios.faults import reset
from mitmproxy import http


class ResetFault(Fault):
    kind = reset.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        flow.kill()
        ex.outcome = "reset"
        ex.deliver("connection closed before forwarding")
