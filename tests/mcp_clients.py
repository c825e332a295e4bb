"""Driving stdio MCP servers with the official SDK's client, as agents do: the server command
with `faultproxy mcp` in front, started with the SDK's default environment."""

from __future__ import annotations

import json
import subprocess
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
async def session(parameters: StdioServerParameters, **callbacks) -> AsyncIterator[ClientSession]:
    """An initialized client session; `callbacks`: ClientSession's (sampling_callback, ...)."""
    async with stdio_client(parameters) as (read, write), ClientSession(read, write, **callbacks) as client:
        await client.initialize()
        yield client


class RawClient:
    """The shim on raw pipes, one message at a time as a client waits for each answer; every
    byte it writes to stdout is kept."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "faultproxy", "mcp", *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.received = b""

    def ask(self, message: dict) -> bytes:
        """Send one message; the next line the shim writes (b"" once it closed its stdout)."""
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        self.received += line
        return line

    def finish(self, timeout: float = 60) -> tuple[int, bytes]:
        rest, stderr = self.process.communicate(timeout=timeout)
        self.received += rest
        return self.process.returncode, stderr


def call(rpc_id: int, tool: str, **arguments) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}
