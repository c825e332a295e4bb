"""A local model upstream speaking all four model APIs (OpenAI Chat and Responses, Anthropic
Messages, Gemini), in JSON (gzip-encoded, as the providers' edges send it) and as event streams,
written out by hand as each provider sends them. A request that offers tools gets a tool call
(`refund_order`), any other gets text. `GET /items/{id}` is a tool's JSON answer. Every answer
reports `input_tokens` in and 12 out, in its API's own usage fields; so does each turn of a live
session (OpenAI Realtime at /v1/realtime, Gemini Live at /ws/...BidiGenerateContent), text only."""

from __future__ import annotations

import gzip
import json

import aiohttp
from aiohttp import web

TEXT = "Order 1001 was refunded in full; the customer will see it in five days."
TOOL = "refund_order"
ARGS = {"order_id": "1001", "amount_cents": 1250}
OUTPUT_TOKENS = 12
INPUT_TOKENS = web.AppKey("input_tokens", int)
GEMINI_LIVE = "google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


def app(input_tokens: int = 10) -> web.Application:
    application = web.Application()
    application[INPUT_TOKENS] = input_tokens
    application.router.add_post("/v1/chat/completions", chat)
    application.router.add_post("/v1/responses", responses)
    application.router.add_post("/v1/messages", messages)
    application.router.add_post("/v1beta/models/{call}", gemini)
    application.router.add_get("/items/{id}", item)  # a tool, for instructions planted in its answers
    application.router.add_post("/mcp", mcp_over_sse)
    application.router.add_get("/v1/realtime", realtime)
    application.router.add_get(f"/ws/{GEMINI_LIVE}", gemini_live)
    return application


async def realtime(request: web.Request) -> web.WebSocketResponse:
    """A Realtime session: each response.create gets the text as a delta, then response.done with
    the turn's usage."""
    ws = web.WebSocketResponse()
    await ws.prepare(request)
    model = request.query.get("model", "")
    await ws.send_json({"type": "session.created", "event_id": "ev_0", "session": {"id": "sess_1", "model": model}})
    turns = 0
    async for message in ws:
        if message.type != aiohttp.WSMsgType.TEXT or json.loads(message.data).get("type") != "response.create":
            continue
        turns += 1
        tokens_in = request.app[INPUT_TOKENS]
        item = {"id": f"item_{turns}", "object": "realtime.item", "type": "message", "status": "completed",
                "role": "assistant", "content": [{"type": "output_text", "text": TEXT}]}
        where = {"response_id": f"resp_{turns}", "item_id": item["id"], "output_index": 0, "content_index": 0}
        await ws.send_json({"type": "response.output_text.delta", "event_id": f"ev_{turns}a", **where, "delta": TEXT})
        await ws.send_json({"type": "response.done", "event_id": f"ev_{turns}b", "response": {
            "id": f"resp_{turns}", "object": "realtime.response", "status": "completed", "output": [item],
            "usage": {"total_tokens": tokens_in + OUTPUT_TOKENS, "input_tokens": tokens_in,
                      "output_tokens": OUTPUT_TOKENS, "input_token_details": {"cached_tokens": 0, "text_tokens": tokens_in},
                      "output_token_details": {"text_tokens": OUTPUT_TOKENS, "audio_tokens": 0}}}})
    return ws


async def gemini_live(request: web.Request) -> web.WebSocketResponse:
    """A Gemini Live session: setup, then each client turn gets the text and turnComplete. The
    turn's usage comes twice, a running count with the text and the whole with turnComplete."""
    tokens_in = request.app[INPUT_TOKENS]

    def usage(output: int) -> dict:
        return {"promptTokenCount": tokens_in, "responseTokenCount": output, "totalTokenCount": tokens_in + output}

    ws = web.WebSocketResponse()
    await ws.prepare(request)
    async for message in ws:
        if "setup" in json.loads(message.data):  # the session's first message; every other is a turn
            await ws.send_json({"setupComplete": {}})
            continue
        await ws.send_json({"serverContent": {"modelTurn": {"parts": [{"text": TEXT}]}}, "usageMetadata": usage(5)})
        await ws.send_json({"serverContent": {"turnComplete": True}, "usageMetadata": usage(OUTPUT_TOKENS)})
    return ws


