"""A text delta ws_inject held mid-turn and sent again behind its injection: the turn's answer in the
trace is what the client received, once (evaluator.traces.model_sessions), and the fault stays the turn's."""

from __future__ import annotations

import asyncio
import json

from websockets.asyncio.client import connect

from faultproxy.evaluator.traces import final_answer, parse_trace
from faultproxy.formats.trace import read_trace, trace_path
from tests.support.fixtures import scenario
from tests.support.realtime import DELTAS, GEMINI_LIVE, gemini_live_app, realtime_app
from tests.support.upstream import ServerThread


def model_calls(tmp_path, episode: str) -> tuple[list, str | None]:
    exchanges = parse_trace(read_trace(trace_path(tmp_path / "flows", episode)))
    return [ex for ex in exchanges if ex.is_model], final_answer(exchanges)


def test_a_realtime_delta_held_behind_an_injected_error_is_read_once(make_proxy, tmp_path):
    proxy = make_proxy(scenario("""
        - name: error-after-the-second-delta
          match: {path: "*/realtime", websocket: {from: server, body: {type: response.output_text.delta}}}
          fault: {type: ws_inject, preset: server_error}
          when: {calls: [2]}
    """))

    async def agent(port: int) -> str:
        async with connect(f"ws://127.0.0.1:{port}/v1/realtime", proxy=proxy.proxy_url("held"), open_timeout=20) as ws:
            await ws.recv()  # session.created
            await ws.send(json.dumps({"type": "response.create"}))
            text = ""
            while (event := json.loads(await asyncio.wait_for(ws.recv(), 20)))["type"] != "response.done":
                text += event.get("delta", "")
            return text

    with ServerThread(realtime_app()) as server:
        received = asyncio.run(agent(server.port))
    proxy.end_episode("held")
    assert received == "".join(f"d{i} " for i in range(DELTAS))  # each delta once, the error after the second
    [turn], answer = model_calls(tmp_path, "held")
    assert answer == received.strip()
    assert turn.raw["fault"]["rule"] == "error-after-the-second-delta"


def test_a_gemini_live_text_held_behind_an_injected_go_away_is_read_once(make_proxy, tmp_path):
    proxy = make_proxy(scenario("""
        - name: go-away-after-the-text
          match: {path: "*BidiGenerateContent", websocket: {from: server, body: {serverContent.modelTurn: {exists: true}}}}
          fault: {type: ws_inject, preset: go_away}
    """))

    async def agent(port: int) -> tuple[str, list[str]]:
        async with connect(f"ws://127.0.0.1:{port}/ws/{GEMINI_LIVE}", proxy=proxy.proxy_url("held-live"),
                           open_timeout=20) as ws:
            await ws.send(json.dumps({"setup": {"model": "models/gemini-live"}}))
            await asyncio.wait_for(ws.recv(), 20)  # setupComplete
            await ws.send(json.dumps({"realtimeInput": {"audio": {"data": "AAAA", "mimeType": "audio/pcm"}}}))
            text, kinds = "", []
            while not (event := json.loads(await asyncio.wait_for(ws.recv(), 20))).get("serverContent", {}) \
                    .get("turnComplete"):
                kinds.append(next(iter(event)))
                text += "".join(p.get("text", "") for p in event.get("serverContent", {}).get("modelTurn", {})
                                .get("parts", ()))
            return text, kinds

    with ServerThread(gemini_live_app()) as server:
        received, kinds = asyncio.run(agent(server.port))
    proxy.end_episode("held-live")
    assert (received, kinds) == ("Heard you.", ["serverContent", "goAway"])
    [turn], answer = model_calls(tmp_path, "held-live")
    assert answer == received
    assert turn.raw["fault"]["rule"] == "go-away-after-the-text"
