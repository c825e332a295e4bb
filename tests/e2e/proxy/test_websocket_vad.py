"""A voice session with server VAD through the proxy: the turn the server starts by itself is a model call
with its answer, usage, function call and fault (evaluator.traces.model_sessions)."""

from __future__ import annotations

import asyncio
import base64
import json

from websockets.asyncio.client import connect

from faultproxy.evaluator.judging import judge_episode
from faultproxy.evaluator.traces import final_answer, model_usage, parse_trace
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.tasks.task_model import Effect, EndpointPattern, Expected, Task
from tests.support.fixtures import scenario
from tests.support.realtime import GEMINI_LIVE, VAD_USAGE, gemini_live_app, server_vad_app
from tests.support.upstream import ServerThread


async def until_done(ws) -> list[dict]:
    """The events of one response, up to its response.done."""
    seen = [json.loads(await asyncio.wait_for(ws.recv(), 20))]
    while seen[-1]["type"] != "response.done":
        seen.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
    return seen


def test_a_turn_the_server_started_on_committed_audio_is_a_model_call_with_its_call_and_fault(make_proxy, tmp_path):
    proxy = make_proxy(scenario("""
        - name: slow-commit
          match: {path: "/v1/realtime", websocket: {from: server, body: {type: input_audio_buffer.committed}}}
          fault: {type: ws_delay, ms: 5}
    """))

    async def voice_agent(port: int) -> None:
        async with connect(f"ws://127.0.0.1:{port}/v1/realtime", proxy=proxy.proxy_url("vad"), open_timeout=20) as ws:
            await ws.recv()  # session.created
            # the agent only streams audio: the server decides the speaker is done and answers
            audio = base64.b64encode(b"\0" * 64).decode()
            await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": audio}))
            call = next(e for e in await until_done(ws) if e["type"] == "response.function_call_arguments.done")
            await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                "type": "function_call_output", "call_id": call["call_id"], "output": '{"status": "refunded"}'}}))
            await ws.send(json.dumps({"type": "response.create"}))
            await until_done(ws)

    with ServerThread(server_vad_app()) as server:
        asyncio.run(voice_agent(server.port))
    proxy.end_episode("vad")
    trace = list(read_trace(trace_path(tmp_path / "flows", "vad")))
    exchanges = [ex for ex in parse_trace(trace) if not ex.is_protocol]
    assert [(ex.is_model, ex.function_call) for ex in exchanges] == [(True, None), (False, "refund_order"),
                                                                     (True, None)]
    vad, call, asked = exchanges
    # the delayed commit came before the server's response.created: its fault is the VAD turn's
    assert vad.body is None and vad.fault["rule"] == "slow-commit" and asked.fault is None
    assert '"call_vad"' in vad.raw["upstream"]["sse"][1][1]  # the call is in the VAD turn's answer
    the_task = Task(id="t", prompt="Refund 1001.", irreversible=(EndpointPattern.parse("mcp:refund_order"),),
                    expected=Expected(effects=(Effect("*", "*/tools/refund_order", 1),)))
    verdict = judge_episode(the_task, {"key": "vad", "completed": True, "exit_code": 0,
                                       "model": "gpt-realtime", "output": {"answer": "x"}}, trace)
    assert (verdict["model_calls"], verdict["tool_calls"]) == (2, 1)
    assert verdict["usage"] == {"gpt-realtime": {"input": 2 * VAD_USAGE["input_tokens"],
                                                 "output": 2 * VAD_USAGE["output_tokens"]}}
    assert {c["name"]: c["passed"] for c in verdict["checks"]}["effects"] is True
    assert [f["rule"] for f in verdict["faults"]] == ["slow-commit"]


def test_a_gemini_live_answer_to_streamed_audio_is_a_model_call(make_proxy, tmp_path):
    proxy = make_proxy(scenario("""
        - name: never
          match: {websocket: {body: {type: no.such.event}}}
          fault: {type: ws_drop}
    """))

    async def voice_agent(port: int) -> None:
        async with connect(f"ws://127.0.0.1:{port}/ws/{GEMINI_LIVE}", proxy=proxy.proxy_url("live-vad"),
                           open_timeout=20) as ws:
            await ws.send(json.dumps({"setup": {"model": "models/gemini-live"}}))
            await asyncio.wait_for(ws.recv(), 20)  # setupComplete
            await ws.send(json.dumps({"realtimeInput": {"audio": {"data": "AAAA", "mimeType": "audio/pcm"}}}))
            while "turnComplete" not in json.loads(await asyncio.wait_for(ws.recv(), 20))["serverContent"]:
                pass

    with ServerThread(gemini_live_app()) as server:
        asyncio.run(voice_agent(server.port))
    proxy.end_episode("live-vad")
    trace = list(read_trace(trace_path(tmp_path / "flows", "live-vad")))
    [turn] = [ex for ex in parse_trace(trace) if ex.is_model]
    assert turn.body is None and not turn.failed and final_answer(parse_trace(trace)) == "Heard you."
    assert model_usage(parse_trace(trace), None) == {"gemini-live": {"input": VAD_USAGE["input_tokens"],
                                                                     "output": VAD_USAGE["output_tokens"]}}