async def mcp_over_sse(request: web.Request) -> web.StreamResponse:
    """An MCP Streamable HTTP server answering a tools/call as an SSE stream: a progress
    notification, then the result."""
    call = await request.json()
    result = {"content": [{"type": "text", "text": json.dumps({"ok": True})}], "isError": False}
    progress = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}
    return await _stream(request, [_sse(progress, "message"),
                                   _sse({"jsonrpc": "2.0", "id": call["id"], "result": result}, "message")])


async def item(request: web.Request) -> web.Response:
    return web.json_response({"id": request.match_info["id"], "status": "open", "amount": 1250})


def _json(document: dict) -> web.Response:
    return web.Response(body=gzip.compress(json.dumps(document).encode()),
                        headers={"content-type": "application/json", "content-encoding": "gzip"})


async def _stream(request: web.Request, events: list[str]) -> web.StreamResponse:
    response = web.StreamResponse(headers={"content-type": "text/event-stream"})
    await response.prepare(request)
    for text in events:
        await response.write(text.encode())
    await response.write_eof()
    return response


def _sse(data: dict, name: str | None = None, end: str = "\n\n") -> str:
    return (f"event: {name}\n" if name else "") + f"data: {json.dumps(data)}{end}"


async def chat(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tools = bool(body.get("tools"))
    head = {"id": "chatcmpl-1", "created": 0, "model": body["model"]}
    tokens_in = request.app[INPUT_TOKENS]
    usage = {"prompt_tokens": tokens_in, "completion_tokens": OUTPUT_TOKENS, "total_tokens": tokens_in + OUTPUT_TOKENS}
    if not body.get("stream"):
        message = {"role": "assistant", "content": None if tools else TEXT, "refusal": None}
        if tools:
            message["tool_calls"] = [{"id": "call_1", "type": "function",
                                      "function": {"name": TOOL, "arguments": json.dumps(ARGS)}}]
        choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": "tool_calls" if tools else "stop"}
        return _json({**head, "object": "chat.completion", "choices": [choice], "usage": usage})
    chunk = {**head, "object": "chat.completion.chunk"}
    if tools:
        arguments = json.dumps(ARGS)
        deltas = [{"role": "assistant", "tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                                                         "function": {"name": TOOL, "arguments": ""}}]}]
        deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": arguments[i:i + 10]}}]}
                   for i in range(0, len(arguments), 10)]
    else:
        deltas = [{"role": "assistant", "content": ""}] + [{"content": TEXT[i:i + 10]} for i in range(0, len(TEXT), 10)]
    events = [_sse(chunk | {"choices": [{"index": 0, "delta": d, "finish_reason": None}]}) for d in deltas]
    events.append(_sse(chunk | {"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls" if tools else "stop"}]}))
    events += [_sse(chunk | {"choices": [], "usage": usage}), "data: [DONE]\n\n"]
    return await _stream(request, events)


def _response(model: str, tools: bool, tokens_in: int | None, status: str = "completed") -> dict:
    """A Responses object; a response in progress has no usage yet (None), as OpenAI sends it."""
    if tools:
        output = [{"id": "fc_1", "type": "function_call", "status": "completed", "call_id": "call_1", "name": TOOL,
                   "arguments": json.dumps(ARGS)}]
    else:
        output = [{"id": "msg_1", "type": "message", "status": "completed", "role": "assistant",
                   "content": [{"type": "output_text", "text": TEXT, "annotations": []}]}]
    return {"id": "resp_1", "object": "response", "created_at": 0, "status": status, "error": None,
            "incomplete_details": None, "instructions": None, "model": model,
            "output": output if status == "completed" else [], "parallel_tool_calls": True, "temperature": 1.0,
            "tool_choice": "auto", "tools": [], "top_p": 1.0,
            "usage": None if tokens_in is None else {
                "input_tokens": tokens_in, "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": OUTPUT_TOKENS, "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": tokens_in + OUTPUT_TOKENS}}


