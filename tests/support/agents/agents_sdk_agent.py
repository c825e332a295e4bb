"""A demo-shop agent on the OpenAI Agents SDK, as its users write one: an `Agent` with function
tools and a model name, run by `Runner`. The SDK's default model class talks to the Responses API
(`POST /v1/responses`), through the SDK's default client (OPENAI_BASE_URL, HTTP(S)_PROXY, its own
retries). `--stream` runs it streamed (typed SSE events). Tracing is off, as an agent in a locked
CI sets it (OPENAI_AGENTS_DISABLE_TRACING=1): the exporter would call api.openai.com.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))  # the demo agents' plumbing

from agent_common import SYSTEM, Shop, configure, finish, parse_answer, tool_message  # noqa: E402
from agents import Agent, FunctionTool, Runner  # noqa: E402


def shop_tools(shop: Shop) -> list[FunctionTool]:
    tools = []
    for spec in shop.tools():
        function = spec["function"]

        async def invoke(context, arguments: str, name: str = function["name"]) -> str:
            return tool_message(shop.send(name, json.loads(arguments or "{}")))

        tools.append(FunctionTool(name=function["name"], description=function["description"],
                                  params_json_schema=function["parameters"], on_invoke_tool=invoke,
                                  strict_json_schema=False))
    return tools


async def answer(agent: Agent, prompt: str, stream: bool) -> str:
    if not stream:
        return (await Runner.run(agent, prompt)).final_output
    result = Runner.run_streamed(agent, prompt)
    async for _ in result.stream_events():
        pass
    return result.final_output


def main() -> None:
    cfg = configure(__doc__)
    agent = Agent(name="shop", instructions=SYSTEM, model=cfg.model, tools=shop_tools(Shop(cfg.shop_url, cfg.mcp)))
    finish(parse_answer(asyncio.run(answer(agent, cfg.prompt, cfg.stream))))


if __name__ == "__main__":
    main()
