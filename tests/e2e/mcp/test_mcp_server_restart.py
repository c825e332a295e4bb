"""server_restart over stdio (issue 34): `faultproxy mcp` in front of the journal server on the
official SDK, driven by the SDK's stdio client. The shim kills the server and starts its command
again, replaying nothing: the client's next request meets a server that was never initialized
and refuses it, as the SDK's server does, until the client initializes again on the same stream.
What the client sees, with the server's state file saying what really ran; a call in flight
lost with the old server (a hand-written server that never answers it); a naive agent that
repeats the lost write without its idempotency key failing, a careful one passing; the frozen
failure replayed with no server, and minimized; an agent that never initializes again (`when:
before`) failing on the fault, neither passing nor incomplete. (Over Streamable HTTP the fault is the session's
404: tests/e2e/mcp/test_mcp_control_plane.py's tables hold its rows.) And the journal agent, an
agent function, replayed in-process with no fault: its MCP client passes the shim no
FAULTPROXY_REPLAY, and the shim learns from the replay proxy that it replays and starts no server.
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path

import pytest
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.shared.exceptions import MCPError

from faultproxy import Episode, run_function
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.minimize import minimize
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.agents.journal_mcp_server import entries
from tests.support.fixtures import scenario
from tests.support.mcp_clients import AGENTS, RawClient, call, session, shim_parameters

pytestmark = pytest.mark.timeout(180)

JOURNAL = AGENTS / "journal_mcp_server.py"
ASKING = AGENTS / "asking_mcp_server.py"  # confirm_refund asks the user, and refunds on yes
ODD_SERVER = AGENTS / "odd_stdio_server.py"  # `hang` is never answered; any other tool at once
NOT_INITIALIZED = "Invalid request parameters"  # the SDK's server, to a request before initialize
LOST_AFTER_S = 2  # how long the agents wait for a call's answer


def restart_on_first_post(when: str) -> str:
    return scenario("- name: restart\n  match: {body: {method: tools/call, params.name: post_entry}}\n"
                    f"  when: {{calls: [1]}}\n  fault: {{type: server_restart, when: {when}}}\n")


async def initialize_again(mcp: ClientSession) -> types.InitializeResult:
    """What a client does for a server that restarted: initialize on the same stream. The SDK's
    ClientSession.initialize() answers from its cache once it has run, so the request is sent as is."""
    params = types.InitializeRequestParams(protocol_version="2025-06-18", capabilities=types.ClientCapabilities(),
                                           client_info=types.Implementation(name="journal-agent", version="1"))
    result = await mcp.send_request(types.InitializeRequest(params=params), types.InitializeResult)
    await mcp.send_notification(types.InitializedNotification())
    return result


def rpc(line: dict) -> str:
    return json.loads(line["request"]["body"])["method"]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_the_next_request_meets_a_new_server_never_initialized(when: str, tmp_path: Path) -> None:
    state = tmp_path / "journal.json"
    (tmp_path / "scenario.yaml").write_text(restart_on_first_post(when))
    parameters = shim_parameters([sys.executable, str(JOURNAL), str(state)], "--scenario",
                                 str(tmp_path / "scenario.yaml"), "--trace-dir", str(tmp_path / "flows"))
    post = {"account": "ops", "cents": 700, "idempotency_key": "ops-700"}
    async with session(parameters) as mcp:
        if when == "before":  # the call reaches the new server, which refuses it: it never ran
            with pytest.raises(MCPError, match=NOT_INITIALIZED):
                await mcp.call_tool("post_entry", post)
        else:  # the call ran; its answer went with the old server: none ever comes
            with pytest.raises(MCPError, match="timed out"):
                await mcp.call_tool("post_entry", post, read_timeout_seconds=LOST_AFTER_S)
        assert len(entries(state)) == int(when == "after")
        with pytest.raises(MCPError, match=NOT_INITIALIZED):  # carrying on with the old session
            await mcp.list_tools()
        assert (await initialize_again(mcp)).server_info.name == "journal"
        assert {tool.name for tool in (await mcp.list_tools()).tools} == {"post_entry", "list_entries"}
        again = json.loads((await mcp.call_tool("post_entry", post)).content[0].text)
    assert [entry["id"] for entry in entries(state)] == ["E1"] and again["id"] == "E1"  # the key held across it

    lines = sorted(read_trace(next((tmp_path / "flows").iterdir())), key=lambda line: line["seq"])
    [restart] = [line for line in lines if line["fault"]]
    assert restart["fault"]["delivered"] and restart["forwarded"] and rpc(restart) == "tools/call"
    answer = json.loads(restart["upstream"]["body"])
    if when == "before":  # the new server's own refusal, recorded as the upstream's answer
        assert answer["error"]["code"] == -32602 and restart["client"]["outcome"] == "response"
    else:  # the old server's answer, which the client never got
        assert json.loads(answer["result"]["content"][0]["text"])["id"] == "E1"
        assert restart["client"]["outcome"] == "reset"
    after = [line for line in lines if line["seq"] > restart["seq"] and rpc(line) != "notifications/cancelled"]
    assert [(rpc(line), line["upstream"]["status"]) for line in after[:3]] == [
        ("tools/list", 200), ("initialize", 200), ("notifications/initialized", 202)]
    assert json.loads(after[0]["upstream"]["body"])["error"]["code"] == -32602  # the new server's, to the old session


def test_a_call_in_flight_is_lost_with_the_old_server_and_the_session_goes_on(tmp_path: Path) -> None:
    (tmp_path / "scenario.yaml").write_text(scenario(
        "- name: restart\n  match: {body: {method: tools/call, params.name: quick}}\n  when: {calls: [1]}\n"
        "  fault: {type: server_restart}\n"))
    client = RawClient(["--scenario", str(tmp_path / "scenario.yaml"), "--trace-dir", str(tmp_path / "flows"), "--",
                        sys.executable, str(ODD_SERVER)])
    for message in (call(1, "hang"), call(2, "quick")):  # the old server has both; it answers the second
        client.process.stdin.write(json.dumps(message).encode() + b"\n")
    client.process.stdin.flush()
    for said in iter(client.process.stderr.readline, b""):
        if b"why='server_restart fault" in said:
            break  # the restart has begun: what the client sends now waits for the new server
    answered = json.loads(client.ask(call(3, "quick")))
    status, _ = client.finish()
    assert answered["id"] == 3 and client.received.count(b"\n") == 1 and status == 0  # nothing came of 1 and 2

    [trace] = (tmp_path / "flows").iterdir()
    lines = {json.loads(line["request"]["body"])["id"]: line for line in read_trace(trace)}
    hung, restart, after = lines[1], lines[2], lines[3]
    assert hung["upstream"]["status"] == 502 and ["x-faultproxy-stdio-exited", "restart"] in hung["upstream"]["headers"]
    assert hung["forwarded"] and parse_trace([hung])[0].maybe_committed  # the old server had it: maybe it ran
    assert restart["fault"]["delivered"] and restart["upstream"]["status"] == 200
    assert restart["client"]["outcome"] == "reset"  # its answer lost with the old server
    assert after["upstream"]["status"] == 200 and not after["fault"]


def initialize(rpc_id: int) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {}},
                       "clientInfo": {"name": "raw", "version": "1"}}}


def answered(rpc_id, **result) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "result": result}


INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def test_an_answer_to_the_old_servers_question_never_reaches_the_new_server(tmp_path: Path) -> None:
    """The old server asks the user (elicitation) during a refund; the server restarts while the
    question is open. The new server, initialized again, asks about another refund, and the SDK's
    servers number their requests from 0 as the old one did. The client's late yes to the old
    question must not reach the new server as the answer to its own: it gets the client's no and
    refunds nothing. Raw lines, so the late yes is written before the no."""
    state = tmp_path / "refunds"
    (tmp_path / "scenario.yaml").write_text(scenario(
        "- name: restart\n  match: {body: {method: tools/call, params.name: roots}}\n  when: {calls: [1]}\n"
        "  fault: {type: server_restart, when: before}\n"))
    client = RawClient(["--scenario", str(tmp_path / "scenario.yaml"), "--trace-dir", str(tmp_path / "flows"), "--",
                        sys.executable, str(ASKING), str(state)])
    assert "result" in json.loads(client.ask(initialize(1)))
    client.send(INITIALIZED)
    old = json.loads(client.ask(call(2, "confirm_refund", order="A1")))
    refused = json.loads(client.ask(call(3, "roots")))  # the server restarted before it; the new one refuses it
    assert old["method"] == "elicitation/create" and refused["id"] == 3 and refused["error"]["code"] == -32602
    assert "result" in json.loads(client.ask(initialize(4)))
    client.send(INITIALIZED)
    new = json.loads(client.ask(call(5, "confirm_refund", order="B2")))
    assert new["method"] == "elicitation/create" and new["id"] != old["id"]  # never one id twice on the stream
    client.send(answered(old["id"], action="accept", content={"confirm": True}))  # late: its server is gone
    client.send(answered(new["id"], action="decline"))
    refund = json.loads(client.process.stdout.readline())
    status, _ = client.finish()
    assert refund["id"] == 5 and refund["result"]["isError"]
    assert refund["result"]["content"][0]["text"].endswith("not refunded: decline")
    assert not state.exists() and status == 0  # neither refund ran

    lines = sorted(read_trace(next((tmp_path / "flows").iterdir())), key=lambda line: line["seq"])
    first, second = [line for line in lines if rpc(line) == "elicitation/create"]
    assert json.loads(first["upstream"]["body"])["result"]["action"] == "accept"  # the client's yes, recorded
    assert first["client"] == {"outcome": "reset", "status": None}  # ... and never delivered
    assert "restarted" in first["error"]
    assert json.loads(second["upstream"]["body"])["result"]["action"] == "decline"
    assert second["client"]["outcome"] == "response" and second["client"]["status"] == 200


TASKS = """tasks:
  - id: post
    prompt: post 7.00 to the ops account
    irreversible: ["mcp:post_*"]
    expected: {effects: [{mcp: "post_*", count: 1}]}
