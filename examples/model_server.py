"""A scripted model behind the OpenAI chat completions API, so the demo needs no API key.

`POST /v1/chat/completions` (plain JSON or SSE with `stream: true`), `GET /v1/models`; the same
model speaks the Responses API (`POST /v1/responses`, typed SSE events with `stream: true`) and
Gemini (`POST /v1beta/models/M:generateContent`, `:streamGenerateContent?alt=sse`) and the Realtime
API as a text session over a WebSocket (`GET /v1/realtime?model=M`: `session.update` with
instructions and tools, `conversation.item.create`, `response.create`; no audio), translated in
model_dialects.py. The answers
come from planner.py, which reads the conversation and the request's `tools`. Responses carry
usage (estimated from message lengths), `x-request-id`, `openai-processing-ms` and the
`x-ratelimit-*` headers the real API sends. The server is deterministic: the same request gets the
same response, ids included; `seed` (or, without one, the conversation's opening) keys the
planner's dice. Admin: `GET /_log` lists every exchange as {request, response}, in the chat
dialect whatever the request's (a streamed response logged as the completion it adds up to);
`POST /_reset` clears it.

Run it alone with `python examples/model_server.py --port 0`: the first line of stdout is the base
URL for OPENAI_BASE_URL.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import logging
import math
import time
from collections import deque
from typing import Any

from aiohttp import web

try:  # imported as examples.model_server, or run as a script from examples/
    from examples.model_dialects import (chat_to_gemini, chat_to_response, gemini_chunks, gemini_to_chat, pieces,
                                         realtime_events, response_events, responses_to_chat)
    from examples.planner import MODELS, decide
    from examples.script_session import Final, ToolCall
    from examples.shop import serve
except ModuleNotFoundError:
    from model_dialects import (chat_to_gemini, chat_to_response, gemini_chunks, gemini_to_chat, pieces,
                                realtime_events, response_events, responses_to_chat)
    from planner import MODELS, decide
    from script_session import Final, ToolCall
    from shop import serve

log = logging.getLogger("faultproxy.demo.model")
CREATED = 1735689600  # the world has no clock: same request, same response
TOKEN_LIMIT = 2_000_000


def _hash(*parts: Any) -> str:
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


def _error(status: int, message: str, type_: str, code: str | None = None, param: str | None = None) -> web.Response:
    body = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return web.json_response(body, status=status, headers={"x-request-id": "req_" + _hash(message)[:24]})


class ModelServer:
    def __init__(self, *, latency_ms: float = 0, chunk_latency_ms: float = 0, error_rate: float | None = None,
                 temperature_default: float = 1.0, seed: int = 0):
        self.latency = latency_ms / 1000
        self.chunk_latency = chunk_latency_ms / 1000
        self.error_rate = error_rate  # None: each model's own rate
        self.temperature_default = temperature_default
        self.seed = seed
        self.exchanges: deque[dict] = deque(maxlen=10_000)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/v1/models/{model}", self._model)
        app.router.add_post("/v1/chat/completions", self._completions)
        app.router.add_post("/v1/responses", self._responses)
        app.router.add_get("/v1/realtime", self._realtime)
        for version in ("v1", "v1beta"):  # google-genai asks for v1 once given a base URL
            app.router.add_post(f"/{version}/models/{{model}}", self._gemini)  # {model} is M:generateContent
        app.router.add_get("/_log", self._log)
        app.router.add_post("/_reset", self._reset)
        return app

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [self._model_card(m) for m in MODELS]})

    async def _model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name not in MODELS:
            return _error(404, f"The model `{name}` does not exist.", "invalid_request_error", "model_not_found")
        return web.json_response(self._model_card(name))

    @staticmethod
    def _model_card(name: str) -> dict:
        return {"id": name, "object": "model", "created": CREATED, "owned_by": "faultproxy-demo"}

    async def _log(self, request: web.Request) -> web.Response:
        return web.json_response({"exchanges": list(self.exchanges)})

    async def _reset(self, request: web.Request) -> web.Response:
        self.exchanges.clear()
        return web.json_response({"ok": True})

    async def _completions(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, lambda body: body, self._reply_chat)

    async def _responses(self, request: web.Request) -> web.StreamResponse:
        return await self._serve(request, responses_to_chat, self._reply_responses)

    async def _realtime(self, request: web.Request) -> web.WebSocketResponse:
        """One Realtime session: the conversation lives here, as on the real server, and is gone
        with the connection (a client that reconnects must restore it)."""
        model = request.query.get("model", "demo-large")
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        session: dict[str, Any] = {"type": "realtime", "id": "sess_" + _hash(model, id(ws))[:20], "model": model,
                                   "output_modalities": ["text"], "instructions": "", "tools": []}
        items: list[dict] = []
        await ws.send_json({"type": "session.created", "event_id": "event_created", "session": session})
        async for message in ws:
            if message.type != web.WSMsgType.TEXT:
                continue
            event = json.loads(message.data)
            kind = event.get("type")
            if kind == "session.update":
                session |= {k: v for k, v in (event.get("session") or {}).items() if k in ("instructions", "tools")}
                await ws.send_json({"type": "session.updated", "event_id": "event_updated", "session": session})
            elif kind == "conversation.item.create":
                item = {"id": "item_" + _hash(items, event["item"])[:20]} | event["item"]
                items.append(item)
                await ws.send_json({"type": "conversation.item.added", "event_id": "event_" + item["id"], "item": item})
            elif kind == "response.create":
                chat = responses_to_chat({"model": model, "instructions": session["instructions"], "input": items,
                                          "tools": session["tools"]})
                completion = self._complete(chat)
                self.exchanges.append({"request": chat, "response": completion})
                await asyncio.sleep(self.latency)
                events = realtime_events(completion)
                for i, out in enumerate(events):
                    if i and self.chunk_latency:
                        await asyncio.sleep(self.chunk_latency)
                    await ws.send_json(out)
                items += events[-1]["response"]["output"]  # response.done: the model's items join the conversation
        return ws

    async def _gemini(self, request: web.Request) -> web.StreamResponse:
        model, _, method = request.match_info["model"].partition(":")
        if method not in ("generateContent", "streamGenerateContent"):
            return _error(404, f"Method {method!r} is not served here.", "invalid_request_error")
        streamed = method == "streamGenerateContent"
        return await self._serve(request, lambda body: gemini_to_chat(model, body) | {"stream": streamed},
                                 self._reply_gemini)

    async def _serve(self, request: web.Request, to_chat, reply) -> web.StreamResponse:
        """Read the request in its dialect, plan the turn as a chat completion, answer in the dialect."""
        started = time.monotonic()
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "We could not parse the JSON body of your request.", "invalid_request_error")
        chat = to_chat(body) if isinstance(body, dict) else {}
        if not isinstance(chat.get("messages"), list) or not chat["messages"]:
            return _error(400, "'messages' must be a non-empty array.", "invalid_request_error", param="messages")
        model = chat.get("model")
        if model not in MODELS:
            return _error(404, f"The model `{model}` does not exist or you do not have access to it.",
                          "invalid_request_error", "model_not_found")

        completion = self._complete(chat)
        self.exchanges.append({"request": chat, "response": completion})  # every dialect logged as chat
        await asyncio.sleep(self.latency)
        return await reply(request, chat, completion, self._headers(completion, started))

    async def _reply_chat(self, request: web.Request, body: dict, completion: dict, headers: dict) -> web.StreamResponse:
        if not body.get("stream"):
            return web.json_response(completion, headers=headers)
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        return await self._stream(request, headers, [f"data: {json.dumps(chunk)}\n\n"
                                                     for chunk in self._chunks(completion, include_usage)]
                                  + ["data: [DONE]\n\n"])

    async def _reply_responses(self, request: web.Request, body: dict, completion: dict,
                               headers: dict) -> web.StreamResponse:
        if not body.get("stream"):
            return web.json_response(chat_to_response(completion), headers=headers)
        return await self._stream(request, headers, [f"event: {kind}\ndata: {json.dumps(event)}\n\n"
                                                     for kind, event in response_events(completion)])

    async def _reply_gemini(self, request: web.Request, body: dict, completion: dict,
                            headers: dict) -> web.StreamResponse:
        if not body.get("stream"):
            return web.json_response(chat_to_gemini(completion))
        return await self._stream(request, {}, [f"data: {json.dumps(chunk)}\r\n\r\n"
                                                for chunk in gemini_chunks(completion)])

    def _complete(self, body: dict) -> dict:
        """The whole (non-streamed) completion for this request."""
        messages = body["messages"]
        tools = {(t.get("function") or {}).get("name") for t in body.get("tools") or []
                 if isinstance(t, dict) and t.get("type") == "function"}
        if body.get("tool_choice") == "none":
            tools = set()
        temperature = body.get("temperature")
        # Without a seed, the conversation's opening keys the dice, so its turns stay consistent.
        opening = [m for m in messages if m.get("role") in ("system", "developer", "user")][:2]
        material = _hash(self.seed, body["model"], body["seed"] if body.get("seed") is not None else opening)
        try:
            action = decide(messages, tools, model=body["model"], material=material,
                            temperature=self.temperature_default if temperature is None else temperature,
                            error_rate=self.error_rate)
        except Exception:  # a model server answers; the bug shows in its log
            log.exception("planner failed")
            action = Final("Something went wrong on my side.", escalate=True, reason="model_error", confidence=0.1)

        message: dict[str, Any] = {"role": "assistant", "content": None, "refusal": None}
        if isinstance(action, ToolCall):
            arguments = json.dumps(action.args)
            message["tool_calls"] = [{"id": "call_" + _hash(material, len(messages), action.name, arguments)[:24],
                                      "type": "function", "function": {"name": action.name, "arguments": arguments}}]
            finish, completion_tokens = "tool_calls", math.ceil((len(action.name) + len(arguments)) / 4) + 6
        else:
            message["content"] = action.as_json()
            finish, completion_tokens = "stop", math.ceil(len(message["content"]) / 4)
        prompt_tokens = math.ceil((len(json.dumps(messages)) + len(json.dumps(body.get("tools") or []))) / 4)
        return {
            "id": "chatcmpl-" + _hash(body)[:29], "object": "chat.completion", "created": CREATED,
            "model": body["model"], "system_fingerprint": "fp_demo",
            "choices": [{"index": 0, "message": message, "logprobs": None, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                      "total_tokens": prompt_tokens + completion_tokens,
                      "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
                      "completion_tokens_details": {"reasoning_tokens": 0, "audio_tokens": 0}},
        }

    @staticmethod
    def _headers(completion: dict, started: float) -> dict[str, str]:
        tokens = completion["usage"]["total_tokens"]
        return {
            "x-request-id": "req_" + completion["id"].removeprefix("chatcmpl-")[:24],
            "openai-processing-ms": str(round((time.monotonic() - started) * 1000)),
            "openai-version": "2020-10-01",
            "openai-organization": "faultproxy-demo",
            "x-ratelimit-limit-requests": "10000", "x-ratelimit-remaining-requests": "9999",
            "x-ratelimit-reset-requests": "6ms",
            "x-ratelimit-limit-tokens": str(TOKEN_LIMIT), "x-ratelimit-remaining-tokens": str(TOKEN_LIMIT - tokens),
            "x-ratelimit-reset-tokens": "0s",
        }

    async def _stream(self, request: web.Request, headers: dict, events: list[str]) -> web.StreamResponse:
        response = web.StreamResponse(headers={**headers, "Content-Type": "text/event-stream; charset=utf-8",
                                               "Cache-Control": "no-cache"})
        await response.prepare(request)
        for i, event in enumerate(events):
            if i and self.chunk_latency:
                await asyncio.sleep(self.chunk_latency)
            await response.write(event.encode())
        await response.write_eof()
        return response

    @staticmethod
    def _chunks(completion: dict, include_usage: bool) -> list[dict]:
        """The completion as the chunk sequence the real API streams."""
        choice = completion["choices"][0]
        message = choice["message"]
        if message.get("tool_calls"):
            call = message["tool_calls"][0]
            first = {"index": 0, "id": call["id"], "type": "function",
                     "function": {"name": call["function"]["name"], "arguments": ""}}
            deltas = [{"role": "assistant", "content": None, "tool_calls": [first]}]
            deltas += [{"tool_calls": [{"index": 0, "function": {"arguments": p}}]}
                       for p in pieces(call["function"]["arguments"], 16)]
        else:
            deltas = [{"role": "assistant", "content": "", "refusal": None}]
            deltas += [{"content": p} for p in pieces(message["content"], 24)]
        base = {"object": "chat.completion.chunk"} | {k: completion[k] for k in ("id", "created", "model", "system_fingerprint")}
        if include_usage:
            base["usage"] = None
        chunks = [base | {"choices": [{"index": 0, "delta": d, "logprobs": None, "finish_reason": None}]} for d in deltas]
        last = {"index": 0, "delta": {}, "logprobs": None, "finish_reason": choice["finish_reason"]}
        chunks.append(base | {"choices": [last]})
        if include_usage:
            chunks.append(base | {"choices": [], "usage": completion["usage"]})
        return chunks


async def _main(args: argparse.Namespace) -> None:
    server = ModelServer(latency_ms=args.latency_ms, chunk_latency_ms=args.chunk_latency_ms, error_rate=args.error_rate,
                         temperature_default=args.temperature_default, seed=args.seed)
    _, port = await serve(server.app(), args.port)
    print(f"http://127.0.0.1:{port}/v1", flush=True)
    await asyncio.Event().wait()


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The model server's options (world.py offers the same ones)."""
    parser.add_argument("--latency-ms", type=float, default=0, help="delay before each response")
    parser.add_argument("--chunk-latency-ms", type=float, default=0, help="delay between streamed chunks")
    parser.add_argument("--error-rate", type=float, default=None,
                        help="chance per turn (at temperature 1) of a deviation, for every model; default: per model")
    parser.add_argument("--temperature-default", type=float, default=1.0, help="temperature when a request sends none")
    parser.add_argument("--seed", type=int, default=0, help="world seed, mixed into every request's dice")


if __name__ == "__main__":
    cli = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cli.add_argument("--port", type=int, default=0, help="port on 127.0.0.1 (0: any free port)")
    add_arguments(cli)
    logging.basicConfig(level=logging.INFO)
    try:
        asyncio.run(_main(cli.parse_args()))
    except KeyboardInterrupt:
        pass
