"""A model stream that fails midway ends with its own API's error event (the bundled server_error
scenario's model_stream_error rule), and each official SDK raises, or reports, as it does when
the provider fails mid-stream: openai's APIError (Chat), a `response.failed` event (Responses),
anthropic's APIStatusError `overloaded_error`, google-genai's ServerError 503 UNAVAILABLE."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from faultproxy.formats.trace import read_trace
from faultproxy.proxy.server import ProxyServer
from tests.support import model_upstream
from tests.support.upstream import ServerThread

FORCE = {"x-faultproxy-force": "model_stream_error"}  # the rule, whatever the draw
MESSAGES = [{"role": "user", "content": "refund order 1001"}]


@pytest.fixture(scope="module")
def upstream_url() -> Iterator[str]:
    with ServerThread(model_upstream.app()) as server:
        yield server.url


@pytest.fixture(scope="module")
def flows(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("flows")


@pytest.fixture(scope="module")
def proxy(flows: Path) -> Iterator[ProxyServer]:
    proxy = ProxyServer("server_error", trace_dir=flows).start()
    yield proxy
    proxy.stop()


def client_sse(proxy: ProxyServer, flows: Path, episode: str) -> list[str]:
    """The events the client got, from the episode's trace."""
    proxy.end_episode(episode)
    [line] = read_trace(flows / f"{episode}.jsonl")
    assert line["fault"]["rule"] == "model_stream_error" and line["fault"]["delivered"]
    assert line["fault"]["detail"] == "kept 1 events, then the API's error event"
    return [text for _, text in line["client"]["sse"]]


def test_chat_stream_error_raises_api_error(proxy, flows, upstream_url):
    sdk = openai.OpenAI(base_url=upstream_url + "/v1", api_key="k", max_retries=0,
                        http_client=openai.DefaultHttpxClient(proxy=proxy.proxy_url("ep-chat")))
    got = []
    with pytest.raises(openai.APIError) as raised:
        for chunk in sdk.chat.completions.create(model="m", messages=MESSAGES, stream=True, extra_headers=FORCE):
            got.append(chunk)
    assert len(got) == 1 and raised.value.body["type"] == "server_error"
    assert len(client_sse(proxy, flows, "ep-chat")) == 2


def test_responses_stream_ends_with_response_failed(proxy, upstream_url):
    sdk = openai.OpenAI(base_url=upstream_url + "/v1", api_key="k", max_retries=0,
                        http_client=openai.DefaultHttpxClient(proxy=proxy.proxy_url("ep-responses")))
    events = list(sdk.responses.create(model="m", input="refund order 1001", stream=True, extra_headers=FORCE))
    assert [event.type for event in events] == ["response.created", "response.failed"]
    failed = events[-1]
    assert failed.sequence_number == events[0].sequence_number + 1
    assert (failed.response.status, failed.response.error.code) == ("failed", "server_error")
    assert failed.response.id == events[0].response.id  # the response the stream opened with


def test_anthropic_stream_error_raises_overloaded(proxy, upstream_url):
    sdk = anthropic.Anthropic(base_url=upstream_url, api_key="k", max_retries=0,
                              http_client=anthropic.DefaultHttpxClient(proxy=proxy.proxy_url("ep-anthropic")))
    got = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        for event in sdk.messages.create(model="m", max_tokens=100, messages=MESSAGES, stream=True,
                                         extra_headers=FORCE):
            got.append(event.type)
    assert got == ["message_start"]
    assert raised.value.body["error"]["type"] == "overloaded_error"


def test_gemini_stream_error_raises_server_error(proxy, flows, upstream_url):
    options = genai_types.HttpOptions(base_url=upstream_url, api_version="v1beta", headers=FORCE,
                                      client_args={"proxy": proxy.proxy_url("ep-gemini")})
    client = genai.Client(api_key="k", http_options=options)
    got = []
    with pytest.raises(genai_errors.ServerError) as raised:
        for chunk in client.models.generate_content_stream(model="m", contents="refund order 1001"):
            got.append(chunk.text)
    assert len(got) == 1 and (raised.value.code, raised.value.status) == (503, "UNAVAILABLE")
    first, error = client_sse(proxy, flows, "ep-gemini")
    assert first.endswith("\r\n\r\n") and error.endswith("\r\n\r\n")  # the stream's own line ends
    assert json.loads(error.removeprefix("data: ")) == {"error": {
        "code": 503, "message": "The model is overloaded. Please try again later.", "status": "UNAVAILABLE"}}


def test_end_error_needs_an_event_cut(tmp_path):
    from faultproxy.scenarios import ScenarioError, load_scenario

    path = tmp_path / "s.yaml"
    path.write_text("name: t\ndescription: d\nrules:\n  - name: r\n"
                    "    fault: {type: partial_response, bytes: 10, end: error}\n")
    with pytest.raises(ScenarioError, match="end: error ends an event stream, so it needs events, not bytes"):
        load_scenario(path)
