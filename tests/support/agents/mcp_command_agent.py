"""An agent whose one tool is the stdio MCP server its arguments name (else $MCP_SERVER, a JSON
list), behind `faultproxy mcp` (the official SDK's stdio client starts it): it lists the tools
and answers with their names. A server that cannot be reached crashes it, as it would most agents.

    python tests/support/agents/mcp_command_agent.py [SERVER_COMMAND...]
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.mcp_clients import session, shim_parameters  # noqa: E402


async def main(server: list[str]) -> None:
    async with session(shim_parameters(server)) as client:
        tools = await client.list_tools()
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump({"answer": " ".join(tool.name for tool in tools.tools)}, file)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1:] or json.loads(os.environ["MCP_SERVER"])))
