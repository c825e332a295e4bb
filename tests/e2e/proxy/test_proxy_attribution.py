"""Determinism, episode attribution, reverse mode, forcing a rule, redaction, fault log events."""

from __future__ import annotations

import asyncio
import json
import urllib.request
from concurrent.futures import ThreadPoolExecutor

import aiohttp
import httpx
import openai
import requests
import structlog

from faultproxy.formats.trace import read_trace, trace_path
from tests.support.fixtures import scenario

COIN_FLIPS = scenario("""
    - name: coin
      match: {path: "/items/*"}
      fault: {type: server_error, status: 503}
      when: {probability: lambda}
""", params="{lambda: 0.5}")


def decisions(proxy, tmp_path, episode: str) -> list[tuple[int, bool, float | None]]:
    proxy.end_episode(episode)
    return [
        (e["seq"], e["fault"] is not None, e["fault"] and e["fault"]["decision"])
        for e in read_trace(trace_path(tmp_path / "flows", episode))
    ]


def run_episode(proxy, url: str, episode: str, requests: int = 12) -> list[int]:
    with httpx.Client(proxy=proxy.proxy_url(episode)) as client:
        return [client.get(f"{url}/items/{i}").status_code for i in range(requests)]


def test_same_seed_and_episode_give_the_same_faults(make_proxy, upstream, tmp_path):
    _, server = upstream
    runs = []
    for attempt in range(2):
        proxy = make_proxy(COIN_FLIPS, trace_dir=tmp_path / f"flows{attempt}")
        runs.append(run_episode(proxy, server.url, "ep-a") + run_episode(proxy, server.url, "ep-b"))
    assert runs[0] == runs[1]
    assert 503 in runs[0] and 200 in runs[0]  # the coin really is a coin
    assert runs[0][:12] != runs[0][12:]  # and episodes draw independently


def test_a_different_seed_gives_different_faults(make_proxy, upstream):
    _, server = upstream
    first = run_episode(make_proxy(COIN_FLIPS), server.url, "ep", 24)
    second = run_episode(make_proxy(COIN_FLIPS.replace("seed: 7", "seed: 8")), server.url, "ep", 24)
    assert first != second


def test_concurrent_episodes_get_the_same_decisions_as_serial(make_proxy, upstream, tmp_path):
    _, server = upstream
    episodes = [f"ep-{i}" for i in range(8)]
    serial_proxy = make_proxy(COIN_FLIPS, trace_dir=tmp_path / "serial")
    serial = {e: run_episode(serial_proxy, server.url, e) for e in episodes}
    concurrent_proxy = make_proxy(COIN_FLIPS, trace_dir=tmp_path / "concurrent")
    with ThreadPoolExecutor(8) as pool:
        concurrent = dict(zip(episodes, pool.map(lambda e: run_episode(concurrent_proxy, server.url, e), episodes)))
    assert concurrent == serial
    for e in episodes:
        serial_proxy.end_episode(e)
        concurrent_proxy.end_episode(e)
        serial_trace = [x["fault"] for x in read_trace(trace_path(tmp_path / "serial", e))]
        concurrent_trace = [x["fault"] for x in read_trace(trace_path(tmp_path / "concurrent", e))]
        assert serial_trace == concurrent_trace


def test_https_connect_tunnel_keeps_the_episode(make_proxy, https_upstream, tmp_path):
    _, server = https_upstream
    proxy = make_proxy(scenario("""
        - name: every-second
          match: {path: "/items/*"}
          fault: {type: server_error}
          when: {every: 2}
    """))
    with httpx.Client(proxy=proxy.proxy_url("tls-1"), verify=str(proxy.ca_bundle)) as one, \
         httpx.Client(proxy=proxy.proxy_url("tls-2"), verify=str(proxy.ca_bundle)) as two:
        statuses = [one.get(f"{server.url}/items/1").status_code, two.get(f"{server.url}/items/1").status_code,
                    one.get(f"{server.url}/items/1").status_code, two.get(f"{server.url}/items/1").status_code]
    assert statuses == [200, 200, 500, 500]  # counters are per episode, not per proxy
    assert [seq for seq, *_ in decisions(proxy, tmp_path, "tls-1")] == [1, 2]


def test_reverse_mode_base_url_with_the_openai_sdk(make_proxy, upstream, tmp_path):
    state, server = upstream
    proxy = make_proxy(COIN_FLIPS, upstreams={"model": server.url + "/v1"})
    client = openai.OpenAI(base_url=proxy.reverse_url("rev-1", "model"), api_key="sk-test-fake")
    completion = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])
    assert completion.choices[0].message.content == "Hello from the scripted model."
    assert state.hits["POST /v1/chat/completions"] == 1
    proxy.end_episode("rev-1")
    [exchange] = read_trace(trace_path(tmp_path / "flows", "rev-1"))
    assert exchange["request"]["url"] == f"{server.url}/v1/chat/completions"
    assert exchange["tokens"] == 16


