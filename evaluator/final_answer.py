"""The model's final answer in a trace: the text of the last model response that asked for no tool.

Read from the recorded upstream response of the episode's last model call, whole body or SSE
events, in the shape of whichever model API answered (OpenAI Chat and Responses, Anthropic
Messages, Gemini; a live session's turn: OpenAI Realtime, Gemini Live). A last response that asks for a tool call is no final answer: the episode
ended while the model was still working.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from faultproxy.evaluator.traced import TracedExchange, documents


def final_answer(exchanges: Sequence[TracedExchange]) -> str | None:
    """The final answer's text, or None when the last model call has none (no model call, no
    answer recorded, or a request for a tool)."""
    last = next((ex for ex in reversed(exchanges) if ex.is_model and ex.upstream_status is not None), None)
    if last is None or not 200 <= last.upstream_status < 300:
        return None
    texts: list[str] = []
    completed = None
    for document in documents(last.raw.get("upstream") or {}):
        if not isinstance(document, dict):
            continue
        if document.get("type") == "response.completed" and isinstance(document.get("response"), dict):
            completed = document["response"]  # the whole Responses answer: its deltas came before
        parts, tool = _parts(document)
        if tool:
            return None
        texts += parts
    if completed is not None:
        texts, tool = _parts(completed)
        if tool:
            return None
    text = "".join(texts).strip()
    return text or None


def _parts(document: dict[str, Any]) -> tuple[list[str], bool]:
    """(text pieces, asks for a tool) of one response document or stream event, any model API."""
    texts: list[str] = []
    tool = False
    for choice in _list(document.get("choices")):  # OpenAI Chat: message, or a stream's delta
        message = choice.get("message") or choice.get("delta") or {}
        tool |= bool(message.get("tool_calls")) or choice.get("finish_reason") == "tool_calls"
        texts += [message["content"]] if isinstance(message.get("content"), str) else []
    for item in _list(document.get("output")):  # OpenAI Responses
        tool |= item.get("type") == "function_call"
        texts += [p["text"] for p in _list(item.get("content")) if p.get("type") == "output_text"
                  and isinstance(p.get("text"), str)]
    if document.get("type") == "response.output_text.delta" and isinstance(document.get("delta"), str):
        texts.append(document["delta"])
    for block in _list(document.get("content")):  # Anthropic Messages
        tool |= block.get("type") == "tool_use"
        texts += [block["text"]] if block.get("type") == "text" and isinstance(block.get("text"), str) else []
    block = document.get("content_block") or document.get("delta")  # Anthropic stream events
    if isinstance(block, dict):
        tool |= block.get("type") == "tool_use"
        texts += [block["text"]] if block.get("type") == "text_delta" and isinstance(block.get("text"), str) else []
    live = document.get("serverContent")  # Gemini Live: the model's turn, in pieces
    if isinstance(live, dict) and isinstance(live.get("modelTurn"), dict):
        texts += [p["text"] for p in _list(live["modelTurn"].get("parts")) if isinstance(p.get("text"), str)]
    tool |= isinstance(document.get("toolCall"), dict)
    for candidate in _list(document.get("candidates")):  # Gemini
        for part in _list((candidate.get("content") or {}).get("parts")):
            tool |= "functionCall" in part
            texts += [part["text"]] if isinstance(part.get("text"), str) else []
    return texts, tool


def _list(value: Any) -> list[dict[str, Any]]:
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []
