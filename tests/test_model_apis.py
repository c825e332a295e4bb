"""Which model API a request talks to: by path for local and proxied endpoints, by host or
header where the path alone could be another API."""

import pytest

from faultproxy.formats.model_apis import ModelApi, api_of_path, detect_api, is_streamed, provider_of, request_model


@pytest.mark.parametrize(("path", "api"), [
    ("/v1/chat/completions", ModelApi.OPENAI_CHAT),
    ("/openai/deployments/gpt/chat/completions?api-version=2024", ModelApi.OPENAI_CHAT),
    ("/v1/responses", ModelApi.OPENAI_RESPONSES),
    ("/v1/messages", ModelApi.ANTHROPIC_MESSAGES),
    ("/v1beta/models/gemini-2.5-flash:generateContent", ModelApi.GEMINI),
    ("/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse", ModelApi.GEMINI),
    ("/v1/projects/p/locations/l/publishers/google/models/gemini-2.5-pro:generateContent", ModelApi.GEMINI),
    ("/orders/1001/refund", None),
    ("/v1beta/models", None),
])
def test_the_path_names_the_api(path: str, api: ModelApi | None) -> None:
    assert api_of_path(path) == api


def test_the_host_or_header_decides_a_path_without_its_version_prefix() -> None:
    assert detect_api("api.anthropic.com", "/messages") is ModelApi.ANTHROPIC_MESSAGES
    assert detect_api("127.0.0.1", "/messages", {"Anthropic-Version": "2023-06-01"}) is ModelApi.ANTHROPIC_MESSAGES
    assert detect_api("127.0.0.1", "/messages") is None


def test_providers_of_model_calls_and_of_other_endpoints() -> None:
    assert provider_of("127.0.0.1", "/v1/responses") == "openai"
    assert provider_of("127.0.0.1", "/v1beta/models/g:generateContent") == "gemini"
    assert provider_of("generativelanguage.googleapis.com", "/v1beta/files") == "gemini"
    assert provider_of("127.0.0.1", "/x", {"x-goog-api-key": "k"}) == "gemini"
    assert provider_of("api.anthropic.com", "/v1/models") == "anthropic"
    assert provider_of("127.0.0.1", "/orders") == "generic"


def test_streaming_and_model_are_read_where_each_api_keeps_them() -> None:
    gemini = "/v1beta/models/gemini-2.5-flash:streamGenerateContent"
    assert is_streamed(ModelApi.GEMINI, gemini, {}) is True
    assert is_streamed(ModelApi.OPENAI_RESPONSES, "/v1/responses", {"stream": True}) is True
    assert is_streamed(ModelApi.OPENAI_CHAT, "/v1/chat/completions", {}) is False
    assert request_model(ModelApi.GEMINI, gemini, {}) == "gemini-2.5-flash"
    assert request_model(ModelApi.OPENAI_CHAT, "/v1/chat/completions", {"model": "gpt-x"}) == "gpt-x"
