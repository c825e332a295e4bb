"""Traces cut long bodies at a limit (1 MiB by default), recording the whole body's length and
sha256; replay refuses to serve a cut response and says why instead of answering wrongly."""

from __future__ import annotations

import hashlib
import json

import httpx

from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import DEFAULT_BODY_LIMIT, read_trace, trace_path
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.proxy.server import ProxyServer
from faultproxy.replay_store import entry_writer, har
from faultproxy.replay_store.replay_matching import Pool
from faultproxy.replay_store.replay_proxy import DIVERGED_STATUS, EpisodeReplay, ReplayInjector
from tests.support.fixtures import NOTHING


def test_a_10_mb_request_is_one_line_of_about_the_limit(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(NOTHING)
    body = json.dumps({"reason": "x" * 10_000_000}).encode()
    with httpx.Client(proxy=proxy.proxy_url("big"), timeout=60) as client:
        assert client.post(f"{server.url}/items/1/refund", content=body,
                           headers={"content-type": "application/json"}).status_code == 200
    proxy.end_episode("big")
    path = trace_path(tmp_path / "flows", "big")
    assert path.stat().st_size < DEFAULT_BODY_LIMIT + 20_000  # was 10 MB
    (line,) = read_trace(path)
    request = line["request"]
    assert len(request["body"].encode()) == DEFAULT_BODY_LIMIT and request["body_truncated"] is True
    assert request["body_length"] == len(body) and request["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert "body_truncated" not in line["upstream"]  # a small answer stays whole


def test_the_limit_applies_after_redaction_and_to_binary_bodies(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(NOTHING, limits=EpisodeLimits(trace_body_bytes=100))
    secret = {"api_key": "sk-" + "a" * 40, "note": "y" * 300}
    with httpx.Client(proxy=proxy.proxy_url("ep")) as client:
        client.post(f"{server.url}/items/1/refund", json=secret)
        client.post(f"{server.url}/items/2/refund", content=bytes(range(256)) * 2)
        client.get(f"{server.url}/text/99")
    proxy.end_episode("ep")
    redacted, binary, whole = read_trace(trace_path(tmp_path / "flows", "ep"))
    assert "sk-" not in json.dumps(redacted) and redacted["request"]["body_truncated"]
    assert binary["request"]["body_encoding"] == "base64" and binary["request"]["body_length"] == 512
    assert whole["upstream"]["body"] == "x" * 99 and "body_truncated" not in whole["upstream"]


def test_replay_does_not_serve_a_cut_response(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(NOTHING, limits=EpisodeLimits(trace_body_bytes=1000))
    with httpx.Client(proxy=proxy.proxy_url("live")) as client:
        client.get(f"{server.url}/text/500")
        client.get(f"{server.url}/text/5000")
    proxy.end_episode("live")
    document = {"episode": "live", "task": {"id": "t", "prompt": "p"}, "prompt": "p", "scenario": {"name": "s", "source": "x"},
                "expect": "fail", "decisions": [], "command": ["agent"]}
    entry = har.read_entry(entry_writer.write_entry(tmp_path / "store" / "e", document,
                                           read_trace(trace_path(tmp_path / "flows", "live")), Redactor()))
    assert [dict(r.truncated) for r in entry.exchanges] == [{}, {"response": {"length": 5000, "sha256": hashlib.sha256(
        b"x" * 5000).hexdigest()}}]

    injector = ReplayInjector()
    with ProxyServer(None, injector=injector, trace_dir=tmp_path / "replayed") as replaying:
        replay = EpisodeReplay("live", Pool(list(entry.exchanges)))
        injector.stage("again", replay)
        replaying.begin_episode("again")
        with httpx.Client(proxy=replaying.proxy_url("again")) as client:
            whole = client.get(f"{server.url}/text/500")
            cut = client.get(f"{server.url}/text/5000")
        replaying.end_episode("again")
    assert whole.status_code == 200 and whole.text == "x" * 500
    assert cut.status_code == DIVERGED_STATUS
    assert "response body (5000 bytes) was cut by the trace body limit" in cut.json()["error"]["message"]
    assert [d["why"] for d in replay.diverged] == [
        "recording #2's response body (5000 bytes) was cut by the trace body limit when recorded; "
        "re-record with a larger limit"]
