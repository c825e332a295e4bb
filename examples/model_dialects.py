"""The scripted model's other dialects: the OpenAI Responses API, the Realtime API's text session
and Gemini, as translations to and from the chat completion the planner already writes
(model_server.py serves them).

A request becomes chat messages and tool names; the chat completion for them becomes the
Responses or Gemini body, and the events or chunks that stream it, with the fields the official
SDKs read (openai's `Response`, google-genai's `GenerateContentResponse`).
"""

from __future__ import annotations

import json
from typing import Any


def _text(content: Any) -> str:
    if isinstance(content, list):  # content parts: input_text, output_text, text
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return content if isinstance(content, str) else ""


def pieces(text: str, size: int) -> list[str]:
    """Text in the small deltas a stream carries it in (one empty piece for no text)."""
    return [text[i:i + size] for i in range(0, len(text), size)] or [""]


# ---------------------------------------------------------------- the Responses API


def responses_to_chat(body: dict) -> dict:
    """A Responses request as the chat request the planner reads."""
    messages: list[dict] = []
    if body.get("instructions"):
        messages.append({"role": "system", "content": body["instructions"]})
    items = body.get("input")
    for item in [{"role": "user", "content": items}] if isinstance(items, str) else items or []:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {"id": item["call_id"], "type": "function",
                    "function": {"name": item["name"], "arguments": item.get("arguments") or "{}"}}
            messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append({"role": "tool", "tool_call_id": item["call_id"], "content": _text(item.get("output"))})
        elif kind == "message":
            messages.append({"role": item.get("role", "user"), "content": _text(item.get("content"))})
    tools = [{"type": "function", "function": {"name": t.get("name")}} for t in body.get("tools") or []
             if isinstance(t, dict) and t.get("type") == "function"]
    return {"model": body.get("model"), "messages": messages, "tools": tools, "tool_choice": body.get("tool_choice"),
            "temperature": body.get("temperature"), "seed": None, "stream": body.get("stream")}


def chat_to_response(completion: dict, status: str = "completed") -> dict:
    """The Response object for a chat completion (`status` in_progress: the stream's opening snapshot)."""
    message = completion["choices"][0]["message"]
    suffix = completion["id"].removeprefix("chatcmpl-")
    output: list[dict] = []
    for call in message.get("tool_calls") or []:
        output.append({"type": "function_call", "id": "fc_" + call["id"].removeprefix("call_"), "call_id": call["id"],
                       "name": call["function"]["name"], "arguments": call["function"]["arguments"],
                       "status": "completed"})
    if message.get("content") is not None:
        output.append({"type": "message", "id": "msg_" + suffix, "role": "assistant", "status": "completed",
                       "content": [{"type": "output_text", "text": message["content"], "annotations": [],
                                    "logprobs": []}]})
    usage = completion["usage"]
    done = status == "completed"
    return {
        "id": "resp_" + suffix, "object": "response", "created_at": completion["created"], "status": status,
        "model": completion["model"], "output": output if done else [], "error": None, "incomplete_details": None,
        "instructions": None, "metadata": {}, "parallel_tool_calls": True, "temperature": 1.0, "top_p": 1.0,
        "tool_choice": "auto", "tools": [], "text": {"format": {"type": "text"}}, "truncation": "disabled",
        "usage": {"input_tokens": usage["prompt_tokens"],
                  "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                  "output_tokens": usage["completion_tokens"], "output_tokens_details": {"reasoning_tokens": 0},
                  "total_tokens": usage["total_tokens"]} if done else None,
    }


def response_events(completion: dict) -> list[tuple[str, dict]]:
    """The typed events that stream a Response: created, in_progress, each item's, completed."""
    final = chat_to_response(completion)
    events: list[dict] = [{"type": "response.created", "response": chat_to_response(completion, "in_progress")},
                          {"type": "response.in_progress", "response": chat_to_response(completion, "in_progress")}]
    for index, item in enumerate(final["output"]):
        common = {"item_id": item["id"], "output_index": index}
        if item["type"] == "function_call":
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "arguments": "", "status": "in_progress"}})
            events += [{"type": "response.function_call_arguments.delta", **common, "delta": piece}
                       for piece in pieces(item["arguments"], 16)]
            events.append({"type": "response.function_call_arguments.done", **common, "name": item["name"],
                           "arguments": item["arguments"]})
        else:
            text, part = item["content"][0]["text"], {"type": "output_text", "text": "", "annotations": []}
            events.append({"type": "response.output_item.added", "output_index": index,
                           "item": {**item, "content": [], "status": "in_progress"}})
            events.append({"type": "response.content_part.added", **common, "content_index": 0, "part": part})
            events += [{"type": "response.output_text.delta", **common, "content_index": 0, "delta": piece,
                        "logprobs": []} for piece in pieces(text, 24)]
            events.append({"type": "response.output_text.done", **common, "content_index": 0, "text": text,
                           "logprobs": []})
            events.append({"type": "response.content_part.done", **common, "content_index": 0,
                           "part": {**part, "text": text}})
        events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    events.append({"type": "response.completed", "response": final})
    return [(event["type"], {**event, "sequence_number": n}) for n, event in enumerate(events)]


