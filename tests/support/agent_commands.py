"""The command lines of the agent scripts in tests/support/agents/ that end-to-end tests run, each under
the interpreter running the tests."""

from __future__ import annotations

import sys
from pathlib import Path

from tests.support.layout import AGENTS

PROBE_AGENT = [sys.executable, str(AGENTS / "probe_agent.py")]
REFUND_AGENT = [sys.executable, str(AGENTS / "refund_agent.py")]
DESK_AGENT = [sys.executable, str(AGENTS / "desk_chat_agent.py")]
BOOKING_AGENT = [sys.executable, str(AGENTS / "booking_agent.py")]
MCP_COMMAND_AGENT = [sys.executable, str(AGENTS / "mcp_command_agent.py")]


def agent_command(agent: Path, *flags: str) -> list[str]:
    """An agent script written by the test itself (outside tests/support/agents/)."""
    return [sys.executable, str(agent), *flags]
