"""WebSocket sessions through the proxy: every message in the trace, and the message faults,
seen by the `websockets` client library (CONNECT through the proxy) against an aiohttp server."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import ssl
from pathlib import Path

import aiohttp
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from faultproxy.cli.main import main
from faultproxy.evaluator.judging import judge_episode
from faultproxy.evaluator.traces import final_answer, parse_trace
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.otel import names as N
from faultproxy.otel.spans import exchange_span
from faultproxy.tasks.task_model import Effect, EndpointPattern, Expected, Task
from tests.support.fixtures import scenario
from tests.support.realtime import (DELTAS, FAULTS, GEMINI_LIVE, TURNS, function_calling_app, gemini_live_app,
                                    realtime_app)
from tests.support.upstream import ServerThread

AUDIO = bytes(range(256)) * 8  # 2 KiB of "audio"


@pytest.fixture
def realtime_server():
    with ServerThread(realtime_app()) as server:
        yield server


def run_session(proxy, server: ServerThread, episode: str, script, lane: str = "") -> object:
    async def main():
        async with connect(f"ws://127.0.0.1:{server.port}{lane}/v1/realtime", proxy=proxy.proxy_url(episode),
                           open_timeout=20) as ws:
            return await script(ws)
    result = asyncio.run(main())
    proxy.end_episode(episode)
    return result


async def one_answer(ws) -> list[dict]:
    """Read the session's greeting, ask for an answer, read events until response.done."""
    seen = [json.loads(await ws.recv())]
    await ws.send(json.dumps({"type": "response.create", "api_key": "sk-secret-in-a-message-0123456789"}))
    while seen[-1].get("type") != "response.done":
        seen.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
    return seen


def session_line(tmp_path: Path, episode: str) -> dict:
    lines = [line for line in read_trace(trace_path(tmp_path / "flows", episode)) if "websocket" in line]
    assert len(lines) == 1
    return lines[0]["websocket"]


def test_every_message_both_ways_is_in_the_trace(make_proxy, realtime_server, tmp_path):
    proxy = make_proxy(scenario("""
        - name: never
          match: {path: "/v1/realtime", websocket: {body: {type: no.such.event}}}
          fault: {type: ws_drop}
    """))

    async def script(ws):
        seen = await one_answer(ws)
        await ws.send(b"\x00\x01audio")
        assert await ws.recv() == b"\x00\x01audio"
        await ws.send(json.dumps({"type": "input_audio_buffer.append", "audio": base64.b64encode(AUDIO).decode()}))
        await ws.recv()  # its echo
        return seen

    seen = run_session(proxy, realtime_server, "ep", script)
    assert [e["type"] for e in seen][-1] == "response.done"
    record = session_line(tmp_path, "ep")
    messages = record["messages"]
    assert [m["from"] for m in messages] == ["server", "client", *["server"] * (DELTAS + 1), *["client", "server"] * 2]
    client_text = messages[1]
    assert client_text["type"] == "text" and "sk-secret-in-a-message" not in client_text["text"]
    assert json.loads(client_text["text"])["type"] == "response.create"
    appended, echoed = (json.loads(m["text"]) for m in messages[-2:])
    hashed = {"base64_length": len(AUDIO), "sha256": hashlib.sha256(AUDIO).hexdigest()}
    assert appended["audio"] == hashed and echoed["of"]["audio"] == hashed  # never the audio itself
    messages = messages[:-2]
    binary = messages[-1]
    assert binary["type"] == "binary" and binary["size"] == 7 and len(binary["sha256"]) == 64 and "text" not in binary
    offsets = [m["t"] for m in messages]
    assert offsets == sorted(offsets) and offsets[0] >= 0
    assert record["close"]["by"] == "client" and record["close"]["code"] == 1000
    upgrade, turn = parse_trace(read_trace(trace_path(tmp_path / "flows", "ep")))  # the evaluator reads the line
    assert (upgrade.upstream_status, upgrade.client_status, upgrade.route) == (101, 101, "/v1/realtime")
    assert upgrade.is_protocol and turn.is_model and not turn.failed  # the session's one turn, a model call


@pytest.fixture
def fault_proxy(make_proxy):
    return make_proxy(scenario(FAULTS))


