"""The bundled scenarios' provider-shaped errors, as each API's own SDK meets them: the OpenAI
Responses API through the openai SDK, Gemini through google-genai (Chat Completions and Messages:
tests/e2e/proxy/test_faults_errors.py). The test upstream has no Gemini route: a call the scenario lets
through comes back 404 from it. Last, the bundled drift of model answers, on both APIs' JSON."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from faultproxy.proxy.server import ProxyServer
from tests.support import model_upstream
from tests.support.fixtures import scenario
from tests.support.upstream import ServerThread

@pytest.fixture
def bundled(tmp_path) -> Iterator:
    started: list[ProxyServer] = []

    def start(name: str, **params: float) -> ProxyServer:
        proxy = ProxyServer(name, params=params, trace_dir=tmp_path / "flows").start()
        started.append(proxy)
        return proxy

    yield start
    for proxy in started:
        proxy.stop()


def gemini_client(proxy: ProxyServer, url: str, episode: str) -> genai.Client:
    options = genai_types.HttpOptions(base_url=url, client_args={"proxy": proxy.proxy_url(episode)})
    return genai.Client(api_key="gemini-test-key", http_options=options)


def responses_client(proxy: ProxyServer, url: str, episode: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key="sk-test-fake", max_retries=0,
                         http_client=openai.DefaultHttpxClient(proxy=proxy.proxy_url(episode)))


def test_rate_limit_answers_the_responses_api_as_openai_does(bundled, upstream):
    proxy = bundled("rate_limit", **{"lambda": 1.0})
    with pytest.raises(openai.RateLimitError) as raised:
        responses_client(proxy, upstream[1].url, "ep-responses").responses.create(model="gpt-x", input="hi")
    assert raised.value.body["code"] == "rate_limit_exceeded"
    headers = raised.value.response.headers
    assert (headers["retry-after"], headers["retry-after-ms"], headers["x-ratelimit-remaining-requests"]) == ("1", "1000", "0")


@pytest.mark.parametrize("streamed", [False, True])
def test_rate_limit_answers_gemini_as_google_does(bundled, upstream, streamed: bool):
    proxy = bundled("rate_limit", **{"lambda": 1.0})
    client = gemini_client(proxy, upstream[1].url, "ep-gemini")
    models = client.models
    with pytest.raises(genai_errors.ClientError) as raised:
        if streamed:
            list(models.generate_content_stream(model="gemini-x", contents="hi"))
        else:
            models.generate_content(model="gemini-x", contents="hi")
    error = raised.value
    assert (error.code, error.status) == (429, "RESOURCE_EXHAUSTED")
    assert error.details["error"]["details"] == [
        {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "1s"}]
    assert "retry-after" not in error.response.headers and "x-ratelimit-remaining-requests" not in error.response.headers
    assert proxy.end_episode("ep-gemini").faults == 1


def forwarded(models, contents: str) -> None:
    """The call reached the test upstream, which knows no Gemini route."""
    with pytest.raises(genai_errors.ClientError) as raised:
        models.generate_content(model="gemini-x", contents=contents)
    assert raised.value.code == 404


def test_server_error_and_auth_failure_answer_gemini_in_its_shape(bundled, upstream):
    proxy = bundled("server_error", **{"lambda": 1.0})  # model_503 fires on every second model call
    client = gemini_client(proxy, upstream[1].url, "ep-5xx")
    models = client.models
    forwarded(models, "first")
    with pytest.raises(genai_errors.ServerError) as raised:
        models.generate_content(model="gemini-x", contents="second")
    assert (raised.value.code, raised.value.status) == (503, "UNAVAILABLE")
    assert raised.value.message == "The model is overloaded. Please try again later."

    proxy = bundled("auth_failure", **{"lambda": 1.0})  # model_401 fires on the third model call
    client = gemini_client(proxy, upstream[1].url, "ep-401")
    models = client.models
    forwarded(models, "first")
    forwarded(models, "second")
    with pytest.raises(genai_errors.ClientError) as raised:
        models.generate_content(model="gemini-x", contents="third")
    assert (raised.value.code, raised.value.status) == (401, "UNAUTHENTICATED")


def test_provider_overrides_detection(make_proxy, upstream):
    proxy = make_proxy(scenario("""
        - name: openai-shaped
          match: {api: gemini}
          fault: {type: rate_limit, provider: openai}
    """))
    client = gemini_client(proxy, upstream[1].url, "ep")
    with pytest.raises(genai_errors.ClientError) as raised:
        client.models.generate_content(model="gemini-x", contents="hi")
    assert raised.value.details["error"]["code"] == "rate_limit_exceeded"  # OpenAI's body, as told


def test_schema_drift_drops_usage_from_responses_and_gemini_answers(bundled):
    proxy = bundled("schema_drift", **{"lambda": 1.0})
    with ServerThread(model_upstream.app()) as server:
        response = responses_client(proxy, server.url, "ep-drift").responses.create(model="m", input="refund 1001")
        client = gemini_client(proxy, server.url + "/", "ep-drift")
        answer = client.models.generate_content(model="m", contents="refund 1001",
                                                config=genai_types.GenerateContentConfig(
                                                    http_options=genai_types.HttpOptions(api_version="v1beta")))
    assert response.usage is None and response.output_text == model_upstream.TEXT  # gzip re-encoded, still parses
    assert answer.usage_metadata is None and answer.text == model_upstream.TEXT
    assert proxy.end_episode("ep-drift").faults == 2
