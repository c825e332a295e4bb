"""Rules that match what a request is (`kind: write | irreversible | read | model | mcp_tool`), not
the demo shop's paths (issue 33 §5): the bundled tool faults reach a user's booking API, whose
paths and fields are nothing like the shop's; `irreversible` comes from the task, an MCP tool's
read or write from its annotations or the task's `read_only`, and an unclassified tool is no write."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import httpx2
import pytest
from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from faultproxy import Episode, run_function
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.proxy.server import ProxyServer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from faultproxy.tasks.request_class import Declared
from tests.support.agents.asking_mcp_server import make_server as asking_server
from tests.support.agents.ledger_mcp_server import make_server as ledger_server
from tests.support.mcp_clients import HttpServer, counter_server, session, shim_parameters
from tests.support.bookings import Bookings as BlindSpotBookings
from tests.support.monitor import MonitorProcess
from tests.support.upstream import ServerThread, Upstream

pytestmark = pytest.mark.timeout(120)


class Bookings(BlindSpotBookings):
    """The booking API of the blind-spot tests (cancelling answers a cancellation id), which also
    shows a booking ({"booking_ref", "state"}) and takes notes on it."""

    def app(self) -> web.Application:
        app = super().app()
        app.router.add_get("/bookings/{id}", self.booking)
        app.router.add_post("/bookings/{id}/notes", self.note)
        return app

    async def booking(self, request: web.Request) -> web.Response:
        ref = request.match_info["id"]
        return web.json_response({"booking_ref": ref, "state": "cancelled" if ref in self.cancelled else "held"})

    async def note(self, request: web.Request) -> web.Response:
        return web.json_response({"note_ref": "N1"}, status=201)


@pytest.fixture
def bookings() -> Iterator[tuple[Bookings, ServerThread]]:
    world = Bookings()
    with ServerThread(world.app()) as server:
        yield world, server


def cancel_booking(episode: Episode) -> dict:
    """Look the booking up (giving up after 0.5 s), then cancel it; errors are swallowed."""
    base = episode.env["BOOKINGS_URL"]
    with httpx.Client(proxy=episode.proxy_url, timeout=5) as http:
        try:
            http.get(f"{base}/bookings/BK1001", timeout=0.5)
        except httpx.TimeoutException:
            pass
        try:
            http.post(f"{base}/bookings/BK1001/cancel", json={"reason": "customer"})
        except httpx.TransportError:
            pass
    return {"answer": "BK1001 cancelled"}


@pytest.mark.parametrize("scenario, params, fault", [("response_lost", {}, "write_lost"),
                                                      ("timeout", {"lambda": 1.0}, "tool_read_504")])
def test_bundled_tool_faults_reach_a_booking_api(bookings: tuple[Bookings, ServerThread], tmp_path: Path,
                                                  scenario: str, params: dict, fault: str) -> None:
    world, server = bookings
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(f'tasks:\n  - id: cancel_bk1001\n    prompt: "Cancel BK1001"\n'
                     f'    env: {{BOOKINGS_URL: "{server.url}"}}\n')
    out = tmp_path / "run"
    run_function(cancel_booking, load_tasks(tasks), k=1, scenario=load_scenario(scenario, params), out=out)
    [record] = read_run(out).episodes
    assert [(f["rule"], f["delivered"]) for f in record["verdict"]["faults"]] == [(fault, True)]
    assert world.cancelled == ["BK1001"]  # response_lost: committed, the answer lost; timeout: the read held
    lines = {line["request"]["method"]: line for line in read_trace(out / record["trace"])}
    faulted = lines["POST" if scenario == "response_lost" else "GET"]
    assert faulted["matched"] == [fault] and faulted["fault"]["delivered"]


def kind_scenario(tmp_path: Path, kind: str, fault: str = "{type: server_error, status: 503}") -> Path:
    scenario = tmp_path / "kinds.yaml"
    scenario.write_text(f"name: kinds\ndescription: fault one kind\nrules:\n  - name: by_kind\n"
                        f"    match: {{kind: {kind}}}\n    fault: {fault}\n")
    return scenario


def test_irreversible_is_what_the_episodes_task_declares(bookings: tuple[Bookings, ServerThread],
                                                          tmp_path: Path) -> None:
    world, server = bookings
    declared = Declared.of(load_tasks(_tasks(tmp_path, 'irreversible: ["POST */cancel"]')).by_id("t"))
    with ProxyServer(kind_scenario(tmp_path, "irreversible")) as proxy:
        proxy.begin_episode("declared", declared=declared)
        proxy.begin_episode("undeclared")
        for episode, cancel_status in (("declared", 503), ("undeclared", 201)):
            with httpx.Client(proxy=proxy.proxy_url(episode)) as http:
                assert http.post(f"{server.url}/bookings/BK7/notes", json={}).status_code == 201  # a write, not irreversible
                assert http.post(f"{server.url}/bookings/BK7/cancel", json={}).status_code == cancel_status
    assert world.cancelled == ["BK7"]  # only the undeclared episode's cancel went through


def _tasks(tmp_path: Path, line: str) -> Path:
    path = tmp_path / "tasks.yaml"
    path.write_text(f"tasks:\n  - id: t\n    prompt: go\n    {line}\n")
    return path


async def _mcp_calls(proxy_url: str, url: str, calls: list[tuple[str, dict]]) -> list[bool]:
    """isError of each tool call, after tools/list (the annotations the proxy learns)."""
    http = httpx2.AsyncClient(proxy=proxy_url, timeout=httpx2.Timeout(30, read=60))
    async with http, streamable_http_client(url, http_client=http) as (read, write, *_), \
            ClientSession(read, write) as mcp:
        await mcp.initialize()
        await mcp.list_tools()
        return [(await mcp.call_tool(tool, arguments)).is_error for tool, arguments in calls]


def test_mcp_tools_are_read_or_write_by_annotations_or_the_task_and_unclassified_is_neither(tmp_path: Path) -> None:
    """The asking server annotates refund_regardless as destructive; the ledger annotates nothing:
    its lookup_account is a read only because the task says so, and issue_credit is no write."""
    declared = Declared.of(load_tasks(_tasks(tmp_path, 'read_only: ["mcp:lookup_*"]')).by_id("t"))
    with HttpServer(ledger_server(tmp_path / "ledger").streamable_http_app(host="127.0.0.1")) as ledger, \
            HttpServer(asking_server(tmp_path / "refunds").streamable_http_app(host="127.0.0.1")) as asking:
        for kind, server, calls, errors in (
                ("read", ledger, [("lookup_account", {"account": "A1"}), ("issue_credit", {"account": "A1",
                                                                                           "amount_minor": 5})],
                 [True, False]),
                ("write", ledger, [("issue_credit", {"account": "A2", "amount_minor": 5})], [False]),
                ("mcp_tool", ledger, [("issue_credit", {"account": "A3", "amount_minor": 5})], [True]),
                ("irreversible", asking, [("announce", {}), ("refund_regardless", {"order": "R1"})], [False, True])):
            with ProxyServer(kind_scenario(tmp_path, kind, "{type: jsonrpc_error, mode: tool_error}")) as proxy:
                proxy.begin_episode(kind, declared=declared)
                got = asyncio.run(_mcp_calls(proxy.proxy_url(kind), server.url, calls))
            assert got == errors, kind
    assert (tmp_path / "ledger").read_text().splitlines() == ["A1", "A2"]  # A3's credit was answered for it
    assert not (tmp_path / "refunds").exists()  # and so was the refund


async def _stdio_answers(tmp_path: Path) -> list[str]:
    """How read_counter and bump were answered, over stdio behind `faultproxy mcp --scenario`
    whose rules fault reads with a tool error and irreversible calls with a JSON-RPC error."""
    scenario = tmp_path / "kinds.yaml"
    scenario.write_text("name: kinds\ndescription: reads and irreversible calls\nrules:\n"
                        "  - name: reads\n    match: {kind: read}\n    fault: {type: jsonrpc_error, mode: tool_error}\n"
                        "  - name: irreversible\n    match: {kind: irreversible}\n"
                        "    fault: {type: jsonrpc_error, mode: error}\n")
    parameters = shim_parameters(counter_server(tmp_path / "counter"), "--scenario", str(scenario),
                                 "--trace-dir", str(tmp_path / "flows"))
    answers = []
    async with session(parameters) as mcp:
        await mcp.list_tools()
        for tool in ("read_counter", "bump"):
            try:
                answers.append("tool error" if (await mcp.call_tool(tool, {})).is_error else "answered")
            except MCPError:
                answers.append("JSON-RPC error")
    return answers


def test_over_stdio_the_servers_annotations_say_read_or_irreversible(tmp_path: Path) -> None:
    """The counter server annotates read_counter readOnlyHint and bump destructiveHint; no task
    declares anything (the shim's own proxy), so the annotations its tools/list answer carried decide."""
    assert asyncio.run(_stdio_answers(tmp_path)) == ["tool error", "JSON-RPC error"]
    assert not (tmp_path / "counter").exists()  # bump never reached the server


def test_a_monitors_canary_rule_reaches_what_its_policy_calls_irreversible(tmp_path: Path) -> None:
    """`faultproxy monitor --scenario` with `kind: irreversible`: the policy, not any task, says
    which requests are irreversible; other writes and reads pass."""
    policy = tmp_path / "policy.yaml"
    policy.write_text('irreversible: ["POST */refund"]\n')
    upstream = Upstream()
    with ServerThread(upstream.app()) as server:
        monitor = MonitorProcess(tmp_path / "run", "--episode-by", "auth", "--scenario",
                                 str(kind_scenario(tmp_path, "irreversible")), policy=policy)
        try:
            with httpx.Client(proxy=monitor.proxy("live-a")) as http:
                assert http.get(f"{server.url}/items/5").status_code == 200
                assert http.post(f"{server.url}/items/5/refund").status_code == 503
        finally:
            assert monitor.stop() == 0
    assert upstream.commits["refund 5"] == 0 and upstream.hits["GET /items/5"] == 1