"""


def journal_behind_shim(episode: Episode, state: Path) -> StdioServerParameters:
    """The journal server behind `faultproxy mcp`, given the episode's variables so the shim finds its proxy."""
    return StdioServerParameters(
        command=sys.executable, args=["-m", "faultproxy", "mcp", "--", sys.executable, str(JOURNAL), str(state)],
        env={"FAULTPROXY_EPISODE": episode.key, "HTTP_PROXY": episode.proxy_url})


def journal_agent(state: Path, careful: bool):
    """Posts one entry over stdio; when no answer comes or the server refuses, initializes again on
    the same stream and posts once more. The careful agent re-lists the tools and carries an
    idempotency key; the naive one neither."""
    arguments = {"account": "ops", "cents": 700} | ({"idempotency_key": "ops-700"} if careful else {})

    async def post(episode: Episode) -> str:
        async with stdio_client(journal_behind_shim(episode, state)) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            await mcp.list_tools()
            try:
                answer = await mcp.call_tool("post_entry", arguments, read_timeout_seconds=LOST_AFTER_S)
            except MCPError:
                await initialize_again(mcp)
                if careful:
                    await mcp.list_tools()
                answer = await mcp.call_tool("post_entry", arguments, read_timeout_seconds=LOST_AFTER_S)
        return answer.content[0].text

    def agent(episode: Episode) -> dict:
        return {"answer": asyncio.run(post(episode))}
    return agent


