"""The trace's compact form (formats.trace, version 2): what a line leaves out, read_trace gives
back exactly; lines of version 1 (every field spelled out) still read as they did."""

from __future__ import annotations

import json

import pytest

from faultproxy.formats.errors import UserError
from faultproxy.formats.trace import TraceWriter, read_trace, trace_time
from faultproxy.formats.trace_compact import FORMAT_VERSION

# A line as version 1 wrote it (a replay store or run directory from before the compact form).
V1_LINE = (
    '{"v":1,"seq":1,"episode":"old.ep","started":1796140000.123456,"duration_s":0.014704,"request":'
    '{"method":"POST","url":"http://127.0.0.1:8100/items/4","headers":[["Host","127.0.0.1:8100"],'
    '["content-type","application/json"]],"body":"{\\"qty\\": 3}"},"upstream":{"status":200,"headers":'
    '[["Content-Type","application/json"]],"body":"{\\"id\\": \\"4\\"}"},"client":{"outcome":"response",'
    '"status":200},"forwarded":true,"fault":null,"perturbation":null,"tokens":0,"error":null,'
    '"response_after_s":0.01096}\n'
)

HEADERS = [("Host", "127.0.0.1:8100"), ("Content-Type", "application/json"), ("Accept", "*/*")]


def exchange(seq: int, **changes) -> dict:
    """A record as the proxy hands it to the writer (proxy.exchange.FlowExchange.to_record)."""
    record = {
        "seq": seq, "episode": "ep: one/two", "started": 1796140000.0 + seq, "duration_s": 0.015,
        "request": {"method": "POST", "url": f"http://127.0.0.1:8100/items/{seq}", "headers": list(HEADERS),
                    "body": '{"qty": 3, "note": "small"}'},
        "upstream": {"status": 200, "headers": [("Content-Type", "application/json"), ("Date", "Tue, 01 Dec")],
                     "body": '{"id":"%d","ok":true}' % seq},
        "client": {"outcome": "response", "status": 200}, "forwarded": True, "fault": None,
        "perturbation": None, "tokens": 0, "error": None, "response_after_s": 0.01,
    }
    return record | changes


def written(tmp_path, records: list[dict]) -> tuple[str, list[dict]]:
    path = tmp_path / "trace.jsonl"
    writer = TraceWriter(path)
    for record in records:
        writer.write(record)
    writer.close()
    return path.read_text(), list(read_trace(path))


def as_read(record: dict) -> dict:
    """The record as JSON gives it back (tuples become lists), with the line's version."""
    return {"v": FORMAT_VERSION, **json.loads(json.dumps(record))}


def test_what_a_line_leaves_out_is_read_back_exactly(tmp_path):
    records = [
        exchange(1),
        exchange(2),  # same headers both ways: left out
        exchange(3, request={**exchange(3)["request"], "headers": [*HEADERS[:2], ("Accept", "text/plain"),
                                                                   ("X-Dup", "a"), ("X-Dup", "b")]}),
        exchange(4, upstream=None, forwarded=False, client={"outcome": "injected", "status": 503,
                                                           "headers": [("x-request-id", "r1")], "body": "no"},
                 fault={"rule": "r", "type": "server_error", "params": {}, "decision": 0.1, "forced": False,
                        "delivered": True, "detail": "503"}, matched=["r"]),
        exchange(5, request={"method": "GET", "url": "http://127.0.0.1:8100/x", "headers": [("A: b", "c")],
                             "body": None}),
        exchange(6, request={**exchange(6)["request"], "body": '{"n": 1e5}'}),  # JSON that would not read back the same
        exchange(7, request={**exchange(7)["request"], "body": '{"cut": "xx', "body_truncated": True,
                             "body_length": 99, "body_sha256": "ab"}),
        exchange(8, upstream=None, client={"outcome": "client_gone", "status": None, "gone_after_s": 1.0},
                 error="client disconnected", tokens=12),
        exchange(9, request={**exchange(9)["request"], "body": "[" * 5000 + "]" * 5000}),  # too deep to parse
    ]
    text, back = written(tmp_path, records)
    assert back == [as_read(record) for record in records]
    lines = [json.loads(line) for line in text.splitlines()]
    assert lines[0]["episode"] == "ep: one/two" and all("episode" not in line for line in lines[1:])
    assert "headers" not in lines[1]["request"] and "headers" not in lines[1]["upstream"]
    assert lines[2]["request"]["headers"] == ["Host", "Content-Type", "Accept: text/plain", "X-Dup: a", "X-Dup: b"]
    assert lines[0]["request"]["json_spaced"] == {"qty": 3, "note": "small"} and lines[0]["upstream"]["json"]["ok"]
    assert lines[5]["request"]["body"] == '{"n": 1e5}' and lines[6]["request"]["body"] == '{"cut": "xx'
    assert lines[8]["request"]["body"].startswith("[[[")
    assert lines[4]["request"]["headers"] == [["A: b", "c"]]
    for default in ("fault", "perturbation", "tokens", "error", "forwarded", "client"):
        assert default not in lines[0], default


def test_a_record_without_forwarded_or_client_reads_back_without_them(tmp_path):
    # Lines older than `forwarded` are passed on by tools (and tests) as they were: not recorded
    # is not the same as forwarded (scenarios.trace_forwarded decides those).
    record = {key: value for key, value in exchange(1).items() if key not in ("forwarded", "client")}
    _, [back] = written(tmp_path, [record])
    assert back["forwarded"] is None and back["client"] is None


def test_a_version_1_line_reads_as_it_did(tmp_path):
    path = tmp_path / "old.jsonl"
    path.write_text(V1_LINE)
    assert list(read_trace(path)) == [json.loads(V1_LINE)]


def test_a_v2_writer_appends_after_v1_lines_and_a_torn_one(tmp_path):
    # A monitor restarted after kill -9 appends to the trace it was writing: the half-written
    # last line is cut off first (it was never written), and the new lines say everything again.
    path = tmp_path / "trace.jsonl"
    path.write_text(V1_LINE + V1_LINE[:40])
    writer = TraceWriter(path)
    writer.write(exchange(2))
    writer.close()
    old, new = read_trace(path)
    assert old == json.loads(V1_LINE) and new == as_read(exchange(2))


def test_a_newer_version_is_one_clear_error_naming_the_line(tmp_path):
    path = tmp_path / "new.jsonl"
    path.write_text(V1_LINE + '{"v":99,"seq":2}\n')
    with pytest.raises(UserError, match=rf"new.jsonl:2: trace format version 99; .*versions 1 to {FORMAT_VERSION}"):
        list(read_trace(path))


def test_trace_times_keep_the_order_a_check_compares():
    """A server's request made 1.2 ms into a 1.4 ms replayed tool call (check_confirmation asks
    whether it came while the call was open): rounded to the millisecond it fell outside it."""
    call_started, call_lasted, asked_at = 1796140000.0004, 0.0014, 1796140000.0016
    assert trace_time(call_started) <= trace_time(asked_at) <= trace_time(call_started) + trace_time(call_lasted)