def faults_of(record: dict) -> list[dict]:
    return [m for m in record["messages"] if "fault" in m]


def test_ws_drop_withholds_the_matching_message(fault_proxy, realtime_server, tmp_path):
    seen = run_session(fault_proxy, realtime_server, "drop", one_answer, lane="/drop")
    deltas = [e["delta"] for e in seen if e["type"] == "response.output_text.delta"]
    assert deltas == ["d0 ", "d1 ", "d3 ", "d4 "]
    record = session_line(tmp_path, "drop")
    [faulted] = faults_of(record)
    assert faulted["dropped"] is True and json.loads(faulted["text"])["delta"] == "d2 "
    assert faulted["fault"]["type"] == "ws_drop" and faulted["fault"]["delivered"] is True
    [turn] = [ex for ex in parse_trace(read_trace(trace_path(tmp_path / "flows", "drop"))) if ex.is_model]
    assert turn.fault["rule"] == "drop-third-delta"  # the message never arrived, its fault is its turn's


async def read_until_closed(ws):
    seen = [json.loads(await ws.recv())]
    await ws.send(json.dumps({"type": "response.create"}))
    try:
        while True:
            seen.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
    except ConnectionClosed as closed:
        return seen, closed.rcvd.code if closed.rcvd else 1006, closed.rcvd.reason if closed.rcvd else ""


@pytest.mark.parametrize(("lane", "code", "reason"), [("close", 1011, "upstream went away"), ("abort", 1006, "")])
def test_ws_close_ends_the_session_right_after_the_matching_message(fault_proxy, realtime_server, tmp_path,
                                                                    lane, code, reason):
    seen, got_code, got_reason = run_session(fault_proxy, realtime_server, lane, read_until_closed, lane=f"/{lane}")
    assert [e.get("delta") for e in seen[1:]] == ["d0 ", "d1 "]  # the matching message, then nothing
    assert (got_code, got_reason) == (code, reason)
    record = session_line(tmp_path, lane)
    [faulted] = faults_of(record)
    assert faulted["fault"]["delivered"] is True and json.loads(faulted["text"])["delta"] == "d1 "
    assert record["close"]["by"] == "proxy" and record["close"]["code"] == (None if lane == "abort" else 1011)


def test_ws_inject_sends_a_realtime_error_before_the_message_and_a_literal_to_the_server(
        fault_proxy, realtime_server, tmp_path):
    async def answer_and_echo(ws):
        return [*await one_answer(ws), json.loads(await asyncio.wait_for(ws.recv(), 20))]

    seen = run_session(fault_proxy, realtime_server, "inject", answer_and_echo, lane="/inject")
    types = [e["type"] for e in seen]
    assert types[:3] == ["session.created", "error", "response.output_text.delta"]
    assert {"type": "echo", "of": {"type": "injected.by.proxy"}} == seen[-1]  # sent after response.create
    assert seen[1]["error"]["code"] == "rate_limit_exceeded" and seen[1]["error"]["type"] == "rate_limit_error"
    assert [e["delta"] for e in seen if e["type"] == "response.output_text.delta"] == [f"d{i} " for i in range(DELTAS)]
    record = session_line(tmp_path, "inject")
    assert [m["fault"]["rule"] for m in faults_of(record)] == ["tell-the-server", "rate-limit-before-first"]
    assert all(m["fault"]["delivered"] for m in faults_of(record))
    injected = [m for m in record["messages"] if m.get("injected")]
    assert [m["from"] for m in injected] == ["client", "server"]
    held = [m["text"] for m in record["messages"] if m.get("held")]
    # each matching message went through the injections' queue: after its injection, or before it
    assert [json.loads(t).get("type") for t in held[:2]] == ["response.create", "response.output_text.delta"]
    assert held == [m["text"] for m in record["messages"] if m.get("resent")]  # each held one sent once
    assert not [m for m in record["messages"] if m.get("dropped")]


def test_ws_delay_holds_the_matching_message(fault_proxy, realtime_server, tmp_path):
    run_session(fault_proxy, realtime_server, "delay", one_answer, lane="/delay")
    messages = session_line(tmp_path, "delay")["messages"]
    done = next(m for m in messages if "response.done" in m.get("text", ""))
    assert done["fault"]["delivered"] is True and done["fault"]["detail"] == "400 ms before the message"


