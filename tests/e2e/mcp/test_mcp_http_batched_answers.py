"""MCP over Streamable HTTP: a client that answers a server's requests with one batched POST (a
JSON array of responses, as JSON-RPC and MCP 2025-03-26 allow). The official SDK's server refuses
arrays (400), so a small aiohttp server of its own on 127.0.0.1 sends two requests on a call's event
stream, takes the batch (202), then answers the call. Each answer is its request's exchange, live
and in replay with the server stopped, where a changed answer in the batch is a divergence."""

from __future__ import annotations

import asyncio
import json
import re
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from aiohttp import web

from faultproxy import Episode, run_function
from faultproxy.formats.trace import read_trace
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import replay_function
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.mcp_clients import method, rule

pytestmark = pytest.mark.timeout(60)

ASKED = [{"jsonrpc": "2.0", "id": "s1", "method": "elicitation/create",
          "params": {"message": "refund B1?", "requestedSchema": {"type": "object"}}},
         {"jsonrpc": "2.0", "id": "s2", "method": "roots/list"}]


class BatchingServer:
    """Asks twice on a tools/call's SSE stream, waits for the batched answer POST, then answers the
    call with the answers it got; in a thread with its own event loop."""

    def __init__(self) -> None:
        self.answers: list = []  # the batches it got
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> BatchingServer:
        self.thread.start()
        self.ready.wait(10)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self.loop.is_running():
            return  # stopped already
        asyncio.run_coroutine_threadsafe(self.runner.cleanup(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def _serve(self) -> None:
        app = web.Application()
        app.router.add_post("/mcp", self._post)
        self.runner = web.AppRunner(app)
        self.loop.run_until_complete(self.runner.setup())
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        self.loop.run_until_complete(site.start())
        self.url = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}/mcp"
        self.batch = asyncio.Event()
        self.ready.set()
        self.loop.run_forever()

    async def _post(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if isinstance(body, list):  # the client's answers, batched
            self.answers.append(body)
            self.batch.set()
            return web.Response(status=202)
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        self.batch.clear()
        for asked in ASKED:
            await stream.write(b"event: message\ndata: " + json.dumps(asked).encode() + b"\n\n")
        await asyncio.wait_for(self.batch.wait(), 10)
        said = json.dumps(self.answers[-1], sort_keys=True)
        answer = {"jsonrpc": "2.0", "id": body["id"], "result": {"content": [{"type": "text", "text": said}]}}
        await stream.write(b"event: message\ndata: " + json.dumps(answer).encode() + b"\n\n")
        await stream.write_eof()
        return stream


@pytest.fixture
def server() -> Iterator[BatchingServer]:
    with BatchingServer() as running:
        yield running


NOTICE = {"jsonrpc": "2.0", "method": "notifications/roots/list_changed"}  # waited for by no request


def batching_agent(url: str, confirm: bool = True, notice: dict | None = None):
    """Calls a tool; answers the server's two requests with one batched POST (with the notification
    `notice` in it, if given); returns the call's answer."""
    def agent(episode: Episode) -> dict:
        headers = {"accept": "application/json, text/event-stream"}
        call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "refund", "arguments": {}}}
        answers = {"s1": {"action": "accept", "content": {"confirm": confirm}}, "s2": {"roots": [{"uri": "file:///b"}]}}
        with httpx2.Client(proxy=episode.proxy_url, timeout=20) as http, \
                http.stream("POST", url, json=call, headers=headers) as stream:
            asked = []
            for line in stream.iter_lines():
                message = json.loads(line[5:]) if line.startswith("data:") else {}
                if "method" in message:
                    asked.append(message["id"])
                if len(asked) == len(ASKED):
                    batch = [{"jsonrpc": "2.0", "id": rpc_id, "result": answers[rpc_id]} for rpc_id in asked]
                    batch += [notice] if notice else []
                    assert http.post(url, json=batch, headers=headers).status_code == 202
                    asked = []
                if message.get("id") == 1:
                    return {"answer": message["result"]["content"][0]["text"]}
        return {"answer": None}
    return agent


def batch_lines(trace: Path) -> tuple[list[dict], list[dict]]:
    """The trace's batched POSTs, and its server requests."""
    lines = list(read_trace(trace))
    return ([line for line in lines if (line["request"]["body"] or "").startswith("[")],
            [line for line in lines if line.get("direction") == "server to client"])


def asked_lines(trace: Path) -> list[dict]:
    batches, asked = batch_lines(trace)
    assert not batches  # each answer is its request's exchange: the batch is no line of its own
    return asked


UNUSED = rule("unused", "never/sent", 1, "{type: delay, ms: 1}")


def run_live(url: str, tmp_path: Path, notice: dict | None = None, rules: str = UNUSED) -> Path:
    """One episode of the batching agent under `rules`; its trace."""
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n  - {id: batch, prompt: refund B1}\n")
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text("name: batched\ndescription: batched answers\nseed: 3\nrules:\n" + rules)
    run_function(batching_agent(url, notice=notice), load_tasks(tasks), k=1, scenario=load_scenario(scenario),
                 out=tmp_path / "run")
    [trace] = [path for path in (tmp_path / "run").rglob("*.jsonl") if "flows" in path.parts]
    return trace


