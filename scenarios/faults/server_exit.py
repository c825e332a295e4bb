"""server_exit: the MCP server process dies mid-session, as crashed servers do.

Over stdio the shim kills the server (SIGKILL) and closes the client's stream: the call gets no
answer and the client sees its server gone. `when: before` — it dies as the call arrives, which
is never executed; `after` — it executes the call, then dies before answering (the worst case for
an irreversible tool). Over HTTP the proxy cannot stop a remote server: the client gets a 502
Bad Gateway instead, as from a gateway whose backend just died.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="server_exit",
    description=("the MCP server dies mid-session: over stdio the shim kills it and the client's stream ends "
                 "(see [MCP servers over stdio](mcp-stdio.md)); over HTTP a 502"),
    params={
        "when": ParamSpec("string", "after", "before the call reaches the server, or after it executed",
                          choices=("before", "after")),
    },
    forwards=True,
    over_stdio=("the server is killed (SIGKILL) as the call arrives (`when: before`) or after it ran (`after`, "
                "the default); no answer, the client's stream ends"),
)