def test_schema_drift_rewrites_the_matching_json_message(fault_proxy, realtime_server, tmp_path):
    seen = run_session(fault_proxy, realtime_server, "drift", one_answer, lane="/drift")
    deltas = [e for e in seen if e["type"] == "response.output_text.delta"]
    assert [("delta" in e, e.get("delta", e.get("text"))) for e in deltas] == \
        [(i != 1, f"d{i} ") for i in range(DELTAS)]  # the client got the second one drifted, the rest as sent
    [faulted] = faults_of(session_line(tmp_path, "drift"))
    assert faulted["fault"]["type"] == "schema_drift" and faulted["fault"]["delivered"] is True
    assert faulted["fault"]["detail"] == "rename delta"
    assert json.loads(faulted["text"])["delta"] == "d1 "  # what the server sent
    assert json.loads(faulted["sent"]) == {"type": "response.output_text.delta", "text": "d1 "}  # what the client got


def test_check_takes_schema_drift_on_messages(tmp_path, capsys):
    path = tmp_path / "s.yaml"
    path.write_text("name: t\ndescription: d\nrules:\n  - name: r\n"
                    "    match: {websocket: {from: server, body: {type: session.created}}}\n"
                    "    fault: {type: schema_drift, ops: [{op: remove, path: session}]}\n")
    assert main(["check", str(path)]) == 0, capsys.readouterr().err


