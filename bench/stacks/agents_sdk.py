"""The OpenAI Agents SDK with its defaults (the Responses API), or with `chat` as argument the
OpenAIChatCompletionsModel class (Chat Completions)."""

import sys

from agents import Agent, OpenAIChatCompletionsModel, Runner
from common import MODEL, PROMPT, answer
from openai import AsyncOpenAI

model = OpenAIChatCompletionsModel(MODEL, AsyncOpenAI()) if sys.argv[1:] == ["chat"] else MODEL
result = Runner.run_sync(Agent(name="bench", instructions="Answer briefly.", model=model), PROMPT)
answer(result.final_output)
