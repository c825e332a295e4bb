"""Anthropic Messages: a `message` whose `content` holds `text` and `tool_use` blocks (input a
JSON object); `stop_reason` end_turn | tool_use | max_tokens | refusal. Streamed as
message_start, content_block_start / _delta (text_delta, input_json_delta with partial_json
strings) / _stop per block, message_delta with the stop reason and usage, message_stop. Only
the stream carries arguments as a string. Blocks of other types (thinking) ride along first."""

from __future__ import annotations

import copy
from typing import Any

from faultproxy.formats.model_answers import read_answer
from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.shapes.answer import Answer, Stop, ToolCall, calls_of, event, pieces

_STOPS = {"end_turn": Stop.END, "stop_sequence": Stop.END, "pause_turn": Stop.END, "tool_use": Stop.TOOL_USE,
          "max_tokens": Stop.LENGTH, "refusal": Stop.REFUSAL}
_STOP_REASONS = {Stop.END: "end_turn", Stop.TOOL_USE: "tool_use", Stop.LENGTH: "max_tokens", Stop.REFUSAL: "refusal",
                 Stop.CONTENT_FILTER: "refusal"}
_EDITED_BLOCKS = ("text", "tool_use")


class MessagesShape:
    def from_body(self, document: Any) -> Answer | None:
        if not isinstance(document, dict) or document.get("type") != "message":
            return None
        read = read_answer(ModelApi.ANTHROPIC_MESSAGES, [document])
        return Answer(read.text, calls_of(read), _STOPS.get(document.get("stop_reason"), Stop.END), None, document)

    def to_body(self, answer: Answer) -> dict[str, Any]:
        document = copy.deepcopy(answer.base)
        document["content"] = _kept(document) + [
            {**block, "input": call.arguments_object()} if call else block
            for block, call in _blocks(answer)]
        document["stop_reason"], document["stop_sequence"] = _STOP_REASONS[answer.stop], None
        return document

    def from_events(self, payloads: list[Any]) -> Answer | None:
        message, blocks = None, {}
        for payload in payloads:
            kind = payload.get("type") if isinstance(payload, dict) else None
            if kind == "message_start":
                message = copy.deepcopy(payload.get("message") or {})
            elif kind == "content_block_start":
                blocks[payload.get("index", 0)] = copy.deepcopy(payload.get("content_block") or {})
            elif kind == "content_block_delta":
                _apply_delta(blocks.setdefault(payload.get("index", 0), {}), payload.get("delta") or {})
            elif kind == "message_delta" and message is not None:
                message.update(payload.get("delta") or {})
                message["usage"] = {**(message.get("usage") or {}), **(payload.get("usage") or {})}
        if message is None or message.get("stop_reason") is None:
            return None  # not a finished answer
        read = read_answer(ModelApi.ANTHROPIC_MESSAGES, payloads)  # arguments as streamed, not re-serialised
        return Answer(read.text, calls_of(read), _STOPS.get(message["stop_reason"], Stop.END), None,
                      {**message, "content": [blocks[i] for i in sorted(blocks)]})

    def to_events(self, answer: Answer) -> bytes:
        message = copy.deepcopy(answer.base)
        usage = message.get("usage") or {}
        kept = _kept(message)
        start = {**message, "content": [], "stop_reason": None, "stop_sequence": None,
                 "usage": {**usage, "output_tokens": min(usage.get("output_tokens", 1), 1)}}
        out = [event({"type": "message_start", "message": start}, "message_start")]
        blocks = [(block, None) for block in kept] + _blocks(answer)
        for index, (block, call) in enumerate(blocks):
            out += _stream_block(index, block, call)
        delta = {"stop_reason": _STOP_REASONS[answer.stop], "stop_sequence": None}
        out.append(event({"type": "message_delta", "delta": delta,
                          "usage": {"output_tokens": usage.get("output_tokens", 0)}}, "message_delta"))
        out.append(event({"type": "message_stop"}, "message_stop"))
        return b"".join(out)


def _kept(message: dict[str, Any]) -> list[dict[str, Any]]:
    return [b for b in message.get("content") or [] if b.get("type") not in _EDITED_BLOCKS]


def _blocks(answer: Answer) -> list[tuple[dict[str, Any], ToolCall | None]]:
    blocks: list[tuple[dict[str, Any], ToolCall | None]] = [({"type": "text", "text": answer.text}, None)] \
        if answer.text else []
    return blocks + [({"type": "tool_use", "id": c.id, "name": c.name, "input": {}}, c) for c in answer.tool_calls]


def _apply_delta(block: dict[str, Any], delta: dict[str, Any]) -> None:
    """A delta to a block the base keeps whole (thinking); the text and tool calls the answer
    edits are read by formats.model_answers, and written anew from it."""
    kind = delta.get("type")
    if kind in ("thinking_delta", "signature_delta"):
        field = kind.removesuffix("_delta")
        block[field] = block.get(field, "") + delta.get(field, "")


def _stream_block(index: int, block: dict[str, Any], call: ToolCall | None) -> list[bytes]:
    if call is not None:
        start, deltas = block, [{"type": "input_json_delta", "partial_json": p} for p in pieces(call.arguments)]
    elif block["type"] == "text":
        start, deltas = {"type": "text", "text": ""}, [{"type": "text_delta", "text": p} for p in pieces(block["text"])]
    else:
        start, deltas = block, []
    out = [event({"type": "content_block_start", "index": index, "content_block": start}, "content_block_start")]
    out += [event({"type": "content_block_delta", "index": index, "delta": d}, "content_block_delta") for d in deltas]
    out.append(event({"type": "content_block_stop", "index": index}, "content_block_stop"))
    return out


SHAPE = MessagesShape()
