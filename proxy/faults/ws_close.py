"""ws_close: the WebSocket session ends right after the matching message."""

from __future__ import annotations

from faultproxy.proxy.faults.base import Fault
from faultproxy.proxy.websocket import MessageFault, WsSession, end_session
from faultproxy.scenarios.faults import ws_close
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage


class WsCloseFault(Fault):
    kind = ws_close.KIND

    async def message(self, flow: http.HTTPFlow, session: WsSession, message: WebSocketMessage,
                      fault: MessageFault) -> None:
        abort = self.params["mode"] == "abort"
        code = None if abort else self.params["code"]
        if end_session(flow, code, self.params["reason"]):
            # delivered once mitmproxy reports the session ended (WsSession.closing)
            session.closing = fault
            session.close = {"by": "proxy", "code": code, "reason": "" if abort else self.params["reason"],
                             "t": session.offset()}
