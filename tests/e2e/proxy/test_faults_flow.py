"""Faults on the way through: delays, timeouts, resets, lost responses, cuts, drift, stale reads."""

from __future__ import annotations

import gzip
import json
import time

import brotli

import httpx
import openai
import pytest
import requests

from faultproxy.formats.trace import read_trace, trace_path
from tests.support.fixtures import scenario
from tests.support.upstream import zstd


def client(proxy, episode: str = "ep", **kwargs) -> httpx.Client:
    return httpx.Client(proxy=proxy.proxy_url(episode), verify=str(proxy.ca_bundle), **kwargs)


def trace(proxy, tmp_path, episode: str = "ep") -> list[dict]:
    proxy.end_episode(episode)
    return list(read_trace(trace_path(tmp_path / "flows", episode)))


def test_response_lost_commits_once_and_client_errors(make_proxy, upstream, tmp_path):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: lose-refund
          match: {method: POST, path: "*/refund"}
          fault: {type: response_lost}
          when: {calls: [1]}
    """))
    with client(proxy) as http:
        with pytest.raises(httpx.RemoteProtocolError):
            http.post(f"{server.url}/items/3/refund", json={"amount": 1250})
    assert state.commits["refund 3"] == 1  # the upstream did the irreversible thing
    [exchange] = trace(proxy, tmp_path)
    assert exchange["upstream"]["status"] == 200
    assert exchange["client"]["outcome"] == "reset"
    assert exchange["fault"]["delivered"] is True


def test_response_lost_as_504_and_retry_commits_twice(make_proxy, upstream):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: lose-refund
          match: {method: POST, path: "*/refund"}
          fault: {type: response_lost, mode: "504"}
          when: {calls: [1]}
    """))
    with client(proxy) as http:
        first = http.post(f"{server.url}/items/4/refund", json={})
        retry = http.post(f"{server.url}/items/4/refund", json={})
    assert (first.status_code, retry.status_code) == (504, 200)
    assert state.commits["refund 4"] == 2  # a keyless retry after a lost response refunds twice


def test_timeout_holds_without_forwarding_and_client_times_out(make_proxy, upstream):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: hold
          match: {path: "/items/*"}
          fault: {type: timeout, hold_s: 5}
    """))
    with pytest.raises(requests.exceptions.ReadTimeout):
        requests.get(f"{server.url}/items/1", proxies={"http": proxy.proxy_url("ep")}, timeout=0.5)
    assert state.hits["GET /items/1"] == 0


def test_timeout_then_504(make_proxy, upstream):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: hold
          match: {path: "/items/*"}
          fault: {type: timeout, hold_s: 0.1, then: "504"}
    """))
    with client(proxy) as http:
        assert http.get(f"{server.url}/items/1").status_code == 504
    assert state.hits["GET /items/1"] == 0


def test_openai_sdk_reports_timeout(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: hold
          match: {path: "*/chat/completions"}
          fault: {type: timeout, hold_s: 5}
    """))
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, timeout=0.5,
                        http_client=client(proxy))
    with pytest.raises(openai.APITimeoutError):
        sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])


def test_reset_closes_without_response(make_proxy, upstream):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: drop
          match: {path: "/items/*"}
          fault: {type: reset}
    """))
    with pytest.raises(requests.exceptions.ConnectionError):
        requests.get(f"{server.url}/items/1", proxies={"http": proxy.proxy_url("ep")}, timeout=5)
    assert state.hits["GET /items/1"] == 0


@pytest.mark.parametrize("at", ["request", "response"])
def test_fixed_delay(make_proxy, upstream, at):
    _, server = upstream
    proxy = make_proxy(scenario(f"""
        - name: slow
          match: {{path: "/items/*"}}
          fault: {{type: delay, at: {at}, ms: 300}}
    """))
    with client(proxy) as http:
        started = time.monotonic()
        assert http.get(f"{server.url}/items/1").status_code == 200
        assert time.monotonic() - started >= 0.3


def test_lognormal_delay_is_deterministic(make_proxy, upstream, tmp_path):
    _, server = upstream
    rules = """
        - name: jitter
          match: {path: "/items/*"}
          fault: {type: delay, distribution: lognormal, median_ms: 20, sigma: 0.8}
    """
    details = []
    for _ in range(2):
        proxy = make_proxy(scenario(rules))
        with client(proxy) as http:
            for i in range(3):
                http.get(f"{server.url}/items/{i}")
        details.append([e["fault"]["detail"] for e in trace(proxy, tmp_path)][-3:])
        proxy.stop()
        (tmp_path / "flows" / "ep.jsonl").unlink()
    assert details[0] == details[1]
    assert len(set(details[0])) == 3  # three different draws, the same in both runs


def test_openai_stream_cut_cleanly_ends_without_exception(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: cut
          match: {path: "*/chat/completions"}
          fault: {type: partial_response, events: 2}
    """))
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, http_client=client(proxy))
    stream = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    words = [chunk.choices[0].delta.content for chunk in stream if chunk.choices]
    assert words == ["Hello", " from"]
    [exchange] = trace(proxy, tmp_path)
    assert len(exchange["upstream"]["sse"]) == 9  # 6 words, finish_reason, usage, [DONE]
    assert len(exchange["client"]["sse"]) == 2
    assert exchange["client"]["outcome"] == "cut"


def test_openai_stream_cut_with_reset_raises(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: cut
          match: {path: "*/chat/completions"}
          fault: {type: partial_response, events: 3, end: reset}
    """))
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, http_client=client(proxy))
    stream = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    words = []
    with pytest.raises((openai.APIConnectionError, httpx.RemoteProtocolError)):
        for chunk in stream:
            words.append(chunk.choices[0].delta.content)
    assert words == ["Hello", " from", " the"]


