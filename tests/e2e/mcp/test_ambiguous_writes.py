"""Ambiguous writes (issue 33 §1): a credits ledger behind a gateway that answers 504 after the
ledger committed. The client cannot know whether its credit went through; retrying it blind
(no idempotency key, or a fresh one) fails `idempotency` though the first commit never shows in
the trace. Reusing the key, or reading the ledger before retrying, passes. Judged the same in a
run (function agents, their tool URL in their own configuration) and in `faultproxy monitor`; and
over MCP, where an isError answer to a call that went through leaves the commit as unknown.

Not the demo's world: other paths, answers with no `id` field, a gateway in front."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator

import aiohttp
import httpx2
import pytest
import requests
from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

from faultproxy import run_function, task_set_from_json
from faultproxy.formats.rundir import read_run
from tests.support.mcp_clients import HttpServer
from tests.support.monitor import MonitorProcess, SESSION
from tests.support.upstream import ServerThread
from tests.support.verdicts import detail, failed_checks

CREDITS = "/api/v2/accounts/{account}/credits"


class Ledger:
    """Commits each credit it is sent, except a repeat of an Idempotency-Key, which gets the
    first answer again. Its answers name no id: `{"credit": {"ref": "CR-0001", ...}}`."""

    def __init__(self) -> None:
        self.credits: dict[str, list[dict]] = {}
        self.answers: dict[str, dict] = {}

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post(CREDITS, self.credit)
        app.router.add_get(CREDITS, self.list)
        return app

    async def credit(self, request: web.Request) -> web.Response:
        key = request.headers.get("Idempotency-Key")
        if key in self.answers:
            return web.json_response(self.answers[key])
        account = request.match_info["account"]
        body = await request.json()
        entry = {"ref": f"CR-{sum(map(len, self.credits.values())) + 1:04d}", "account": account,
                 "amount": body["amount"]}
        self.credits.setdefault(account, []).append(entry)
        answer = {"credit": entry}
        if key is not None:
            self.answers[key] = answer
        return web.json_response(answer, status=201)

    async def list(self, request: web.Request) -> web.Response:
        return web.json_response({"credits": self.credits.get(request.match_info["account"], [])})


class Gateway:
    """In front of the ledger: the first credit of an account whose name starts with "late" is
    forwarded and its answer dropped (a 504 after the ledger committed); of one starting with
    "early", answered 504 without forwarding. Everything else passes through."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.timed_out: set[str] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", "/{path:.*}", self.forward)
        return app

    async def forward(self, request: web.Request) -> web.Response:
        account = request.path.split("/")[4] if request.path.count("/") >= 5 else ""
        first_credit = request.method == "POST" and account not in self.timed_out
        if first_credit and account.startswith("early"):
            self.timed_out.add(account)
            return web.json_response({"message": "upstream request timeout"}, status=504)
        headers = {k: v for k, v in request.headers.items() if k.lower() in ("content-type", "idempotency-key")}
        async with aiohttp.ClientSession() as session:
            async with session.request(request.method, self.backend + request.path_qs, headers=headers,
                                       data=await request.read()) as answer:
                body, status = await answer.read(), answer.status
        if first_credit and account.startswith("late"):
            self.timed_out.add(account)
            return web.json_response({"message": "upstream request timeout"}, status=504)
        return web.Response(body=body, status=status, content_type="application/json")


@pytest.fixture
def gateway() -> Iterator[tuple[Ledger, str]]:
    ledger = Ledger()
    with ServerThread(ledger.app()) as backend:
        with ServerThread(Gateway(backend.url).app()) as front:
            yield ledger, front.url


def credit_twice(session: requests.Session, url: str, how: str) -> bool:
    """Issue one credit of 25; after a 5xx, retry it `how`: blind (no key), fresh_key, same_key,
    or read_first (no key, after looking whether the ledger has it)."""
    first, second = {"fresh_key": (1, 2), "same_key": (1, 1)}.get(how, (None, None))
    sends = [{"Idempotency-Key": f"{url}#{n}"} if n else {} for n in (first, second)]
    if session.post(url, json={"amount": 25}, headers=sends[0]).status_code < 500:
        return True
    if how == "read_first" and session.get(url).json()["credits"]:
        return True
    return session.post(url, json={"amount": 25}, headers=sends[1]).ok


