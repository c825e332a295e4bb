"""ws_drop: the matching WebSocket message is not delivered."""

from __future__ import annotations

from faultproxy.proxy.faults.base import Fault
from faultproxy.proxy.websocket import MessageFault, WsSession
from faultproxy.scenarios.faults import ws_drop
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage


class WsDropFault(Fault):
    kind = ws_drop.KIND

    async def message(self, flow: http.HTTPFlow, session: WsSession, message: WebSocketMessage,
                      fault: MessageFault) -> None:
        message.drop()
        fault.deliver(f"the {'client' if message.from_client else 'server'}'s message was not delivered")
