"""A careful realtime agent: the same loop as naive_realtime_agent.py, with the habits that
survive a session that closes mid-answer.

- It keeps its own copy of the conversation (the user's request, each function call it carried
  out and its output). When the session closes, for any reason, it opens a new one with backoff,
  restores instructions, tools and that conversation, and asks again: the server forgot it all.
- It acts only on a response that ended (`response.done`): a function call cut off mid-answer is
  never carried out; one carried out before the close is in the restored conversation, so the
  model does not ask for it again.
- Its writes carry an Idempotency-Key derived from the intent, so even a repeated call cannot
  commit twice; transport errors, 429 and 5xx from the shop are retried with backoff.

Usage: SHOP_URL=... OPENAI_BASE_URL=... python examples/careful_realtime_agent.py --prompt "Refund order 1001."
"""

from __future__ import annotations

import asyncio
import hashlib
import json

import httpx
import openai
from agent_common import SPECS, Reply, Shop, configure, finish, parse_answer, tool_message
from realtime_common import MAX_TURNS, one_turn, open_session, output_item, realtime_client, realtime_tools, user_item
from websockets.exceptions import ConnectionClosed

SESSIONS = 4  # sessions opened in all before giving up
ATTEMPTS = 4  # sends of one shop operation


def backoff_s(attempt: int) -> float:
    return min(4.0, 0.25 * 2**attempt)


async def main() -> dict:
    cfg = configure(__doc__)
    shop = Shop(cfg.shop_url, mcp=False)
    tools = realtime_tools(shop)
    client = realtime_client()
    items = [user_item(cfg.prompt)]  # the conversation, as a new session must be told it

    async def carry_out(call: dict) -> str:
        name, args = call["name"], json.loads(call["arguments"])
        write = SPECS.get(name, {}).get("method", "GET") != "GET"
        key = "careful-rt-" + hashlib.sha256(json.dumps([cfg.prompt, name, args], sort_keys=True).encode()).hexdigest()[:32]
        for attempt in range(ATTEMPTS):
            try:
                reply = shop.send(name, args, key if write else None)
            except httpx.TransportError as e:
                reply = Reply(0, {"error": {"message": f"no response: {e}"}}, {})
            if reply.status and reply.status < 500 and reply.status != 429:
                break
            await asyncio.sleep(backoff_s(attempt))
        return tool_message(reply)

    for session in range(SESSIONS):
        try:
            async with client.realtime.connect(model=cfg.model) as conn:
                await open_session(conn, tools, items)
                for _ in range(MAX_TURNS):
                    text, calls = await one_turn(conn)
                    if not calls:
                        return parse_answer(text)
                    for call in calls:
                        output = output_item(call, await carry_out(call))
                        items += [call, output]  # kept before it is sent: a close now loses nothing
                        await conn.conversation.item.create(item=output)
            raise RuntimeError(f"no answer after {MAX_TURNS} turns")
        except (ConnectionClosed, ConnectionError, openai.OpenAIError) as e:
            if session == SESSIONS - 1:
                raise RuntimeError(f"gave up after {SESSIONS} sessions: {e}") from e
            await asyncio.sleep(backoff_s(session))
    raise AssertionError("unreachable")


if __name__ == "__main__":
    try:
        output = asyncio.run(main())
    except RuntimeError as e:
        finish({"answer": None, "confidence": 0.0, "escalate": True, "reason": str(e)}, code=1)
    finish(output)
