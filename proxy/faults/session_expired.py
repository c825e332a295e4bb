"""session_expired: the server has forgotten the MCP session; its requests are answered 404. The
client's other sessions with the server go on (server_restart ends them all)."""

from __future__ import annotations

from collections.abc import Callable

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, answer
from faultproxy.proxy.faults.lingering import SESSION_HEADER, Answer, end_session, session_gone, session_of
from faultproxy.scenarios.faults import session_expired
from mitmproxy import http


class SessionExpiredFault(Fault):
    kind = session_expired.KIND
    # what the trace's fault detail says happened to the session (server_restart says it restarted)
    ended_before = "the server had forgotten the session; the call never ran"
    ended_after = "then the session ended before the client heard"

    def end(self, ex: FlowExchange, session: str, gone: Answer) -> None:
        """The server forgets `session`: its later requests get `gone`."""
        end_session(ex, session, gone)

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        session = session_of(flow)
        if session is None:
            ex.detail = "no session to expire: the request carries no Mcp-Session-Id"
        elif self.params["when"] == "before":
            gone = session_gone(self.params["message"])
            self.end(ex, session, gone)
            answer(flow, ex, *gone)
            ex.deliver(self.ended_before)

    def event_shaper(self, ex: FlowExchange) -> Callable[[bytes], bytes | None] | None:
        """when: after, on an answer stream: the session ends as the call runs, and the server
        closes the stream with nothing more on it (the SDK's client then says the stream ended
        without a response)."""
        if self.params["when"] != "after" or not any(name.lower() == SESSION_HEADER for name, _ in ex.request_headers):
            return None
        return lambda event: None

    async def responseheaders(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """An answer stream: the session ends now, before the client can see the stream end and
        send its next request."""
        session = session_of(flow)
        if self.params["when"] == "after" and session is not None and flow.response.stream:
            self.end(ex, session, session_gone(self.params["message"]))

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        session = session_of(flow)
        if self.params["when"] != "after" or session is None or ex.upstream is None:
            return
        if flow.response.stream:
            ex.outcome = "cut"
        else:  # a JSON answer: the session ends, and the connection closes before the answer
            self.end(ex, session, session_gone(self.params["message"]))
            flow.kill()
            ex.outcome = "reset"
        ex.deliver(f"the server answered {ex.upstream['status']}, {self.ended_after}")
