"""pydantic-ai with its OpenAI model class, the base URL from OPENAI_BASE_URL."""

from common import MODEL, PROMPT, answer
from pydantic_ai import Agent

answer(Agent(f"openai:{MODEL}").run_sync(PROMPT).output)
