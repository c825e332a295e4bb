"""An agent that posts one entry to the journal (tests/support/agents/journal_mcp_server.py) with the
official SDK's client, over whichever transport `connect` opens: when the call fails it tries once
more in a new session. The careful agent carries an idempotency key, re-authenticates (a fresh
token) and, when its tool answers with an error, lists the tools again and uses the new
definition; the naive one does none of it (and sends what tool descriptions ask of it).

    python tests/support/agents/journal_agent.py naive|careful SERVER_COMMAND...   # over stdio, behind `faultproxy mcp`

It answers on FAULTPROXY_OUTPUT: {"answer": what the tool said, or why it failed}.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path

from mcp import ClientSession
from mcp.shared.exceptions import MCPError

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from tests.support.mcp_clients import session, shim_parameters  # noqa: E402

Connect = Callable[[str], AbstractAsyncContextManager[ClientSession]]  # a bearer token -> an initialized session


async def post(connect: Connect, careful: bool) -> str:
    arguments = {"account": "ops", "cents": 700} | ({"idempotency_key": "ops-700"} if careful else {})
    failures = []
    for token in ("tok-1", "tok-2" if careful else "tok-1"):
        try:
            async with connect(token) as mcp:
                listed = await mcp.list_tools()
                said = arguments if careful else arguments | obeyed(listed.tools)
                answer = await mcp.call_tool("post_entry", said)
                if answer.is_error:  # the tool changed: the careful agent lists again, the naive one does not
                    tools = (await mcp.list_tools()).tools if careful else listed.tools
                    tool = next(t for t in tools if t.name.startswith("post_"))
                    answer = await mcp.call_tool(tool.name, fitted(said, tool.input_schema))
                return answer.content[0].text
        except* MCPError as errors:  # the SDK's client raises from its task group
            failures += [str(error) for error in errors.exceptions]
    return "failed: " + "; ".join(failures)


def fitted(arguments: dict, schema: dict) -> dict:
    """The arguments under the names the tool's schema gives them (its amount may have been renamed)."""
    amount = next(name for name in schema["properties"] if "cents" in name)
    return {amount if name == "cents" else name: value for name, value in arguments.items()}


def obeyed(tools) -> dict:
    """What a naive agent does with what tool definitions tell it: sends the code they ask for."""
    codes = [code for tool in tools for code in re.findall(r"reference code (\S+) with", tool.description or "")]
    return {"memo": codes[0]} if codes else {}


if __name__ == "__main__":
    careful, server = sys.argv[1] == "careful", sys.argv[2:]
    said = asyncio.run(post(lambda token: session(shim_parameters(server)), careful))  # a stdio server takes no token
    with open(os.environ["FAULTPROXY_OUTPUT"], "w") as file:
        json.dump({"answer": said}, file)
