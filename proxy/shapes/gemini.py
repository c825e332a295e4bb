"""Gemini generateContent: `candidates[0].content.parts` with `text` and `functionCall {name, args}`
parts (args a JSON object); `finishReason` STOP | MAX_TOKENS | SAFETY | ... (a function call ends
with STOP). Streamed (`:streamGenerateContent?alt=sse`) as `data:` chunks, each a whole
GenerateContentResponse; the last carries the finish reason and usage. A blocked answer has no
content, and safety ratings saying why."""

from __future__ import annotations

import copy
from typing import Any

from faultproxy.formats.model_answers import read_answer
from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.shapes.answer import Answer, Stop, calls_of, event, pieces

_STOPS = {"STOP": Stop.END, "MAX_TOKENS": Stop.LENGTH, "SAFETY": Stop.CONTENT_FILTER,
          "RECITATION": Stop.CONTENT_FILTER, "PROHIBITED_CONTENT": Stop.CONTENT_FILTER, "BLOCKLIST": Stop.CONTENT_FILTER,
          "SPII": Stop.CONTENT_FILTER}
_FINISH = {Stop.END: "STOP", Stop.TOOL_USE: "STOP", Stop.LENGTH: "MAX_TOKENS", Stop.REFUSAL: "SAFETY",
           Stop.CONTENT_FILTER: "SAFETY"}
_BLOCKED = [{"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH", "blocked": True}]
_END = "\r\n\r\n"  # as Google's servers frame their events


class GeminiShape:
    def from_body(self, document: Any) -> Answer | None:
        candidate = _first_candidate(document)
        if candidate is None:
            return None
        read = read_answer(ModelApi.GEMINI, [document])
        stop = _STOPS.get(candidate.get("finishReason"), Stop.END)
        return Answer(read.text, calls_of(read), Stop.TOOL_USE if read.tool_calls and stop is Stop.END else stop,
                      None, document)

    def to_body(self, answer: Answer) -> dict[str, Any]:
        document = copy.deepcopy(answer.base)
        candidate = document["candidates"][0]
        parts = _parts(answer)
        if answer.stop in (Stop.REFUSAL, Stop.CONTENT_FILTER):
            candidate.pop("content", None)  # a blocked answer carries no content
            candidate["safetyRatings"] = _BLOCKED
        else:
            candidate["content"] = {"role": "model", "parts": _kept(candidate) + parts}
        candidate["finishReason"] = _FINISH[answer.stop]
        return document

    def from_events(self, payloads: list[Any]) -> Answer | None:
        chunks = [p for p in payloads if _first_candidate(p) is not None]
        if not chunks or not _first_candidate(chunks[-1]).get("finishReason"):
            return None  # not a finished answer
        parts = [part for chunk in chunks for part in (_first_candidate(chunk).get("content") or {}).get("parts") or []]
        last = copy.deepcopy(chunks[-1])
        last["candidates"][0]["content"] = {"role": "model", "parts": parts}
        return self.from_body(last)

    def to_events(self, answer: Answer) -> bytes:
        final = self.to_body(answer)
        candidate = final["candidates"][0]
        parts = (candidate.get("content") or {}).get("parts") or []
        texts = [p for p in parts if set(p) == {"text"}]
        head = {k: v for k, v in final.items() if k not in ("candidates", "usageMetadata")}
        chunks = [{**head, "candidates": [{"content": {"role": "model", "parts": [{"text": piece}]}, "index": 0}]}
                  for part in texts for piece in pieces(part["text"])]
        if "content" in candidate:
            candidate["content"]["parts"] = [p for p in parts if p not in texts]
        chunks.append(final)
        return b"".join(event(c, end=_END) for c in chunks)


def _first_candidate(document: Any) -> dict[str, Any] | None:
    if not isinstance(document, dict):
        return None
    candidates = document.get("candidates")
    return candidates[0] if isinstance(candidates, list) and candidates and isinstance(candidates[0], dict) else None


def _kept(candidate: dict[str, Any]) -> list[dict[str, Any]]:
    """Thought parts ride along; text and function calls are the answer's."""
    return [p for p in (candidate.get("content") or {}).get("parts") or [] if p.get("thought")]


def _parts(answer: Answer) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = [{"text": answer.text}] if answer.text else []
    for call in answer.tool_calls:
        function_call = {"name": call.name, "args": call.arguments_object()}
        parts.append({"functionCall": ({"id": call.id} if call.id else {}) | function_call})
    return parts


SHAPE = GeminiShape()
