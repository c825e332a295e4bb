"""Driving stdio MCP servers with the official SDK's client, as agents do: the server command
with `faultproxy mcp` in front, started with the SDK's default environment."""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

AGENTS = Path(__file__).resolve().parent / "agents"
COUNTER_SERVER = AGENTS / "counter_mcp_server.py"


def shim_parameters(server: Sequence[str], *shim_flags: str) -> StdioServerParameters:
    """`faultproxy mcp [flags] -- server...` as an MCP configuration's command and args (no env:
    the SDK's default, six variables)."""
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "faultproxy", "mcp", *shim_flags, "--", *server])


def counter_server(state: Path) -> list[str]:
    return [sys.executable, str(COUNTER_SERVER), str(state)]


@asynccontextmanager
async def session(parameters: StdioServerParameters) -> AsyncIterator[ClientSession]:
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as client:
        await client.initialize()
        yield client
