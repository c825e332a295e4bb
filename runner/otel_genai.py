"""What a model call's trace line says in GenAI terms: request parameters, the response's id,
model, finish reasons and token usage, the time to the first streamed chunk, and (opt-in) the
messages in the conventions' shape. Read from the recorded bodies and SSE events of the four
model APIs formats.model_apis names; the response read is the one the client got (a fault may
have cut or rewritten it), else the upstream's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from faultproxy.evaluator.traced import TracedExchange, documents
from faultproxy.formats.model_apis import ModelApi, is_streamed, request_model
from faultproxy.runner import otel_names as N

# Where each API keeps a number, as dotted paths into a usage block (first found wins).
_USAGE_PATHS: Mapping[str, tuple[str, ...]] = {
    "input": ("prompt_tokens", "input_tokens", "promptTokenCount"),
    "output": ("completion_tokens", "output_tokens", "candidatesTokenCount"),
    "cache_read": ("prompt_tokens_details.cached_tokens", "input_tokens_details.cached_tokens",
                   "cache_read_input_tokens", "cachedContentTokenCount"),
    "cache_creation": ("cache_creation_input_tokens",),
    "reasoning": ("completion_tokens_details.reasoning_tokens", "output_tokens_details.reasoning_tokens",
                  "thoughtsTokenCount"),
}
_REQUEST_NUMBERS = ((N.REQUEST_TEMPERATURE, ("temperature", "generationConfig.temperature")),
                    (N.REQUEST_TOP_P, ("top_p", "generationConfig.topP")),
                    (N.REQUEST_MAX_TOKENS, ("max_tokens", "max_completion_tokens", "max_output_tokens",
                                            "generationConfig.maxOutputTokens")),
                    (N.REQUEST_SEED, ("seed",)))


def dig(document: Any, path: str) -> Any:
    """document["a"]["b"] for "a.b", or None where the path leads nowhere."""
    for part in path.split("."):
        if not isinstance(document, Mapping):
            return None
        document = document.get(part)
    return document


def answer_of(ex: TracedExchange) -> list[Any]:
    """The JSON documents of the answer the client got (body or SSE events), else the upstream's."""
    client = ex.raw.get("client") or {}
    if client.get("sse") or client.get("body") is not None:
        return documents(client)
    return documents(ex.raw.get("upstream") or {})


def request_attributes(ex: TracedExchange, api: ModelApi) -> dict[str, Any]:
    body = ex.body_json if isinstance(ex.body_json, dict) else {}
    model = request_model(api, ex.route, body)
    attributes: dict[str, Any] = {N.OPERATION: N.OPERATION_OF[api], N.PROVIDER: N.PROVIDER_OF[api],
                                  N.REQUEST_STREAM: is_streamed(api, ex.route, body)}
    if model:
        attributes[N.REQUEST_MODEL] = model
    for name, paths in _REQUEST_NUMBERS:
        value = next((v for p in paths if isinstance(v := dig(body, p), (int, float)) and not isinstance(v, bool)),
                     None)
        if value is not None:
            attributes[name] = value
    return attributes


def response_attributes(ex: TracedExchange) -> dict[str, Any]:
    """Id, model, finish reasons and usage of the answer; streams repeat or accumulate counts,
    so each number is the largest any event reports."""
    attributes: dict[str, Any] = {}
    reasons: list[str] = []
    usage: dict[str, int] = {}
    cache_apart = False  # Anthropic counts cached input beside input_tokens, the others within it
    for document in answer_of(ex):
        for holder in _holders(document):
            _first(attributes, N.RESPONSE_ID, holder.get("id") or holder.get("responseId"))
            _first(attributes, N.RESPONSE_MODEL, holder.get("model") or holder.get("modelVersion"))
            reasons.extend(r for r in _finish_reasons(holder) if r not in reasons)
            for block in (holder.get("usage"), holder.get("usageMetadata")):
                if isinstance(block, Mapping):
                    _add_usage(usage, block)
                    cache_apart = cache_apart or "cache_read_input_tokens" in block
    if reasons:
        attributes[N.RESPONSE_FINISH_REASONS] = reasons
    if "input" in usage:  # the conventions count cached input in input_tokens
        cached = usage.get("cache_read", 0) + usage.get("cache_creation", 0) if cache_apart else 0
        attributes[N.USAGE_INPUT] = usage["input"] + cached
    for key, name in (("output", N.USAGE_OUTPUT), ("cache_read", N.USAGE_CACHE_READ),
                      ("cache_creation", N.USAGE_CACHE_CREATION), ("reasoning", N.USAGE_REASONING)):
        if key in usage:
            attributes[name] = usage[key]
    return attributes


