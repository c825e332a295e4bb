"""Hermetic replay of a stdio MCP episode whose server talks back. Recorded with `faultproxy run`:
an agent on the official SDK's client (sampling, elicitation and roots callbacks, progress) and
tests/support/agents/asking_mcp_server.py behind `faultproxy mcp --`, with faults on the server's
requests; frozen; replayed with no server. The stand-in sends the client the recorded server's
requests and notifications at their place, re-applies the recorded faults, and checks the
client's answers against the recorded ones."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator

import pytest

from faultproxy import RunOptions, run
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.rendering.html import render
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.har import Recorded, read_entries
from faultproxy.replay_store.replay_matching import Pool
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.replay_store.stand_in import server_messages_after
from faultproxy.runner.plan import GridPoint
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.mcp_clients import AGENTS

pytestmark = pytest.mark.timeout(300)

SCENARIO = """name: the_user_says_no
description: faults on the server's requests, in the client's place
seed: 3
rules:
  - name: user_says_no           # the second confirmation: refund_regardless's
    match: {body: {method: elicitation/create}}
    when: {calls: [2]}
    fault: {type: elicitation_declined}
  - name: no_model               # the second sampling request
    match: {body: {method: sampling/createMessage}}
    when: {calls: [2]}
    fault: {type: jsonrpc_error, code: -32001, message: no model here}
  - name: roots_lost             # the client answers; the server never hears it
    match: {body: {method: roots/list}}
    fault: {type: response_lost}
"""
TASKS = """tasks:
  - {id: asking, prompt: "Summarize orders A1 and A2, refund them", shape: writes_state, max_tool_calls: 5,
     budgets: {wall_s: 120, requests: 12}}
