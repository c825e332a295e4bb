"""A model's answer as the model-answer faults edit it, whatever API carried it.

Each API's shape (this package's other modules) reads its JSON answer or its event stream into
an Answer and writes an Answer back in the same form; a fault edits only the Answer. The text,
tool calls and refusal are read by formats.model_answers (the one reading of model answers); a
shape adds its stop reason and what it needs to write the answer again: fields it does not model
(ids, model, usage, reasoning items, safety ratings) ride along in `base`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from faultproxy.formats.model_answers import ModelAnswer


class Stop(StrEnum):
    """Why the answer ended, in the shapes' common words (each shape maps its own)."""

    END = "end"
    TOOL_USE = "tool_use"
    LENGTH = "length"
    REFUSAL = "refusal"
    CONTENT_FILTER = "content_filter"


class NotExpressible(ValueError):
    """The edited answer cannot be written in this API's form (e.g. arguments that do not parse,
    in an API that carries them as a JSON object)."""


@dataclass
class ToolCall:
    id: str
    name: str
    arguments: str  # JSON text as the model wrote it; after a fault it may not parse
    item_id: str | None = None  # the Responses API's item id, apart from the call id

    def arguments_object(self) -> dict[str, Any]:
        """The arguments as the object an API without string arguments carries."""
        try:
            value = json.loads(self.arguments or "{}")
        except ValueError:
            raise NotExpressible(f"tool call {self.name!r}: arguments that do not parse cannot be sent "
                                 "where the API carries them as a JSON object") from None
        if not isinstance(value, dict):
            raise NotExpressible(f"tool call {self.name!r}: arguments must be a JSON object here")
        return value


@dataclass
class Answer:
    text: str
    tool_calls: list[ToolCall]
    stop: Stop
    refusal: str | None = None
    base: dict[str, Any] = field(default_factory=dict)  # the shape's own document: what is not modelled


def calls_of(read: ModelAnswer) -> list[ToolCall]:
    """The tool calls formats.model_answers read, as a fault edits them (arguments as JSON text)."""
    return [ToolCall(c.id, c.name, c.arguments_text(), c.item_id) for c in read.tool_calls]


def pieces(text: str, size: int = 24) -> list[str]:
    """Text in the small deltas a stream carries it in."""
    return [text[i:i + size] for i in range(0, len(text), size)]


def event(data: Any, name: str | None = None, end: str = "\n\n") -> bytes:
    """One server-sent event with a JSON payload (and an `event:` line when named)."""
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {json.dumps(data, separators=(',', ':'))}{end}".encode()
