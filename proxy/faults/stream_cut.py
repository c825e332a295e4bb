"""stream_cut: an MCP event stream ends after N events, as partial_response cuts one by events."""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.partial_response import PartialResponseFault
from faultproxy.scenarios.faults import stream_cut
from mitmproxy import http


class StreamCutFault(PartialResponseFault):
    kind = stream_cut.KIND

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None:
            return
        if not flow.response.stream:
            ex.detail = "not delivered: the answer is no event stream"
            return
        await super().response(flow, ex)