"""
SERVER_TO_CLIENT = "server to client"


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    folder = tmp_path_factory.mktemp("asking")
    (folder / "scenario.yaml").write_text(SCENARIO)
    (folder / "tasks.yaml").write_text(TASKS)
    state = folder / "refunds"
    agent = [sys.executable, str(AGENTS / "asking_mcp_agent.py"), str(state)]
    result = run(RunOptions(scenario=load_scenario(folder / "scenario.yaml"), tasks=load_tasks(folder / "tasks.yaml"),
                            out=folder / "run", k=1, grid=[GridPoint()], show_progress=False, command=agent))
    assert result.complete, result.errors
    [episode] = read_run(folder / "run").episodes
    assert state.read_text() == "A2"  # the live server refunded, A2 last: the careless tool ignored the "decline"
    state.unlink()
    freeze(folder / "run", folder / "store")
    [entry] = read_entries(folder / "store")
    with Replayer(ReplayOptions(out=folder / "replayed"), [entry]) as replayer:  # one replay proxy for the module
        yield {"folder": folder, "episode": episode, "agent": agent, "state": state, "entry": entry,
               "replayer": replayer}


def faults(verdict: dict) -> list[tuple]:
    return [(f["seq"], f["rule"], f["type"], f["delivered"]) for f in verdict["faults"]]


def test_a_frozen_episode_replays_the_servers_own_requests_without_the_server(recorded: dict) -> None:
    live = recorded["episode"]
    assert live["verdict"]["status"] == "fail" and [c["name"] for c in live["verdict"]["failed"]] == ["confirmation"]
    result = recorded["replayer"].replay(recorded["entry"], recorded["agent"])
    assert result.meets_expectation and not result.diverged and not result.unserved, result.explain()
    assert not recorded["state"].exists()  # no server ran: nothing was refunded
    # The client's callbacks were asked what the recorded server asked, in the same order: progress,
    # sampling (the second one answered by the jsonrpc_error fault), the first elicitation (the
    # second declined by the fault), roots (its answer lost again); and the tools said the same.
    assert result.record["output"] == live["output"]
    assert [m for m, _ in live["output"]["asked"]] == ["notifications/progress", "notifications/progress",
                                                       "sampling/createMessage", "notifications/progress",
                                                       "elicitation/create", "roots/list"]
    assert "no model here" in live["output"]["answer"] and "timed out" in live["output"]["answer"]
    assert faults(result.verdict) == faults(live["verdict"]) and len(faults(live["verdict"])) == 3
    # The confirmation check still flags the refund committed after the re-applied "decline".
    [failed] = result.verdict["failed"]
    assert failed["name"] == "confirmation" and failed["severity"] == "high"
    assert failed["detail"] == live["verdict"]["failed"][0]["detail"]
    replayed = list(read_trace(result.trace))
    live_trace = list(read_trace(recorded["folder"] / "run" / live["trace"]))
    assert sorted((line["seq"], line.get("direction")) for line in replayed) == \
        sorted((line["seq"], line.get("direction")) for line in live_trace)
    assert sum(line.get("direction") == SERVER_TO_CLIENT for line in replayed) >= 8


def test_a_client_that_answers_the_server_differently_diverges(recorded: dict) -> None:
    result = recorded["replayer"].replay(recorded["entry"], [*recorded["agent"], "no"])  # the user says no
    [diverged] = result.diverged
    assert '"confirm":false' in diverged["why"] and '"confirm":true' in diverged["why"]
    replayed = {line["seq"]: line for line in read_trace(result.trace)}
    assert json.loads(replayed[diverged["seq"]]["request"]["body"])["method"] == "elicitation/create"
    assert result.verdict["status"] == "incomplete" and result.verdict["cause"] == "diverged"
    assert not result.meets_expectation and "the client answered the server's elicitation/create" in result.explain()


def test_the_report_marks_the_servers_messages_and_counts_only_the_agents_calls(recorded: dict) -> None:
    run_dir, live = recorded["folder"] / "run", recorded["episode"]
    # five tools/call of the agent's, within max_tool_calls 5: the server's requests are not among them
    assert live["verdict"]["tool_calls"] == 5
    assert "tool_calls" not in {c["name"] for c in live["verdict"]["failed"]}
    # nor are they the agent's requests: of its 9 messages, the 5 calls are (initialize, its
    # notification, tools/list and the like are the session's plumbing), within `requests: 12`, live and
    # judged, though the trace holds more than 12 exchanges
    lines = list(read_trace(run_dir / live["trace"]))
    from_server = sum(line.get("direction") == SERVER_TO_CLIENT for line in lines)
    assert live["verdict"]["requests"] == 5 and len(lines) - from_server == 9 and len(lines) > 12
    assert live["cause"] is None and "budget" not in {c["name"] for c in live["verdict"]["failed"]}
    page = render(build_report(run_dir), run_dir)
    badges, arrows = page.count('class="badge b-s2c"'), page.count('<path class="s2c"')
    # a badge in the table and an arrow in the chart for each, in every timeline of the episode (its cause's, its own)
    assert badges == arrows and badges % from_server == 0 and badges >= from_server >= 9
    assert "← server to client</span> elicitation/create" in page
    assert "← server to client: sampling/createMessage, answered by the client" in page  # the bars' labels
    assert "← server to client: notifications/progress →" in page


def test_without_the_recorded_faults_on_its_requests_the_server_would_have_heard_otherwise(recorded: dict) -> None:
    """As minimize tries it: no fault fires, so the server would get what it never got when
    recorded, and the stand-in cannot know what it would have done. Each is a divergence."""
    result = recorded["replayer"].replay(recorded["entry"], recorded["agent"], forced=[])
    replayed = {line["seq"]: json.loads(line["request"]["body"])["method"] for line in read_trace(result.trace)}
    whys = {replayed[d["seq"]]: d["why"] for d in result.diverged}
    assert set(whys) == {"sampling/createMessage", "elicitation/create", "roots/list"}, whys
    assert "never asked the client" in whys["elicitation/create"] and "never asked" in whys["sampling/createMessage"]
    assert whys["roots/list"].startswith("the recorded response_lost (roots_lost) on it did not fire")


def stdio(seq: int, direction: str, host: str = "shop", forwarded: bool = True) -> Recorded:
    return Recorded(seq, "POST", f"http://{host}.stdio.invalid/mcp", (), b"{}", forwarded, 200, "", (), b"{}",
                    None, None, None, {}, direction=direction)


def test_a_servers_messages_follow_the_last_client_message_that_reached_that_server() -> None:
    c2s = "client to server"
    recordings = [stdio(1, SERVER_TO_CLIENT), stdio(2, c2s), stdio(3, c2s, "other"), stdio(4, SERVER_TO_CLIENT),
                  stdio(5, c2s, forwarded=False), stdio(6, SERVER_TO_CLIENT), stdio(7, SERVER_TO_CLIENT, "other")]
    following = {seq: [r.seq for r in messages] for seq, messages in server_messages_after(recordings).items()}
    # before any client message: after the first; a faulted (not forwarded) message never reached it
    assert following == {2: [1, 4, 6], 3: [7]}


def test_the_servers_messages_are_a_pool_of_their_own() -> None:
    cancelled = b'{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":1}}'
    mine, theirs = (Recorded(seq, "POST", "http://shop.stdio.invalid/mcp", (), cancelled, True, 202, "", (), b"",
                             None, None, None, {}, direction=direction)
                    for seq, direction in ((1, "client to server"), (2, SERVER_TO_CLIENT)))
    clients, servers = Pool([mine, theirs]), Pool([mine, theirs], from_server=True)
    assert clients.take("POST", mine.url, (), cancelled).recorded.seq == 1
    assert clients.take("POST", mine.url, (), cancelled) is None  # never the server's
    assert servers.take("POST", mine.url, (), cancelled).recorded.seq == 2
    assert [r.seq for r in clients.unserved()] == [] == [r.seq for r in servers.unserved()]
