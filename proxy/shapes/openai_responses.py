"""OpenAI Responses: a `response` object whose `output` holds `message` items (content parts
`output_text` or `refusal`) and `function_call` items (arguments a JSON string); `status`
completed, or incomplete with `incomplete_details.reason` max_output_tokens | content_filter.
Streamed as typed events with sequence numbers, ending with `response.completed` or
`response.incomplete`, which carries the whole response: a stream is read from that event."""

from __future__ import annotations

import copy
import hashlib
from typing import Any

from faultproxy.formats.model_answers import read_answer
from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.shapes.answer import Answer, Stop, calls_of, event, pieces

_INCOMPLETE = {"max_output_tokens": Stop.LENGTH, "content_filter": Stop.CONTENT_FILTER}
_REASONS = {Stop.LENGTH: "max_output_tokens", Stop.CONTENT_FILTER: "content_filter"}
_FINAL_EVENTS = ("response.completed", "response.incomplete", "response.failed")
_EDITED_ITEMS = ("message", "function_call")


class ResponsesShape:
    def from_body(self, document: Any) -> Answer | None:
        if not isinstance(document, dict) or document.get("object") != "response" \
                or not isinstance(document.get("output"), list) or document.get("status") == "failed":
            return None
        read = read_answer(ModelApi.OPENAI_RESPONSES, [document])
        reason = (document.get("incomplete_details") or {}).get("reason")
        stop = _INCOMPLETE.get(reason, Stop.LENGTH) if document.get("status") == "incomplete" else \
            Stop.REFUSAL if read.refusal else Stop.TOOL_USE if read.tool_calls else Stop.END
        return Answer(read.text, calls_of(read), stop, read.refusal, document)

    def to_body(self, answer: Answer) -> dict[str, Any]:
        document = copy.deepcopy(answer.base)
        kept = [item for item in document["output"] if item.get("type") not in _EDITED_ITEMS]
        finished = answer.stop not in _REASONS
        items = [] if answer.stop is Stop.CONTENT_FILTER else [_message(answer, finished)]
        items += [{"id": c.item_id or _item_id("fc", c.id), "type": "function_call",
                   "status": "completed" if finished else "incomplete",
                   "call_id": c.id, "name": c.name, "arguments": c.arguments} for c in answer.tool_calls]
        if not answer.text and not answer.refusal and answer.tool_calls:
            items = items[1:]  # a plain tool call comes without an empty message beside it
        document["output"] = kept + items
        document["status"] = "completed" if finished else "incomplete"
        document["incomplete_details"] = None if finished else {"reason": _REASONS[answer.stop]}
        return document

    def from_events(self, payloads: list[Any]) -> Answer | None:
        for payload in reversed(payloads):
            if isinstance(payload, dict) and payload.get("type") in _FINAL_EVENTS:
                return self.from_body(payload.get("response"))
        return None

    def to_events(self, answer: Answer) -> bytes:
        document = self.to_body(answer)
        events = _Events()
        opening = {**document, "status": "in_progress", "output": [], "incomplete_details": None}
        events.add("response.created", response=opening)
        events.add("response.in_progress", response=opening)
        for index, item in enumerate(document["output"]):
            _stream_item(events, index, item)
        final = "response.completed" if document["status"] == "completed" else "response.incomplete"
        events.add(final, response=document)
        return events.body()


class _Events:
    def __init__(self) -> None:
        self.chunks: list[bytes] = []

    def add(self, kind: str, **fields: Any) -> None:
        self.chunks.append(event({"type": kind, "sequence_number": len(self.chunks), **fields}, kind))

    def body(self) -> bytes:
        return b"".join(self.chunks)


def _stream_item(events: _Events, index: int, item: dict[str, Any]) -> None:
    where = {"item_id": item.get("id"), "output_index": index}
    if item["type"] == "message":
        events.add("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
        for part_index, part in enumerate(item["content"]):
            _stream_part(events, {**where, "content_index": part_index}, part)
    elif item["type"] == "function_call":
        events.add("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
        for piece in pieces(item["arguments"]):
            events.add("response.function_call_arguments.delta", **where, delta=piece)
        events.add("response.function_call_arguments.done", **where, name=item["name"], arguments=item["arguments"])
    else:
        events.add("response.output_item.added", output_index=index, item=item)
    events.add("response.output_item.done", output_index=index, item=item)


def _stream_part(events: _Events, where: dict[str, Any], part: dict[str, Any]) -> None:
    kind, field = ("output_text", "text") if part["type"] == "output_text" else ("refusal", "refusal")
    events.add("response.content_part.added", **where, part={**part, field: ""})
    extra = {"logprobs": []} if kind == "output_text" else {}
    for piece in pieces(part[field]):
        events.add(f"response.{kind}.delta", **where, delta=piece, **extra)
    events.add(f"response.{kind}.done", **where, **{field: part[field]}, **extra)
    events.add("response.content_part.done", **where, part=part)


def _message(answer: Answer, finished: bool) -> dict[str, Any]:
    part = {"type": "refusal", "refusal": answer.refusal} if answer.refusal else \
        {"type": "output_text", "text": answer.text, "annotations": [], "logprobs": []}
    original = next((i for i in answer.base.get("output", []) if i.get("type") == "message"), {})
    return {"id": original.get("id") or _item_id("msg", answer.base.get("id", "")), "type": "message",
            "status": "completed" if finished else "incomplete", "role": "assistant", "content": [part]}


def _item_id(prefix: str, seed: str) -> str:
    return f"{prefix}_" + hashlib.sha256(f"{prefix}:{seed}".encode()).hexdigest()[:32]


SHAPE = ResponsesShape()
