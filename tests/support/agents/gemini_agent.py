"""A demo-shop agent on google-genai, as its users write one: function declarations, a
generate_content loop that runs the calls the model asks for. The client is the SDK's default
(GOOGLE_GEMINI_BASE_URL, GEMINI_API_KEY, HTTP(S)_PROXY); `--stream` uses
`generate_content_stream` (`:streamGenerateContent?alt=sse`).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from google import genai
from google.genai import types

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "examples"))  # the demo agents' plumbing
from agent_common import MAX_TURNS, SYSTEM, Shop, configure, finish, parse_answer, tool_message  # noqa: E402


def declarations(shop: Shop) -> types.Tool:
    return types.Tool(function_declarations=[
        types.FunctionDeclaration(name=spec["function"]["name"], description=spec["function"]["description"],
                                  parameters_json_schema=spec["function"]["parameters"])
        for spec in shop.tools()])


def turn(client: genai.Client, model: str, contents: list, config: types.GenerateContentConfig,
         stream: bool) -> types.Content:
    if not stream:
        return client.models.generate_content(model=model, contents=contents, config=config).candidates[0].content
    parts: list[types.Part] = []
    for chunk in client.models.generate_content_stream(model=model, contents=contents, config=config):
        parts += chunk.candidates[0].content.parts or [] if chunk.candidates else []
    return types.Content(role="model", parts=parts)


def result(shop: Shop, call: types.FunctionCall) -> dict:
    """The tool's answer as Gemini takes it: an object, or anything else under "output"."""
    body = json.loads(tool_message(shop.send(call.name, dict(call.args or {}))))
    return body if isinstance(body, dict) else {"output": body}


def main() -> None:
    cfg = configure(__doc__)
    shop = Shop(cfg.shop_url, cfg.mcp)
    client = genai.Client()
    config = types.GenerateContentConfig(system_instruction=SYSTEM, tools=[declarations(shop)], temperature=0.7,
                                         automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True))
    contents: list = [types.Content(role="user", parts=[types.Part(text=cfg.prompt)])]
    for _ in range(MAX_TURNS):
        content = turn(client, cfg.model, contents, config, cfg.stream)
        contents.append(content)
        calls = [part.function_call for part in content.parts or [] if part.function_call]
        if not calls:
            finish(parse_answer("".join(part.text or "" for part in content.parts or [])))
        contents.append(types.Content(role="user", parts=[
            types.Part.from_function_response(name=call.name, response=result(shop, call)) for call in calls]))
    raise RuntimeError(f"no answer after {MAX_TURNS} turns")


if __name__ == "__main__":
    main()
