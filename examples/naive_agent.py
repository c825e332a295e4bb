"""A naive agent: the tool loop most agents start as. Read it next to careful_agent.py.

- When a call fails it tries again at once, three times in all, and ignores Retry-After
  (the SDK's own retries are off).
- Its POSTs carry no idempotency key: if a refund's response is lost, the retry refunds again.
- It trusts what it read earlier and whatever the tools return: no re-reads, no checks.

Usage: SHOP_URL=... OPENAI_BASE_URL=... python examples/naive_agent.py --prompt "Refund order 1001."
"""

from __future__ import annotations

import json

import httpx
import openai
from agent_common import Shop, complete, configure, finish, openai_client, run, tool_message

ATTEMPTS = 3


def main() -> None:
    cfg = configure(__doc__)
    client = openai_client(max_retries=0)
    shop = Shop(cfg.shop_url, cfg.mcp)
    tools = shop.tools()

    def ask(messages: list[dict]) -> dict:
        for attempt in range(ATTEMPTS):
            try:
                return complete(client, cfg, messages, tools)[0]
            except openai.APIError:
                if attempt == ATTEMPTS - 1:
                    raise
        raise AssertionError("unreachable")

    def use_tool(name: str, arguments: str) -> str:
        args = json.loads(arguments)
        for attempt in range(ATTEMPTS):
            try:
                reply = shop.send(name, args)  # no idempotency key
            except httpx.TransportError:
                if attempt == ATTEMPTS - 1:
                    raise
                continue
            if (reply.status < 500 and reply.status != 429) or attempt == ATTEMPTS - 1:
                return tool_message(reply)
        raise AssertionError("unreachable")

    finish(run(ask, use_tool, cfg.prompt), chat=cfg.chat)  # in a conversation (--chat) it never asks first


if __name__ == "__main__":
    main()
