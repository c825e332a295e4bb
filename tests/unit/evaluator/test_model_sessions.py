"""Live sessions read as model calls (evaluator.traces.model_sessions), on synthetic trace lines: turns
the server starts by itself (voice activity detection) beside turns the client asks for."""

from __future__ import annotations

import json
from typing import Any

from faultproxy.evaluator.traces import TracedExchange, final_answer, model_usage, parse_trace
from tests.support.realtime import GEMINI_LIVE

DROP = {"rule": "drop-created", "type": "ws_drop", "delivered": True}


def session(url: str, *events: tuple[str, dict[str, Any]] | tuple[str, dict[str, Any], dict]) -> dict[str, Any]:
    """A session's trace line: (from, event[, extra message fields]) one message a second."""
    messages = [{"from": sender, "t": float(t), "type": "text", "text": json.dumps(event), **(rest[0] if rest else {})}
                for t, (sender, event, *rest) in enumerate(events)]
    return {"seq": 1, "episode": "ep", "started": 100.0, "response_after_s": 0.0, "forwarded": True,
            "request": {"method": "GET", "url": url, "headers": []},
            "upstream": {"status": 101}, "client": {"outcome": "response", "status": 101},
            "websocket": {"messages": messages, "close": {"by": "client", "code": 1000, "t": float(len(messages))}}}


def model_calls(line: dict[str, Any]) -> list[TracedExchange]:
    return [ex for ex in parse_trace([line]) if ex.is_model]


REALTIME = "ws://127.0.0.1:1/v1/realtime"
DONE = {"type": "response.done", "response": {"status": "completed", "usage": {"input_tokens": 7, "output_tokens": 3}}}
CALL = {"type": "response.function_call_arguments.done", "call_id": "c1", "name": "refund_order", "arguments": "{}"}


def test_a_realtime_turn_the_server_started_after_committed_audio_is_a_model_call():
    line = session(REALTIME, ("server", {"type": "session.created"}),
                   ("client", {"type": "input_audio_buffer.append", "audio": "AAAA"}),
                   ("server", {"type": "input_audio_buffer.committed"}),
                   ("server", {"type": "response.created"}), ("server", CALL), ("server", DONE),
                   ("client", {"type": "conversation.item.create", "item": {
                       "type": "function_call_output", "call_id": "c1", "output": '{"status": "refunded"}'}}),
                   ("client", {"type": "response.create"}), ("server", {"type": "response.created"}),
                   ("server", {"type": "response.output_text.delta", "delta": "Refunded."}), ("server", DONE))
    exchanges = parse_trace([line])
    vad, asked = [ex for ex in exchanges if ex.is_model]
    # the server's turn starts at its response.created, no request of the client's; the client's is one turn
    assert (vad.started, vad.body, vad.failed) == (103.0, None, False)
    assert (asked.started, json.loads(asked.body)) == (107.0, {"type": "response.create"})
    assert [ex.function_call for ex in exchanges if ex.function_call] == ["refund_order"]
    assert model_usage(exchanges, "gpt-realtime") == {"gpt-realtime": {"input": 14, "output": 6}}
    assert final_answer(exchanges) == "Refunded."


def test_a_withheld_response_created_still_starts_the_servers_turn_and_is_its_fault():
    line = session(REALTIME, ("server", {"type": "input_audio_buffer.committed"}),
                   ("server", {"type": "response.created"}, {"dropped": True, "fault": DROP}),
                   ("server", {"type": "response.output_text.delta", "delta": "Hi."}), ("server", DONE))
    [turn] = model_calls(line)
    assert turn.started == 101.0 and turn.fault["rule"] == "drop-created"


def test_gemini_live_answers_to_streamed_audio_are_model_calls():
    audio = {"realtimeInput": {"audio": {"data": "AAAA", "mimeType": "audio/pcm;rate=16000"}}}
    line = session(f"ws://127.0.0.1:1/ws/{GEMINI_LIVE}", ("client", {"setup": {"model": "models/gemini-live"}}),
                   ("server", {"setupComplete": {}}), ("client", audio),
                   ("server", {"toolCall": {"functionCalls": [{"id": "f1", "name": "refund_order", "args": {}}]}}),
                   ("client", {"toolResponse": {"functionResponses": [{"id": "f1", "response": {"ok": True}}]}}),
                   ("server", {"serverContent": {"modelTurn": {"parts": [{"text": "Refunded."}]}}}),
                   ("server", {"serverContent": {"turnComplete": True}}), ("client", audio),
                   ("server", {"serverContent": {"modelTurn": {"parts": [{"text": "Bye."}]}}}),
                   ("server", {"serverContent": {"turnComplete": True}}))
    # a toolCall the server started by itself is a turn of its own, started and ended by one message
    assert [(ex.started, ex.body is None) for ex in model_calls(line)] == [(103.0, True), (104.0, False),
                                                                          (108.0, True)]
    assert final_answer(parse_trace([line])) == "Bye."


def test_a_message_resent_behind_an_injection_starts_no_turn_of_its_own():
    call = {"toolCall": {"functionCalls": [{"id": "f1", "name": "refund_order", "args": {}}]}}
    line = session(f"ws://127.0.0.1:1/ws/{GEMINI_LIVE}", ("client", {"realtimeInput": {}}),
                   ("server", call, {"held": True}), ("server", {"goAway": {}}, {"injected": True}),
                   ("server", call, {"resent": True}))
    assert [ex.started for ex in model_calls(line)] == [101.0]  # the held toolCall started and ended it


def test_a_held_message_is_read_once_where_the_client_got_it():
    delta = {"type": "response.output_text.delta", "delta": "Done."}
    error = {"type": "error", "error": {"code": "server_error"}}
    line = session(REALTIME, ("client", {"type": "response.create"}), ("server", delta, {"held": True}),
                   ("server", DONE, {"held": True}), ("server", error, {"injected": True}),
                   ("server", delta, {"resent": True}), ("server", DONE, {"resent": True}))
    [turn] = model_calls(line)
    assert (turn.started, turn.raw["duration_s"]) == (100.0, 5.0)  # ended by the done the client got, behind the error
    assert [s[0] for s in turn.raw["upstream"]["sse"]] == [3.0, 4.0, 5.0] and final_answer(parse_trace([line])) == "Done."
