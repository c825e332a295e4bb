"""Frozen WebSocket sessions replay hermetically.

Function agents hold Realtime-like sessions (the `websockets` library, and the openai SDK's
realtime client) through `run_function` against a local server, under message faults; the
episodes are frozen, the server stops, and `replay_function` replays them: each client gets
the same messages and the same verdict, the recorded faults act again, nothing reaches the
stopped server's port, and a client that leaves the recording gets a close that says where.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed

from faultproxy import Episode, run_function
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.replay_store.minimize import minimize
from faultproxy.runner.replay_agents import Replayer, replay_function
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import task_set_from_json
from tests.support.fixtures import scenario
from tests.support.ports import PortWatch
from tests.support.realtime import FAULTS, realtime_app
from tests.support.upstream import ServerThread

LANES = {"plain": "", "drop": "/drop", "close": "/close", "sdk": "/inject", "drift": "/drift"}
# FAULTS drifts the second delta on /drift; this drifts the client's ask there too, so the
# session server must expect the ask as the upstream received it
ASK_DRIFT = """
    - name: drift-the-ask
      match: {path: "/drift/*", websocket: {from: client, body: {type: response.create}}}
      fault: {type: schema_drift, ops: [{op: add, path: drifted, value: true}]}
"""
seen: dict[str, list] = {}  # task id -> what the client saw, one item per episode (live, then replay)


async def _session(url: str, proxy_url: str, first: dict) -> dict:
    """Read the greeting, send `first`, read events until response.done or the close."""
    events, closed = [], None
    async with connect(url, proxy=proxy_url, open_timeout=20) as ws:
        events.append(json.loads(await ws.recv()))
        await ws.send(json.dumps(first))
        try:
            while events[-1].get("type") != "response.done":
                events.append(json.loads(await asyncio.wait_for(ws.recv(), 20)))
        except ConnectionClosed as error:
            closed = (error.rcvd.code, error.rcvd.reason) if error.rcvd else (1006, "")
    return {"events": events, "closed": closed}


async def _sdk_session(episode: Episode) -> dict:
    from openai import AsyncOpenAI

    client = AsyncOpenAI(api_key="sk-realtime-test-key-0123456789abcdef",
                         base_url=episode.env["RT_URL"].replace("ws://", "http://").removesuffix("/realtime"))
    events = []
    async with client.realtime.connect(model="gpt-realtime", websocket_connection_options={
            "proxy": episode.proxy_url, "open_timeout": 20}) as conn:
        await conn.response.create()
        async for event in conn:
            events.append({"type": event.type, "delta": getattr(event, "delta", None),
                           "error": event.error.code if event.type == "error" else None})
            if event.type == "response.done":
                break
    return {"events": events, "closed": None}


def agent(episode: Episode, first: dict | None = None) -> bool:
    """Ask for one answer; passes when it came whole (response.done)."""
    if episode.task_id == "binary":
        return binary(episode)
    if episode.task_id == "sdk":
        got = asyncio.run(_sdk_session(episode))
    else:
        got = asyncio.run(_session(episode.env["RT_URL"], episode.proxy_url, first or {"type": "response.create"}))
    seen.setdefault(episode.task_id, []).append(got)
    return got["events"][-1].get("type") == "response.done"


async def _binary_echo(url: str, proxy_url: str) -> dict:
    async with connect(url, proxy=proxy_url, open_timeout=20) as ws:
        events = [json.loads(await ws.recv())]
        await ws.send(b"\x00\x01audio")
        try:
            return {"events": events, "echo": await asyncio.wait_for(ws.recv(), 20), "closed": None}
        except ConnectionClosed as error:
            return {"events": events, "echo": None, "closed": (error.rcvd.code, error.rcvd.reason)}


def binary(episode: Episode) -> bool:
    """Sends audio as a binary message; the server echoes it as binary."""
    got = asyncio.run(_binary_echo(episode.env["RT_URL"], episode.proxy_url))
    seen.setdefault(episode.task_id, []).append(got)
    return got["echo"] == b"\x00\x01audio"


def diverging(episode: Episode) -> bool:
    """Sends a message the recording does not hold."""
    return agent(episode, {"type": "conversation.item.create"})


def differing(episode: Episode) -> bool:
    """Sends the recorded event with a field more."""
    return agent(episode, {"type": "response.create", "response": {"modalities": ["text"]}})


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The four sessions, run live and frozen; the server is stopped when this returns."""
    folder = tmp_path_factory.mktemp("ws-replay")
    (folder / "scenario.yaml").write_text(scenario(FAULTS + ASK_DRIFT))
    seen.clear()
    with ServerThread(realtime_app()) as server:
        tasks = task_set_from_json([{"id": task, "prompt": f"answer ({task})",
                                     "env": {"RT_URL": f"ws://127.0.0.1:{server.port}{lane}/v1/realtime"}}
                                    for task, lane in {**LANES, "binary": ""}.items()])
        live = run_function(agent, tasks, k=1, scenario=load_scenario(folder / "scenario.yaml"), out=folder / "run")
    frozen = freeze(folder / "run", folder / "store")
    return {"live": live, "path": folder / "store", "port": server.port, "frozen": frozen,
            "entries": {har.read_entry(f.path).task.id: har.read_entry(f.path) for f in frozen}}