def test_a_naive_agent_repeats_the_lost_write_a_careful_one_does_not_and_the_failure_replays(tmp_path: Path) -> None:
    (tmp_path / "tasks.yaml").write_text(TASKS)
    (tmp_path / "scenario.yaml").write_text(restart_on_first_post("after"))
    tasks, restart = load_tasks(tmp_path / "tasks.yaml"), load_scenario(tmp_path / "scenario.yaml")
    verdicts, posted = {}, {}
    for name, careful in (("naive", False), ("careful", True)):
        state = tmp_path / f"{name}.json"
        run_function(journal_agent(state, careful), tasks, k=1, scenario=restart, out=tmp_path / name)
        [record] = read_run(tmp_path / name).episodes
        verdicts[name], posted[name] = record["verdict"], [entry["key"] for entry in entries(state)]
    failed = {result["name"]: result for result in verdicts["naive"]["failed"]}
    assert {name: result["severity"] for name, result in failed.items()} == {
        "idempotency": "high", "effects": "high", "claimed_success": "high"}, verdicts["naive"]
    assert re.search(r"post_entry #\d+ repeats #\d+, which committed, without an idempotency key",
                     failed["idempotency"]["detail"]), failed["idempotency"]["detail"]
    assert verdicts["careful"]["status"] == "pass", verdicts["careful"]
    assert posted == {"naive": [None, None], "careful": ["ops-700"]}  # the server kept the key across the restart

    [frozen] = freeze(tmp_path / "naive", tmp_path / "store")
    entry, naive = har.read_entry(frozen.path), journal_agent(tmp_path / "replayed.json", careful=False)
    with Replayer(ReplayOptions(out=tmp_path / "replayed"), [entry]) as replayer:  # no server runs in replay
        replayed = replayer.replay(entry, agent=naive)
        assert replayed.diverged == [] and replayed.meets_expectation, replayed.explain()
        assert {result["name"] for result in replayed.verdict["failed"]} == set(failed)
        result = minimize(entry, lambda e, forced: replayer.replay(e, forced=forced, agent=naive))
    assert not (tmp_path / "replayed.json").exists()  # no server started (the journal writes it on start)
    assert [d.ident for d in result.minimal] == [("restart", 1)]
    assert not result.trials[1].reproduced  # without the restart, the naive agent passes


