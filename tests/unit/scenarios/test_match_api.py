"""`match: {api: ..., stream: ...}` selects model calls by the API formats.model_apis detects, so
one rule covers Chat Completions, Responses, Messages and Gemini, on any host or path prefix."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from faultproxy.formats.model_apis import ModelApi
from faultproxy.scenarios.selection import parse_json_body, request_matches
from faultproxy.scenarios import MatchSpec, bundled_names, load_scenario

STREAMED = {"model": "m", "stream": True}
CALLS = {  # (host, path, headers, body) of one JSON and one streamed call of each API
    "openai_chat": [("127.0.0.1", "/v1/chat/completions", {}, {"model": "m"}),
                    ("api.openai.com", "/v1/chat/completions", {}, STREAMED)],
    "openai_responses": [("127.0.0.1", "/proxy/v1/responses", {}, {"model": "m"}),
                         ("api.openai.com", "/v1/responses", {}, STREAMED)],
    "anthropic_messages": [("127.0.0.1", "/v1/messages", {}, {"model": "m"}),
                           ("api.anthropic.com", "/messages", {"anthropic-version": "2023-06-01"}, STREAMED)],
    "gemini": [("127.0.0.1", "/v1beta/models/g:generateContent", {"x-goog-api-key": "k"}, {"contents": []}),
               ("generativelanguage.googleapis.com", "/v1beta/models/g:streamGenerateContent?alt=sse", {},
                {"contents": []})],
}
TOOL_CALL = ("127.0.0.1", "/orders/1001/refund", {}, {"stream": True})


def match_of(tmp_path: Path, match: str) -> MatchSpec:
    text = f"name: t\ndescription: d\nrules:\n  - name: r\n    match: {match}\n    fault: {{type: reset}}\n"
    (tmp_path / "s.yaml").write_text(textwrap.dedent(text))
    return load_scenario(tmp_path / "s.yaml").rules[0].match


def matches(spec: MatchSpec, call: tuple) -> bool:
    host, path, headers, body = call
    return request_matches(spec, "POST", host, 443, path, headers,
                           lambda: parse_json_body(json.dumps(body).encode()))


def test_api_model_selects_every_model_call_and_nothing_else(tmp_path: Path) -> None:
    spec = match_of(tmp_path, "{api: model}")
    assert spec.apis == set(ModelApi)
    assert all(matches(spec, call) for calls in CALLS.values() for call in calls)
    assert not matches(spec, TOOL_CALL)


@pytest.mark.parametrize("api", list(CALLS))
def test_one_api_by_name_selects_its_calls_only(tmp_path: Path, api: str) -> None:
    spec = match_of(tmp_path, f"{{api: {api}}}")
    for name, calls in CALLS.items():
        assert [matches(spec, call) for call in calls] == [name == api] * 2


def test_a_list_of_apis(tmp_path: Path) -> None:
    spec = match_of(tmp_path, "{api: [openai_responses, gemini]}")
    selected = {name for name, calls in CALLS.items() if matches(spec, calls[0])}
    assert selected == {"openai_responses", "gemini"}


def test_stream_is_read_where_each_api_says_it(tmp_path: Path) -> None:
    streamed = match_of(tmp_path, "{api: model, stream: true}")
    plain = match_of(tmp_path, "{api: model, stream: false}")
    for name, (json_call, stream_call) in CALLS.items():
        assert (matches(streamed, json_call), matches(streamed, stream_call)) == (False, True), name
        assert (matches(plain, json_call), matches(plain, stream_call)) == (True, False), name
    assert not matches(streamed, TOOL_CALL)  # a body saying stream: true is no model call


def test_api_combines_with_the_other_predicates(tmp_path: Path) -> None:
    spec = match_of(tmp_path, '{api: model, host: "127.0.0.1", body: {model: m}}')
    assert matches(spec, CALLS["openai_chat"][0]) and matches(spec, CALLS["openai_responses"][0])
    assert not matches(spec, CALLS["openai_chat"][1])  # another host
    assert not matches(spec, CALLS["gemini"][0])  # no model in a Gemini body


def test_a_body_too_deep_to_read_does_not_hide_a_streamed_call(tmp_path: Path) -> None:
    spec = match_of(tmp_path, "{api: openai_chat, stream: true}")
    deep = b'{"stream": true, "x": ' + b"[" * 5000 + b"]" * 5000 + b"}"
    assert request_matches(spec, "POST", "127.0.0.1", 80, "/v1/chat/completions", {},
                           lambda: parse_json_body(deep))


# --- every bundled scenario covers every model API ----------------------------------------------

MODEL_SCENARIOS = {"rate_limit", "timeout", "server_error", "auth_failure", "latency", "schema_drift",
                   "partial_response", "slow_stream", "mixed", "model_faults"}
HOSTS = ("127.0.0.1", "api.openai.com", "api.anthropic.com", "generativelanguage.googleapis.com")


def faults_on(scenario, call: tuple) -> set[str]:
    """The fault types of the scenario's rules that select this call, from its host or a provider's."""
    own_host, path, headers, body = call
    return {rule.fault.type for rule in scenario.rules for host in (own_host, *HOSTS)
            if matches(rule.match, (host, path, headers, body))}


@pytest.mark.parametrize("name", bundled_names())
def test_a_bundled_scenario_faults_every_model_api_alike(name: str) -> None:
    """A scenario that faults one API's calls faults every API's, JSON and streamed, with the
    same fault types: a rule written for Chat Completions alone fails here."""
    scenario = load_scenario(name)
    for mode in (0, 1):  # the JSON call, the streamed call
        seen = {api: faults_on(scenario, calls[mode]) for api, calls in CALLS.items()}
        assert len({frozenset(types) for types in seen.values()}) == 1, (name, "streamed" if mode else "JSON", seen)
    faults_models = any(faults_on(scenario, call) for calls in CALLS.values() for call in calls)
    assert faults_models == (name in MODEL_SCENARIOS)


MCP_TOOL_CALL = {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "get_order", "arguments": {}}}


@pytest.mark.parametrize("name", ["latency", "server_error", "mcp_errors"])
def test_bundled_scenarios_fault_mcp_tool_calls_over_http_and_stdio(name: str) -> None:
    """Where a tool-side fault makes sense for MCP, the scenario's rule reads the JSON-RPC body, so
    it meets a tools/call over Streamable HTTP and over stdio (the shim's exchanges) alike."""
    scenario = load_scenario(name)
    over_http = faults_on(scenario, ("127.0.0.1", "/t/ep/mcp", {}, MCP_TOOL_CALL))
    over_stdio = faults_on(scenario, ("shop.stdio.invalid", "/mcp", {}, MCP_TOOL_CALL))
    assert over_http == over_stdio and over_http - {"rate_limit", "auth_failure"}
