"""How an answer of each model API reads: its text, tool calls, finish reasons, id, model and
token usage, from a JSON body or from the events of a stream (their `data:` payloads, in order).

This is the one reading of model answers: the proxy's live token budget, the verdict's usage and
tokens, the report's totals and cost, the final answer the checks read and the OpenTelemetry
spans all ask here, so a number is the same wherever it shows. formats.model_apis names the
APIs and tells which one a request talks to; proxy/shapes writes the answers a fault edits.

Usage, per API (streams report running totals, so the last value of each field wins):

| API                  | where                                             | input (cached included)                         | output (reasoning included)          |
|----------------------|---------------------------------------------------|-------------------------------------------------|--------------------------------------|
| `openai_chat`        | `usage` (a stream's last chunk, if asked for)     | `prompt_tokens`                                 | `completion_tokens`                  |
| `openai_responses`   | `usage` of the response (`response.completed`)    | `input_tokens`                                  | `output_tokens`                      |
| `anthropic_messages` | `usage`, `message_start`'s `message.usage`, then `message_delta`'s | `input_tokens` + `cache_read_input_tokens` + `cache_creation_input_tokens` | `output_tokens` |
| `gemini`             | `usageMetadata` (each chunk, the last complete)   | `promptTokenCount`                              | `candidatesTokenCount` + `thoughtsTokenCount` |
| `openai_realtime`    | `response.done`'s `response.usage`                | `input_tokens`                                  | `output_tokens`                      |
| `gemini_live`        | `usageMetadata`                                   | `promptTokenCount`                              | `responseTokenCount` + `thoughtsTokenCount` |

A streamed Anthropic message says `output_tokens` twice (a first count in message_start, the
running total in message_delta): the later one is the count, never their sum.

A live session's tokens are its turns' added up (LiveUsage): each turn's read as a stream's, from
its server messages up to the one that ends it. Gemini Live reports usage per turn, not a running
total for the session (a turn's `promptTokenCount` grows with the conversation it reads).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from faultproxy.formats.model_apis import LiveApi, ModelApi, live_function_calls, live_turn_edge

Api = ModelApi | LiveApi

# Finish reasons that mean "the model asks for a tool", in each API's words.
_TOOL_REASONS = frozenset({"tool_calls", "function_call", "tool_use"})
_RESPONSE_ENDS = ("response.completed", "response.incomplete", "response.failed", "response.done")
_TEXT_DELTAS = ("response.output_text.delta", "response.text.delta", "response.output_audio_transcript.delta",
                "response.audio_transcript.delta")


@dataclass(frozen=True)
class Usage:
    """Tokens one answer used, counted alike for every API: input with cached input, output with
    reasoning (the OpenTelemetry GenAI conventions' counts)."""

    input: int = 0
    output: int = 0
    cache_read: int | None = None
    cache_creation: int | None = None
    reasoning: int | None = None

    @property
    def total(self) -> int:
        return self.input + self.output


@dataclass(frozen=True)
class AnswerToolCall:
    id: str
    name: str
    arguments: Any  # as the API carries it: JSON text (OpenAI, a streamed Anthropic call), an object
    item_id: str | None = None  # the Responses API's item id, apart from the call id

    def arguments_text(self) -> str:
        """The arguments as JSON text: as the model wrote them where the API carries text."""
        return self.arguments if isinstance(self.arguments, str) else json.dumps(self.arguments)


@dataclass
class ModelAnswer:
    text: str = ""
    tool_calls: list[AnswerToolCall] = field(default_factory=list)
    finish_reasons: list[str] = field(default_factory=list)
    refusal: str | None = None  # OpenAI's refusal text (Chat `refusal`, a Responses refusal part)
    id: str | None = None
    model: str | None = None
    usage: Usage | None = None

    @property
    def asks_for_tool(self) -> bool:
        return bool(self.tool_calls) or any(r in _TOOL_REASONS for r in self.finish_reasons)


def read_answer(api: Api, documents: Iterable[Any]) -> ModelAnswer:
    """The answer in a JSON body ([body]) or a stream's payloads; a cut stream reads as far as it went."""
    documents = [d for d in documents if isinstance(d, Mapping)]
    answer = _READERS[api](documents)
    answer.usage = read_usage(api, documents)
    return answer


def read_usage(api: Api, documents: Iterable[Any]) -> Usage | None:
    """The tokens the answer reports using; None when it reports none."""
    fields = _USAGE[api]
    seen: dict[str, int] = {}
    for document in documents:
        if isinstance(document, Mapping):
            for block in fields.blocks(document):
                seen.update(_numbers(block, fields.names))
    if not seen:
        return None
    return Usage(input=sum(seen.get(n, 0) for n in fields.input), output=sum(seen.get(n, 0) for n in fields.output),
                 cache_read=_some(seen, fields.cache_read), cache_creation=_some(seen, fields.cache_creation),
                 reasoning=_some(seen, fields.reasoning))


class LiveUsage:
    """A live session's tokens, counted as its server messages arrive (the proxy's live budget):
    a turn's usage is read_usage over the turn's messages, up to the server's turn edge
    (formats.model_apis.live_turn_edge, where the evaluator's turns end too), so a running total
    repeated within a turn counts once; turns add up."""

    def __init__(self, api: LiveApi) -> None:
        self.api = api
        self._turn: list[Mapping[str, Any]] = []  # the turn's messages that report usage
        self._counted = 0  # of the turn's tokens, those already added to the session's count

    def server_message(self, event: Any) -> int:
        """The tokens a server message (parsed JSON) adds to the session's count; 0 for most."""
        if read_usage(self.api, [event]) is not None:
            self._turn.append(event)
        usage = read_usage(self.api, self._turn) if self._turn else None
        added = (usage.total if usage is not None else 0) - self._counted
        self._counted += added
        if live_turn_edge(self.api, event, "server"):
            self._turn, self._counted = [], 0
        return added


@dataclass(frozen=True)
class _UsageFields:
    blocks: Callable[[Mapping[str, Any]], list[Mapping[str, Any]]]  # the usage blocks in one body or event
    input: tuple[str, ...]  # dotted paths, summed
    output: tuple[str, ...]
    cache_read: str | None = None
    cache_creation: str | None = None
    reasoning: str | None = None

    @property
    def names(self) -> tuple[str, ...]:
        optional = (self.cache_read, self.cache_creation, self.reasoning)
        return tuple(dict.fromkeys((*self.input, *self.output, *(n for n in optional if n))))


def _blocks(*paths: str, key: str) -> Callable[[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The `key` blocks found in the document itself or under one of `paths`."""
    def find(document: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        holders = [document, *(document.get(p) for p in paths)]
        return [h[key] for h in holders if isinstance(h, Mapping) and isinstance(h.get(key), Mapping)]
    return find


_USAGE: Mapping[Api, _UsageFields] = {
    ModelApi.OPENAI_CHAT: _UsageFields(_blocks(key="usage"), ("prompt_tokens",), ("completion_tokens",),
                                       "prompt_tokens_details.cached_tokens", None,
                                       "completion_tokens_details.reasoning_tokens"),
    ModelApi.OPENAI_RESPONSES: _UsageFields(_blocks("response", key="usage"), ("input_tokens",), ("output_tokens",),
                                            "input_tokens_details.cached_tokens", None,
                                            "output_tokens_details.reasoning_tokens"),
    ModelApi.ANTHROPIC_MESSAGES: _UsageFields(
        _blocks("message", key="usage"),
        ("input_tokens", "cache_read_input_tokens", "cache_creation_input_tokens"), ("output_tokens",),
        "cache_read_input_tokens", "cache_creation_input_tokens"),
    ModelApi.GEMINI: _UsageFields(_blocks(key="usageMetadata"), ("promptTokenCount",),
                                  ("candidatesTokenCount", "thoughtsTokenCount"), "cachedContentTokenCount", None,
                                  "thoughtsTokenCount"),
    LiveApi.OPENAI_REALTIME: _UsageFields(_blocks("response", key="usage"), ("input_tokens",), ("output_tokens",),
                                          "input_token_details.cached_tokens"),
    LiveApi.GEMINI_LIVE: _UsageFields(_blocks(key="usageMetadata"), ("promptTokenCount",),
                                      ("responseTokenCount", "thoughtsTokenCount"), "cachedContentTokenCount", None,
                                      "thoughtsTokenCount"),
}


def dig(document: Any, path: str) -> Any:
    """document["a"]["b"] for "a.b", or None where the path leads nowhere."""
    for part in path.split("."):
        if not isinstance(document, Mapping):
            return None
        document = document.get(part)
    return document


def _numbers(block: Mapping[str, Any], names: tuple[str, ...]) -> dict[str, int]:
    found = {name: dig(block, name) for name in names}
    return {name: v for name, v in found.items() if isinstance(v, int) and not isinstance(v, bool)}


def _some(seen: Mapping[str, int], name: str | None) -> int | None:
    return seen.get(name) if name else None


# ---------------------------------------------------------------- text, tool calls, finish reasons


def _list(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if isinstance(item, Mapping)] if isinstance(value, list) else []


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _note(answer: ModelAnswer, id_: Any = None, model: Any = None, reason: Any = None) -> None:
    """First id and model seen; every distinct finish reason."""
    answer.id = answer.id or _str(id_)
    answer.model = answer.model or _str(model)
    if _str(reason) and reason not in answer.finish_reasons:
        answer.finish_reasons.append(reason)


def _chat(documents: list[Mapping[str, Any]]) -> ModelAnswer:
    """A chat completion (choices[].message) or its chunks (choices[].delta; tool calls in pieces by index)."""
    answer, texts, refusals, calls = ModelAnswer(), [], [], {}
    for document in documents:
        _note(answer, document.get("id"), document.get("model"))
        for choice in _list(document.get("choices")):
            _note(answer, reason=choice.get("finish_reason"))
            if choice.get("index", 0) != 0:
                continue
            message = choice.get("message") if isinstance(choice.get("message"), Mapping) else choice.get("delta")
            message = message if isinstance(message, Mapping) else {}
            texts.append(message.get("content") if isinstance(message.get("content"), str) else "")
            refusals.append(message.get("refusal") if isinstance(message.get("refusal"), str) else "")
            for position, call in enumerate(_list(message.get("tool_calls"))):
                slot = calls.setdefault(call.get("index", position), {"id": "", "name": "", "arguments": ""})
                function = call.get("function") if isinstance(call.get("function"), Mapping) else {}
                slot["id"] = call.get("id") or slot["id"]
                slot["name"] = function.get("name") or slot["name"]
                slot["arguments"] += function.get("arguments") or ""
    answer.text, answer.refusal = "".join(texts), "".join(refusals) or None
    answer.tool_calls = [AnswerToolCall(c["id"], c["name"], c["arguments"]) for _, c in sorted(calls.items())]
    return answer


def _response_end(answer: ModelAnswer, response: Mapping[str, Any]) -> None:
    """A whole Responses (or Realtime) response's id, model and end: the reason it is
    incomplete, else its status once completed or failed."""
    _note(answer, response.get("id"), response.get("model"))
    status = response.get("status")
    reason = dig(response, "incomplete_details.reason") or dig(response, "status_details.reason")
    _note(answer, reason=reason if status == "incomplete" else status if status in ("completed", "failed") else None)


def _output_item(answer: ModelAnswer, item: Mapping[str, Any], texts: list[str], refusals: list[str]) -> None:
    """A Responses output item: a function call, or a message's text and refusal parts (a
    Realtime message's audio parts by their transcript)."""
    if item.get("type") == "function_call":
        answer.tool_calls.append(AnswerToolCall(str(item.get("call_id") or ""), str(item.get("name") or ""),
                                                item.get("arguments") or "", _str(item.get("id"))))
    for part in _list(item.get("content")) if item.get("type") == "message" else ():
        if part.get("type") == "refusal":
            refusals.append(part["refusal"] if isinstance(part.get("refusal"), str) else "")
            continue
        text = part.get("text") if part.get("type") in ("output_text", "text") else part.get("transcript")
        texts.append(text if isinstance(text, str) else "")


def _responses(documents: list[Mapping[str, Any]]) -> ModelAnswer:
    """A response object, or its events: the final event carries the whole response; a stream cut
    before it (or a final event without its output) reads from its text deltas and finished items."""
    answer, texts, refusals = ModelAnswer(), [], []
    final = next((d.get("response") for d in reversed(documents)
                  if d.get("type") in _RESPONSE_ENDS and isinstance(d.get("response"), Mapping)), None)
    whole = final if final is not None else next((d for d in documents if d.get("object") == "response"), None)
    for document in documents:
        if isinstance(document.get("response"), Mapping):
            _note(answer, document["response"].get("id"), document["response"].get("model"))
    if whole is not None:
        _response_end(answer, whole)
    if whole is not None and _list(whole.get("output")):
        for item in _list(whole.get("output")):
            _output_item(answer, item, texts, refusals)
    else:
        for document in documents:
            kind = document.get("type")
            if kind in _TEXT_DELTAS and isinstance(document.get("delta"), str):
                texts.append(document["delta"])
            if kind == "response.refusal.delta" and isinstance(document.get("delta"), str):
                refusals.append(document["delta"])
            if kind == "response.output_item.done" and isinstance(document.get("item"), Mapping):
                _output_item(answer, {**document["item"], "content": []}, texts, refusals)  # text came as deltas
    answer.text, answer.refusal = "".join(texts), "".join(refusals) or None
    return answer


def _messages(documents: list[Mapping[str, Any]]) -> ModelAnswer:
    """A message (content blocks), or its events: message_start, content blocks started and
    added to by deltas, message_delta with the stop reason."""
    answer, blocks = ModelAnswer(), {}
    for document in documents:
        kind = document.get("type")
        if kind == "message":
            blocks = dict(enumerate(dict(b) for b in _list(document.get("content"))))
        held = document.get("message") if kind == "message_start" else document
        if isinstance(held, Mapping):
            _note(answer, held.get("id"), held.get("model"), held.get("stop_reason"))
        if kind == "message_delta":
            _note(answer, reason=dig(document, "delta.stop_reason"))
        index = document.get("index", 0)
        if kind == "content_block_start" and isinstance(document.get("content_block"), Mapping):
            blocks[index] = dict(document["content_block"])
        delta = document.get("delta") if kind == "content_block_delta" else None
        if isinstance(delta, Mapping):
            block = blocks.setdefault(index, {"type": "tool_use" if delta.get("type") == "input_json_delta" else "text"})
            if delta.get("type") == "text_delta":
                block["text"] = block.get("text", "") + str(delta.get("text") or "")
            elif delta.get("type") == "input_json_delta":
                block["partial"] = block.get("partial", "") + str(delta.get("partial_json") or "")
    ordered = [blocks[i] for i in sorted(blocks)]
    answer.text = "".join(b["text"] for b in ordered if b.get("type") == "text" and isinstance(b.get("text"), str))
    answer.tool_calls = [AnswerToolCall(str(b.get("id") or ""), str(b.get("name") or ""),
                                        b["partial"] if "partial" in b else b.get("input") or {})
                         for b in ordered if b.get("type") == "tool_use"]
    return answer


def _gemini(documents: list[Mapping[str, Any]]) -> ModelAnswer:
    """A GenerateContentResponse, or a stream of them (each a chunk: parts add up)."""
    answer, texts = ModelAnswer(), []
    for document in documents:
        _note(answer, document.get("responseId"), document.get("modelVersion"))
        candidates = _list(document.get("candidates"))
        for candidate in candidates:
            _note(answer, reason=candidate.get("finishReason"))
        for part in _list(dig(candidates[0], "content.parts")) if candidates else ():
            if isinstance(part.get("text"), str) and not part.get("thought"):
                texts.append(part["text"])
            call = part.get("functionCall")
            if isinstance(call, Mapping):
                answer.tool_calls.append(AnswerToolCall(str(call.get("id") or ""), str(call.get("name") or ""),
                                                        call.get("args") or {}))
    answer.text = "".join(texts)
    return answer


def _gemini_live(documents: list[Mapping[str, Any]]) -> ModelAnswer:
    """A Gemini Live turn: the model's turn in pieces (`serverContent.modelTurn`), tool calls."""
    answer, texts = ModelAnswer(), []
    for document in documents:
        content = document.get("serverContent")
        parts = dig(content, "modelTurn.parts") if isinstance(content, Mapping) else None
        texts += [p["text"] for p in _list(parts) if isinstance(p.get("text"), str) and not p.get("thought")]
        answer.tool_calls += [AnswerToolCall(c.call_id, c.name, c.arguments)
                              for c in live_function_calls(LiveApi.GEMINI_LIVE, document)]
    answer.text = "".join(texts)
    return answer


def _realtime(documents: list[Mapping[str, Any]]) -> ModelAnswer:
    """An OpenAI Realtime turn: its events are the Responses API's, ending in response.done."""
    answer = _responses(documents)
    if not answer.tool_calls:
        calls = {c.call_id: c for d in documents for c in live_function_calls(LiveApi.OPENAI_REALTIME, d)}
        answer.tool_calls = [AnswerToolCall(c.call_id, c.name, c.arguments) for c in calls.values()]
    return answer


_READERS: Mapping[Api, Callable[[list[Mapping[str, Any]]], ModelAnswer]] = {
    ModelApi.OPENAI_CHAT: _chat,
    ModelApi.OPENAI_RESPONSES: _responses,
    ModelApi.ANTHROPIC_MESSAGES: _messages,
    ModelApi.GEMINI: _gemini,
    LiveApi.OPENAI_REALTIME: _realtime,
    LiveApi.GEMINI_LIVE: _gemini_live,
}
