"""duplicate_delivery: the request reaches the server a second time once it answered the first."""

from __future__ import annotations

import asyncio

from faultproxy.formats.trace import decode_body
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import RECORDED_FAULT_KEY, Fault
from faultproxy.proxy.stdio.route import STDIO_SUFFIX
from faultproxy.scenarios.faults import duplicate_delivery
from mitmproxy import http


class DuplicateDeliveryFault(Fault):
    kind = duplicate_delivery.KIND

    def buffers_events(self) -> bool:
        return True  # the duplicate goes out before the client hears the first answer, so before its next call

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None:
            ex.detail = "not delivered: the upstream did not answer the first delivery"
            return
        if flow.request.host.endswith(STDIO_SUFFIX):  # the lane, not HTTP, reaches a stdio server
            ex.detail = "not delivered: a stdio server's messages are not duplicated"
            return
        if RECORDED_FAULT_KEY in flow.metadata:  # replay: the duplicate's answer is the recording's, no network
            recorded = (flow.metadata[RECORDED_FAULT_KEY] or {}).get("duplicate")
            if recorded is None:
                ex.detail = "not delivered: the recording holds no duplicate's answer"
                return
            ex.duplicate = (recorded["status"], [tuple(pair) for pair in recorded["headers"]],
                            decode_body(recorded) or b"")
        else:
            await asyncio.sleep(self.params["delay_ms"] / 1000)
            headers = dict(flow.request.headers.items())
            try:
                ex.duplicate = await self.relay.send(ex.method, ex.url, headers, ex.request_body or b"")
            except Exception as error:  # noqa: BLE001 — any failure to reach the upstream: no second delivery
                ex.detail = f"not delivered: the duplicate did not reach the upstream ({error or type(error).__name__})"
                return
        ex.deliver(f"delivered twice; the duplicate was answered {ex.duplicate[0]}")
