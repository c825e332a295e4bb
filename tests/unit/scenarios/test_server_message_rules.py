"""Which rules may select a message an MCP server sends on an event stream (scenarios.selection):
the proxy lets mitmproxy hand on a stream no rule may select, so a False must never hide a
message a rule would select, and the rules MCP scenarios are made of must give False."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from faultproxy.scenarios import MatchSpec, load_scenario
from faultproxy.scenarios.selection import may_select_server_messages, parse_json_body, request_matches
from faultproxy.tasks.request_class import classify

HOST, PORT, PATH = "tools.internal", 8443, "/gateway/rpc"  # not the demo's /mcp
SERVER_MESSAGES = [  # what servers send on their streams, the spec's and a server's own
    {"jsonrpc": "2.0", "method": "notifications/progress", "params": {"progressToken": 1, "progress": 1}},
    {"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info", "data": "x"}},
    {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"},
    {"jsonrpc": "2.0", "id": 1, "method": "elicitation/create", "params": {"message": "sure?"}},
    {"jsonrpc": "2.0", "id": 2, "method": "sampling/createMessage", "params": {"maxTokens": 5}},
    {"jsonrpc": "2.0", "id": 3, "method": "roots/list"},
    {"jsonrpc": "2.0", "id": 4, "method": "ping"},
    {"jsonrpc": "2.0", "method": "acme/heartbeat", "params": {"n": 1}},
]

CANNOT = [  # what MCP scenarios select tool calls and listings by
    "{body: {method: tools/call, params.name: refund}}",
    "{body: {method: [tools/list, tools/call]}}",
    "{method: POST, path: '*/rpc', body: {method: initialize}}",
    "{kind: mcp_tool}",
    "{kind: [write, irreversible]}",
    "{kind: read}",
    "{kind: model}",
    "{host: other.internal}",
    "{path: /v1/*}",
    "{method: GET}",
    "{headers: {mcp-session-id: '*'}}",
    "{headers: {authorization: '*'}}",
    "{api: openai_chat}",
    "{path: '*/rpc', websocket: {from: server}}",
]
MAY = [
    "{}",
    "{host: tools.internal, method: POST}",
    "{path: '*/rpc'}",
    "{body: {method: elicitation/create}}",
    "{body: {method: 'notifications/*'}}",
    "{body: {method: 're:tools/.*'}}",  # a pattern, not a name: it is not worked out
    "{body: {method: [tools/call, roots/list]}}",
    "{body: {params.message: 'sure?'}}",
    "{headers: {content-type: 'application/*'}}",
]


def match_of(tmp_path: Path, match: str) -> MatchSpec:
    fault = "ws_drop" if "websocket" in match else "reset"
    text = f"name: t\ndescription: d\nrules:\n  - name: r\n    match: {match}\n    fault: {{type: {fault}}}\n"
    (tmp_path / "s.yaml").write_text(textwrap.dedent(text))
    return load_scenario(tmp_path / "s.yaml").rules[0].match


def selects(spec: MatchSpec, message: dict) -> bool:
    """Does the rule select this message as it passes the proxy (a POST to the stream's URL)? A
    rule with `websocket:` selects a session's messages, never a request (proxy.injector)."""
    if spec.websocket is not None:
        return False
    headers = {"content-type": "application/json"}
    body = lambda: parse_json_body(json.dumps(message).encode())  # noqa: E731
    kinds = lambda: classify("POST", HOST, PATH, headers, body).kinds  # noqa: E731
    return request_matches(spec, "POST", HOST, PORT, PATH, headers, body, kinds)


@pytest.mark.parametrize("match", CANNOT)
def test_rules_on_the_clients_requests_cannot_select_a_servers_messages(tmp_path: Path, match: str) -> None:
    spec = match_of(tmp_path, match)
    assert not may_select_server_messages(spec, HOST, PORT, PATH)
    assert not any(selects(spec, message) for message in SERVER_MESSAGES)


@pytest.mark.parametrize("match", MAY)
def test_a_rule_that_may_select_one_says_so(tmp_path: Path, match: str) -> None:
    assert may_select_server_messages(match_of(tmp_path, match), HOST, PORT, PATH)


def test_a_rule_that_selects_a_servers_message_is_never_ruled_out(tmp_path: Path) -> None:
    for match in [*CANNOT, *MAY]:
        spec = match_of(tmp_path, match)
        if any(selects(spec, message) for message in SERVER_MESSAGES):
            assert may_select_server_messages(spec, HOST, PORT, PATH), match


def test_kind_model_may_select_a_servers_message_on_a_model_apis_path(tmp_path: Path) -> None:
    assert may_select_server_messages(match_of(tmp_path, "{kind: model}"), HOST, PORT, "/v1/chat/completions")
