"""What a model call's trace line says in GenAI terms: request parameters, the response's id,
model, finish reasons and token usage, the time to the first streamed chunk, and (opt-in) the
messages in the conventions' shape. Answers are read by formats.model_answers (as the proxy's
budget and the verdict read them): the response read is the one the client got (a fault may
have cut or rewritten it), else the upstream's; the tokens are those the upstream's reports.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from faultproxy.evaluator.traces import TracedExchange, documents
from faultproxy.formats.model_answers import Api, dig, read_answer, read_usage
from faultproxy.formats.model_apis import ModelApi, is_streamed, request_model
from faultproxy.otel import names as N

_REQUEST_NUMBERS = ((N.REQUEST_TEMPERATURE, ("temperature", "generationConfig.temperature")),
                    (N.REQUEST_TOP_P, ("top_p", "generationConfig.topP")),
                    (N.REQUEST_MAX_TOKENS, ("max_tokens", "max_completion_tokens", "max_output_tokens",
                                            "generationConfig.maxOutputTokens")),
                    (N.REQUEST_SEED, ("seed",)))


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


def response_attributes(ex: TracedExchange, api: Api) -> dict[str, Any]:
    """Id, model and finish reasons of the answer the client got; the tokens the upstream's
    answer reports (what the call used, a fault's edit or cut aside: the verdict's count too)."""
    answer = read_answer(api, answer_of(ex))
    usage = read_usage(api, documents(ex.raw.get("upstream") or {}))
    attributes: dict[str, Any] = {N.RESPONSE_ID: answer.id, N.RESPONSE_MODEL: answer.model,
                                  N.RESPONSE_FINISH_REASONS: answer.finish_reasons or None}
    if usage is not None:
        attributes |= {N.USAGE_INPUT: usage.input, N.USAGE_OUTPUT: usage.output, N.USAGE_CACHE_READ: usage.cache_read,
                       N.USAGE_CACHE_CREATION: usage.cache_creation, N.USAGE_REASONING: usage.reasoning}
    return {name: value for name, value in attributes.items() if value is not None}


def time_to_first_chunk(ex: TracedExchange) -> float | None:
    """Seconds from the request to the first streamed event the client got: the proxy's time to
    the response headers plus the first event's offset (None for traces without the former)."""
    headers_after = ex.raw.get("response_after_s")
    client = ex.raw.get("client") or {}
    events = client.get("sse") if client.get("sse") is not None else (ex.raw.get("upstream") or {}).get("sse")
    if not isinstance(headers_after, (int, float)) or not events:
        return None
    return round(float(headers_after) + float(events[0][0]), 6)


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
    """The answer, whole or streamed, as one assistant message: its text and tool calls."""
    read = read_answer(api, answer)
    parts = [{"type": "text", "content": read.text}] if read.text else []
    parts += [{"type": "tool_call", "id": c.id or None, "name": c.name, "arguments": c.arguments}
              for c in read.tool_calls]
    return [{"role": "assistant", "parts": parts}] if parts else []


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
