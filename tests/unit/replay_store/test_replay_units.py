"""Replay store units: request identity and the pool's tiers, ddmin, entry validation."""

from __future__ import annotations

import itertools
import json

import pytest

from faultproxy.cli.main import main as faultproxy_main
from faultproxy.replay_store import har
from faultproxy.replay_store.har import Recorded, StoreError
from faultproxy.replay_store.replay_matching import Pool, identity_of
from faultproxy.replay_store.minimize import ddmin


def recorded(seq: int, method: str, url: str, body: dict | None = None, status: int | None = 200,
             forwarded: bool = True, text: str = "{}") -> Recorded:
    return Recorded(seq, method, url, (("content-type", "application/json"),),
                    json.dumps(body).encode() if body is not None else None, forwarded, status, "OK",
                    (("content-type", "application/json"),), text.encode(), None, None, None, {})


def test_identity_ignores_headers_volatile_keys_key_order_and_rpc_ids():
    a = identity_of("POST", "http://h:8/v1/x?b=2&a=1&ts=5", [("x-stainless-retry-count", "0"), ("user-agent", "a")],
                    json.dumps({"model": "m", "n": 1.0, "request_id": "r1", "timestamp": 1, "meta": {"createdAt": 3}}).encode())
    b = identity_of("post", "http://H:8/v1/x?a=1&b=2&ts=9", [("x-stainless-retry-count", "2"), ("user-agent", "b")],
                    json.dumps({"meta": {"created_at": 4}, "timestamp": 2, "request_id": "r2", "n": 1, "model": "m"}).encode())
    assert a == b
    rpc = lambda i: json.dumps({"jsonrpc": "2.0", "id": i, "method": "tools/call", "params": {"name": "x", "arguments": {"idempotency_key": f"k{i}"}}}).encode()
    assert identity_of("POST", "http://h/mcp", [], rpc(1)) == identity_of("POST", "http://h/mcp", [], rpc(7))
    assert identity_of("POST", "http://h/x", [], b'{"a": 1}') != identity_of("POST", "http://h/x", [], b'{"a": 2}')
    assert identity_of("GET", "https://h:443/x", [], None) == identity_of("GET", "https://h/x", [], None)
    assert identity_of("GET", "http://h:81/x", [], None) != identity_of("GET", "http://h/x", [], None)


def test_a_batch_is_what_it_sends_not_the_answers_in_it():
    """The client's answers in a batched POST are their server requests' exchanges: the proxy
    cuts them down to what the server gets, a replay to nothing; the batch is its notifications."""
    answer = {"jsonrpc": "2.0", "id": "s1", "result": {"action": "accept"}}
    notice = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}
    batch = lambda *messages: identity_of("POST", "http://h/mcp", [], json.dumps(list(messages)).encode())
    assert batch(answer, notice) == batch(notice) != batch({**notice, "method": "notifications/cancelled"})
    assert batch(answer, notice).endpoint.operation == "notifications/roots/list_changed"


def test_pool_serves_oldest_first_then_by_endpoint_then_repeats_reads_only():
    pool = Pool([
        recorded(1, "POST", "http://h/chat", {"q": "a"}, text='{"n": 1}'),
        recorded(2, "GET", "http://h/orders/1", text='{"status": "paid"}'),
        recorded(3, "POST", "http://h/chat", {"q": "a"}, text='{"n": 3}'),
        recorded(4, "POST", "http://h/refund", {}, text='{"ok": 1}'),
        recorded(5, "POST", "http://h/chat", {"q": "z"}, status=429, forwarded=False),  # answered by a fault
    ])
    take = lambda method, url, body=None: pool.take(method, url, [], json.dumps(body).encode() if body is not None else None)
    first, second = take("POST", "http://h/chat", {"q": "a"}), take("POST", "http://h/chat", {"q": "a"})
    assert (first.recorded.seq, first.how, second.recorded.seq, second.how) == (1, "exact", 3, "exact")
    assert take("POST", "http://h/chat", {"q": "a"}) is None  # #5 never reached the upstream: not servable
    assert (m := take("POST", "http://h/refund", {"reworded": True})).recorded.seq == 4 and m.how == "endpoint"
    assert take("POST", "http://h/refund", {}) is None  # a write is never served twice
    assert take("GET", "http://h/orders/1").how == "exact"
    again = take("GET", "http://h/orders/1")
    assert again.recorded.seq == 2 and again.how == "repeat"  # a re-read is
    assert take("GET", "http://h/orders/2") is None
    assert "already served" in pool.explain_miss("POST", "http://h/refund", [], b"{}")
    assert "nothing recorded for this path" in pool.explain_miss("GET", "http://h/nope", [], None)


def rpc(method: str, **params) -> dict:
    return {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}