def time_to_first_chunk(ex: TracedExchange) -> float | None:
    """Seconds from the request to the first streamed event the client got: the proxy's time to
    the response headers plus the first event's offset (None for traces without the former)."""
    headers_after = ex.raw.get("response_after_s")
    client = ex.raw.get("client") or {}
    events = client.get("sse") if client.get("sse") is not None else (ex.raw.get("upstream") or {}).get("sse")
    if not isinstance(headers_after, (int, float)) or not events:
        return None
    return round(float(headers_after) + float(events[0][0]), 6)


def _holders(document: Any) -> Iterable[Mapping[str, Any]]:
    """The objects in a body or event that carry response fields: the document, and the message
    (Anthropic's message_start) or response (OpenAI Responses events) it wraps."""
    if not isinstance(document, Mapping):
        return ()
    inner = [document.get(k) for k in ("message", "response")]
    return [document, *(i for i in inner if isinstance(i, Mapping))]


def _first(attributes: dict[str, Any], name: str, value: Any) -> None:
    if isinstance(value, str) and value and name not in attributes:
        attributes[name] = value


def _finish_reasons(holder: Mapping[str, Any]) -> list[str]:
    found = [dig(holder, "stop_reason"), dig(holder, "delta.stop_reason"), dig(holder, "incomplete_details.reason")]
    for choice in holder.get("choices") or holder.get("candidates") or ():
        if isinstance(choice, Mapping):
            found += [choice.get("finish_reason"), choice.get("finishReason")]
    if holder.get("object") == "response" and holder.get("status") in ("completed", "failed"):
        found.append(holder["status"])
    return [r for r in found if isinstance(r, str) and r]


def _add_usage(usage: dict[str, int], block: Mapping[str, Any]) -> None:
    for key, paths in _USAGE_PATHS.items():
        value = next((v for p in paths if isinstance(v := dig(block, p), int)), None)
        if value is not None:
            usage[key] = max(usage.get(key, 0), value)


def content_attributes(ex: TracedExchange, api: ModelApi) -> dict[str, str]:
    """gen_ai.input.messages, gen_ai.output.messages and gen_ai.system_instructions as JSON text
    in the conventions' shape ({"role", "parts": [{"type": "text", "content"}, ...]})."""
    body = ex.body_json if isinstance(ex.body_json, dict) else {}
    system, messages = _input_messages(api, body)
    output = _output_messages(api, answer_of(ex))
    attributes = {N.INPUT_MESSAGES: _json(messages)} if messages else {}
    if output:
        attributes[N.OUTPUT_MESSAGES] = _json(output)
    if system:
        attributes[N.SYSTEM_INSTRUCTIONS] = _json([{"type": "text", "content": system}])
    return attributes


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def _input_messages(api: ModelApi, body: Mapping[str, Any]) -> tuple[str | None, list[dict[str, Any]]]:
    if api is ModelApi.GEMINI:
        system = " ".join(p.get("text", "") for p in dig(body, "systemInstruction.parts") or () if isinstance(p, Mapping))
        return system or None, [_message(_gemini_role(c.get("role")), c.get("parts"))
                                for c in body.get("contents") or () if isinstance(c, Mapping)]
    if api is ModelApi.OPENAI_RESPONSES:
        items = body.get("input")
        items = [{"role": "user", "content": items}] if isinstance(items, str) else items or ()
        instructions = body.get("instructions")
        return (instructions if isinstance(instructions, str) else None,
                [_item_message(item) for item in items if isinstance(item, Mapping)])
    system = body.get("system")
    if isinstance(system, list):
        system = " ".join(b.get("text", "") for b in system if isinstance(b, Mapping))
    messages = [_message(m.get("role", "user"), m.get("content"), m) for m in body.get("messages") or ()
                if isinstance(m, Mapping)]
    return (system if isinstance(system, str) and system else None), messages