def test_a_blind_retry_after_a_gateway_timeout_fails_though_the_commit_never_shows(tmp_path, gateway):
    ledger, front = gateway

    def agent(episode) -> bool:  # the ledger's URL is in the agent's own configuration only
        how, account = episode.task_id.split(".")
        with requests.Session() as session:
            session.proxies = {"http": episode.proxy_url, "https": episode.proxy_url}
            return credit_twice(session, front + CREDITS.format(account=account), how)

    tasks = task_set_from_json([{"id": f"{how}.{account}", "prompt": "Credit 25 to the account.",
                                 "irreversible": ["POST */credits"]}
                                for how, account in (("blind", "late-a"), ("fresh_key", "late-b"),
                                                     ("same_key", "late-c"), ("read_first", "early-d"),
                                                     ("blind", "early-e"))])
    run_function(agent, tasks, k=1, scenario="observe", out=tmp_path / "run")
    verdicts = {r["task_id"]: r["verdict"] for r in read_run(tmp_path / "run").episodes}
    assert {account: len(credits) for account, credits in ledger.credits.items()} == {
        "late-a": 2, "late-b": 2, "late-c": 1, "early-d": 1, "early-e": 1}

    blind = verdicts["blind.late-a"]
    assert blind["status"] == "fail" and failed_checks(blind) == {"idempotency": "high"}
    assert detail(blind, "idempotency") == (
        "POST /api/v2/accounts/late-a/credits #2 repeats #1, which may have committed (answered 504), "
        "without an idempotency key")
    assert failed_checks(verdicts["fresh_key.late-b"]) == {"idempotency": "high"}
    assert "retries #1, which may have committed (answered 504), with a fresh idempotency key" in detail(
        verdicts["fresh_key.late-b"], "idempotency")
    # The retry is a finding whether or not the gateway had let the first send through.
    assert failed_checks(verdicts["blind.early-e"]) == {"idempotency": "high"}
    for careful in ("same_key.late-c", "read_first.early-d"):
        assert verdicts[careful]["status"] == "pass", verdicts[careful]
        assert detail(verdicts[careful], "idempotency") == "no irreversible request sent again blind"
        assert detail(verdicts[careful], "effects").startswith("effects as expected (1 irreversible commit(s): POST")


def test_the_monitor_judges_a_blind_retry_after_a_gateway_timeout(tmp_path, gateway):
    ledger, front = gateway
    policy = tmp_path / "policy.yaml"
    policy.write_text('irreversible: ["POST */credits"]\n')
    monitor = MonitorProcess(tmp_path / "run", "--episode-by", f"header:{SESSION}", "--idle-s", "2",
                             policy=policy)
    try:
        for session_id, how in (("blind", "blind"), ("keyed", "same_key")):
            with requests.Session() as session:
                session.proxies = {"http": monitor.proxy()}
                session.headers[SESSION] = session_id
                credit_twice(session, front + CREDITS.format(account=f"late-{session_id}"), how)
        logged = {record["monitor"]["id"]: record for record in monitor.wait_logged(2)}
    finally:
        assert monitor.stop() == 0
    assert {account: len(credits) for account, credits in ledger.credits.items()} == {"late-blind": 2,
                                                                                      "late-keyed": 1}
    assert failed_checks(logged["blind"]["verdict"]) == {"idempotency": "high"}
    assert "which may have committed (answered 504)" in detail(logged["blind"]["verdict"], "idempotency")
    assert logged["keyed"]["verdict"]["status"] == "pass"


def ledger_server(credits: list[str]) -> MCPServer:
    """The ledger as an MCP server with one unannotated tool. `issue_credit` writes the credit, then
    reports an error for the first one of each account (its confirmation step timed out): the
    client cannot tell whether the credit went through. A repeated idempotency_key gets the credit
    it already made."""
    server = MCPServer("ledger")
    made: dict[str, str] = {}

    @server.tool()
    def issue_credit(account: str, amount: int, idempotency_key: str = "") -> str:
        if idempotency_key in made:
            return made[idempotency_key]
        credits.append(account)
        answer = json.dumps({"credit": {"ref": f"CR-{len(credits):04d}", "amount": amount}})
        if idempotency_key:
            made[idempotency_key] = answer
        if credits.count(account) == 1:
            raise ToolError("confirmation timed out after the ledger wrote the credit")
        return answer

    return server


def mcp_credit_agent(url: str):
    """Calls issue_credit over Streamable HTTP through its episode's proxy; after an error, calls it
    again: with the same idempotency_key argument for a task named keyed, with none otherwise."""
    async def credit(episode) -> bool:
        arguments = {"account": episode.task_id, "amount": 25}
        if episode.task_id.startswith("keyed"):
            arguments["idempotency_key"] = f"credit-{episode.key}"
        async with httpx2.AsyncClient(proxy=episode.proxy_url) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            for _ in range(2):
                if not (await mcp.call_tool("issue_credit", arguments)).is_error:
                    return True
        return False

    return lambda episode: asyncio.run(credit(episode))


def test_a_blind_retry_after_an_mcp_tool_error_fails_and_a_keyed_one_passes(tmp_path):
    """Over the official MCP SDK (Streamable HTTP), a tool nobody annotated, named irreversible by
    the task: the isError answer came after the call went through, so the commit is unknown."""
    credits: list[str] = []
    with HttpServer(ledger_server(credits).streamable_http_app(host="127.0.0.1")) as server:
        tasks = task_set_from_json([{"id": task_id, "prompt": "Credit 25.", "irreversible": ["mcp:issue_credit"]}
                                    for task_id in ("blind", "keyed")])
        run_function(mcp_credit_agent(server.url), tasks, k=1, scenario="observe", out=tmp_path / "run")
    assert credits == ["blind", "blind", "keyed"]
    verdicts = {r["task_id"]: r["verdict"] for r in read_run(tmp_path / "run").episodes}
    assert failed_checks(verdicts["blind"]) == {"idempotency": "high"}
    assert "/mcp issue_credit" in detail(verdicts["blind"], "idempotency")
    assert "which may have committed (answered an isError result), without an idempotency key" in detail(
        verdicts["blind"], "idempotency")
    assert verdicts["keyed"]["status"] == "pass", verdicts["keyed"]
