"""ws_inject: an extra WebSocket message before or after the matching one.

Presets speak the session's API (formats.model_apis.live_api_of): OpenAI Realtime `error`
events, and Gemini Live's error document and `goAway`."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from faultproxy.formats.model_apis import LiveApi
from faultproxy.proxy.faults.base import Fault
from faultproxy.proxy.websocket import MessageFault, WsSession, inject
from faultproxy.scenarios.faults import ws_inject
from mitmproxy import http
from mitmproxy.websocket import WebSocketMessage

# preset -> (OpenAI Realtime error type, code, Gemini HTTP-like code, Google status, message)
_ERRORS = {
    "rate_limit": ("rate_limit_error", "rate_limit_exceeded", 429, "RESOURCE_EXHAUSTED",
                   "Rate limit reached. Please try again later."),
    "server_error": ("server_error", "server_error", 500, "INTERNAL",
                     "The server had an error while processing your request."),
    "session_expired": ("invalid_request_error", "session_expired", 401, "UNAUTHENTICATED",
                        "Your session hit the maximum duration."),
}


def preset_message(preset: str, api: LiveApi, event_id: str) -> dict[str, Any]:
    if preset == "go_away":  # Gemini Live's notice that the server will close the session soon
        return {"goAway": {"timeLeft": "10s"}}
    error_type, code, status, google_status, message = _ERRORS[preset]
    if api is LiveApi.GEMINI_LIVE:
        return {"error": {"code": status, "status": google_status, "message": message}}
    return {"type": "error", "event_id": event_id,
            "error": {"type": error_type, "code": code, "message": message, "param": None, "event_id": None}}


class WsInjectFault(Fault):
    kind = ws_inject.KIND

    async def message(self, flow: http.HTTPFlow, session: WsSession, message: WebSocketMessage,
                      fault: MessageFault) -> None:
        p = self.params
        event_id = "event_" + hashlib.sha256(f"{fault.episode}:{fault.rule.name}:{fault.index}".encode()).hexdigest()[:20]
        body = p["message"] if p["preset"] is None else preset_message(p["preset"], session.api, event_id)
        content = json.dumps(body, separators=(",", ":")).encode()
        to_client = p["to"] == "client"
        # mitmproxy sends an injection before the message in hand, and before the rest of what it
        # already read: holding the message back and sending it again through the same queue
        # (WsSession.resend; the injector does the same to what follows) puts each where it belongs.
        if p["position"] == "after":
            session.resend(flow, message)
        session.expected.append((content, fault))
        inject(flow, to_client, content)
        if p["position"] == "before":
            session.resend(flow, message)
