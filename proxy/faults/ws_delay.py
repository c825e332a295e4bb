"""ws_delay: the matching WebSocket message is held before it is delivered."""

from __future__ import annotations

import asyncio

from faultproxy.proxy.faults.base import Fault
from faultproxy.proxy.faults.delay import drawn_ms
from faultproxy.proxy.websocket import MessageFault, WsSession
from faultproxy.scenarios.faults import ws_delay
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage


class WsDelayFault(Fault):
    kind = ws_delay.KIND

    async def message(self, flow: http.HTTPFlow, session: WsSession, message: WebSocketMessage,
                      fault: MessageFault) -> None:
        # mitmproxy sends the message on once this hook returns: sleeping here holds it (and
        # the session's later messages that way, which keep their order behind it).
        ms = drawn_ms(self.params, self.seed, fault.episode, fault.rule.name, fault.index)
        await asyncio.sleep(ms / 1000)
        fault.deliver(f"{ms:.0f} ms before the message")