def test_the_store_entry_keeps_the_session_and_its_faults(store):
    assert store["live"].per_task == {"plain": ["pass"], "drop": ["pass"], "close": ["fail"], "sdk": ["pass"],
                                      "drift": ["pass"], "binary": ["pass"]}
    [upgrade] = store["entries"]["drop"].exchanges
    assert upgrade.status == 101
    messages = upgrade.websocket["messages"]
    [dropped] = [m for m in messages if m.get("dropped")]
    assert dropped["fault"]["type"] == "ws_drop" and json.loads(dropped["text"])["delta"] == "d2 "
    [upgrade] = store["entries"]["close"].exchanges
    assert upgrade.websocket["close"]["by"] == "proxy" and upgrade.websocket["close"]["code"] == 1011


def test_replay_gives_every_client_the_same_messages_and_verdict_with_the_server_gone(store, tmp_path):
    with PortWatch([store["port"]]) as watch:
        results = replay_function(agent, store["path"], ReplayOptions(out=tmp_path / "out"))
    assert watch.sockets and watch.accepted == 0  # nothing tried the stopped server
    by_task = {r.entry.task.id: r for r in results}
    for task in LANES:
        result = by_task[task]
        assert (result.diverged, result.blocked, result.meets_expectation) == ([], [], True), task
        live, replayed = seen[task]
        # the same events, the greeting's `session` settings included (opened, not masked), and the same close
        assert (replayed["events"], replayed["closed"]) == (live["events"], live["closed"]), task
    assert seen["drop"][1]["events"][3]["delta"] == "d3 "  # the recorded ws_drop dropped d2 again
    assert seen["close"][1]["closed"] == (1011, "upstream went away")  # the ws_close, at the same point
    assert seen["drift"][1]["events"][2] == {"type": "response.output_text.delta", "text": "d1 "}  # drifted again
    assert [e["type"] for e in seen["sdk"][1]["events"]][:3] == ["session.created", "error",
                                                                 "response.output_text.delta"]
    lines = [json.loads(line) for line in by_task["sdk"].trace.read_text().splitlines()]
    [session] = [line["websocket"] for line in lines if line.get("websocket")]
    assert sorted(m["fault"]["rule"] for m in session["messages"] if "fault" in m) == [
        "rate-limit-before-first", "tell-the-server"]  # both injections made again, to each side
    assert all(m["fault"]["delivered"] for m in session["messages"] if "fault" in m)
    # the server's binary echo was recorded as its sha256 only: replay does not make one up
    result = by_task["binary"]
    [why] = [d["why"] for d in result.diverged]
    assert why.startswith("server message binary sha256 ") and why.endswith("cannot be replayed: it is binary, "
                                                                            "recorded as its sha256 only")
    assert seen["binary"][1]["closed"][0] == 4000 and seen["binary"][1]["echo"] is None
    [frozen] = [f for f in store["frozen"] if f.path.name.startswith(result.entry.key)]
    assert frozen.warnings == ["exchange 1: a WebSocket server message cannot be replayed "
                               "(it is binary, recorded as its sha256 only)"]


@pytest.mark.parametrize(("client", "why"), [
    (diverging, "client message 1: expected type response.create, got type conversation.item.create"),
    (differing, "client message 1: type response.create differs in response"),
])
def test_a_client_that_leaves_the_recording_gets_a_close_naming_where(store, tmp_path, client, why):
    [result] = replay_function(client, [store["entries"]["plain"]], ReplayOptions(out=tmp_path / "out"))
    code, reason = seen["plain"][-1]["closed"]
    assert (code, reason) == (4000, f"faultproxy replay diverged: {why}")
    [diverged] = result.diverged
    assert diverged["method"] == "GET" and diverged["url"].endswith("/v1/realtime")
    assert result.record["cause"] == "diverged" and not result.meets_expectation
    assert result.explain().startswith("diverged: 1 request(s) not in the recording, first #1 GET ")
    assert "client message 1" in result.explain()


def test_minimize_takes_a_message_fault_out_and_back(store, tmp_path):
    """The close that failed the episode is a fault decision of the upgrade: without it the
    failure does not reproduce, so it is the minimal fault set. (How the no-fault trial ends
    depends on the recording: the answer comes whole when the server's messages after the live
    close reached the proxy before it closed the server's side, which is usual; otherwise the
    recording ends at the close and the client waits out its own deadline.)"""
    entry = store["entries"]["close"]
    assert [(d.seq, d.rule, d.index, d.type) for d in entry.fired] == [(1, "close-after-second", 2, "ws_close")]
    with Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = minimize(entry, lambda e, forced: replayer.replay(e, forced=forced, agent=agent), write=False)
    assert [(t.faults, t.reproduced, t.diverged) for t in result.trials] == [
        ([("close-after-second", 2)], True, 0), ([], False, 0)]
    assert [d.rule for d in result.minimal] == ["close-after-second"]
    assert result.trials[1].status != "incomplete"  # judged: the client was served, not cut off by the replay
