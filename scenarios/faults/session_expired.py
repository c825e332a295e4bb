"""session_expired: an MCP server over Streamable HTTP has forgotten the client's session.

The request carrying `Mcp-Session-Id` is answered 404 with the JSON-RPC error the official SDK's
server sends for an unknown session, and so is every later request of that session in the
episode; the client's other sessions with the server, and a new one it initializes, go on (a
request with no session header reaches the server as ever).
`when: before` — the server had forgotten the session before the call came; it never ran.
`after` — the call ran, then the session ended before its answer reached the client: the answer
is lost (the connection closes), which leaves the call *maybe committed* for the client. A
request with no session (an `initialize`) is forwarded; the fault is recorded as not delivered.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

# Neither a retry on the forgotten session nor an idempotency key gets a call through: the client
# must begin a session again first (server_restart's advice too).
_AGAIN = "initialize a new session (the server has forgotten this one), then retry the call, a write with the same " \
         "idempotency key"

KIND = FaultKind(
    name="session_expired",
    description=("MCP over Streamable HTTP: the server has forgotten the session; the request carrying "
                 "`Mcp-Session-Id` gets 404 `Session not found`, and so does every later request of that "
                 "session; other sessions, and a new one the client initializes, go on (below)"),
    params={
        "when": ParamSpec("string", "before", "the session ended before the call reached the server, "
                          "or after it ran", choices=("before", "after")),
        "message": ParamSpec("string", "Session not found", "the JSON-RPC error's message"),
    },
    forwards=False,
    advice={"gave up": _AGAIN, "went on without retrying": f"{_AGAIN}, or report that the task is unfinished"},
    over_stdio=("nothing: a stdio session has no `Mcp-Session-Id` to forget; the fault is recorded as not "
                "delivered, saying so"),
    over_mcp_http=("404 `Session not found` (the official SDK's server's answer) on the call and on every later "
                   "request of that session, DELETE included (its other sessions with the server, and a new one it "
                   "initializes, go on); with `when: "
                   "after` the call ran and its answer stream ends empty first (the SDK's client: \"SSE stream "
                   'ended without a response")'),
    robust_client=("initializes a new session and goes on, without repeating a write whose outcome it did not "
                   "see: a retry of the irreversible call without its idempotency argument (or with a fresh one) "
                   "fails `idempotency` (high)"),
)
