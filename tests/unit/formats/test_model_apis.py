"""Which model API a request talks to: by path for local and proxied endpoints, by host or
header where the path alone could be another API."""

import pytest

from faultproxy.formats.model_apis import (LiveApi, LiveFunctionCall, ModelApi, api_of_path, detect_api, is_streamed,
                                           live_api_of_session, live_function_calls, live_function_outputs,
                                           live_server_start, live_turn_edge, provider_of, request_model)


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


def test_live_session_shapes_of_both_apis():
    """The events the evaluator reads in a live session, as each API sends them."""
    gemini, openai = LiveApi.GEMINI_LIVE, LiveApi.OPENAI_REALTIME
    assert live_api_of_session("/ws/google.ai.generativelanguage.v1beta.GenerativeService.BidiGenerateContent?key=k") \
        is gemini
    assert live_api_of_session("/v1/realtime?model=gpt-realtime") is openai
    assert live_api_of_session("/events") is None  # a tool server's push channel is no model session
    assert live_function_calls(gemini, {"toolCall": {"functionCalls": [
        {"id": "f1", "name": "refund_order", "args": {"order_id": "1001"}}]}}) == \
        [LiveFunctionCall("f1", "refund_order", '{"order_id":"1001"}')]
    assert live_function_outputs(gemini, {"toolResponse": {"functionResponses": [
        {"id": "f1", "name": "refund_order", "response": {"ok": True}}]}}) == [("f1", {"ok": True})]
    assert live_turn_edge(gemini, {"clientContent": {"turns": [], "turnComplete": True}}, "client")
    assert live_turn_edge(gemini, {"toolCall": {}}, "server")
    assert live_turn_edge(gemini, {"serverContent": {"turnComplete": True}}, "server")
    assert not live_turn_edge(gemini, {"serverContent": {"modelTurn": {}}}, "server")
    item = {"type": "function_call", "call_id": "c1", "name": "get_order", "arguments": "{}"}
    assert live_function_calls(openai, {"type": "response.output_item.done", "item": item}) == \
        live_function_calls(openai, {**item, "type": "response.function_call_arguments.done"}) == \
        [LiveFunctionCall("c1", "get_order", "{}")]
    assert live_function_outputs(openai, {"type": "conversation.item.create", "item": {
        "type": "function_call_output", "call_id": "c1", "output": "{}"}}) == [("c1", "{}")]
    assert live_turn_edge(openai, {"type": "response.create"}, "client")
    assert not live_turn_edge(openai, {"type": "response.create"}, "server")
    # a server with voice activity detection starts a turn itself
    assert live_server_start(openai, {"type": "response.created"}) and not live_server_start(openai, {"type": "response.done"})
    assert live_server_start(gemini, {"server_content": {}}) and live_server_start(gemini, {"toolCall": {}})
    assert not live_server_start(gemini, {"setupComplete": {}})
