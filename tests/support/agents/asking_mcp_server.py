"""A stdio MCP server on the official SDK that talks back: `summarize_order` reports progress and
asks the client's model (sampling), `confirm_refund` asks the user to confirm (elicitation) before
an irreversible refund, written to a state file the test reads, and `refund_regardless` asks the
same but refunds whatever the answer (a careless server); `roots` asks what the client exposes;
`announce` tells the client its tools changed, outside any request (over Streamable HTTP: on the
standalone GET stream); `order_status` only reads, and says nothing else (bench/mcp_http.py times it). `make_server(state)` builds it for a test to serve over Streamable HTTP.

    python tests/support/agents/asking_mcp_server.py STATE_FILE             # over stdio
    python tests/support/agents/asking_mcp_server.py STATE_FILE --http PORT # over Streamable HTTP on 127.0.0.1
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.types import SamplingMessage, TextContent, ToolAnnotations
from pydantic import BaseModel


class Confirmation(BaseModel):
    confirm: bool


def make_server(state: Path) -> MCPServer:
    """The server; refunds are written to `state`."""
    server = MCPServer("asking")

    @server.tool()
    async def summarize_order(order: str, steps: int, ctx: Context) -> str:
        """Summarize an order with the client's model, reporting progress `steps` times."""
        for step in range(steps):
            await ctx.report_progress(step + 1, steps)
        with warnings.catch_warnings():  # sampling is deprecated (SEP-2577); servers still send it
            warnings.simplefilter("ignore")
            said = await ctx.request_context.session.create_message(
                [SamplingMessage(role="user", content=TextContent(type="text", text=f"summarize {order}"))], max_tokens=50)
        return f"summary: {said.content.text}"

    @server.tool(annotations=ToolAnnotations(destructiveHint=True))
    async def confirm_refund(order: str, ctx: Context) -> str:
        """Refund an order once the user confirms. Irreversible."""
        answer = await ctx.elicit(f"Refund {order}?", Confirmation)
        if answer.action != "accept" or not answer.data.confirm:
            raise ToolError(f"not refunded: {answer.action}")  # an error result: the tool did not do its job
        state.write_text(order)
        return f"refunded {order}"

    @server.tool(annotations=ToolAnnotations(destructiveHint=True))
    async def refund_regardless(order: str, ctx: Context) -> str:
        """Refund an order, asking first but not listening. Irreversible."""
        await ctx.elicit(f"Refund {order}?", Confirmation)
        state.write_text(order)
        return f"refunded {order}"

    @server.tool()
    async def roots(ctx: Context) -> str:
        """How many roots the client exposes."""
        with warnings.catch_warnings():  # roots too is deprecated (SEP-2577); servers still ask
            warnings.simplefilter("ignore")
            return str(len((await ctx.request_context.session.list_roots()).roots))

    @server.tool()
    async def order_status(order: str) -> str:
        """An order's status."""
        return f"{order}: shipped"

    @server.tool()
    async def announce(ctx: Context) -> str:
        """Tell the client the tool list changed (a notification outside this request)."""
        await ctx.request_context.session.send_tool_list_changed()
        return "announced"

    return server


if __name__ == "__main__":
    if "--http" in sys.argv:
        port = int(sys.argv[sys.argv.index("--http") + 1])
        make_server(Path(sys.argv[1])).run("streamable-http", host="127.0.0.1", port=port)
    else:
        make_server(Path(sys.argv[1])).run("stdio")
