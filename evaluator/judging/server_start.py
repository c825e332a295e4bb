"""A stdio MCP server that could not start: the harness's problem, not the agent's.

    detail = server_not_started(exchanges)

`faultproxy mcp -- pyhton server.py` (a typo), or a server that exits before answering
`initialize` (a missing dependency, a missing key), leaves the agent without its tools: whatever
it then does is no verdict on it. The stdio shim answers the client's requests with a 502 that
says so (formats.trace.STDIO_EXITED_HEADER "start", the reason in the body: the command, its
error or its status and last stderr lines), and the episode is incomplete with cause
server_not_started.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultproxy.evaluator.traces import TracedExchange
from faultproxy.formats.trace import STDIO_EXITED_HEADER

FIX = "check the server command in the agent's MCP configuration (faultproxy mcp -- CMD) and run it by hand"


def server_not_started(exchanges: Sequence[TracedExchange]) -> str | None:
    """What the first server that did not start said (its address, reason and the fix), or None."""
    for ex in exchanges:
        if ex.upstream_status == 502 and ex.upstream_headers.get(STDIO_EXITED_HEADER) == ("start",):
            reason = str((ex.raw.get("upstream") or {}).get("body") or "").strip()
            return f"{ex.method} {ex.netloc}{ex.route}: {reason} → {FIX}"
    return None