def test_a_reverse_mode_base_url_works_through_the_forward_proxy_too(make_proxy, upstream, tmp_path):
    """Clients that honour HTTP_PROXY send a base-URL request to the forward port: it is routed as
    reverse mode, not refused as a connection to the proxy itself."""
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: refunds_reset
          match: {path: "*/refund"}
          fault: {type: reset}
    """), upstreams={"api": server.url})
    url = proxy.reverse_url("via-forward", "api") + "/items/1"
    forward = proxy.proxy_url("via-forward")

    async def with_aiohttp() -> int:
        async with aiohttp.ClientSession() as session, session.get(url, proxy=forward) as response:
            return response.status

    statuses = [
        httpx.get(url, proxy=forward).status_code,
        requests.get(url, proxies={"http": forward}, timeout=10).status_code,
        urllib.request.build_opener(urllib.request.ProxyHandler({"http": forward})).open(url, timeout=10).status,
        asyncio.run(with_aiohttp()),
    ]
    assert statuses == [200] * 4
    assert state.hits["GET /items/1"] == 4
    proxy.end_episode("via-forward")
    urls = [line["request"]["url"] for line in read_trace(trace_path(tmp_path / "flows", "via-forward"))]
    assert urls == [f"{server.url}/items/1"] * 4  # one exchange each, recorded as the upstream's URL


def test_reverse_mode_unknown_upstream_is_a_clear_404(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(COIN_FLIPS, upstreams={"model": server.url})
    response = httpx.get(proxy.reverse_url("ep", "nope") + "/x")
    assert response.status_code == 404
    assert "upstreams: model" in response.text


def test_force_header_applies_a_rule_exactly(make_proxy, upstream, tmp_path):
    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: never
          match: {path: "/nowhere"}
          fault: {type: rate_limit}
          when: {probability: 0}
    """))
    with httpx.Client(proxy=proxy.proxy_url("ep")) as client:
        forced = client.get(f"{server.url}/items/1", headers={"x-faultproxy-force": "never"})
        plain = client.get(f"{server.url}/items/1")
        unknown = client.get(f"{server.url}/items/1", headers={"x-faultproxy-force": "nope"})
    assert (forced.status_code, plain.status_code, unknown.status_code) == (429, 200, 400)
    assert "no rule named 'nope'" in unknown.text
    assert state.hits["GET /items/1"] == 1


def test_secrets_never_reach_the_trace(make_proxy, upstream, tmp_path, monkeypatch):
    _, server = upstream
    secret = "shop-secret-value-1234"
    monkeypatch.setenv("SHOP_TOKEN", secret)
    proxy = make_proxy(COIN_FLIPS, secret_env=["SHOP_TOKEN"])
    with httpx.Client(proxy=proxy.proxy_url("ep")) as client:
        client.post(
            f"{server.url}/items/1/refund?api_key=sk-live-abcdefghijklmnopqrstu&note={secret}",
            headers={"Authorization": "Bearer sk-abcdefghijklmnopqrstuvwx", "x-api-key": "k-123456",
                     "Cookie": "session=abc", "X-Note": f"token {secret}"},
            json={"password": "hunter22", "note": f"use {secret}", "amount": 5},
        )
    proxy.end_episode("ep")
    text = trace_path(tmp_path / "flows", "ep").read_text()
    for leaked in (secret, "sk-live-abcdefghijklmnopqrstu", "sk-abcdefghijklmnopqrstuvwx", "k-123456",
                   "session=abc", "hunter22"):
        assert leaked not in text
    [exchange] = read_trace(trace_path(tmp_path / "flows", "ep"))
    assert json.loads(exchange["request"]["body"])["amount"] == 5  # redaction keeps the rest intact


def test_one_structured_event_per_injected_fault(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: limit
          match: {path: "/items/*"}
          fault: {type: rate_limit}
          when: {calls: [2, 3]}
    """))
    with structlog.testing.capture_logs() as logs:
        run_episode(proxy, server.url, "ep", 4)
        proxy.end_episode("ep")
    faults = [entry for entry in logs if entry["event"] == "fault"]
    assert [(f["rule"], f["seq"], f["delivered"]) for f in faults] == [("limit", 2, True), ("limit", 3, True)]


def test_reverse_mode_sets_the_upstream_url_exactly_as_mitmproxy_parses_it():
    """The upstream's base URL is parsed once, not per request: every path a client may send
    reaches the same scheme, host, port, path and Host header as setting the whole URL would."""
    from mitmproxy.proxy.mode_specs import ProxyMode
    from mitmproxy.test import taddons, tflow

    from faultproxy.proxy.attribution import Attribution

    bases = ["http://127.0.0.1:8080", "https://API.Example.com/v1/", "http://h:81/a;b", "http://h/x?key=1",
             "http://xn--bcher-kva.example/v1"]
    tails = ["", "/", "/items/1", "items/1?q=1&r=%20x", "?q=1", "/a//b", "/a?", "/a?b?", "/a;p=1", "/a#f", "/ä",
             "/a b", "/~[x]|{y}^`\\"]
    attribution = Attribution()
    with taddons.context(attribution) as context:
        context.configure(attribution, faultproxy_upstreams=[f"u{i}={base}" for i, base in enumerate(bases)])
        for i, base in enumerate(bases):
            for tail in tails:
                flow = tflow.tflow()
                flow.client_conn.proxy_mode = ProxyMode.parse("reverse:http://127.0.0.1:9")
                flow.request.headers["host"] = "127.0.0.1:9"
                flow.request.path = f"/ep/u{i}" + ("" if tail.startswith("?") or not tail else "/") + tail.lstrip("/")
                expected = tflow.tflow().request
                expected.headers["host"] = "127.0.0.1:9"
                try:
                    expected.url = base.rstrip("/") + ("/" + tail.lstrip("/") if not tail.startswith("?") else tail)
                except ValueError:
                    expected = None  # mitmproxy refuses the URL: so must the fast path (an error in the hook)
                try:
                    attribution.requestheaders(flow)
                except ValueError:
                    assert expected is None, (base, tail)
                    continue
                assert expected is not None, (base, tail)
                got = flow.request
                assert (got.scheme, got.host, got.port, got.path, got.headers["host"]) == (
                    expected.scheme, expected.host, expected.port, expected.path, expected.headers["host"]), (base, tail)
