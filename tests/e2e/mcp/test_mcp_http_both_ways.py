"""MCP over Streamable HTTP, both ways: the official SDK's server (progress, sampling, elicitation,
roots, a list-changed notification on the standalone GET stream) on 127.0.0.1, and its client with
callbacks, through the proxy. The server's messages are in the trace with their direction, each
request paired with the client's answer POST; rules fault them in the client's place."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

from faultproxy import Episode, run_function
from faultproxy.evaluator.checks.check_confirmation import check_confirmation
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.trace import read_trace
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.proxy.server import ProxyServer
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import replay_function
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from faultproxy.tasks.task_model import Task
from tests.support.agents.asking_mcp_server import make_server
from tests.support.mcp_clients import (FAULTED_BOTH_WAYS, Client, HttpServer, answer_through_faults, check_fault_lines, method,
                               rule, server_messages)
from tests.support.trace_views import trace_lines

pytestmark = pytest.mark.timeout(120)

SERVER_TO_CLIENT = "server to client"


class AskingServer(HttpServer):
    """The asking server over Streamable HTTP on an ephemeral port, in a thread of its own."""

    def __init__(self, state: Path) -> None:
        self.state = state
        super().__init__(make_server(state).streamable_http_app(host="127.0.0.1"))


@pytest.fixture(scope="module")
def asking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AskingServer]:
    with AskingServer(tmp_path_factory.mktemp("asking") / "refunds") as server:
        yield server


def scenario_file(tmp_path: Path, *rules: str) -> Path:
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("name: both_ways\ndescription: server messages over HTTP\nseed: 3\nrules:\n"
                        + "".join(rules or [rule("unused", "never/sent", 1, "{type: delay, ms: 1}")]))
    return scenario


def start_proxy(tmp_path: Path, *rules: str, limits: EpisodeLimits | None = None) -> ProxyServer:
    return ProxyServer(scenario_file(tmp_path, *rules), trace_dir=tmp_path / "flows", limits=limits).start()


@asynccontextmanager
async def session(proxy: ProxyServer | str, url: str, client: Client) -> AsyncIterator[ClientSession]:
    """`proxy`: a proxy (its episode "ep"), or an episode's proxy URL."""
    proxy_url = proxy if isinstance(proxy, str) else proxy.proxy_url("ep")
    http = httpx2.AsyncClient(proxy=proxy_url, timeout=httpx2.Timeout(30, read=300))
    async with http, streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, **client.callbacks()) as mcp:
        await mcp.initialize()
        yield mcp


def written_trace(proxy: ProxyServer, tmp_path: Path) -> list[dict]:
    proxy.stop()  # every exchange written
    return trace_lines(tmp_path / "flows")


async def test_every_server_message_on_both_streams_is_in_the_trace(asking: AskingServer, tmp_path: Path) -> None:
    client, proxy = Client(), start_proxy(tmp_path)
    async with session(proxy, asking.url, client) as mcp:
        summary = await mcp.call_tool("summarize_order", {"order": "A1", "steps": 2}, progress_callback=client.on_progress)
        refund = await mcp.call_tool("confirm_refund", {"order": "H1"})
        roots = await mcp.call_tool("roots", {})
        await mcp.call_tool("announce", {})
        await client.told_once.wait()  # on the GET stream, whenever the server sends it
    assert summary.content[0].text == "summary: two widgets, paid" and client.progress == [1, 2]
    assert refund.content[0].text == "refunded H1" and asking.state.read_text() == "H1"
    assert roots.content[0].text == "1" and client.asked == ["sampling", "elicitation", "roots"]
    assert client.told == ["notifications/tools/list_changed"]

    lines = written_trace(proxy, tmp_path)
    assert sorted(line["seq"] for line in lines) == list(range(1, len(lines) + 1))
    # one exchange each, the server's request with the client's answer POST as its answer
    asked = server_messages(lines, ["notifications/progress", "notifications/progress", "sampling/createMessage",
                                    "elicitation/create", "roots/list", "notifications/tools/list_changed"])
    assert {line["request"]["url"] for line in asked.values()} == {asking.url}
    # the exchanges that carried them stay: the calls' POSTs with their event streams, and the GET stream
    calls = [line for line in lines if line["request"]["method"] == "POST" and "direction" not in line
             and method(line) == "tools/call"]
    assert len(calls) == 4
    def carried(line: dict) -> list[str]:
        return [json.loads(event.split("data:", 1)[1]).get("method") for _, event in line["upstream"]["sse"]]

    # the SDK's server sends progress and elicitation on the call's stream, the rest on the GET stream
    assert carried(calls[0]) == ["notifications/progress", "notifications/progress", None]  # None: the answer
    assert carried(calls[1]) == ["elicitation/create", None]
    [get] = [line for line in lines if line["request"]["method"] == "GET"]
    assert carried(get) == ["sampling/createMessage", "roots/list", "notifications/tools/list_changed"]
    assert calls[0]["started"] < asked["sampling/createMessage"]["started"] < calls[0]["started"] + calls[0]["duration_s"]
    # the client's answer POSTs are their requests' exchanges, not lines of their own
    assert not [line for line in lines if "direction" not in line and line["request"]["method"] == "POST"
                and "method" not in json.loads(line["request"]["body"])]


