"""timeout: hold the request without forwarding it; the client's own timeout usually fires first."""

from __future__ import annotations

import asyncio

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer_gateway_timeout
from faultproxy.scenarios.faults import timeout
from mitmproxy import http


class TimeoutFault(Fault):
    kind = timeout.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        await asyncio.sleep(self.params["hold_s"])
        if self.params["then"] == "504":
            answer_gateway_timeout(flow, ex)
        else:
            flow.kill()
            ex.outcome = "reset"
        ex.deliver(f"held {self.params['hold_s']} s, then {self.params['then']}")
