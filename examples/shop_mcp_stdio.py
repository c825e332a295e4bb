"""The shop's orders as a stdio MCP server, written with the official SDK (`mcp` 2.x, MCPServer).

Two tools over one shop tenant's REST API: `get_order` (read-only) and `refund_order`
(irreversible; an optional `idempotency_key` argument makes a retry safe). MCP clients start it
with a bare environment, so the shop's URL comes as an argument:

    python examples/shop_mcp_stdio.py --shop http://127.0.0.1:PORT/t/TENANT

Its own calls to the shop never go through a proxy: they are the server's backend, not the
agent's traffic (`faultproxy mcp` sees the agent's JSON-RPC on the server's stdin and stdout).
"""

from __future__ import annotations

import argparse
import json

import httpx
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations


def build(shop_url: str) -> MCPServer:
    server = MCPServer("shop-orders")
    shop = httpx.AsyncClient(base_url=shop_url.rstrip("/"), trust_env=False, timeout=30)

    async def reply(response: httpx.Response) -> str:
        if response.is_success:
            return response.text
        raise ValueError(f"shop answered {response.status_code}: {response.text}")

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    async def get_order(order_id: str) -> str:
        """Get one order by id, with its items, totals and status."""
        return await reply(await shop.get(f"/orders/{order_id}"))

    @server.tool(annotations=ToolAnnotations(destructiveHint=True, idempotentHint=False))
    async def refund_order(order_id: str, reason: str = "requested_by_customer",
                           idempotency_key: str | None = None) -> str:
        """Refund a paid order in full. Irreversible."""
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return await reply(await shop.post(f"/orders/{order_id}/refund", content=json.dumps({"reason": reason}),
                                           headers={"content-type": "application/json", **headers}))

    return server


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shop", required=True, help="the shop (tenant) URL")
    build(parser.parse_args().shop).run("stdio")


if __name__ == "__main__":
    main()