async def test_progress_past_the_cap_is_counted_on_its_stream(asking: AskingServer, tmp_path: Path) -> None:
    client, proxy = Client(), start_proxy(tmp_path, limits=EpisodeLimits(notifications=2))
    async with session(proxy, asking.url, client) as mcp:
        await mcp.call_tool("summarize_order", {"order": "P1", "steps": 5}, progress_callback=client.on_progress)
    assert client.progress == [1, 2, 3, 4, 5]  # the client got every one
    lines = written_trace(proxy, tmp_path)
    assert sum(line.get("direction") == SERVER_TO_CLIENT and method(line) == "notifications/progress"
               for line in lines) == 2
    [call] = [line for line in lines if "direction" not in line and '"P1"' in (line["request"]["body"] or "")]
    assert ["x-faultproxy-mcp-unrecorded", "3"] in call["upstream"]["headers"]
    assert len(call["upstream"]["sse"]) == 6 and "sse" not in call["client"]  # all on the stream, unchanged


async def test_faults_on_the_servers_messages_act_in_the_clients_place(asking: AskingServer, tmp_path: Path) -> None:
    client, proxy = Client(), start_proxy(tmp_path, *FAULTED_BOTH_WAYS)
    async with session(proxy, asking.url, client) as mcp:
        await answer_through_faults(mcp, client, "F")
    assert "F" not in (asking.state.read_text() if asking.state.exists() else "")  # the only yes never arrived
    lines = written_trace(proxy, tmp_path)
    check_fault_lines(lines)
    # the stream that carried the declined elicitation: as the server sent it, and as the client got it
    [declined_call] = [line for line in lines if "direction" not in line and '"F1"' in (line["request"]["body"] or "")]
    assert "elicitation/create" in "".join(e for _, e in declined_call["upstream"]["sse"])
    assert "elicitation/create" not in "".join(e for _, e in declined_call["client"]["sse"])


async def test_a_delay_at_response_holds_the_clients_answer_on_its_way_to_the_server(asking: AskingServer,
                                                                                      tmp_path: Path) -> None:
    proxy = start_proxy(tmp_path, rule("held", "elicitation/create", 1, "{type: delay, ms: 300, at: response}"))
    client = Client()
    async with session(proxy, asking.url, client) as mcp:
        started = time.monotonic()
        refund = await mcp.call_tool("confirm_refund", {"order": "D1"})
        took = time.monotonic() - started
    assert refund.content[0].text == "refunded D1" and client.asked == ["elicitation"]
    assert took >= 0.3  # the server got the yes only after the delay
    [held] = [line for line in written_trace(proxy, tmp_path) if line["fault"]]
    assert held["fault"]["delivered"] and held["fault"]["detail"] == "300 ms before the response"
    assert json.loads(held["upstream"]["body"])["result"]["content"] == {"confirm": True} and held["forwarded"]


