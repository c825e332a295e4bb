"""slow_stream: pace a body event by event. mitmproxy's stream hook cannot wait, so the relay does."""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault
from faultproxy.scenarios.faults import slow_stream
from mitmproxy import http


class SlowStreamFault(Fault):
    kind = slow_stream.KIND

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        await self.relay.route(flow, self.params["first_event_ms"], self.params["between_events_ms"])
        ex.deliver(f"first event after {self.params['first_event_ms']} ms, then every {self.params['between_events_ms']} ms")
