"""What session_expired leaves is the ended session's alone: two clients of one agent hold
sessions with the same server (the journal on the official SDK, behind a path of its own), a
fault ends one, and the other goes on; a request with no session header (a health check on the
same host, a third client's initialize) does not bring the ended one back, which keeps its 404
as a server that lost it answers. And how many ended sessions an episode keeps is bounded.
server_restart, unlike it, ends every session the server held, and only those, and drops the
streams they still had open.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from pathlib import Path

import anyio
import pytest
import requests
from mcp.shared.exceptions import MCPError

from faultproxy import Episode, run_function
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.agents.journal_mcp_server import Events, entries, make_server
from tests.support.fixtures import scenario
from tests.support.mcp_clients import HttpServer, http_session

pytestmark = pytest.mark.timeout(120)

PATH = "/svc/books/rpc"
GONE = "Session not found"
POST = {"account": "ops", "cents": 700}
TASKS = """tasks:
  - id: post
    prompt: post 7.00 to the ops account
    irreversible: ["mcp:post_*"]
    expected: {effects: [{mcp: "post_*", count: 1}]}
"""


class Journal(HttpServer):
    def __init__(self, state: Path) -> None:
        self.state = state
        super().__init__(make_server(state).streamable_http_app(host="127.0.0.1", streamable_http_path=PATH), PATH)


@pytest.fixture
def journal(tmp_path: Path) -> Iterator[Journal]:
    with Journal(tmp_path / "journal.json") as server:
        yield server


def expire_posts(calls: str) -> str:
    return scenario("- name: expire\n  match: {body: {method: tools/call, params.name: post_entry}}\n"
                    f"  when: {{calls: [{calls}]}}\n  fault: {{type: session_expired}}\n")


def held_and_forwarded(proxy, tmp_path: Path) -> tuple[list[str], list[str]]:
    """The JSON-RPC methods (or HTTP method) the proxy answered for the fault, and those it forwarded."""
    proxy.stop()
    lines = sorted(read_trace(next((tmp_path / "flows").iterdir())), key=lambda line: line["seq"])

    def what(line: dict) -> str:
        body = line["request"]["body"]
        return json.loads(body)["method"] if body else line["request"]["method"]
    return ([what(line) for line in lines if line.get("consequence_of")],
            [what(line) for line in lines if line["forwarded"]])


async def test_one_session_ends_and_the_others_with_its_server_go_on(journal: Journal, make_proxy,
                                                                     tmp_path: Path) -> None:
    proxy = make_proxy(expire_posts("1"))
    via = proxy.proxy_url("ep")
    async with http_session(via, journal.url) as first, http_session(via, journal.url) as second:
        with pytest.raises(MCPError, match=GONE):
            await first.call_tool("post_entry", POST)
        posted = json.loads((await second.call_tool("post_entry", POST)).content[0].text)
        health = requests.get(journal.url.replace(PATH, "/healthz"), proxies={"http": via}, timeout=30)
        async with http_session(via, journal.url) as third:  # a new session's initialize, to the same URL
            assert {tool.name for tool in (await third.list_tools()).tools} == {"post_entry", "list_entries"}
        with pytest.raises(MCPError, match=GONE):  # still ended, as a server that lost it answers
            await first.list_tools()
        assert [entry["id"] for entry in json.loads((await second.call_tool(
            "list_entries", {"account": "ops"})).content[0].text)] == ["E1"]
    assert posted["id"] == "E1" and [entry["id"] for entry in entries(journal.state)] == ["E1"]
    assert health.status_code == 404  # the server's own answer: the check reached it
    held, forwarded = held_and_forwarded(proxy, tmp_path)
    assert held == ["tools/list", "DELETE"]  # the ended session's requests after the fault; its own call answered 404
    assert forwarded.count("initialize") == 3 and forwarded.count("tools/call") == 2  # the second's post and read


async def test_an_episode_keeps_its_latest_ended_sessions_up_to_its_limit(journal: Journal, make_proxy,
                                                                          tmp_path: Path) -> None:
    proxy = make_proxy(expire_posts("1, 2, 3"), limits=EpisodeLimits(ended_sessions=2))
    via = proxy.proxy_url("ep")
    async with http_session(via, journal.url) as first, http_session(via, journal.url) as second, \
            http_session(via, journal.url) as third:
        for client in (first, second, third):
            with pytest.raises(MCPError, match=GONE):
                await client.call_tool("post_entry", POST)
        assert len(proxy.injector.episodes.peek("ep").lingering) == 2
        listed = await first.list_tools()  # the oldest, forgotten: it reaches the server, which never lost it
        for client in (second, third):
            with pytest.raises(MCPError, match=GONE):
                await client.list_tools()
    assert {tool.name for tool in listed.tools} == {"post_entry", "list_entries"}
    held, _ = held_and_forwarded(proxy, tmp_path)
    assert held == ["tools/list", "tools/list", "DELETE", "DELETE"]  # the first's DELETE reached the server


RESTART = scenario("- name: restart\n  match: {body: {method: tools/call, params.name: post_entry}}\n"
                   "  when: {calls: [1]}\n  fault: {type: server_restart, when: before}\n")


async def test_a_restart_ends_every_session_its_server_held_and_a_session_begun_after_it_goes_on(
        journal: Journal, make_proxy, tmp_path: Path) -> None:
    proxy = make_proxy(RESTART)
    via = proxy.proxy_url("ep")
    async with http_session(via, journal.url) as first, http_session(via, journal.url) as second:
        with pytest.raises(MCPError, match=GONE):
            await first.call_tool("post_entry", POST)
        with pytest.raises(MCPError, match=GONE):  # the other client's session died with the server too
            await second.call_tool("list_entries", {"account": "ops"})
        async with http_session(via, journal.url) as third:  # begun after the restart
            posted = json.loads((await third.call_tool("post_entry", POST)).content[0].text)
        with pytest.raises(MCPError, match=GONE):
            await first.list_tools()
    assert posted["id"] == "E1" and [entry["id"] for entry in entries(journal.state)] == ["E1"]
    held, forwarded = held_and_forwarded(proxy, tmp_path)
    # the second's read, the first's listing, then each ended session's DELETE as its client closes
    assert [what for what in held if what != "GET"] == ["tools/call", "tools/list", "DELETE", "DELETE"]
    assert forwarded.count("initialize") == 3 and forwarded.count("tools/call") == 1  # the third's post


async def test_a_restart_ends_only_the_sessions_its_episode_still_knows(journal: Journal, make_proxy,
                                                                        tmp_path: Path) -> None:
    """An episode keeps at most EpisodeLimits.mcp_sessions sessions servers gave, the newest: one
    it forgot reaches the server after a restart, which (not restarted behind the proxy) still has it."""
    proxy = make_proxy(RESTART, limits=EpisodeLimits(mcp_sessions=1))
    via = proxy.proxy_url("ep")
    async with http_session(via, journal.url) as first, http_session(via, journal.url) as second:
        with pytest.raises(MCPError, match=GONE):
            await second.call_tool("post_entry", POST)
        listed = await first.list_tools()
    assert {tool.name for tool in listed.tools} == {"post_entry", "list_entries"}
    held, _ = held_and_forwarded(proxy, tmp_path)
    assert [what for what in held if what != "GET"] == ["DELETE"]  # the second's; the first's reached the server


def two_clients_and_a_third(url: str):
    """An agent whose first client posts and whose second reads, each answer or error kept, then
    a third client, begun afterwards, posts."""
    async def steps(via: str) -> list[str]:
        said = []
        async with http_session(via, url) as first, http_session(via, url) as second:
            for client, tool, arguments in ((first, "post_entry", POST), (second, "list_entries", {"account": "ops"})):
                try:
                    said.append((await client.call_tool(tool, arguments)).content[0].text)
                except MCPError as error:
                    said.append(str(error))
            async with http_session(via, url) as third:
                said.append((await third.call_tool("post_entry", POST)).content[0].text)
        return said

    def agent(episode: Episode) -> dict:
        return {"answer": json.dumps(asyncio.run(steps(episode.proxy_url)))}
    return agent


def test_a_restart_of_a_server_with_two_sessions_replays_with_the_server_stopped(tmp_path: Path) -> None:
    """Replay gives each recorded session an id of its own (replay_store.stand_in), and the restart
    ends both again there: the second client's read gets its 404 from the proxy, no server runs."""
    (tmp_path / "tasks.yaml").write_text(TASKS)
    (tmp_path / "scenario.yaml").write_text(RESTART)
    with Journal(tmp_path / "journal.json") as journal:
        agent = two_clients_and_a_third(journal.url)
        run_function(agent, load_tasks(tmp_path / "tasks.yaml"), k=1, scenario=load_scenario(tmp_path / "scenario.yaml"),
                     out=tmp_path / "run")
    [record] = read_run(tmp_path / "run").episodes
    assert json.loads(record["output"]["answer"])[:2] == [GONE, GONE], record["output"]
    assert [entry["id"] for entry in entries(journal.state)] == ["E1"]  # the third's post
    [frozen] = freeze(tmp_path / "run", tmp_path / "store")
    with Replayer(ReplayOptions(out=tmp_path / "replayed"), [entry := har.read_entry(frozen.path)]) as replayer:
        replayed = replayer.replay(entry, agent=agent)  # the journal is stopped
    assert replayed.diverged == [] and not replayed.unserved and replayed.meets_expectation, replayed.explain()
    assert replayed.record["output"] == record["output"]
    held = [line for line in read_trace(replayed.trace) if line.get("consequence_of")]
    assert [json.loads(line["request"]["body"])["method"] for line in held if line["request"]["body"]] == ["tools/call"]