async def responses(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tools = bool(body.get("tools"))
    final = _response(body["model"], tools, request.app[INPUT_TOKENS])
    if not body.get("stream"):
        return _json(final)
    item = final["output"][0]
    seq = iter(range(100))

    def sse(kind: str, **fields) -> str:
        return _sse({"type": kind, "sequence_number": next(seq), **fields}, kind)

    events = [sse("response.created", response=_response(body["model"], tools, None, "in_progress")),
              sse("response.output_item.added", output_index=0, item={**item, "status": "in_progress",
                                                                     **({"arguments": ""} if tools else {"content": []})})]
    where = {"item_id": item["id"], "output_index": 0}
    if tools:
        events += [sse("response.function_call_arguments.delta", **where, delta=item["arguments"]),
                   sse("response.function_call_arguments.done", **where, arguments=item["arguments"])]
    else:
        part = item["content"][0]
        events += [sse("response.content_part.added", **where, content_index=0, part={**part, "text": ""}),
                   sse("response.output_text.delta", **where, content_index=0, delta=TEXT, logprobs=[]),
                   sse("response.output_text.done", **where, content_index=0, text=TEXT, logprobs=[]),
                   sse("response.content_part.done", **where, content_index=0, part=part)]
    events += [sse("response.output_item.done", output_index=0, item=item), sse("response.completed", response=final)]
    return await _stream(request, events)


async def messages(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tools = bool(body.get("tools"))
    block = {"type": "tool_use", "id": "toolu_1", "name": TOOL, "input": ARGS} if tools else {"type": "text", "text": TEXT}
    message = {"id": "msg_1", "type": "message", "role": "assistant", "model": body["model"], "content": [block],
               "stop_reason": "tool_use" if tools else "end_turn", "stop_sequence": None,
               "usage": {"input_tokens": request.app[INPUT_TOKENS], "output_tokens": OUTPUT_TOKENS}}
    if not body.get("stream"):
        return _json(message)
    # as Anthropic streams: a first output count in message_start, the running total in message_delta
    start = {**message, "content": [], "stop_reason": None,
             "usage": {"input_tokens": request.app[INPUT_TOKENS], "output_tokens": 1}}
    events = [_sse({"type": "message_start", "message": start}, "message_start")]
    if tools:
        arguments = json.dumps(ARGS)
        events.append(_sse({"type": "content_block_start", "index": 0, "content_block": {**block, "input": {}}},
                           "content_block_start"))
        events += [_sse({"type": "content_block_delta", "index": 0,
                         "delta": {"type": "input_json_delta", "partial_json": arguments[i:i + 10]}}, "content_block_delta")
                   for i in range(0, len(arguments), 10)]
    else:
        events.append(_sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                           "content_block_start"))
        events.append(_sse({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": TEXT}},
                           "content_block_delta"))
    events += [_sse({"type": "content_block_stop", "index": 0}, "content_block_stop"),
               _sse({"type": "message_delta", "delta": {"stop_reason": message["stop_reason"], "stop_sequence": None},
                     "usage": {"output_tokens": OUTPUT_TOKENS}}, "message_delta"),
               _sse({"type": "message_stop"}, "message_stop")]
    return await _stream(request, events)


async def gemini(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    tools = bool(body.get("tools"))
    parts = [{"functionCall": {"name": TOOL, "args": ARGS}}] if tools else [{"text": TEXT}]
    tokens_in = request.app[INPUT_TOKENS]
    usage = {"promptTokenCount": tokens_in, "candidatesTokenCount": OUTPUT_TOKENS, "totalTokenCount": tokens_in + OUTPUT_TOKENS}
    final = {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
             "usageMetadata": usage, "modelVersion": "gemini-2.5-flash", "responseId": "r1"}
    if ":streamGenerateContent" not in request.path:
        return _json(final)
    chunks = []
    if not tools:
        half = len(TEXT) // 2
        chunks.append({"candidates": [{"content": {"role": "model", "parts": [{"text": TEXT[:half]}]}, "index": 0}],
                       "modelVersion": "gemini-2.5-flash", "responseId": "r1"})
        final["candidates"][0]["content"]["parts"] = [{"text": TEXT[half:]}]
    chunks.append(final)
    return await _stream(request, [_sse(c, end="\r\n\r\n") for c in chunks])
