"""server_restart: the MCP server process restarts between two calls and loses its state.

Over stdio the shim kills the server and starts the same command again, and replays nothing to
it: the client's next request meets a server that was never initialized and answers as such a
server does (the official SDK's: a JSON-RPC error, "Invalid request parameters", to anything but
`ping` before `initialize`), until the client initializes again on the same stream. Over
Streamable HTTP the proxy cannot restart a remote server; the sessions are gone as they would be
after one: 404 with the SDK server's body, on the call and on every later request of that
session and of every other session of the episode's with that server (a restarted server has
lost them all), while a new one the client initializes goes on (as after session_expired); and
the streams those sessions still had open (a GET stream, another call's answer stream) end
unfinished, as the restarted server's dropped connections end them.
`when: before` — the server restarted before the call came: over stdio the call reaches the new
server, which refuses it (it never ran); over HTTP it gets the 404. `after` — the call ran, then
the server restarted before its answer reached the client: the answer is lost (over stdio no
answer ever comes; over HTTP the stream ends empty or the connection closes), which leaves the
call *maybe committed* for the client.
"""

from __future__ import annotations

from faultproxy.scenarios.faults import session_expired
from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="server_restart",
    description=("the MCP server process restarts between two calls and loses its state: over stdio the shim "
                 "starts its command again and replays nothing, so the client's next request meets a server "
                 "never initialized (the official SDK's: -32602 `Invalid request parameters`) until it "
                 "initializes again; over Streamable HTTP its sessions are gone, 404 `Session not found` as "
                 "`session_expired`'s; `when: after` loses the answer of a call that ran (below)"),
    params={
        "when": ParamSpec("string", "after", "the server restarted before the call reached it, or after it ran "
                          "(its answer lost)", choices=("before", "after")),
        "message": session_expired.KIND.params["message"],  # over HTTP: the 404 of a session the server forgot
    },
    forwards=True,
    advice=session_expired.KIND.advice,  # over stdio too: the new server knows no session until the client initializes
    over_stdio=("the shim kills the server (SIGKILL) and starts its command again, replaying nothing; the "
                "session goes on with the new server, which was never initialized: it answers the client's "
                "next request as such a server does (the official SDK's: JSON-RPC error -32602 `Invalid "
                "request parameters`) until the client initializes again on the same stream. `when: before`: "
                "the call itself meets the new server (it never ran); `after` (the default): the call ran and "
                "its answer is lost with the old server, no answer ever comes (nor to other calls in flight)"),
    over_mcp_http=("as `session_expired`: the restarted server has forgotten the session, 404 `Session not found` "
                   "on the call (`when: before`) or, the call having run, its answer stream ends empty (`after`, "
                   "the default), then on every later request of that session and of the client's other sessions "
                   "with that server (all lost with the restart), while a new one the client initializes goes on "
                   "(over stdio: the table above); the streams those sessions still had open end unfinished, as "
                   "a dropped connection ends them: a call in flight on another session gets no answer (the SDK's "
                   "client: \"SSE stream ended without a response\", or, having an event id, a resuming GET with "
                   "`Last-Event-ID` that gets the 404), and its GET stream ends"),
    robust_client=("initializes again (over stdio on the same stream: the SDK's `ClientSession.initialize()` "
                   "answers from its cache, so the client sends `initialize` itself, or starts the server anew), "
                   "re-lists the tools, and repeats the lost write only with its idempotency argument: a retry "
                   "without it (or with a fresh one) fails `idempotency` (high)"),
)