@pytest.mark.parametrize("end, error", [("clean", None), ("reset", requests.exceptions.ChunkedEncodingError)])
def test_partial_body_by_bytes(make_proxy, upstream, end, error):
    _, server = upstream
    proxy = make_proxy(scenario(f"""
        - name: cut
          match: {{path: "/text/*"}}
          fault: {{type: partial_response, bytes: 100, end: {end}}}
    """))
    proxies = {"http": proxy.proxy_url("ep")}
    if error:
        with pytest.raises(error):
            requests.get(f"{server.url}/text/1000", proxies=proxies, timeout=5)
    else:
        assert requests.get(f"{server.url}/text/1000", proxies=proxies, timeout=5).content == b"x" * 100


def test_partial_json_by_fraction_breaks_the_parse(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: half
          match: {path: "/items/*"}
          fault: {type: partial_response, fraction: 0.5}
    """))
    with client(proxy) as http:
        response = http.get(f"{server.url}/items/1")
    with pytest.raises(json.JSONDecodeError):
        response.json()


def test_slow_stream_paces_events(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: slow
          match: {path: "*/chat/completions"}
          fault: {type: slow_stream, first_event_ms: 200, between_events_ms: 50}
    """))
    sdk = openai.OpenAI(base_url=server.url + "/v1", api_key="k", max_retries=0, http_client=client(proxy))
    started = time.monotonic()
    stream = sdk.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}], stream=True)
    arrivals = [time.monotonic() - started for chunk in stream if chunk.choices]
    assert arrivals[0] >= 0.2
    assert arrivals[-1] - arrivals[0] >= 5 * 0.05 * 0.9
    [exchange] = trace(proxy, tmp_path)
    assert exchange["request"]["url"].startswith(server.url)  # the trace names the real upstream


def test_schema_drift_renames_the_field_the_client_reads(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: drift
          match: {path: "/items/*"}
          fault:
            type: schema_drift
            ops:
              - {op: rename, path: status, to: state}
              - {op: retype, path: amount, to: string}
    """))
    with client(proxy) as http:
        item = http.get(f"{server.url}/items/1").json()
    assert "status" not in item and item["state"] == "open"
    assert item["amount"] == "1250"


DECODERS = {"gzip": gzip.decompress, "br": brotli.decompress, "zstd": zstd.decompress}


@pytest.mark.parametrize("encoding", sorted(DECODERS))
def test_schema_drift_on_compressed_bodies(make_proxy, upstream, encoding):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: drift
          match: {path: "/encoded/*"}
          fault: {type: schema_drift, ops: [{op: remove, path: total}]}
    """))
    with client(proxy) as http, http.stream("GET", f"{server.url}/encoded/{encoding}") as response:
        raw = b"".join(response.iter_raw())
    assert response.headers["content-encoding"] == encoding
    assert int(response.headers["content-length"]) == len(raw)
    assert json.loads(DECODERS[encoding](raw)) == {"status": "open"}


def test_schema_drift_on_each_sse_event(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: drift
          match: {path: "*/chat/completions"}
          fault: {type: schema_drift, ops: [{op: rename, path: "choices.*.delta.content", to: text}]}
    """))
    with client(proxy) as http:
        with http.stream("POST", f"{server.url}/v1/chat/completions", json={"model": "m", "stream": True}) as response:
            body = response.read().decode()
    events = [json.loads(line[6:]) for line in body.splitlines() if line.startswith("data: {")]
    deltas = [c["delta"] for e in events for c in e["choices"] if c["delta"]]  # not the empty one that stops
    assert deltas and all("content" not in d and "text" in d for d in deltas)


def test_stale_state_serves_the_earlier_read_after_a_write(make_proxy, upstream):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: stale
          match: {method: GET, path: "/items/*"}
          fault: {type: stale_state, after_write: true}
    """))
    with client(proxy) as http:
        before = http.get(f"{server.url}/items/5").json()
        again = http.get(f"{server.url}/items/5").json()  # no write yet: fresh
        http.post(f"{server.url}/items/5/refund", json={})
        after = http.get(f"{server.url}/items/5").json()
    assert before["version"] == again["version"] == 0
    assert after["version"] == 0  # stale: the upstream is at version 1
    assert state.versions["5"] == 1
    assert state.hits["GET /items/5"] == 2  # the stale read never reached the upstream


def test_epsilon_perturbs_json_equivalently_and_deterministically(make_proxy, upstream, tmp_path):
    _, server = upstream
    rules = """
        - name: never
          match: {path: /nowhere}
          fault: {type: reset}
    """
    originals = [{"id": str(i), "status": "open", "version": 0, "amount": 1250} for i in range(12)]
    texts = []
    for attempt in range(2):
        proxy = make_proxy(scenario(rules, params="{epsilon: 0.5}"), trace_dir=tmp_path / f"flows{attempt}")
        with client(proxy) as http:
            responses = [http.get(f"{server.url}/items/{i}") for i in range(12)]
        assert [r.json() for r in responses] == originals  # equivalent: the same values
        texts.append([r.text for r in responses])
        proxy.end_episode("ep")
        perturbed = [bool(e["perturbation"]) for e in read_trace(trace_path(tmp_path / f"flows{attempt}", "ep"))]
        changed = [text != json.dumps(original) for text, original in zip(texts[-1], originals)]
        assert changed == perturbed and 0 < sum(perturbed) < 12
    assert texts[0] == texts[1]  # the same draws in a rerun
