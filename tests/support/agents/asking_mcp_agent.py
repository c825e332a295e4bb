"""An agent whose MCP client answers its server: the official SDK's stdio client, with sampling,
elicitation and roots callbacks, starts tests/support/agents/asking_mcp_server.py behind `faultproxy mcp`
(SDK default environment) and calls summarize_order (twice), confirm_refund, refund_regardless and
roots, which it gives up on after 1 s (a scenario may lose the answer its server waits for).

    python tests/support/agents/asking_mcp_agent.py STATE_FILE [no]

`no`: its user answers an elicitation with {"confirm": false} (by default, true).
It answers on FAULTPROXY_OUTPUT: {"answer": what the tools said, "asked": what its callbacks
were asked and the progress they were told, in order (method, and the message or progress)}.
"""

import asyncio
import json
import os
import sys
from pathlib import Path

from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client

SERVER = Path(__file__).resolve().parent / "asking_mcp_server.py"


async def main(state: str, confirm: bool) -> None:
    asked: list[list[str]] = []

    async def sampling(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        asked.append(["sampling/createMessage", params.messages[0].content.text])
        return types.CreateMessageResult(role="assistant", model="stub-model",
                                         content=types.TextContent(type="text", text="two widgets, paid"))

    async def elicitation(context, params) -> types.ElicitResult:
        asked.append(["elicitation/create", params.message])
        return types.ElicitResult(action="accept", content={"confirm": confirm})

    async def progress(done: float, total: float | None, message: str | None) -> None:
        asked.append(["notifications/progress", f"{done:g}/{total:g}"])

    async def roots(context) -> types.ListRootsResult:
        asked.append(["roots/list", ""])
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/orders")])

    parameters = StdioServerParameters(command=sys.executable,
                                       args=["-m", "faultproxy", "mcp", "--", sys.executable, str(SERVER), state])
    said = []
    async with stdio_client(parameters) as (read, write), ClientSession(
            read, write, sampling_callback=sampling, elicitation_callback=elicitation, list_roots_callback=roots) as mcp:
        await mcp.initialize()
        await mcp.list_tools()  # the annotations say which tools are irreversible
        for tool, arguments in (("summarize_order", {"order": "A1", "steps": 2}),
                                ("summarize_order", {"order": "A2", "steps": 1}), ("confirm_refund", {"order": "A1"}),
                                ("refund_regardless", {"order": "A2"}), ("roots", {})):
            try:
                result = await mcp.call_tool(tool, arguments, progress_callback=progress,
                                             read_timeout_seconds=1 if tool == "roots" else None)
                said.append(result.content[0].text)
            except Exception as error:  # noqa: BLE001 — a JSON-RPC error, or no answer in time: it says so
                said.append(f"{tool}: {error}")
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump({"answer": "; ".join(said), "asked": asked}, file)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2:] != ["no"]))
