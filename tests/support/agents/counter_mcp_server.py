"""A stdio MCP server on the official SDK (MCPServer) whose state is a file the test can read:
`read_counter` (read-only) and `bump` (irreversible). The file shows whether the server ran a call,
even one whose answer was lost or after which the server was killed.

    python tests/support/agents/counter_mcp_server.py STATE_FILE
"""

from __future__ import annotations

import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

STATE = Path(sys.argv[1])
server = MCPServer("counter")


def _value() -> int:
    return int(STATE.read_text() or 0) if STATE.exists() else 0


@server.tool(annotations=ToolAnnotations(readOnlyHint=True))
def read_counter() -> str:
    """The counter's value."""
    return str(_value())


@server.tool(annotations=ToolAnnotations(destructiveHint=True))
def bump(by: int = 1) -> str:
    """Add to the counter. Irreversible."""
    STATE.write_text(str(_value() + by))
    return str(_value())


if __name__ == "__main__":
    server.run("stdio")