def test_a_batched_answer_post_pairs_each_answer_and_replays_with_the_server_stopped(server: BatchingServer,
                                                                                      tmp_path: Path) -> None:
    live = asked_lines(run_live(server.url, tmp_path))
    assert [[answer["id"] for answer in batch] for batch in server.answers] == [["s1", "s2"]]  # the server got it
    assert [(method(line), json.loads(line["upstream"]["body"])["result"]) for line in live] == [
        ("elicitation/create", {"action": "accept", "content": {"confirm": True}}),
        ("roots/list", {"roots": [{"uri": "file:///b"}]})]

    assert len(freeze(tmp_path / "run", tmp_path / "store")) == 1
    url = server.url
    server.__exit__()  # the server is stopped: the recording answers
    [result] = replay_function(batching_agent(url), tmp_path / "store", ReplayOptions(out=tmp_path / "r1"))
    assert (result.diverged, result.blocked) == ([], []) and result.meets_expectation, result.explain()
    assert [method(line) for line in asked_lines(result.trace)] == ["elicitation/create", "roots/list"]

    [result] = replay_function(batching_agent(url, confirm=False), tmp_path / "store",
                               ReplayOptions(out=tmp_path / "r2"))
    assert [d["url"] for d in result.diverged] == [url] and not result.meets_expectation
    assert result.diverged[0]["why"].startswith("the client answered the server's elicitation/create")
    assert '"confirm":false' in result.diverged[0]["why"].replace(" ", "")


def test_a_batch_that_also_carries_a_message_no_request_waits_for_is_recorded_once(server: BatchingServer,
                                                                                  tmp_path: Path) -> None:
    batches, asked = batch_lines(run_live(server.url, tmp_path, notice=NOTICE))
    assert [answer.get("id") for answer in server.answers[0]] == ["s1", "s2", None]  # the server got all three
    assert [method(line) for line in asked] == ["elicitation/create", "roots/list"]
    assert all(json.loads(line["upstream"]["body"])["result"] for line in asked)
    [batch] = batches
    assert json.loads(batch["request"]["body"])[-1] == NOTICE and batch["upstream"]["status"] == 202


def replay_batch(url: str, tmp_path: Path, name: str, confirm: bool = True, notice: dict | None = None):
    """The store's one entry replayed by the batching agent (the server is stopped by then)."""
    [result] = replay_function(batching_agent(url, confirm, notice), tmp_path / "store",
                               ReplayOptions(out=tmp_path / name))
    return result


def test_a_batch_that_also_carries_a_notification_replays_with_the_server_stopped(server: BatchingServer,
                                                                                  tmp_path: Path) -> None:
    batches, _ = batch_lines(run_live(server.url, tmp_path, notice=NOTICE))
    assert len(batches) == 1 and len(freeze(tmp_path / "run", tmp_path / "store")) == 1
    url = server.url
    server.__exit__()  # the server is stopped: the recording answers
    result = replay_batch(url, tmp_path, "same", notice=NOTICE)
    assert (result.diverged, result.blocked, result.unserved) == ([], [], []) and result.meets_expectation, \
        result.explain()
    [batch] = batch_lines(result.trace)[0]  # the notification went on in the batch, as recorded
    assert json.loads(batch["request"]["body"])[-1] == NOTICE and batch["upstream"]["status"] == 202

    other = {**NOTICE, "method": "notifications/cancelled", "params": {"requestId": 1}}
    notice, answer = replay_batch(url, tmp_path, "notice", notice=other), \
        replay_batch(url, tmp_path, "answer", confirm=False, notice=NOTICE)
    for changed in (notice, answer):  # the batch's notification, or one of its answers
        assert [d["url"] for d in changed.diverged] == [url] and not changed.meets_expectation, changed.diverged
    [diverged] = [line for line in read_trace(notice.trace) if line["seq"] == notice.diverged[0]["seq"]]
    assert json.loads(diverged["request"]["body"]) == [other]  # what went on of the batch: no recording has it
    host = url.split("/")[2]
    assert re.fullmatch(rf"batch 1 to POST {host}/mcp sends notifications/cancelled; the recording's batch 1 there "
                        r"\(#\d+\) sent notifications/roots/list_changed", notice.diverged[0]["why"]), notice.diverged
    assert answer.diverged[0]["why"].startswith("the client answered the server's elicitation/create")


LOST_AND_SLOW = (rule("lost", "elicitation/create", 1, "{type: response_lost}")
                 + rule("slow", "roots/list", 1, "{type: delay, ms: 300, at: response}"))


def test_a_fault_on_one_answer_of_a_batch_reaches_the_server_and_replays(server: BatchingServer,
                                                                        tmp_path: Path) -> None:
    live = asked_lines(run_live(server.url, tmp_path, rules=LOST_AND_SLOW))
    # the server got what the injector made of each answer: the elicitation's lost, the roots' late
    assert [[answer["id"] for answer in batch] for batch in server.answers] == [["s2"]]
    faults = {line["fault"]["rule"]: line for line in live}
    assert [method(line) for line in live] == ["elicitation/create", "roots/list"] and set(faults) == {"lost", "slow"}
    assert all(line["fault"]["delivered"] and line["forwarded"] for line in live)
    assert [json.loads(line["upstream"]["body"])["result"] for line in live] == [  # the client's answers, both
        {"action": "accept", "content": {"confirm": True}}, {"roots": [{"uri": "file:///b"}]}]

    assert len(freeze(tmp_path / "run", tmp_path / "store")) == 1
    url = server.url
    server.__exit__()
    result = replay_batch(url, tmp_path, "replayed")
    assert (result.diverged, result.blocked, result.unserved) == ([], [], []) and result.meets_expectation, \
        result.explain()
    replayed = asked_lines(result.trace)
    assert [(line["fault"]["rule"], line["fault"]["delivered"]) for line in replayed] == [
        ("lost", True), ("slow", True)]
    assert [line["upstream"]["body"] for line in replayed] == [line["upstream"]["body"] for line in live]
    changed = replay_batch(url, tmp_path, "changed", confirm=False)  # the lost answer is still the client's
    assert [d["url"] for d in changed.diverged] == [url] and not changed.meets_expectation, changed.diverged
    assert changed.diverged[0]["why"].startswith("the client answered the server's elicitation/create")
