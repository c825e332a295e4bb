"""An MCP server unlike the demo shop's, on the official SDK, for Streamable HTTP behind a gateway
path: a journal whose `post_entry` is irreversible (it says nothing of it: no annotations; a
tasks file names it) and deduplicates on an `idempotency_key` argument, and `list_entries`, a
read. Entries are kept in a JSON file the test reads: it shows whether a call ran, even one whose
answer the client never got. Over stdio the server writes it (empty) when it starts, so the file
shows whether a server ran at all (replay must start none). `Events` makes its streams resumable.

    python tests/support/agents/journal_mcp_server.py STATE_FILE     # over stdio
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp.types import JSONRPCMessage


def entries(state: Path) -> list[dict]:
    return json.loads(state.read_text()) if state.exists() else []


def make_server(state: Path) -> MCPServer:
    server = MCPServer("journal")

    @server.tool()
    def post_entry(account: str, cents: int, idempotency_key: str | None = None) -> str:
        """Post an entry to an account's ledger."""
        book = entries(state)
        for entry in book:
            if idempotency_key is not None and entry["key"] == idempotency_key:
                return json.dumps(entry)  # already posted: the same entry again
        entry = {"id": f"E{len(book) + 1}", "account": account, "cents": cents, "key": idempotency_key}
        state.write_text(json.dumps([*book, entry]))
        return json.dumps(entry)

    @server.tool()
    def list_entries(account: str) -> str:
        """The entries of an account."""
        return json.dumps([entry for entry in entries(state) if entry["account"] == account])

    return server


class Events(EventStore):
    """The events of every stream, kept in memory, so a client that lost a stream resumes it with
    `Last-Event-ID` (the SDK's server then serves what followed on that stream)."""

    def __init__(self) -> None:
        self.events: list[tuple[EventId, StreamId, JSONRPCMessage | None]] = []

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self.events.append((str(len(self.events) + 1), stream_id, message))
        return self.events[-1][0]

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        at = next((i for i, (event_id, _, _) in enumerate(self.events) if event_id == last_event_id), None)
        if at is None:
            return None
        stream = self.events[at][1]
        for event_id, stream_id, message in self.events[at + 1:]:
            if stream_id == stream and message is not None:
                await send_callback(EventMessage(message, event_id))
        return stream


if __name__ == "__main__":
    state = Path(sys.argv[1])
    if not state.exists():  # a restarted server keeps the entries its predecessor wrote
        state.write_text("[]")
    make_server(state).run("stdio")
