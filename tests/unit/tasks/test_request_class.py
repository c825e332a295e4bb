"""What a request is (formats.request_kinds, tasks.request_class): model call, HTTP read or write,
MCP plumbing, MCP tool call read / write / unclassified, irreversible — from the protocol and
what a tasks file declares, never guessed. A booking API and a ledger MCP server, not the demo shop."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultproxy.formats.request_kinds import Access, Kind, mcp_server
from faultproxy.tasks.tasks_file import TaskError, load_policy, load_tasks
from faultproxy.tasks.task_model import Task
from faultproxy.tasks.request_class import Declared, classify, suggested_line

HOST = "bookings.test"
SERVER = "bookings.test/rpc"  # formats.request_kinds.mcp_server of the calls to /rpc
SESSION = {"mcp-session-id": "c0ffee"}


def call(tool: str, **arguments: object) -> dict:
    return {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


def of(method: str, path: str, body: object = None, headers: dict | None = None, declared: Declared = Declared(),
       hints: dict | None = None, server: str = SERVER):
    return classify(method, HOST, path, headers or {}, lambda: body, declared, hints, server)


def declared(tmp_path: Path, lines: str) -> Declared:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n  - id: t\n    prompt: go\n" + lines)
    return Declared.of(load_tasks(tasks).by_id("t"))


def test_http_reads_and_writes_come_from_the_method() -> None:
    for method in ("GET", "HEAD", "OPTIONS"):
        assert of(method, "/bookings/BK1001").kinds == {Kind.READ}
    for method in ("POST", "PUT", "PATCH", "DELETE"):
        cls = of(method, "/bookings/BK1001/cancel", {"reason": "ill"})
        assert cls.kinds == {Kind.WRITE} and cls.is_tool_call and not cls.irreversible


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/gw/openai/v1/responses", "/v1/messages",
                                  "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"])
def test_model_calls_are_model_calls_only(path: str) -> None:
    cls = of("POST", path, call("not_read"))  # the body is never consulted for a model path
    assert cls.kinds == {Kind.MODEL} and not cls.is_tool_call


@pytest.mark.parametrize("method, body, headers", [
    ("POST", {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {}}, {}),
    ("POST", {"jsonrpc": "2.0", "method": "notifications/initialized"}, SESSION),
    ("POST", {"jsonrpc": "2.0", "id": 1, "method": "ping"}, SESSION),
    ("POST", {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}, SESSION),
    ("POST", {"jsonrpc": "2.0", "id": 3, "method": "resources/list"}, SESSION),
    ("POST", {"jsonrpc": "2.0", "id": 7, "result": {"action": "accept"}}, SESSION),  # the client's answer
    ("GET", None, SESSION),  # the standalone event stream
    ("DELETE", None, SESSION),  # the end of the session
])
def test_mcp_session_plumbing_is_no_tool_call(method: str, body: object, headers: dict) -> None:
    cls = of(method, "/rpc", body, headers)
    assert cls.plumbing and cls.kinds == set() and not cls.is_tool_call and cls.access is None


def test_an_unannotated_mcp_tool_is_unclassified_not_a_write() -> None:
    cls = of("POST", "/rpc", call("lookup_account", account="A7"), SESSION, hints={(SERVER, "lookup_account"): {}})
    assert cls.tool == "lookup_account" and cls.access is Access.UNCLASSIFIED
    assert cls.kinds == {Kind.MCP_TOOL} and cls.is_tool_call and not cls.is_write
    assert suggested_line(["lookup_account", "find_flight", "lookup_account"]) == \
        'read_only: ["mcp:find_flight", "mcp:lookup_account"]'


@pytest.mark.parametrize("annotations, access, irreversible", [
    ({"readOnlyHint": True}, Access.READ, False),
    ({"readOnlyHint": False}, Access.WRITE, False),
    ({"destructiveHint": True}, Access.WRITE, True),
    ({"idempotentHint": True, "openWorldHint": False}, Access.UNCLASSIFIED, False),
])
def test_annotations_say_what_a_tool_does(annotations: dict, access: Access, irreversible: bool) -> None:
    cls = of("POST", "/rpc", call("ledger_op"), hints={(SERVER, "ledger_op"): annotations})
    assert (cls.access, cls.irreversible) == (access, irreversible)


def test_a_tool_takes_its_own_servers_annotations_never_a_namesakes() -> None:
    cache, files = mcp_server("http://127.0.0.1:8001/mcp?x=1"), mcp_server("http://127.0.0.1:8002/mcp")
    hints = {(cache, "delete"): {"readOnlyHint": True}, (files, "delete"): {"destructiveHint": True}}
    assert (cache, files) == ("127.0.0.1:8001/mcp", "127.0.0.1:8002/mcp")
    assert of("POST", "/mcp", call("delete"), hints=hints, server=cache).kinds == {Kind.MCP_TOOL, Kind.READ}
    assert of("POST", "/mcp", call("delete"), hints=hints, server=files).irreversible
    # a server whose tools/list was never seen: unclassified, whatever another server said
    assert of("POST", "/mcp", call("delete"), hints=hints, server="127.0.0.1:8003/mcp").access is Access.UNCLASSIFIED


def test_declared_patterns_win_over_annotations_and_methods(tmp_path: Path) -> None:
    names = declared(tmp_path, '    read_only: ["mcp:lookup_*", "POST */search"]\n'
                               '    irreversible: ["mcp:issue_credit", "POST */bookings/*/cancel"]\n'
                               '    expected: {effects: [{mcp: note_booking}]}\n')
    lookup = of("POST", "/rpc", call("lookup_account"), declared=names, hints={(SERVER, "lookup_account"): {"readOnlyHint": False}})
    assert lookup.kinds == {Kind.MCP_TOOL, Kind.READ}
    assert of("POST", "/api/search", {"q": "BK"}, declared=names).kinds == {Kind.READ}
    credit = of("POST", "/rpc", call("issue_credit", cents=500), declared=names)
    assert credit.kinds == {Kind.MCP_TOOL, Kind.WRITE, Kind.IRREVERSIBLE}
    assert of("POST", "/api/bookings/BK1001/cancel", {}, declared=names).kinds == {Kind.WRITE, Kind.IRREVERSIBLE}
    assert of("POST", "/rpc", call("note_booking"), declared=names).kinds == {Kind.MCP_TOOL, Kind.WRITE}
    # "POST */search" is an HTTP pattern: it does not name an MCP tool call sent to /search
    assert of("POST", "/search", call("rank"), declared=names).access is Access.UNCLASSIFIED


def test_read_only_is_read_from_tasks_and_policy_files_with_a_clear_error(tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text('read_only: ["mcp:lookup_*"]\n')
    [live] = load_policy(policy)
    assert [str(p) for p in live.read_only] == ["mcp:lookup_*"]
    assert Task.from_json(live.to_json()) == live
    assert "read_only" not in Task("plain", "p").to_json()  # the digests of older tasks files stay as they were
    bad = tmp_path / "tasks.yaml"
    bad.write_text("tasks:\n  - id: t\n    prompt: go\n    read_only: [lookup_account]\n")
    with pytest.raises(TaskError) as error:
        load_tasks(bad)
    assert str(error.value).startswith(f"{bad}:4: tasks[0].read_only[0]: bad endpoint pattern 'lookup_account'")
