"""An agent whose one tool is a stdio MCP server (tests/support/agents/counter_mcp_server.py) behind
`faultproxy mcp`, started by the official SDK's stdio client: it reads the counter once and
prints the answer.

    python tests/support/agents/stdio_counter_agent.py STATE_FILE
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.mcp_clients import counter_server, session, shim_parameters  # noqa: E402


async def main(state: Path) -> None:
    async with session(shim_parameters(counter_server(state))) as client:
        result = await client.call_tool("read_counter", {})
    print(f"counter: {result.content[0].text}")


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
