"""A third-party MCP server whose tools carry no annotations, driven by the official SDK's client
over stdio (behind `faultproxy mcp`) and over Streamable HTTP (behind a gateway that refuses the
SDK's GET stream and DELETE with 405, as many do), the same agent on both.

What must hold (issue 33 §2): an unannotated read (`lookup_account`) is no write — the correct run
passes, and the tool is listed as unclassified with the line to add; the session's plumbing
(initialize, notifications, tools/list, the GET stream, DELETE, their 405s) is no tool call, no
retry and no budget request — both transports count the agent's 3 tool calls."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from starlette.responses import PlainTextResponse

from faultproxy import Episode, run_function
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.checks import check_retry
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.proxy.server import ProxyServer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from faultproxy.tasks.task_model import Task
from tests.support.agents.ledger_mcp_server import make_server
from tests.support.mcp_clients import AGENTS, HttpServer

pytestmark = pytest.mark.timeout(180)

LEDGER_SERVER = AGENTS / "ledger_mcp_server.py"


def gateway(app):
    """An ASGI gateway in front of the MCP app: POSTs pass, the GET stream and DELETE get 405."""
    async def serve(scope, receive, send):
        if scope["type"] == "http" and scope["method"] in ("GET", "DELETE"):
            await PlainTextResponse("method not allowed", status_code=405, headers={"allow": "POST"})(scope, receive,
                                                                                                     send)
            return
        await app(scope, receive, send)
    return serve


@pytest.fixture(scope="module")
def ledger_http(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[HttpServer, Path]]:
    ledger = tmp_path_factory.mktemp("ledger-http") / "ledger"
    with HttpServer(gateway(make_server(ledger).streamable_http_app(host="127.0.0.1"))) as server:
        yield server, ledger


async def credit_once(episode: Episode) -> dict:
    """Look the account up, credit it once, look again: 3 tool calls, on either transport."""
    if episode.env["LEDGER_TRANSPORT"] == "stdio":
        # the episode's variables passed on to the server's command, so `faultproxy mcp` finds its proxy
        server = StdioServerParameters(
            command=sys.executable, args=["-m", "faultproxy", "mcp", "--", sys.executable, str(LEDGER_SERVER),
                                          episode.env["LEDGER_FILE"]],
            env={"FAULTPROXY_EPISODE": episode.key, "HTTP_PROXY": episode.proxy_url})
        transport, http = stdio_client(server), None
    else:
        http = httpx2.AsyncClient(proxy=episode.proxy_url, timeout=httpx2.Timeout(30, read=120))
        transport = streamable_http_client(episode.env["LEDGER_URL"], http_client=http)
    async with transport as (read, write, *_), ClientSession(read, write) as mcp:
        await mcp.initialize()
        await mcp.list_tools()
        before = json.loads((await mcp.call_tool("lookup_account", {"account": "A7"})).content[0].text)
        await mcp.call_tool("issue_credit", {"account": "A7", "amount_minor": 500})
        after = json.loads((await mcp.call_tool("lookup_account", {"account": "A7"})).content[0].text)
    if http is not None:
        await http.aclose()
    return {"answer": f"credited A7: {before['balance_minor']} -> {after['balance_minor']}"}


def ledger_agent(episode: Episode) -> dict:
    return asyncio.run(credit_once(episode))


TASK = """
  - id: credit_{transport}
    prompt: "Credit account A7 with 5.00"
    env: {{LEDGER_TRANSPORT: {transport}, LEDGER_FILE: "{ledger}", LEDGER_URL: "{url}"}}
    expected:
      effects: [{{mcp: issue_credit, count: 1}}]
      output: {{regex: "credited A7: 1200 -> 1700"}}
    irreversible: ["mcp:issue_credit"]
    max_tool_calls: 3
    max_retries: 0
    budgets: {{requests: 3}}
