"""A naive realtime agent: the Realtime API's tool loop as most voice agents start. Read it next
to careful_realtime_agent.py.

- One session for the whole task: if it closes mid-answer, the agent is done for (the SDK raises).
- Its writes carry no idempotency key, and it does not retry.

Usage: SHOP_URL=... OPENAI_BASE_URL=... python examples/naive_realtime_agent.py --prompt "Refund order 1001."
"""

from __future__ import annotations

import asyncio
import json

from agent_common import Shop, configure, finish, parse_answer, tool_message
from realtime_common import MAX_TURNS, one_turn, open_session, output_item, realtime_client, realtime_tools, user_item


async def main() -> dict:
    cfg = configure(__doc__)
    shop = Shop(cfg.shop_url, mcp=False)
    async with realtime_client().realtime.connect(model=cfg.model) as conn:
        await open_session(conn, realtime_tools(shop), [user_item(cfg.prompt)])
        for _ in range(MAX_TURNS):
            text, calls = await one_turn(conn)
            if not calls:
                return parse_answer(text)
            for call in calls:
                reply = shop.send(call["name"], json.loads(call["arguments"]))
                await conn.conversation.item.create(item=output_item(call, tool_message(reply)))
    raise RuntimeError(f"no answer after {MAX_TURNS} turns")


if __name__ == "__main__":
    finish(asyncio.run(main()))
