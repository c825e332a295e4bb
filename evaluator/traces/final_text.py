"""The model's final answer in a trace: the text of the last model response that asked for no tool.

Read from the recorded upstream response of the episode's last model call, whole body or SSE
events, by formats.model_answers in the shape of whichever model API answered (OpenAI Chat and
Responses, Anthropic Messages, Gemini; a live session's turn: OpenAI Realtime, Gemini Live). A
last response that asks for a tool call is no final answer: the episode ended while the model
was still working.
"""

from __future__ import annotations

from collections.abc import Sequence

from faultproxy.evaluator.traces.traced import TracedExchange, documents
from faultproxy.evaluator.traces.token_usage import model_api
from faultproxy.formats.model_answers import read_answer


def final_answer(exchanges: Sequence[TracedExchange]) -> str | None:
    """The final answer's text, or None when the last model call has none (no model call, no
    answer recorded, or a request for a tool)."""
    last = next((ex for ex in reversed(exchanges) if ex.is_model and ex.upstream_status is not None), None)
    if last is None or not 200 <= last.upstream_status < 300:
        return None
    api = model_api(last)
    if api is None:
        return None
    answer = read_answer(api, documents(last.raw.get("upstream") or {}))
    return None if answer.asks_for_tool else answer.text.strip() or None
