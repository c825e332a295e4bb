"""How each model API carries an answer, as JSON and as an event stream: one module per API
behind one small interface (ApiShape), so the model-answer faults (truncated,
malformed_tool_call, refusal, empty_response) edit one Answer and each API writes it back in its
own form, with its own stop reasons and final events. formats.model_apis names the APIs and says
which one a request talks to; this package knows their bodies.

A stream is read whole (the faults buffer it) and written anew from the edited answer, so it
always ends as the provider ends a finished stream (`[DONE]`, `message_stop`,
`response.completed` / `response.incomplete`, a last chunk with its finish reason): an SDK sees a
finished answer, never a broken connection.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.shapes import anthropic_messages, gemini, openai_chat, openai_responses
from faultproxy.proxy.shapes.answer import Answer, NotExpressible, Stop, ToolCall
from faultproxy.proxy.sse import split_events


class ApiShape(Protocol):
    def from_body(self, document: Any) -> Answer | None:
        """The answer in a JSON body; None when the body is no answer (an error, another object)."""

    def to_body(self, answer: Answer) -> dict[str, Any]:
        """The JSON body for an answer; raises NotExpressible when the API cannot carry it."""

    def from_events(self, payloads: list[Any]) -> Answer | None:
        """The answer a stream adds up to, from its `data:` payloads in order; None if it is
        not a finished answer."""

    def to_events(self, answer: Answer) -> bytes:
        """A whole, properly ended stream for an answer; raises NotExpressible likewise."""


SHAPES: Mapping[ModelApi, ApiShape] = {
    ModelApi.OPENAI_CHAT: openai_chat.SHAPE,
    ModelApi.OPENAI_RESPONSES: openai_responses.SHAPE,
    ModelApi.ANTHROPIC_MESSAGES: anthropic_messages.SHAPE,
    ModelApi.GEMINI: gemini.SHAPE,
}


def read_answer(api: ModelApi, content: bytes, streamed: bool) -> Answer | None:
    """The answer in a whole body (a JSON document, or a whole event stream)."""
    shape = SHAPES[api]
    if not streamed:
        try:
            return shape.from_body(json.loads(content))
        except ValueError:
            return None
    return shape.from_events(list(_payloads(content)))


def write_answer(api: ModelApi, answer: Answer, streamed: bool) -> bytes:
    shape = SHAPES[api]
    if streamed:
        return shape.to_events(answer)
    return json.dumps(shape.to_body(answer), separators=(",", ":")).encode()


def _payloads(content: bytes):
    for raw in split_events(content):
        data = b"".join(line[5:].strip() for line in raw.splitlines() if line.startswith(b"data:"))
        if data and data != b"[DONE]":
            try:
                yield json.loads(data)
            except ValueError:
                continue


__all__ = ["SHAPES", "Answer", "ApiShape", "NotExpressible", "Stop", "ToolCall", "read_answer", "write_answer"]