"""


def test_unannotated_tools_and_session_plumbing_over_stdio_and_http(ledger_http: tuple[HttpServer, Path],
                                                                     tmp_path: Path) -> None:
    server, http_ledger = ledger_http
    stdio_ledger = tmp_path / "stdio-ledger"
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:" + TASK.format(transport="stdio", ledger=stdio_ledger, url="")
                     + TASK.format(transport="http", ledger="", url=server.url))
    out = tmp_path / "run"
    result = run_function(ledger_agent, load_tasks(tasks), k=1, scenario="observe", out=out)

    assert stdio_ledger.read_text() == http_ledger.read_text() == "A7\n"  # one credit each, really
    verdicts = {record["task_id"]: record["verdict"] for record in read_run(out).episodes}
    for task_id, verdict in verdicts.items():
        checks = {check["name"]: check for check in verdict["checks"]}
        assert verdict["status"] == "pass", (task_id, verdict["failed"])
        assert verdict["tool_calls"] == 3 and checks["tool_calls"]["detail"] == "3 tool calls (max 3)", task_id
        assert checks["retry"]["detail"] == "no retries", task_id
        assert checks["effects"]["passed"] and checks["claimed_success"]["passed"], task_id
        assert verdict["unclassified_tools"] == ["lookup_account"], task_id
    assert result.per_task == {"credit_stdio": ["pass"], "credit_http": ["pass"]}

    # the HTTP session had its plumbing, refused by the gateway, and none of it counted
    http_lines = [line for record in read_run(out).episodes if record["task_id"] == "credit_http"
                  for line in read_trace(out / record["trace"])]
    refused = sorted(line["request"]["method"] for line in http_lines if (line["upstream"] or {}).get("status") == 405)
    assert "GET" in refused and "DELETE" in refused

    alerts = build_report(out)["run"]["headline"]["alerts"]
    [alert] = [alert for alert in alerts if "lookup_account" in alert]
    assert alert.startswith("2 episode(s) called MCP tools that no annotation and no pattern classifies")
    assert '`read_only: ["mcp:lookup_account"]`' in alert


def lookup_line(seq: int, rpc_id: int, gone_after_s: float | None) -> dict:
    """A tools/call exchange as the proxy traced it over Streamable HTTP (taken from a real run): the
    answer came on the call's event stream 0.043 s in; `gone_after_s`: the SDK closed the stream then."""
    answer = json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": {"content": [{"type": "text", "text": "{}"}],
                                                                     "isError": False}})
    client = {"outcome": "response", "status": 200} if gone_after_s is None else \
        {"outcome": "client_gone", "status": 200, "gone_after_s": gone_after_s}
    return {"v": 2, "seq": seq, "started": 1796176835.7174 + seq, "duration_s": 0.046128,
            "request": {"method": "POST", "url": "http://127.0.0.1:32887/mcp",
                        "headers": [["content-type", "application/json"], ["mcp-session-id", "[REDACTED]"]],
                        "body": json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call",
                                            "params": {"name": "lookup_account", "arguments": {"account": "A7"}}})},
            "upstream": {"status": 200, "headers": [["Content-Type", "text/event-stream"]], "body": None,
                         "sse": [[0.027642, f"event: message\r\ndata: {answer}\r\n\r\n"]]},
            "client": client, "error": None if gone_after_s is None else "Client disconnected.",
            "response_after_s": 0.015217, "fault": None, "tokens": 0, "forwarded": True}


@pytest.mark.parametrize("gone_after_s, retried", [(0.0461, False), (0.0301, True)])
def test_a_call_whose_stream_the_client_closed_after_the_answer_was_delivered(gone_after_s: float,
                                                                             retried: bool) -> None:
    exchanges = parse_trace([lookup_line(1, 3, gone_after_s), lookup_line(2, 5, None)])
    assert exchanges[0].failed is retried  # left 0.0461 s in: after the answer (0.0429 s); 0.0301 s: before it
    verdict = check_retry(Task("lookup", "look A7 up", max_retries=0), {}, exchanges)
    assert verdict.passed is not retried
    assert verdict.detail == ("more than max_retries 0 retries: POST /mcp (from #2)" if retried else "no retries")


def test_the_live_requests_budget_counts_no_plumbing_either(ledger_http: tuple[HttpServer, Path], tmp_path: Path) -> None:
    """The proxy's own count, which stops an agent over `budgets.requests`, is the verdict's:
    the 3 tool calls, not the initialize, notification, tools/list, GET stream and DELETE."""
    server, _ = ledger_http

    async def session(proxy_url: str) -> None:
        http = httpx2.AsyncClient(proxy=proxy_url, timeout=httpx2.Timeout(30, read=60))
        async with http, streamable_http_client(server.url, http_client=http) as (read, write, *_), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            await mcp.list_tools()
            for account in ("B1", "B2", "B3"):
                await mcp.call_tool("lookup_account", {"account": account})

    with ProxyServer(load_scenario("observe"), trace_dir=tmp_path / "flows") as proxy:
        proxy.begin_episode("ep")
        asyncio.run(session(proxy.proxy_url("ep")))
        stats = proxy.end_episode("ep")
    assert stats.exchanges == 8 and stats.requests == 3


def test_event_offsets_through_the_relay_count_from_the_response_headers(tmp_path: Path) -> None:
    """A tools/call's answer stream goes through the relay (proxy.mcp_http); its events' offsets
    count from the response headers, as the trace says (formats.trace), not from the forward.
    Caught under load: the last lookup_account's line said response_after_s 0.031864, its answer at
    offset 0.035754 (counted from the forward: really 0.0039 s after the headers) and the client
    gone at 0.046772 — read as headers + offset = 0.0676 s, after the client left, so the call
    counted as failed and, had it been the first lookup, the second a retry (max_retries 0)."""
    answer = {"jsonrpc": "2.0", "id": 5, "result": {"content": [{"type": "text", "text": "{}"}], "isError": False}}

    async def slow_headers(scope, receive, send):  # the server works 0.5 s before its headers, then answers at once
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await asyncio.sleep(0.5)
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/event-stream")]})
        await send({"type": "http.response.body", "body": f"event: message\r\ndata: {json.dumps(answer)}\r\n\r\n".encode()})

    call = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": "lookup_account",
                                                                       "arguments": {"account": "A7"}}}
    with HttpServer(slow_headers) as server, \
            ProxyServer(load_scenario("observe"), trace_dir=tmp_path / "flows") as proxy:
        proxy.begin_episode("ep")
        with httpx2.Client(proxy=proxy.proxy_url("ep"), timeout=30) as client:
            answered = client.post(server.url, json=call, headers={"accept": "application/json, text/event-stream"})
        assert json.dumps(answer) in answered.text
        proxy.end_episode("ep")
    [line] = [line for path in (tmp_path / "flows").glob("*.jsonl") for line in read_trace(path)]
    [[offset, _]] = line["upstream"]["sse"]
    assert line["response_after_s"] >= 0.5 and offset < 0.25, (line["response_after_s"], offset)
