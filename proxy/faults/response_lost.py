"""response_lost: the upstream commits the request; the client never hears back."""

from __future__ import annotations

import asyncio

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer_gateway_timeout
from faultproxy.scenarios.faults import response_lost
from mitmproxy import http


class ResponseLostFault(Fault):
    kind = response_lost.KIND

    def buffers_events(self) -> bool:
        return True

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None:
            return
        mode = self.params["mode"]
        if mode == "504":
            answer_gateway_timeout(flow, ex)
        else:
            if mode == "hang":
                await asyncio.sleep(self.params["hang_s"])
            flow.kill()
            ex.outcome = "reset"
        ex.deliver(f"upstream answered {ex.upstream['status']}; client got {mode}")