def test_pool_tells_mcp_calls_apart_and_repeats_only_what_the_server_marks_read_only():
    tools = {"jsonrpc": "2.0", "id": 1, "result": {"tools": [
        {"name": "get_order", "annotations": {"readOnlyHint": True}},
        {"name": "refund_order", "annotations": {"destructiveHint": True}}]}}
    pool = Pool([
        recorded(1, "POST", "http://h/mcp", rpc("tools/list"), text=json.dumps(tools)),
        recorded(2, "POST", "http://h/mcp", rpc("tools/call", name="get_order", arguments={"id": 1}), text='{"o": 1}'),
        recorded(3, "POST", "http://h/mcp", rpc("tools/call", name="refund_order", arguments={"id": 1}), text='{"r": 1}'),
    ])
    take = lambda body: pool.take("POST", "http://h/mcp", [], json.dumps(body).encode())
    # another tool is not answered with a recording of the same path: the endpoint names the tool
    assert take(rpc("tools/call", name="list_orders", arguments={})) is None
    assert take(rpc("tools/call", name="get_order", arguments={"id": 1})).recorded.seq == 2
    again = take(rpc("tools/call", name="get_order", arguments={"id": 1}))
    assert (again.recorded.seq, again.how) == (2, "repeat")  # marked readOnlyHint: a re-read
    reworded = take(rpc("tools/call", name="refund_order", arguments={"id": 1, "reason": "broken"}))
    assert (reworded.recorded.seq, reworded.how) == (3, "endpoint")  # same tool, arguments changed
    assert take(rpc("tools/call", name="refund_order", arguments={"id": 1})) is None  # destructive: never twice
    assert [take(rpc("tools/list")).how for _ in range(2)] == ["exact", "repeat"]  # listing is a read
    assert "tools/call:refund_order" in pool.explain_miss("POST", "http://h/mcp", [],
                                                          json.dumps(rpc("tools/call", name="refund_order")).encode())


def test_pool_matches_redacted_recordings_with_the_same_redaction():
    from faultproxy.formats.redact import Redactor

    redactor = Redactor(["hunter2-secret"])
    pool = Pool([recorded(1, "POST", "http://h/x?api_key=[REDACTED]", {"api_key": "[REDACTED]", "note": "[REDACTED]"})],
                redactor)
    body = json.dumps({"api_key": "hunter2-secret", "note": "hunter2-secret"}).encode()
    assert pool.take("POST", "http://h/x?api_key=hunter2-secret", [], body).how == "exact"


@pytest.mark.parametrize("size", [1, 2, 5, 8])
def test_ddmin_finds_a_1_minimal_subset_with_few_tests(size):
    items = list(range(size))
    for needed in [set(c) for r in (1, 2) for c in itertools.combinations(items, r)]:
        calls = []
        result = ddmin(items, lambda subset: calls.append(subset) or needed <= set(subset))
        assert set(result) == needed
        assert len(calls) == len({tuple(c) for c in calls})  # never the same subset twice
        assert len(calls) < max(2 ** size, 4)


def test_ddmin_empty_set_reproducing_means_no_fault_is_needed():
    assert ddmin([1, 2, 3], lambda subset: True) == []


def test_bad_entries_get_one_clear_line(tmp_path, capsys):
    entry = tmp_path / "store" / "e"
    entry.mkdir(parents=True)
    (entry / "episode.json").write_text("{not json")
    with pytest.raises(StoreError, match=r"episode.json:1: not JSON"):
        har.read_entry(entry)
    (entry / "episode.json").write_text(json.dumps({"format": har.FORMAT, "version": 1}))
    with pytest.raises(StoreError, match=r"episode.json: episode: missing"):
        har.read_entry(entry)
    document = {"format": har.FORMAT, "version": 1, "episode": "k", "task": {"id": "t", "prompt": "p"}, "prompt": "p",
                "scenario": {"name": "s", "source": "x"}, "expect": "maybe", "decisions": [], "command": ["a"]}
    (entry / "episode.json").write_text(json.dumps(document))
    with pytest.raises(StoreError, match=r"expect: must be pass or fail, got 'maybe'"):
        har.read_entry(entry)
    (entry / "episode.json").write_text(json.dumps({**document, "expect": "fail"}))
    with pytest.raises(StoreError, match=r"flows.har: missing"):
        har.read_entry(entry)
    (entry / "flows.har").write_text(json.dumps({"log": {"version": "1.2", "entries": [{"request": {}}]}}))
    with pytest.raises(StoreError, match=r"log.entries\[0\].response: expected an object, got null"):
        har.read_entry(entry)
    assert faultproxy_main(["replay", str(tmp_path / "store"), "--", "true"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("faultproxy: ") and "log.entries[0]" in err and "Traceback" not in err
    assert faultproxy_main(["freeze", str(tmp_path / "no-run")]) == 2
    assert faultproxy_main(["minimize", str(tmp_path), "--", "true"]) == 2


@pytest.mark.parametrize("fields, rewrites", [
    ({"rewrite_model": True}, {"model": "model-b"}), ({}, {}),
    ({"rewrite_model": True, "rewrites": {"effort": "low"}}, {"effort": "low"}),
], ids=["rewrite_model", "no rewrite", "rewrites kept"])
def test_a_version_1_entry_reads_in_the_current_shape(tmp_path, fields, rewrites):
    """Entries frozen before `--rewrite` said only `rewrite_model: true`: the episode's model,
    asked in every request."""
    entry = tmp_path / "e"
    entry.mkdir()
    document = {"format": har.FORMAT, "version": 1, "episode": "k", "task": {"id": "t", "prompt": "p"}, "prompt": "p",
                "scenario": {"name": "s", "source": "x"}, "expect": "fail", "decisions": [], "command": ["a"],
                "model": "model-b", **fields}
    (entry / "episode.json").write_text(json.dumps(document))
    (entry / "flows.har").write_text(json.dumps({"log": {"version": "1.2", "entries": []}}))
    read = har.read_entry(entry)
    assert (read.episode["version"], read.rewrites) == (har.VERSION, rewrites)
