"""OpenAI Chat Completions: `choices[0].message` with `content`, `refusal` and `tool_calls`
(arguments a JSON string); `finish_reason` stop | tool_calls | length | content_filter.
Streamed as `chat.completion.chunk` deltas, a chunk with the finish reason, the usage chunk when
the request asked for it, then `data: [DONE]`. Only the first choice is edited (a rewritten
stream carries it alone)."""

from __future__ import annotations

import copy
from typing import Any

from faultproxy.formats.model_answers import read_answer
from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.shapes.answer import Answer, Stop, calls_of, event, pieces

_STOPS = {"stop": Stop.END, "tool_calls": Stop.TOOL_USE, "function_call": Stop.TOOL_USE,
          "length": Stop.LENGTH, "content_filter": Stop.CONTENT_FILTER}
_FINISH = {Stop.END: "stop", Stop.TOOL_USE: "tool_calls", Stop.LENGTH: "length", Stop.REFUSAL: "stop",
           Stop.CONTENT_FILTER: "content_filter"}
_ENVELOPE = ("id", "created", "model", "system_fingerprint", "service_tier")


class ChatShape:
    def from_body(self, document: Any) -> Answer | None:
        choice = _first_choice(document)
        if choice is None or not isinstance(choice.get("message"), dict):
            return None
        read = read_answer(ModelApi.OPENAI_CHAT, [document])
        return Answer(read.text, calls_of(read), _STOPS.get(choice.get("finish_reason"), Stop.END), read.refusal,
                      document)

    def to_body(self, answer: Answer) -> dict[str, Any]:
        document = copy.deepcopy(answer.base)
        choice = document["choices"][0]
        message = {**choice["message"], **_message(answer)}
        if not answer.tool_calls:
            message.pop("tool_calls", None)
        choice["message"], choice["finish_reason"] = message, _FINISH[answer.stop]
        return document

    def from_events(self, payloads: list[Any]) -> Answer | None:
        chunks = [p for p in payloads if isinstance(p, dict) and p.get("object") == "chat.completion.chunk"]
        if not chunks:
            return None
        finish = next((choice["finish_reason"] for chunk in reversed(chunks) for choice in chunk.get("choices") or []
                       if choice.get("index", 0) == 0 and choice.get("finish_reason")), None)
        if finish is None:
            return None  # not a finished answer: a cut stream is left as it is
        usage = next((chunk["usage"] for chunk in reversed(chunks) if chunk.get("usage")), None)
        envelope = {k: chunks[0][k] for k in _ENVELOPE if k in chunks[0]}
        base = {"envelope": envelope, "usage": usage, "has_usage": any("usage" in c for c in chunks)}
        read = read_answer(ModelApi.OPENAI_CHAT, chunks)
        return Answer(read.text, calls_of(read), _STOPS.get(finish, Stop.END), read.refusal, base)

    def to_events(self, answer: Answer) -> bytes:
        base = answer.base
        head = {"object": "chat.completion.chunk", **base["envelope"]} | ({"usage": None} if base["has_usage"] else {})
        deltas: list[dict[str, Any]] = [{"role": "assistant", "content": "" if not answer.refusal else None}]
        deltas += [{"content": p} for p in pieces(answer.text)]
        deltas += [{"refusal": p} for p in pieces(answer.refusal or "")]
        for i, call in enumerate(answer.tool_calls):
            deltas.append({"tool_calls": [{"index": i, "id": call.id, "type": "function",
                                           "function": {"name": call.name, "arguments": ""}}]})
            deltas += [{"tool_calls": [{"index": i, "function": {"arguments": p}}]} for p in pieces(call.arguments)]
        chunks = [head | {"choices": [_choice(d, None)]} for d in deltas]
        chunks.append(head | {"choices": [_choice({}, _FINISH[answer.stop])]})
        if base["has_usage"]:
            chunks.append(head | {"choices": [], "usage": base["usage"]})
        return b"".join(event(c) for c in chunks) + b"data: [DONE]\n\n"


def _first_choice(document: Any) -> dict | None:
    if not isinstance(document, dict) or document.get("object") not in ("chat.completion", None):
        return None
    choices = document.get("choices")
    return choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None


def _message(answer: Answer) -> dict[str, Any]:
    content = answer.text if answer.text or not (answer.tool_calls or answer.refusal) else None
    message: dict[str, Any] = {"role": "assistant", "content": content, "refusal": answer.refusal}
    if answer.tool_calls:
        message["tool_calls"] = [{"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                                 for c in answer.tool_calls]
    return message


def _choice(delta: dict, finish: str | None) -> dict[str, Any]:
    return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}


SHAPE = ChatShape()
