"""A third-party-style MCP server on the official SDK whose tools carry no annotations at all, as
most servers in the wild: `lookup_account` (it only reads, but says nothing) and `issue_credit`
(it writes a line per credit to a ledger file the test reads). `make_server(ledger)` builds it for
a test to serve over Streamable HTTP.

    python tests/support/agents/ledger_mcp_server.py LEDGER_FILE    # over stdio
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer


def make_server(ledger: Path) -> MCPServer:
    server = MCPServer("ledger")

    @server.tool()
    def lookup_account(account: str) -> str:
        """An account's balance and credits so far."""
        credits = ledger.read_text().splitlines().count(account) if ledger.exists() else 0
        return json.dumps({"account_ref": account, "balance_minor": 1200 + 500 * credits, "credits": credits})

    @server.tool()
    def issue_credit(account: str, amount_minor: int) -> str:
        """Credit an account."""
        with ledger.open("a") as file:
            file.write(account + "\n")
        return json.dumps({"credit_ref": f"CR-{account}", "amount_minor": amount_minor})

    return server


if __name__ == "__main__":
    make_server(Path(sys.argv[1])).run("stdio")
