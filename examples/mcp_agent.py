"""The careful agent's loop with its tools from an MCP server, through the official SDK's clients.

MCP_TRANSPORT=stdio (the default): it starts examples/shop_mcp_stdio.py the way MCP clients start
servers, from a command and arguments and the SDK's default environment (HOME, LOGNAME, PATH,
SHELL, TERM, USER only), with `faultproxy mcp --` in front, as a user edits an MCP configuration:

    {"command": "faultproxy", "args": ["mcp", "--", "python", "examples/shop_mcp_stdio.py", "--shop", URL]}

Under `faultproxy run` the shim finds the episode by itself; by hand it is a plain relay.
`--direct` starts the server without the shim. MCP_TRANSPORT=http: the shop's own MCP endpoint
(SHOP_URL/mcp) over Streamable HTTP, through the proxy the environment names.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import threading
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from examples.agent_common import complete, configure, finish, openai_client, run  # noqa: E402

HERE = Path(__file__).resolve().parent
CALL_TIMEOUT_S = float(os.environ.get("MCP_CALL_TIMEOUT_S", "20"))  # how long it waits for a tool's answer


def server_parameters(shop_url: str, direct: bool = False) -> StdioServerParameters:
    server = [sys.executable, str(HERE / "shop_mcp_stdio.py"), "--shop", shop_url]
    shim = [] if direct else ["-m", "faultproxy", "mcp", "--"]
    command = server if direct else [sys.executable, *shim, *server]
    return StdioServerParameters(command=command[0], args=command[1:])  # env: the SDK's default


class McpTools:
    """An MCP session on a loop of its own, so the agent's synchronous loop can call it."""

    def __init__(self, transport: AbstractAsyncContextManager) -> None:
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self._stop = asyncio.Event()
        self._ready: asyncio.Future = self.loop.create_future()
        asyncio.run_coroutine_threadsafe(self._session(transport), self.loop)
        self.session: ClientSession = self._wait(self._ready)

    async def _session(self, transport: AbstractAsyncContextManager) -> None:
        try:
            async with transport as (read, write), ClientSession(read, write) as session:
                await session.initialize()
                self._ready.set_result(session)
                await self._stop.wait()
        except BaseException as error:  # noqa: BLE001 — handed to whoever waits
            if not self._ready.done():
                self._ready.set_exception(error)

    def _wait(self, awaitable: Any, timeout: float | None = 60) -> Any:
        async def wait() -> Any:
            return await asyncio.wait_for(awaitable, timeout)
        return asyncio.run_coroutine_threadsafe(wait(), self.loop).result()

    def openai_tools(self) -> list[dict]:
        listed = self._wait(self.session.list_tools())
        return [{"type": "function", "function": {"name": t.name, "description": t.description or "",
                                                  "parameters": t.input_schema}} for t in listed.tools]

    def call(self, name: str, arguments: str) -> str:
        """The tool's text, or an error the model can read (a failed call, or no answer in time)."""
        try:
            result = self._wait(self.session.call_tool(name, json.loads(arguments or "{}")), timeout=CALL_TIMEOUT_S)
        except Exception as error:  # noqa: BLE001 — the model is told, as a careful agent does
            return json.dumps({"error": f"{type(error).__name__}: {error}"})
        text = "".join(getattr(block, "text", "") for block in result.content)
        return json.dumps({"error": text}) if result.is_error else text

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._stop.set)


def main() -> None:
    direct = "--direct" in sys.argv
    if direct:
        sys.argv.remove("--direct")
    cfg = configure(__doc__)
    client = openai_client(max_retries=2)
    if os.environ.get("MCP_TRANSPORT", "stdio") == "http":
        transport = streamable_http_client(cfg.shop_url.rstrip("/") + "/mcp")
    else:
        transport = stdio_client(server_parameters(cfg.shop_url, direct))
    tools = McpTools(transport)
    try:
        definitions = tools.openai_tools()
        output = run(lambda messages: complete(client, cfg, messages, definitions)[0], tools.call, cfg.prompt)
    finally:
        tools.close()
    finish(output)


if __name__ == "__main__":
    main()