def never_initializing_agent(state: Path):
    """Posts one entry over stdio; when the call fails, posts once more on the same session, never
    initializing again, and answers with what it was told (exiting 0, as such agents do)."""
    async def post(episode: Episode) -> str:
        failures = []
        async with stdio_client(journal_behind_shim(episode, state)) as (read, write), \
                ClientSession(read, write) as mcp:
            await mcp.initialize()
            for _ in range(2):
                try:
                    return (await mcp.call_tool("post_entry", {"account": "ops", "cents": 700})).content[0].text
                except MCPError as error:
                    failures.append(str(error))
        return "failed: " + "; ".join(failures)

    def agent(episode: Episode) -> dict:
        return {"answer": asyncio.run(post(episode))}
    return agent


def test_an_agent_that_never_initializes_the_restarted_server_again_fails_on_the_fault(tmp_path: Path) -> None:
    """server_restart `when: before` over stdio: both calls meet the new server, which refuses them
    (-32602). The harness knows why: the episode fails (nothing posted; the agent exited 0, which
    counts as its claim of success), its cause names the restart and advises initializing again
    (not the irreversible write's key), and it is neither a pass nor incomplete."""
    (tmp_path / "tasks.yaml").write_text(TASKS)
    (tmp_path / "scenario.yaml").write_text(restart_on_first_post("before"))
    run_function(never_initializing_agent(tmp_path / "journal.json"), load_tasks(tmp_path / "tasks.yaml"), k=1,
                 scenario=load_scenario(tmp_path / "scenario.yaml"), out=tmp_path / "run")
    [record] = read_run(tmp_path / "run").episodes
    verdict = record["verdict"]
    assert record["output"]["answer"] == "failed: Invalid request parameters; Invalid request parameters"
    assert entries(tmp_path / "journal.json") == []  # neither call ran
    assert verdict["status"] == "fail" and verdict["cause"] is None, verdict
    assert {result["name"]: result["severity"] for result in verdict["failed"]} == {
        "effects": "medium", "claimed_success": "high"}, verdict
    assert [(fault["type"], fault["delivered"]) for fault in verdict["faults"]] == [("server_restart", True)]
    [cause] = build_report(tmp_path / "run")["causes"]["clusters"]
    assert (cause["fault"], cause["where"], cause["response"]) == (
        {"rule": "restart", "type": "server_restart"}, "POST /mcp tools/call:post_entry", "retried 1 time, then gave up")
    assert cause["irreversible"] and cause["line"].endswith(  # the kind's advice: no key would have got it through
        "→ initialize a new session (the server has forgotten this one), then retry the call, a write with the same "
        "idempotency key"), cause["line"]
    calls = [line for line in read_trace(next((tmp_path / "run" / "flows").iterdir())) if rpc(line) == "tools/call"]
    assert [json.loads(line["upstream"]["body"])["error"]["code"] for line in calls] == [-32602, -32602]


def test_a_function_agent_replayed_in_process_starts_no_server(tmp_path: Path) -> None:
    """The journal agent's MCP client passes the shim only FAULTPROXY_EPISODE and HTTP_PROXY, as a
    function agent's does; the journal server writes its state file when it starts."""
    (tmp_path / "tasks.yaml").write_text(TASKS)
    live = tmp_path / "live.json"
    run_function(journal_agent(live, careful=True), load_tasks(tmp_path / "tasks.yaml"), k=1, scenario="observe",
                 out=tmp_path / "run")
    [episode] = read_run(tmp_path / "run").episodes
    assert episode["verdict"]["status"] == "pass" and [e["key"] for e in entries(live)] == ["ops-700"]
    [frozen] = freeze(tmp_path / "run", tmp_path / "store")
    entry, replayed_state = har.read_entry(frozen.path), tmp_path / "replayed.json"
    with Replayer(ReplayOptions(out=tmp_path / "replayed"), [entry]) as replayer:
        result = replayer.replay(entry, agent=journal_agent(replayed_state, careful=True))
    assert result.diverged == [] and not result.unserved and result.meets_expectation, result.explain()
    assert result.record["output"] == episode["output"]  # the recording answered the call
    assert not replayed_state.exists()  # no journal server started