# ---------------------------------------------------------------- the Realtime API (a text session)


def realtime_events(completion: dict) -> list[dict]:
    """The server events that stream one Realtime response: the Responses API's item events under
    the same names, each with the response's id (a function call's done event with its call_id),
    between `response.created` and `response.done`."""
    response_id = "resp_" + completion["id"].removeprefix("chatcmpl-")
    events = []
    for kind, event in response_events(completion):
        if kind == "response.in_progress":
            continue
        event = {k: v for k, v in event.items() if k != "sequence_number"}
        event["event_id"] = f"event_{response_id[5:21]}_{len(events)}"
        if kind == "response.completed":
            event["type"] = "response.done"
        elif kind != "response.created":
            event["response_id"] = response_id
        if kind == "response.function_call_arguments.done":
            event["call_id"] = "call_" + event["item_id"].removeprefix("fc_")
        events.append(event)
    return events


# ---------------------------------------------------------------- Gemini


def gemini_to_chat(model: str, body: dict) -> dict:
    """A generateContent request as the chat request the planner reads. Gemini's function calls
    carry no id: a call and its response pair up by name, in order."""
    messages: list[dict] = []
    system = _text((body.get("systemInstruction") or {}).get("parts"))
    if system:
        messages.append({"role": "system", "content": system})
    open_calls: dict[str, list[str]] = {}
    for turn, content in enumerate(body.get("contents") or []):
        parts = [p for p in content.get("parts") or [] if isinstance(p, dict)]
        calls = [p["functionCall"] for p in parts if "functionCall" in p]
        answers = [p["functionResponse"] for p in parts if "functionResponse" in p]
        if calls:
            ids = [f"call_{turn}_{i}" for i in range(len(calls))]
            for call_id, call in zip(ids, calls):
                open_calls.setdefault(call["name"], []).append(call_id)
            messages.append({"role": "assistant", "content": None, "tool_calls": [
                {"id": call_id, "type": "function",
                 "function": {"name": call["name"], "arguments": json.dumps(call.get("args") or {})}}
                for call_id, call in zip(ids, calls)]})
        for answer in answers:
            waiting = open_calls.get(answer["name"]) or [""]
            response = answer.get("response")
            if isinstance(response, dict) and set(response) == {"output"}:  # Gemini's wrapper for a non-object
                response = response["output"]
            messages.append({"role": "tool", "tool_call_id": waiting.pop(0), "content": json.dumps(response)})
        text = _text([p for p in parts if "text" in p])
        if text and not calls:
            messages.append({"role": "assistant" if content.get("role") == "model" else "user", "content": text})
    tools = [{"type": "function", "function": {"name": d.get("name")}}
             for tool in body.get("tools") or [] for d in tool.get("functionDeclarations") or []]
    config = body.get("generationConfig") or {}
    return {"model": model, "messages": messages, "tools": tools, "temperature": config.get("temperature"),
            "seed": config.get("seed")}


def chat_to_gemini(completion: dict, text: str | None = None, final: bool = True) -> dict:
    """The GenerateContentResponse for a chat completion; `text` and `final` shape one stream chunk."""
    message = completion["choices"][0]["message"]
    if message.get("tool_calls"):
        parts = [{"functionCall": {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}}
                 for c in message["tool_calls"]]
    else:
        parts = [{"text": message["content"] if text is None else text}]
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    chunk: dict[str, Any] = {"candidates": [candidate], "modelVersion": completion["model"],
                             "responseId": completion["id"].removeprefix("chatcmpl-")[:22]}
    if final:
        usage = completion["usage"]
        candidate["finishReason"] = "STOP"
        chunk["usageMetadata"] = {"promptTokenCount": usage["prompt_tokens"],
                                  "candidatesTokenCount": usage["completion_tokens"],
                                  "totalTokenCount": usage["total_tokens"]}
    return chunk


def gemini_chunks(completion: dict) -> list[dict]:
    """The chunks that stream a Gemini answer: text in pieces, the last with finishReason and usage."""
    message = completion["choices"][0]["message"]
    if message.get("tool_calls"):
        return [chat_to_gemini(completion)]
    texts = pieces(message["content"], 24)
    return [chat_to_gemini(completion, text, final=i == len(texts) - 1) for i, text in enumerate(texts)]