class Gated(HttpServer):
    """The journal with a tool that runs until the test releases it, counting the GET requests
    it gets; its events have ids (an event store), so a client that lost a stream resumes it."""

    def __init__(self, state: Path) -> None:
        self.running, self.release, self.gets = threading.Event(), threading.Event(), threading.Semaphore(0)
        server = make_server(state)

        @server.tool()
        async def wait_for_release() -> str:
            self.running.set()
            await anyio.to_thread.run_sync(self.release.wait)
            return "released"

        app = server.streamable_http_app(host="127.0.0.1", streamable_http_path=PATH, event_store=Events(),
                                         retry_interval=50)  # the client's wait before it resumes, in ms

        async def counted(scope, receive, send) -> None:
            if scope["type"] == "http" and scope["method"] == "GET":
                self.gets.release()
            await app(scope, receive, send)
        super().__init__(counted, PATH)

    def __exit__(self, *exc: object) -> None:
        self.release.set()  # the call the restart cut off still runs on the server behind the proxy
        super().__exit__(*exc)


async def test_a_restart_drops_the_streams_its_server_had_open(make_proxy, tmp_path: Path) -> None:
    """A restarted server dropped every connection it had: the second session's call in flight
    ends without its answer (the SDK's client resumes it with Last-Event-ID and gets 404), its GET
    stream ends, and its next request gets 404; the trace says each stream was cut, naming the restart."""
    proxy = make_proxy(RESTART)
    via = proxy.proxy_url("ep")
    with Gated(tmp_path / "journal.json") as gated:
        async with http_session(via, gated.url) as first, http_session(via, gated.url) as second:
            for _ in range(2):  # each client's GET stream is open at the server
                assert await asyncio.to_thread(gated.gets.acquire, timeout=30)
            waiting = asyncio.create_task(second.call_tool("wait_for_release", {}))
            assert await asyncio.to_thread(gated.running.wait, 30)
            with pytest.raises(MCPError, match=GONE):
                await first.call_tool("post_entry", POST)
            with pytest.raises(MCPError, match="reconnection attempts were exhausted"):
                await waiting
            with pytest.raises(MCPError, match=GONE):
                await second.list_tools()
    proxy.stop()
    lines = sorted(read_trace(next((tmp_path / "flows").iterdir())), key=lambda line: line["seq"])
    [restart] = [line for line in lines if line["fault"]]
    cut = [line for line in lines if line["client"]["outcome"] == "cut"]
    assert sorted(json.loads(line["request"]["body"])["method"] if line["request"]["body"] else line["request"]["method"]
                  for line in cut) == ["GET", "GET", "tools/call"]
    for line in cut:
        assert line["forwarded"] and line["upstream"]["status"] == 200, line
        assert line["consequence_of"] == {"rule": "restart", "type": "server_restart", "seq": restart["seq"]}
        assert "the server restarted (rule restart)" in line["error"]
    [call] = [ex for ex in parse_trace(cut) if ex.method == "POST"]
    assert call.unanswered == "its event stream ended without the answer"  # maybe committed (evaluator.traces.ambiguity)
    resumed = [line for line in lines if line["request"]["method"] == "GET" and line["client"]["status"] == 404
               and any(name.lower() == "last-event-id" for name, _ in line["request"]["headers"])]
    assert resumed and all(line["consequence_of"]["seq"] == restart["seq"] and not line["forwarded"] for line in resumed)
