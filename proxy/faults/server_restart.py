"""server_restart: the MCP server restarts and forgets everything it held.

Over stdio the session restarts the server on this fault's word (RESTART_KEY; proxy/stdio/session.py
has the shim kill it and start the command again): `before` forwarding the call, which then meets
the new, never-initialized server; or `after` it answered, the answer lost with the old server.
Over Streamable HTTP the proxy cannot restart a remote server: the sessions are gone, as
session_expired's, and all of them: every session of the episode's that server had given (its
answers' `Mcp-Session-Id`, proxy.faults.lingering.note_session) gets 404 from now on, while a new
session goes on; and its streams still open (another session's GET stream, a slow call's answer)
end unfinished, as its dropped connections end them (proxy.faults.lingering.drop_server_streams).
In replay no server runs: the recording answers as the new server did, and the
fault loses the same answer again and ends the same sessions (replay gives each its own id).
"""

from __future__ import annotations

from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.lingering import Answer, drop_server_streams, end_server_sessions
from faultproxy.proxy.faults.session_expired import SessionExpiredFault
from faultproxy.proxy.stdio.route import STDIO_SUFFIX
from faultproxy.scenarios.faults import server_restart
from mitmproxy import http

RESTART_KEY = "faultproxy_server_restart"  # flow.metadata of a stdio message: "before" or "after" it reaches the server


class ServerRestartFault(SessionExpiredFault):
    kind = server_restart.KIND
    ended_before = "the server restarted and forgot the session; the call never ran"
    ended_after = "then the server restarted and forgot the session before the client heard"
    drops_streams = True

    def end(self, ex: FlowExchange, session: str, gone: Answer) -> None:
        """The restarted server has forgotten every session it held, not only the faulted one,
        and dropped the connections of the streams still open from it."""
        end_server_sessions(ex, session, gone)
        drop_server_streams(ex)

    async def request(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if not flow.request.host.endswith(STDIO_SUFFIX):
            await super().request(flow, ex)
        elif self.params["when"] == "before":
            flow.metadata[RESTART_KEY] = "before"
            ex.deliver("the server restarted before the call came; the new one was never initialized")

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if not flow.request.host.endswith(STDIO_SUFFIX):
            await super().response(flow, ex)
        elif self.params["when"] == "after" and ex.upstream is not None:
            flow.metadata[RESTART_KEY] = "after"
            flow.kill()  # the answer dies with the old server: the client gets nothing
            ex.outcome = "reset"
            ex.deliver(f"the server answered {ex.upstream['status']}, then restarted before the client heard")