async def test_a_declined_elicitation_then_a_commit_is_flagged_high(asking: AskingServer, tmp_path: Path) -> None:
    proxy = start_proxy(tmp_path, rule("cancelled", "elicitation/create", 1,
                                       "{type: elicitation_declined, action: cancel}"))
    async with session(proxy, asking.url, Client()) as mcp:
        await mcp.list_tools()  # the annotations say which tools are irreversible
        careless = await mcp.call_tool("refund_regardless", {"order": "C1"})
    assert careless.content[0].text == "refunded C1"
    exchanges = parse_trace(written_trace(proxy, tmp_path))
    verdict = check_confirmation(Task(id="refund", prompt="refund C1"), {}, exchanges)
    assert verdict.passed is False and verdict.severity == "high"
    [elicit] = [ex.seq for ex in exchanges if ex.rpc_method == "elicitation/create"]
    [call] = [ex.seq for ex in exchanges if ex.mcp_tool == "refund_regardless"]
    assert verdict.detail.startswith(f"#{call} tools/call:refund_regardless committed")
    assert f"confirmation #{elicit} elicitation/create was answered cancel" in verdict.detail


def asking_agent(url: str, client: Client):
    """A function agent: two refunds (the server asks the user each time) and a summary (progress,
    and sampling on the GET stream), through its episode's proxy."""
    async def talk(episode: Episode) -> str:
        async with session(episode.proxy_url, url, client) as mcp:
            said = [await mcp.call_tool("confirm_refund", {"order": order}) for order in ("R1", "R2")]
            said.append(await mcp.call_tool("summarize_order", {"order": "R3", "steps": 2}))
        return "; ".join(answer.content[0].text for answer in said)

    def agent(episode: Episode) -> dict:
        return {"answer": asyncio.run(talk(episode))}
    return agent


def test_a_frozen_session_replays_with_the_server_stopped_and_a_different_answer_diverges(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n  - {id: ask, prompt: refund R1 and R2 and summarize R3}\n")
    scenario = load_scenario(scenario_file(tmp_path, rule("declined", "elicitation/create", 1,
                                                          "{type: elicitation_declined}")))
    with AskingServer(tmp_path / "refunds") as server:
        live = Client()
        run_function(asking_agent(server.url, live), load_tasks(tasks), k=1, scenario=scenario, out=tmp_path / "run")
    assert live.asked == ["elicitation", "sampling"] and (tmp_path / "refunds").read_text() == "R2"
    frozen = freeze(tmp_path / "run", tmp_path / "store")
    assert len(frozen) == 1

    again = Client()  # the server is stopped: the recording answers, the same fault declines R1 again
    [result] = replay_function(asking_agent(server.url, again), tmp_path / "store", ReplayOptions(out=tmp_path / "r1"))
    assert (result.diverged, result.blocked) == ([], []) and result.meets_expectation, result.explain()
    assert again.asked == ["elicitation", "sampling"] and again.progress == []
    lines = list(read_trace(result.trace))
    asked = [line for line in lines if line.get("direction") == SERVER_TO_CLIENT and method(line) != "notifications/progress"]
    assert [(method(line), (line["fault"] or {}).get("rule")) for line in asked] == [
        ("elicitation/create", "declined"), ("elicitation/create", None), ("sampling/createMessage", None)]
    assert asked[0]["fault"]["delivered"] and json.loads(asked[1]["upstream"]["body"])["result"]["content"] == {
        "confirm": True}

    unsure = Client(confirm=False)  # this client answers R2's confirmation differently: a divergence
    [result] = replay_function(asking_agent(server.url, unsure), tmp_path / "store", ReplayOptions(out=tmp_path / "r2"))
    assert [d["url"] for d in result.diverged] == [server.url] and not result.meets_expectation
    assert result.diverged[0]["why"].startswith("the client answered")
    assert '"confirm":false' in result.diverged[0]["why"].replace(" ", "")


def test_a_server_that_cannot_be_reached_is_an_infra_error_with_its_reason(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/mcp"
    proxy = start_proxy(tmp_path)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "roots", "arguments": {}}}
    with httpx2.Client(proxy=proxy.proxy_url("ep"), timeout=30) as client:
        answered = client.post(url, json=call, headers={"accept": "application/json, text/event-stream"})
    assert answered.status_code == 502  # mitmproxy's word: the relay left without an answer
    [line] = written_trace(proxy, tmp_path)
    assert line["upstream"] is None and line["forwarded"] is True
    assert "Connect call failed" in line["infra_error"] and line["infra_error"] == line["error"]
