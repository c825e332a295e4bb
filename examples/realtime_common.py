"""What the two realtime agents share: the session's setup, one turn read to its end, the items.

Both talk to the demo model over the Realtime API as a text session (the openai SDK's
`client.realtime.connect`, on `websockets`, which takes HTTPS_PROXY / HTTP_PROXY from the
environment) and carry out the functions it calls against the shop over HTTP. What makes one of
them naive and the other careful is in naive_realtime_agent.py and careful_realtime_agent.py.
"""

from __future__ import annotations

import os
from typing import Any

from agent_common import SYSTEM, Shop
from openai import AsyncOpenAI
from openai.resources.realtime.realtime import AsyncRealtimeConnection

MAX_TURNS = 40


class SessionEnded(ConnectionError):
    """The server closed the session normally before the answer was complete."""


def realtime_client() -> AsyncOpenAI:
    return AsyncOpenAI(api_key=os.environ.get("OPENAI_API_KEY") or "no-key", max_retries=0)


def realtime_tools(shop: Shop) -> list[dict]:
    """The shop's tools in the Realtime API's flat shape (the idempotency key stays the agent's)."""
    return [{"type": "function", **tool["function"]} for tool in shop.tools()]


def user_item(prompt: str) -> dict:
    return {"type": "message", "role": "user", "content": [{"type": "input_text", "text": prompt}]}


def output_item(call: dict, output: str) -> dict:
    return {"type": "function_call_output", "call_id": call["call_id"], "output": output}


async def open_session(conn: AsyncRealtimeConnection, tools: list[dict], items: list[dict]) -> None:
    """Instructions and tools, then the conversation's items (all of them, on a new session)."""
    await conn.session.update(session={"type": "realtime", "instructions": SYSTEM, "tools": tools,
                                       "output_modalities": ["text"]})
    for item in items:
        await conn.conversation.item.create(item=item)


async def one_turn(conn: AsyncRealtimeConnection) -> tuple[str, list[dict]]:
    """Ask for a response and read it to `response.done`: its text and its function calls (as the
    conversation's items). A session that closes first raises (the SDK raises for an error close
    code; a normal close ends its iteration, and this raises SessionEnded)."""
    await conn.response.create()
    text: list[str] = []
    calls: list[dict[str, Any]] = []
    async for event in conn:
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        elif event.type == "response.output_item.done" and event.item.type == "function_call":
            item = event.item
            calls.append({"type": "function_call", "call_id": item.call_id, "name": item.name,
                          "arguments": item.arguments})
        elif event.type == "response.done":
            return "".join(text), calls
    raise SessionEnded("the session closed before the response was done")
