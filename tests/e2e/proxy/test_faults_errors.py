"""Error-answer faults as real clients see them: rate limits, server and auth errors, JSON-RPC."""

from __future__ import annotations

import time

import anthropic
import httpx
import openai
import pytest
import requests

from tests.support.fixtures import scenario

RATE_LIMIT_CHAT = scenario("""
    - name: limit-chat
      match: {path: "*/chat/completions", method: POST}
      fault: {type: rate_limit, retry_after: 0.2, provider: openai}
""")


def openai_client(proxy, upstream_url: str, episode: str, **kwargs) -> openai.OpenAI:
    http_client = openai.DefaultHttpxClient(proxy=proxy.proxy_url(episode), verify=str(proxy.ca_bundle))
    return openai.OpenAI(base_url=upstream_url + "/v1", api_key="sk-test-fake", http_client=http_client, **kwargs)


def test_openai_sdk_honours_retry_after_then_raises(make_proxy, upstream):
    state, server = upstream
    proxy = make_proxy(RATE_LIMIT_CHAT)
    client = openai_client(proxy, server.url, "ep-openai", max_retries=2)
    started = time.monotonic()
    with pytest.raises(openai.RateLimitError) as raised:
        client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "hi"}])
    elapsed = time.monotonic() - started
    assert raised.value.body["code"] == "rate_limit_exceeded"
    assert raised.value.response.headers["retry-after-ms"] == "200"
    assert elapsed >= 2 * 0.2  # two retries, each after the 200 ms the proxy asked for
    assert state.hits["POST /v1/chat/completions"] == 0  # nothing reached the model
    assert proxy.end_episode("ep-openai").faults == 3


def test_anthropic_sdk_sees_overloaded_error_with_provider_shape(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: overloaded
          match: {path: "/v1/messages"}
          fault: {type: server_error, status: 529}
    """))
    client = anthropic.Anthropic(
        base_url=server.url, api_key="sk-ant-test-fake", max_retries=0,
        http_client=anthropic.DefaultHttpxClient(proxy=proxy.proxy_url("ep-anthropic")),
    )
    with pytest.raises(anthropic.APIStatusError) as raised:
        client.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    assert raised.value.status_code == 529
    assert raised.value.body["error"]["type"] == "overloaded_error"


def test_anthropic_rate_limit_headers(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(scenario("""
        - name: limit
          match: {path: "/v1/messages"}
          fault: {type: rate_limit, retry_after: 1}
    """))
    client = anthropic.Anthropic(base_url=server.url, api_key="k", max_retries=0,
                                 http_client=anthropic.DefaultHttpxClient(proxy=proxy.proxy_url("ep")))
    with pytest.raises(anthropic.RateLimitError) as raised:
        client.messages.create(model="claude-x", max_tokens=10, messages=[{"role": "user", "content": "hi"}])
    headers = raised.value.response.headers
    assert headers["retry-after"] == "1"
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert raised.value.body["error"]["type"] == "rate_limit_error"


@pytest.mark.parametrize("status", [401, 403])
def test_auth_failure_with_requests(make_proxy, upstream, status):
    _, server = upstream
    proxy = make_proxy(scenario(f"""
        - name: auth
          match: {{path: "/items/*"}}
          fault: {{type: auth_failure, status: {status}, provider: generic}}
    """))
    response = requests.get(f"{server.url}/items/1", proxies={"http": proxy.proxy_url("ep")}, timeout=10)
    assert response.status_code == status
    assert response.json()["status"] == status


def test_server_error_forward_https_through_mitm_ca(make_proxy, https_upstream):
    state, server = https_upstream
    proxy = make_proxy(scenario("""
        - name: flaky
          match: {host: "127.0.0.1", path: "/items/*"}
          fault: {type: server_error, status: 503}
          when: {calls: [1]}
    """))
    with httpx.Client(proxy=proxy.proxy_url("ep-tls"), verify=str(proxy.ca_bundle)) as client:
        first = client.get(f"{server.url}/items/9")
        second = client.get(f"{server.url}/items/9")
    assert (first.status_code, second.status_code) == (503, 200)
    assert second.json()["id"] == "9"
    assert state.hits["GET /items/9"] == 1


async def test_jsonrpc_error_and_tool_error_with_aiohttp(make_proxy, upstream):
    import aiohttp

    state, server = upstream
    proxy = make_proxy(scenario("""
        - name: refund-tool-fails
          match: {path: /mcp, body: {method: tools/call, params.name: refund_order}}
          fault: {type: jsonrpc_error, mode: tool_error, message: "refund service unavailable"}
        - name: rpc-error
          match: {path: /mcp, body: {params.name: lookup}}
          fault: {type: jsonrpc_error, code: -32000}
    """))
    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "refund_order", "arguments": {}}}
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{server.url}/mcp", json=call, proxy=proxy.proxy_url("ep")) as response:
            refund = await response.json()
        lookup = {**call, "id": 6, "params": {"name": "lookup"}}
        async with session.post(f"{server.url}/mcp", json=lookup, proxy=proxy.proxy_url("ep")) as response:
            rpc = await response.json()
        other = {**call, "id": 7, "params": {"name": "list_orders"}}
        async with session.post(f"{server.url}/mcp", json=other, proxy=proxy.proxy_url("ep")) as response:
            passed = await response.json()
    assert refund == {"jsonrpc": "2.0", "id": 5, "result": {
        "content": [{"type": "text", "text": "refund service unavailable"}], "isError": True}}
    assert rpc["id"] == 6 and rpc["error"]["code"] == -32000
    assert passed["result"]["isError"] is False
    assert state.commits == {"mcp list_orders": 1}
