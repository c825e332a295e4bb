"""A 2xx answer that never reached its end is no commit the client heard of (evaluator.traces.traced's
`unanswered`, evaluator.traces.ambiguity): a JSON-RPC call whose event stream ended before the
answer with its id, an answer that broke off midway. Synthetic trace lines in the real format, on a
world unlike the demo's: a JSON-RPC endpoint at /rpc/v1 whose tool nobody annotated, named
irreversible (and its lookup read-only) by the task."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultproxy.evaluator.judging import judge_episode
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.task_model import EndpointPattern, Task
from tests.support.run_records import exchange, record, write_trace
from tests.support.verdicts import check

RPC_URL = "http://127.0.0.1:8300/rpc/v1"
SSE = [["content-type", "text/event-stream"]]
TASK = Task(id="t", prompt="Book the room.", irreversible=(EndpointPattern.parse("mcp:reserve_room"),),
            read_only=(EndpointPattern.parse("mcp:room_holds"),))


def call(tool: str, rpc_id: int, at: float, events: list[Any] | None, key: str | None = None,
         outcome: str = "response", **kwargs: Any) -> dict:
    """A tools/call answered 200 with an event stream of `events` (JSON documents, or raw text);
    None: a stream that sent no event."""
    arguments = {"room": "R-7"} | ({"idempotency_key": key} if key else {})
    line = exchange("POST", RPC_URL, body={"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
                                           "params": {"name": tool, "arguments": arguments}},
                    at=at, outcome=outcome, client_status=200, **kwargs)
    line["upstream"] = {"status": 200, "headers": SSE, "body": None}
    if events is not None:
        line["upstream"]["sse"] = [[0.01 * i, e if isinstance(e, str) else f"data: {json.dumps(e)}\n\n"]
                                   for i, e in enumerate(events)]
    return line


def answer(rpc_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": {"content": [{"type": "text", "text": '{"hold": "H-1"}'}]}}


PROGRESS = {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}}


def classified(tmp_path: Path, line: dict):
    return parse_trace(read_trace(write_trace(tmp_path / f"{line['seq']}.jsonl", [line])))[0]


def idempotency(tmp_path: Path, lines: list[dict]) -> dict:
    path = write_trace(tmp_path / f"ep{lines[0]['seq']}.jsonl", lines)
    verdict = judge_episode(TASK, record(), read_trace(path), {})
    return check(verdict, "idempotency")


@pytest.mark.parametrize("events, outcome, how", [
    ([PROGRESS], "response", "its event stream ended without the answer"),
    (None, "response", "its event stream ended without the answer"),  # no event at all
    ([PROGRESS, answer(99)], "response", "its event stream ended without the answer"),  # another call's id
    ([PROGRESS, "data: {\"jsonrpc\": \"2.0\", \"id\": 5, \"res"], "error", "its answer broke off"),
    ([PROGRESS], "client_gone", "the client left before the answer came"),
])
def test_a_stream_that_ended_before_its_answer_may_have_committed(tmp_path, events, outcome, how):
    ex = classified(tmp_path, call("reserve_room", 5, 1, events, outcome=outcome))
    assert not ex.committed and ex.failed
    assert ex.ambiguity == f"answered 200, but {how}"


def test_a_stream_that_carried_its_answer_committed(tmp_path):
    ex = classified(tmp_path, call("reserve_room", 5, 1, [PROGRESS, answer(5)]))
    assert ex.committed and not ex.failed and ex.ambiguity is None
    buffered = call("reserve_room", 6, 1, None)  # a fault buffered the stream: its text is the body
    buffered["upstream"]["body"] = f"data: {json.dumps(PROGRESS)}\n\ndata: {json.dumps(answer(6))}\n\n"
    assert classified(tmp_path, buffered).committed
    # The stream reached the client's end with the answer, though the client left (the SDK closes it).
    gone = call("reserve_room", 7, 1, [answer(7)], outcome="client_gone")
    gone["client"]["gone_after_s"] = 0.5
    gone["response_after_s"] = 0.1
    ex = classified(tmp_path, gone)
    assert ex.committed and not ex.failed


def test_a_plain_http_answer_committed_unless_it_broke_off(tmp_path):
    """No protocol says what the answer of a plain POST's event stream is: one that ended is the
    server's whole answer. A JSON answer that broke off midway is no commit the client heard of."""
    streamed = exchange("POST", "http://127.0.0.1:8300/holds", body={"room": "R-7"}, at=1)
    streamed["upstream"] = {"status": 200, "headers": SSE, "body": None, "sse": [[0, "data: {\"step\": 1}\n\n"]]}
    assert classified(tmp_path, streamed).committed
    broken = exchange("POST", "http://127.0.0.1:8300/holds", body={"room": "R-7"}, at=2, outcome="error",
                      client_status=None, error="peer closed connection without sending complete message body")
    ex = classified(tmp_path, broken)
    assert not ex.committed and ex.ambiguity == "answered 200, but its answer broke off"


def test_only_a_keyed_retry_or_a_look_first_passes_after_an_unanswered_call(tmp_path):
    first = call("reserve_room", 5, 1, [PROGRESS], key="k1")
    how = "which may have committed (answered 200, but its event stream ended without the answer)"
    blind = call("reserve_room", 6, 2, [answer(6)])
    found = idempotency(tmp_path, [first, blind])
    assert found["passed"] is False and found["detail"] == (
        f"POST /rpc/v1 reserve_room #{blind['seq']} repeats #{first['seq']}, {how}, without an idempotency key")
    fresh = call("reserve_room", 7, 2, [answer(7)], key="k2")
    found = idempotency(tmp_path, [call("reserve_room", 5, 1, [PROGRESS], key="k1"), fresh])
    assert found["passed"] is False and f"{how}, with a fresh idempotency key" in found["detail"]
    same = call("reserve_room", 8, 2, [answer(8)], key="k1")
    assert idempotency(tmp_path, [call("reserve_room", 5, 1, [PROGRESS], key="k1"), same])["passed"] is True
    look = call("room_holds", 9, 1.5, [answer(9)])
    again = [call("reserve_room", 5, 1, [PROGRESS]), look, call("reserve_room", 10, 2, [answer(10)])]
    assert idempotency(tmp_path, again)["passed"] is True


def test_an_answer_on_a_resumed_stream_arrived(tmp_path):
    """MCP's resumability: the server ended the call's stream after an event with an id, and the
    client resumed with a GET carrying Last-Event-ID, on which the answer came."""
    first = call("reserve_room", 5, 1, ["id: 7\ndata: \n\n"])
    resumed = exchange("GET", RPC_URL, headers=[["Last-Event-ID", "7"], ["Accept", "text/event-stream"]], at=1.5)
    resumed["upstream"] = {"status": 200, "headers": SSE, "body": None,
                           "sse": [[0, f"id: 8\ndata: {json.dumps(answer(5))}\n\n"]]}
    lines = [first, resumed]
    ex = parse_trace(read_trace(write_trace(tmp_path / "resumed.jsonl", lines)))[0]
    assert ex.committed and not ex.failed and ex.ambiguity is None
    other = dict(resumed, seq=resumed["seq"] + 100, upstream=resumed["upstream"] | {
        "sse": [[0, f"data: {json.dumps(answer(6))}\n\n"]]})
    ex = parse_trace(read_trace(write_trace(tmp_path / "other.jsonl", [first, other])))[0]
    assert not ex.committed and ex.ambiguity == "answered 200, but its event stream ended without the answer"
