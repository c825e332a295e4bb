"""Realtime-like WebSocket model APIs (aiohttp apps): a text session that streams deltas, one whose model
calls functions (TURNS), voice sessions whose server answers audio by itself (OpenAI server VAD, Gemini
Live realtimeInput), and FAULTS, a scenario's rules with one lane (path prefix) per WebSocket fault."""

from __future__ import annotations

import json

import aiohttp
from aiohttp import web

DELTAS = 5
GEMINI_LIVE = "google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent"


def realtime_app() -> web.Application:
    """A Realtime-like text session: `response.create` streams DELTAS deltas and a done event;
    any other text is echoed; a binary frame is echoed as binary."""

    async def session(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "session.created", "session": {"id": "sess_1"}})
        async for message in ws:
            if message.type == aiohttp.WSMsgType.BINARY:
                await ws.send_bytes(message.data)
                continue
            event = json.loads(message.data)
            if event.get("type") == "response.create":
                for i in range(DELTAS):
                    await ws.send_json({"type": "response.output_text.delta", "delta": f"d{i} "})
                await ws.send_json({"type": "response.done"})
            else:
                await ws.send_json({"type": "echo", "of": event})
        return ws

    app = web.Application()
    app.router.add_get("/v1/realtime", session)
    app.router.add_get("/{lane}/v1/realtime", session)  # one lane per fault in the fault scenario
    app.router.add_get(f"/ws/{GEMINI_LIVE}", session)  # a Gemini Live path: presets in Gemini's shape
    return app


FAULTS = """
    - name: drop-third-delta
      match: {path: "/drop/*", websocket: {from: server, body: {type: response.output_text.delta}}}
      fault: {type: ws_drop}
      when: {calls: [3]}
    - name: close-after-second
      match: {path: "/close/*", websocket: {from: server, body: {type: response.output_text.delta}}}
      fault: {type: ws_close, code: 1011, reason: "upstream went away"}
      when: {calls: [2]}
    - name: abort-after-second
      match: {path: "/abort/*", websocket: {from: server, body: {type: response.output_text.delta}}}
      fault: {type: ws_close, mode: abort}
      when: {calls: [2]}
    - name: rate-limit-before-first
      match: {path: "/inject/*", websocket: {from: server, body: {type: response.output_text.delta}}}
      fault: {type: ws_inject, preset: rate_limit, position: before}
      when: {calls: [1]}
    - name: tell-the-server
      match: {path: "/inject/*", websocket: {from: client}}
      fault: {type: ws_inject, to: server, message: {type: injected.by.proxy}}
      when: {calls: [1]}
    - name: hold-the-done
      match: {path: "/delay/*", websocket: {from: server, body: {type: response.done}}}
      fault: {type: ws_delay, ms: 400}
    - name: drift-the-second-delta
      match: {path: "/drift/*", websocket: {from: server, body: {type: response.output_text.delta}}}
      fault: {type: schema_drift, ops: [{op: rename, path: delta, to: text}]}
      when: {calls: [2]}
"""


TURNS = [("get_order", {"order_id": "1001"}), ("refund_order", {"order_id": "1001"}),
         ("refund_order", {"order_id": "1001"}), None]  # the model repeats the refund, then answers


def function_calling_app() -> web.Application:
    """A Realtime-like session whose model calls TURNS' functions, one per `response.create`, in the
    two events the Realtime API announces a call with, then answers in text."""

    async def session(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "session.created", "session": {"id": "sess_fc"}})
        turns = iter(enumerate(TURNS))
        async for message in ws:
            if json.loads(message.data).get("type") != "response.create":
                continue
            index, turn = next(turns)
            if turn is None:
                for piece in ("Refun", "ded."):
                    await ws.send_json({"type": "response.output_text.delta", "delta": piece})
            else:
                call = {"call_id": f"call_{index}", "name": turn[0], "arguments": json.dumps(turn[1])}
                await ws.send_json({"type": "response.function_call_arguments.done", **call})
                await ws.send_json({"type": "response.output_item.done", "item": {"type": "function_call", **call}})
            await ws.send_json({"type": "response.done", "response": {"status": "completed"}})
        return ws

    app = web.Application()
    app.router.add_get("/v1/realtime", session)
    return app


VAD_USAGE = {"input_tokens": 40, "output_tokens": 9}


def server_vad_app() -> web.Application:
    """A Realtime-like voice session with server VAD: the server commits the client's appended audio
    and answers it by itself (no `response.create`) with a call of refund_order; the client's
    `response.create` after the call's output gets a text answer. Every response reports VAD_USAGE."""

    async def respond(ws: web.WebSocketResponse, *events: dict) -> None:
        await ws.send_json({"type": "response.created", "response": {"status": "in_progress"}})
        for event in events:
            await ws.send_json(event)
        await ws.send_json({"type": "response.done", "response": {"status": "completed", "usage": VAD_USAGE}})

    async def session(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        await ws.send_json({"type": "session.created", "session": {"turn_detection": {"type": "server_vad"}}})
        async for message in ws:
            kind = json.loads(message.data).get("type")
            if kind == "input_audio_buffer.append":  # the speaker stopped: the server takes its turn
                await ws.send_json({"type": "input_audio_buffer.committed", "item_id": "item_1"})
                call = {"call_id": "call_vad", "name": "refund_order", "arguments": json.dumps({"order_id": "1001"})}
                await respond(ws, {"type": "response.function_call_arguments.done", **call})
            elif kind == "response.create":
                await respond(ws, {"type": "response.output_text.delta", "delta": "Refunded."})
        return ws

    app = web.Application()
    app.router.add_get("/v1/realtime", session)
    return app


def gemini_live_app() -> web.Application:
    """A Gemini-Live-shaped session: setup, then a turn that calls refund_order, then one that answers;
    `realtimeInput` audio is answered by itself (voice activity detection) in text, with usage."""

    async def session(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            event = json.loads(message.data)
            if "setup" in event:
                await ws.send_json({"setupComplete": {}})
            elif {"clientContent", "client_content"} & event.keys():  # google-genai sends snake_case
                await ws.send_json({"toolCall": {"functionCalls": [
                    {"id": "fc_1", "name": "refund_order", "args": {"order_id": "1001"}}]}})
            elif {"toolResponse", "tool_response"} & event.keys():
                await ws.send_json({"serverContent": {"modelTurn": {"parts": [{"text": "Refunded order 1001."}]}}})
                await ws.send_json({"serverContent": {"turnComplete": True}})
            elif "realtimeInput" in event:  # voice: streamed audio is answered with no turnComplete asked
                await ws.send_json({"serverContent": {"modelTurn": {"parts": [{"text": "Heard you."}]}}})
                await ws.send_json({"serverContent": {"turnComplete": True}, "usageMetadata": {
                    "promptTokenCount": VAD_USAGE["input_tokens"], "responseTokenCount": VAD_USAGE["output_tokens"]}})
        return ws

    app = web.Application()
    # google-genai names the API version it was given (v1 by default), Google's docs v1beta
    app.router.add_get(f"/ws/{GEMINI_LIVE.replace('v1beta', '{version}')}", session)
    return app