@pytest.mark.parametrize(("rule", "field", "says"), [
    ("match: {path: /x}\n    fault: {type: ws_drop}", "rules[0].fault.type", "needs a websocket: block"),
    ("match: {websocket: {from: server}}\n    fault: {type: delay}", "rules[0].fault.type",
     "use schema_drift, ws_drop, ws_delay, ws_close or ws_inject"),
    ("match: {websocket: {from: nobody}}\n    fault: {type: ws_drop}", "rules[0].match.websocket.from",
     "must be one of client, server"),
    ("match: {websocket: {}}\n    fault: {type: ws_close, code: 1006}", "rules[0].fault.code", "use mode: abort"),
    ("match: {websocket: {}}\n    fault: {type: ws_inject, preset: go_away, message: {a: 1}}",
     "rules[0].fault.preset", "exactly one of message"),
    ("match: {websocket: {}}\n    fault: {type: ws_inject, preset: teapot}", "rules[0].fault.preset",
     "rate_limit, server_error, session_expired, go_away"),
])
def test_check_refuses_a_bad_message_rule_in_one_line(tmp_path, capsys, rule, field, says):
    path = tmp_path / "s.yaml"
    path.write_text(f"name: t\ndescription: d\nrules:\n  - name: r\n    {rule}\n")
    assert main(["check", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.splitlines() == [err.strip()] and f": {field}: " in err and says in err


def test_the_openai_realtime_client_reads_an_injected_rate_limit_error_event(make_proxy, realtime_server, tmp_path):
    """The openai SDK's realtime client (on `websockets`, through the proxy with CONNECT) gets the
    preset as the Realtime API's own `error` event, between the deltas of the answer."""
    from openai import AsyncOpenAI

    proxy = make_proxy(scenario("""
        - name: rate-limit-mid-answer
          match: {path: "*/realtime", websocket: {from: server, body: {type: response.output_text.delta}}}
          fault: {type: ws_inject, preset: rate_limit}
          when: {calls: [2]}
    """))

    async def main():
        client = AsyncOpenAI(api_key="sk-realtime-test-key-0123456789abcdef",
                             base_url=f"http://127.0.0.1:{realtime_server.port}/v1")
        async with client.realtime.connect(model="gpt-realtime",
                                           websocket_connection_options={"proxy": proxy.proxy_url("sdk"),
                                                                         "open_timeout": 20}) as conn:
            await conn.response.create()
            events = []
            async for event in conn:
                events.append(event)
                if event.type == "response.done":
                    return events

    events = asyncio.run(asyncio.wait_for(main(), 60))
    proxy.end_episode("sdk")
    types = [e.type for e in events]
    assert types[types.index("response.output_text.delta") + 2] == "error"  # right after the second delta
    error = next(e for e in events if e.type == "error")
    assert (error.error.type, error.error.code) == ("rate_limit_error", "rate_limit_exceeded")
    [line] = [line for line in read_trace(trace_path(tmp_path / "flows", "sdk")) if "websocket" in line]
    assert "sk-realtime-test-key" not in json.dumps(line)  # the upgrade's Authorization header is redacted
    assert [m["fault"]["delivered"] for m in line["websocket"]["messages"] if "fault" in m] == [True]


def test_aiohttp_reaches_a_wss_session_through_the_proxy(make_proxy, upstream_certificate, tmp_path):
    """aiohttp tunnels wss:// with CONNECT (its ws:// goes in absolute form, which mitmproxy
    refuses: docs/websocket.md)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    proxy = make_proxy(scenario("""
        - name: drop-the-greeting
          match: {websocket: {from: server, body: {type: session.created}}}
          fault: {type: ws_drop}
    """))

    async def main():
        client_ssl = ssl.create_default_context(cafile=str(proxy.ca_bundle))
        async with aiohttp.ClientSession() as session, session.ws_connect(
                f"wss://127.0.0.1:{server.port}/v1/realtime", proxy=proxy.proxy_url("aio"), ssl=client_ssl) as ws:
            await ws.send_json({"type": "ping"})
            return await asyncio.wait_for(ws.receive_json(), 20)

    with ServerThread(realtime_app(), context) as server:
        assert asyncio.run(main()) == {"type": "echo", "of": {"type": "ping"}}  # the greeting was dropped
    proxy.end_episode("aio")
    messages = session_line(tmp_path, "aio")["messages"]
    # the client's ping may reach the proxy before or after the greeting: only the greeting is dropped
    assert [(m["from"], m.get("dropped", False)) for m in messages if m["from"] == "server"] == [
        ("server", True), ("server", False)]
    assert [m.get("dropped", False) for m in messages if m["from"] == "client"] == [False]


def test_presets_take_the_gemini_live_shape_on_a_gemini_live_session(make_proxy, realtime_server, tmp_path):
    from google.genai import types

    proxy = make_proxy(scenario("""
        - name: go-away-first
          match: {path: "*BidiGenerateContent", websocket: {from: server, body: {type: session.created}}}
          fault: {type: ws_inject, preset: go_away}
        - name: exhausted
          match: {path: "*BidiGenerateContent", websocket: {from: server, body: {type: response.done}}}
          fault: {type: ws_inject, preset: rate_limit}
    """))

    async def main():
        async with connect(f"ws://127.0.0.1:{realtime_server.port}/ws/{GEMINI_LIVE}", proxy=proxy.proxy_url("live"),
                           open_timeout=20) as ws:
            seen = await one_answer(ws)
            return seen, [json.loads(await asyncio.wait_for(ws.recv(), 20))]

    seen, after = asyncio.run(main())
    proxy.end_episode("live")
    assert types.LiveServerMessage.model_validate(seen[1]).go_away.time_left == "10s"  # as Google's SDK reads it
    assert after == [{"error": {"code": 429, "status": "RESOURCE_EXHAUSTED",
                                "message": "Rate limit reached. Please try again later."}}]


# ---------------------------------------------------------------- the evaluator reads a live session


def test_the_evaluator_reads_turns_and_function_calls_of_a_realtime_session(make_proxy, tmp_path):
    """A real session through the proxy: each turn is a model call, each function call a tool call
    that tool patterns name, so tool_calls, policy, idempotency and effects judge them."""
    proxy = make_proxy(scenario("""
        - name: hold-the-last-answer
          match: {path: "*/realtime", websocket: {from: server, body: {type: response.done}}}
          fault: {type: ws_delay, ms: 5}
          when: {calls: [4]}
    """))

    async def script(ws):
        await ws.recv()  # session.created
        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
            "type": "message", "role": "user", "content": [{"type": "input_text", "text": "Refund order 1001."}]}}))
        for _ in TURNS:
            await ws.send(json.dumps({"type": "response.create"}))
            while (event := json.loads(await asyncio.wait_for(ws.recv(), 20)))["type"] != "response.done":
                if event["type"] == "response.function_call_arguments.done":  # carried out: its output goes back
                    output = {"id": f"re_{event['call_id']}", "status": "refunded"}
                    await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                        "type": "function_call_output", "call_id": event["call_id"], "output": json.dumps(output)}}))

    with ServerThread(function_calling_app()) as server:
        run_session(proxy, server, "fc", script)
    the_task = Task(id="t", prompt="Refund order 1001.", max_tool_calls=2,
                    irreversible=(EndpointPattern.parse("POST */tools/refund_order"),),
                    forbidden=(EndpointPattern.parse("mcp:delete_*"), EndpointPattern.parse("POST */tools/get_order")),
                    expected=Expected(effects=(Effect("POST", "*/tools/refund_order", 1),)))
    verdict = judge_episode(the_task, {"key": "fc", "completed": True, "exit_code": 0, "output": {"answer": "x"}},
                            read_trace(trace_path(tmp_path / "flows", "fc")))
    assert (verdict["model_calls"], verdict["tool_calls"], verdict["requests"]) == (4, 3, 1)  # one upgrade
    assert [e.split(" ", 1)[1] for e in verdict["endpoints"] if "function_call" in e] == \
        ["/v1/realtime function_call:get_order", "/v1/realtime function_call:refund_order",
         "/v1/realtime function_call:refund_order"]
    failed = {c["name"]: c["detail"] for c in verdict["checks"] if c["passed"] is False}
    assert set(failed) == {"tool_calls", "policy", "idempotency", "effects", "claimed_success"}, failed
    assert "3 tool calls" in failed["tool_calls"] and "POST */tools/get_order" in failed["policy"]
    assert "refund_order" in failed["idempotency"] and "without an idempotency key" in failed["idempotency"]
    assert "2 committed, expected 1" in failed["effects"]
    assert verdict["faults"] and {f["type"] for f in verdict["faults"]} == {"ws_delay"}  # on the fourth turn
    exchanges = parse_trace(read_trace(trace_path(tmp_path / "flows", "fc")))
    assert final_answer(exchanges) == "Refunded."


def test_the_evaluator_reads_a_gemini_live_session(make_proxy, tmp_path):
    proxy = make_proxy(scenario("""
        - name: never
          match: {websocket: {body: {type: no.such.event}}}
          fault: {type: ws_drop}
    """))

    async def main(port):
        async with connect(f"ws://127.0.0.1:{port}/ws/{GEMINI_LIVE}", proxy=proxy.proxy_url("live-fc"),
                           open_timeout=20) as ws:
            await ws.send(json.dumps({"setup": {"model": "models/gemini-live"}}))
            await asyncio.wait_for(ws.recv(), 20)
            await ws.send(json.dumps({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "Refund 1001."}]}],
                                                        "turnComplete": True}}))
            call = json.loads(await asyncio.wait_for(ws.recv(), 20))["toolCall"]["functionCalls"][0]
            await ws.send(json.dumps({"toolResponse": {"functionResponses": [
                {"id": call["id"], "name": call["name"], "response": {"id": "re_1", "status": "refunded"}}]}}))
            while not json.loads(await asyncio.wait_for(ws.recv(), 20)).get("serverContent", {}).get("turnComplete"):
                pass

    with ServerThread(gemini_live_app()) as server:
        asyncio.run(main(server.port))
    proxy.end_episode("live-fc")
    exchanges = parse_trace(read_trace(trace_path(tmp_path / "flows", "live-fc")))
    # the turn that called, its call, the turn that answered
    assert [(ex.is_model, ex.function_call) for ex in exchanges if not ex.is_protocol] == \
        [(True, None), (False, "refund_order"), (True, None)]
    the_task = Task(id="t", prompt="Refund 1001.", irreversible=(EndpointPattern.parse("mcp:refund_order"),),
                    expected=Expected(effects=(Effect("*", "*/tools/refund_order", 1),)))
    verdict = judge_episode(the_task, {"key": "live-fc", "completed": True, "exit_code": 0, "output": {"answer": "x"}},
                            read_trace(trace_path(tmp_path / "flows", "live-fc")))
    assert (verdict["model_calls"], verdict["tool_calls"]) == (2, 1)
    assert {c["name"]: c["passed"] for c in verdict["checks"]}["effects"] is True
    assert final_answer(exchanges) == "Refunded order 1001."


def test_the_google_genai_live_client_through_the_proxy(make_proxy, upstream_certificate, tmp_path, monkeypatch):
    """google-genai's live client, pointed at a local Gemini-Live-shaped server by `base_url`,
    reaches it through the proxy as an agent does: HTTPS_PROXY and SSL_CERT_FILE (the SDK always
    connects `wss://`, and its `websockets` connection takes the proxy from the environment)."""
    from google import genai
    from google.genai import types

    proxy = make_proxy(scenario("""
        - name: go-away-after-the-call
          match: {path: "*BidiGenerateContent", websocket: {from: server, body: {toolCall: {exists: true}}}}
          fault: {type: ws_inject, preset: go_away}
    """))
    for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HTTPS_PROXY", proxy.proxy_url("genai"))
    monkeypatch.setenv("SSL_CERT_FILE", str(proxy.ca_bundle))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)

    async def main(port: int) -> list[types.LiveServerMessage]:
        client = genai.Client(api_key="AIzaSy-genai-live-test-key-0123456789",
                              http_options=types.HttpOptions(base_url=f"https://127.0.0.1:{port}"))
        seen = []
        async with client.aio.live.connect(model="gemini-live", config=types.LiveConnectConfig(
                response_modalities=[types.Modality.TEXT])) as session:
            await session.send_client_content(turns=types.Content(role="user", parts=[types.Part(text="Refund 1001.")]),
                                              turn_complete=True)
            async for message in session.receive():
                seen.append(message)
                if message.tool_call:
                    await session.send_tool_response(function_responses=[types.FunctionResponse(
                        id=call.id, name=call.name, response={"id": "re_1", "status": "refunded"})
                        for call in message.tool_call.function_calls])
        return seen

    with ServerThread(gemini_live_app(), context) as server:
        seen = asyncio.run(asyncio.wait_for(main(server.port), 60))
    proxy.end_episode("genai")
    call, go_away, text, done = seen
    assert [(c.name, c.args) for c in call.tool_call.function_calls] == [("refund_order", {"order_id": "1001"})]
    assert go_away.go_away.time_left == "10s"  # the preset, as the SDK's own LiveServerMessage.go_away
    assert text.server_content.model_turn.parts[0].text == "Refunded order 1001." and done.server_content.turn_complete
    trace = list(read_trace(trace_path(tmp_path / "flows", "genai")))
    [line] = [line for line in trace if "websocket" in line]
    assert "genai-live-test-key" not in json.dumps(line)  # the key the SDK sends is redacted
    # (the toolCall the injection went after is recorded held, then resent behind it)
    sent = [next(iter(json.loads(m["text"]))) for m in line["websocket"]["messages"] if not m.get("held")]
    assert sent == ["setup", "setupComplete", "client_content", "toolCall", "goAway", "tool_response",
                    "serverContent", "serverContent"]
    assert [m["fault"]["delivered"] for m in line["websocket"]["messages"] if "fault" in m] == [True]
    verdict = judge_episode(Task(id="t", prompt="Refund 1001.", expected=Expected(
        effects=(Effect("*", "*/tools/refund_order", 1),))),
        {"key": "genai", "completed": True, "exit_code": 0, "output": {"answer": "x"}}, trace)
    assert (verdict["model_calls"], verdict["tool_calls"]) == (2, 1)  # the turn that called, the one that answered
    assert {c["name"]: c["passed"] for c in verdict["checks"]}["effects"] is True
    spans = [exchange_span(ex, "genai", content=False) for ex in parse_trace(trace) if not ex.is_protocol]
    assert [(s.name, s.attributes.get(N.PROVIDER), [e[2][N.FAULT_RULE] for e in s.events]) for s in spans] == [
        ("chat gemini-live", "gcp.gemini", ["go-away-after-the-call"]),  # the model named in the SDK's setup
        ("execute_tool refund_order", None, ["go-away-after-the-call"]), ("chat gemini-live", "gcp.gemini", [])]