def _output_messages(api: ModelApi, answer: list[Any]) -> list[dict[str, Any]]:
    """The answer as output messages: whole bodies, or the text of streamed deltas joined."""
    if len(answer) == 1 and isinstance(answer[0], Mapping) and not _is_chunk(answer[0]):
        body = answer[0]
        if api is ModelApi.OPENAI_CHAT:
            return [_message(c["message"].get("role", "assistant"), c["message"].get("content"), c["message"])
                    for c in body.get("choices") or () if isinstance(c, Mapping) and isinstance(c.get("message"), Mapping)]
        if api is ModelApi.OPENAI_RESPONSES:
            return [_item_message(item) for item in body.get("output") or () if isinstance(item, Mapping)]
        if api is ModelApi.GEMINI:
            return [_message("assistant", dig(c, "content.parts")) for c in body.get("candidates") or ()
                    if isinstance(c, Mapping)]
        return [_message(body.get("role", "assistant"), body.get("content"))]
    text = "".join(_delta_text(event) for event in answer if isinstance(event, Mapping))
    return [{"role": "assistant", "parts": [{"type": "text", "content": text}]}] if text else []


def _is_chunk(document: Mapping[str, Any]) -> bool:
    return document.get("object") == "chat.completion.chunk" or "type" in document and document.get("type") != "message"


def _delta_text(event: Mapping[str, Any]) -> str:
    """The text one streamed event adds, in any of the four APIs."""
    pieces = [dig(event, "delta.text"), event.get("delta") if event.get("type") == "response.output_text.delta" else None]
    for choice in event.get("choices") or ():
        pieces.append(dig(choice, "delta.content"))
    for candidate in event.get("candidates") or ():
        pieces += [p.get("text") for p in dig(candidate, "content.parts") or () if isinstance(p, Mapping)]
    return "".join(p for p in pieces if isinstance(p, str))


def _gemini_role(role: Any) -> str:
    return "assistant" if role == "model" else str(role or "user")


def _message(role: Any, content: Any, message: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """One message in the conventions' shape, from a content string or a list of parts/blocks."""
    parts = [_part(block) for block in content] if isinstance(content, list) else (
        [{"type": "text", "content": content}] if isinstance(content, str) else [])
    for call in (message or {}).get("tool_calls") or ():
        if isinstance(call, Mapping):
            parts.append({"type": "tool_call", "id": call.get("id"), "name": dig(call, "function.name"),
                          "arguments": dig(call, "function.arguments")})
    if role == "tool" and message is not None:
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": message.get("tool_call_id"),
                                           "response": content}]}
    return {"role": str(role), "parts": parts}


def _part(block: Any) -> dict[str, Any]:
    if not isinstance(block, Mapping):
        return {"type": "text", "content": str(block)}
    if isinstance(block.get("text"), str):
        return {"type": "text", "content": block["text"]}
    if block.get("type") == "tool_use" or "functionCall" in block:
        call = block.get("functionCall") or block
        return {"type": "tool_call", "id": block.get("id"), "name": call.get("name"),
                "arguments": call.get("input", call.get("args"))}
    if block.get("type") == "tool_result" or "functionResponse" in block:
        return {"type": "tool_call_response", "id": block.get("tool_use_id"),
                "response": block.get("content", block.get("functionResponse"))}
    return {"type": str(block.get("type") or "unknown")}


def _item_message(item: Mapping[str, Any]) -> dict[str, Any]:
    """An OpenAI Responses input or output item as a message."""
    kind = item.get("type")
    if kind == "function_call":
        return {"role": "assistant", "parts": [{"type": "tool_call", "id": item.get("call_id"),
                                                "name": item.get("name"), "arguments": item.get("arguments")}]}
    if kind == "function_call_output":
        return {"role": "tool", "parts": [{"type": "tool_call_response", "id": item.get("call_id"),
                                           "response": item.get("output")}]}
    return _message(item.get("role", "assistant"), item.get("content"))
