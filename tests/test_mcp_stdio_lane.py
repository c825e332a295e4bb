"""The stdio lane (proxy/stdio/lane.py): the way a shim's messages reach the proxy. Driven from
the shim's end (LaneClient) against a real proxy with a run's token and episodes, as `faultproxy
run` starts it: who gets a lane, what an ended episode's message gets, and what a shim that
leaves mid-call leaves in the trace."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest

from faultproxy.formats.trace import read_trace
from faultproxy.proxy.server import ProxyServer
from faultproxy.proxy.stdio.lane import LANE_URL, encode
from faultproxy.proxy.stdio.lane_client import LaneClient, LaneError, body_of

pytestmark = pytest.mark.timeout(120)

TOKEN = "lane-test-token-0123456789"
CALL = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                   "params": {"name": "refund_order", "arguments": {"order_id": 1001}}}).encode()
ANSWER = json.dumps({"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "refunded"}]}}).encode()
SCENARIO = """name: lane
description: one rule, on the second refund
seed: 5
rules:
  - name: refund_refused
    match: {body: {method: tools/call, params.name: refund_order}}
    when: {calls: [2]}
    fault: {type: jsonrpc_error, code: -32001, message: refused}
"""


@pytest.fixture
def proxy(tmp_path: Path):
    scenario = tmp_path / "lane.yaml"
    scenario.write_text(SCENARIO)
    with ProxyServer(scenario, trace_dir=tmp_path / "flows", token=TOKEN, only_begun=True) as server:
        server.begin_episode("ep")
        yield server


def trace(folder: Path, episode: str = "ep") -> list[dict]:
    return list(read_trace(folder / "flows" / f"{episode}.jsonl"))


async def call_through(lane: LaneClient) -> dict:
    """One call as the shim makes it: the lane's word, then (if forwarded) the server's answer."""
    n, word = await lane.send(CALL)
    if word.get("forward"):
        if word["unchanged"]:
            lane.report(n, 200, [("content-type", "application/json")], ANSWER)
            return {"status": 200, "body": ANSWER}
        word = await lane.answer(n, 200, [("content-type", "application/json")], ANSWER)
    return {**word, "body": body_of(word)}


async def test_each_message_is_matched_decided_and_traced_in_the_episode(proxy: ProxyServer, tmp_path: Path) -> None:
    lane = await LaneClient.open(proxy.proxy_url("ep"), "shop")
    first, second = await call_through(lane), await call_through(lane)
    await lane.close()
    proxy.end_episode("ep")
    assert first == {"status": 200, "body": ANSWER}  # forwarded, answered by the server, unchanged
    assert second["status"] == 200 and json.loads(second["body"])["error"]["message"] == "refused"
    lines = trace(tmp_path)
    assert [line["seq"] for line in lines] == [1, 2]
    assert {line["request"]["url"] for line in lines} == {"http://shop.stdio.invalid/mcp"}
    assert lines[0]["forwarded"] and lines[0]["upstream"]["body"] == ANSWER.decode() and lines[0]["fault"] is None
    assert lines[1]["fault"]["rule"] == "refund_refused" and not lines[1]["forwarded"]


@pytest.mark.parametrize(("episode", "token", "said"), [
    ("ep", "wrong-token-0123456789", "wrong token"),
    ("never-begun", TOKEN, "unknown episode"),
])
async def test_no_lane_without_the_runs_token_for_an_episode_it_began(proxy: ProxyServer, tmp_path: Path,
                                                                      episode: str, token: str, said: str) -> None:
    with pytest.raises(LaneError, match=f"HTTP 407: faultproxy: {said}"):
        await LaneClient.open(f"http://{episode}:{token}@127.0.0.1:{proxy.port}", "shop")
    [refused] = [json.loads(line) for line in (tmp_path / "flows" / "_rejected.jsonl").read_text().splitlines()]
    assert refused["reason"] == said and refused["url"] == "http://lane.stdio.invalid/"


async def lane_words(port: int, ticket: str | None) -> bytes:
    """Everything a lane says to a connection that presents `ticket` and sends one call."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(encode({"ticket": ticket, "server": "shop"}) + encode({"n": 1, "send": CALL.decode()}))
    said = await asyncio.wait_for(reader.readline(), 30)
    writer.close()
    return said


async def test_a_ticket_opens_one_lane_and_a_made_up_one_none(proxy: ProxyServer) -> None:
    async with aiohttp.ClientSession() as http, http.get(LANE_URL, proxy=proxy.proxy_url("ep")) as response:
        given = await response.json()
    assert await lane_words(given["port"], "made-up") == b""  # closed without a word
    assert json.loads(await lane_words(given["port"], given["ticket"]))["forward"] is True
    assert await lane_words(given["port"], given["ticket"]) == b""  # a ticket opens one lane


async def test_after_its_episode_ends_a_lane_is_refused_and_the_trace_untouched(proxy: ProxyServer,
                                                                               tmp_path: Path) -> None:
    lane = await LaneClient.open(proxy.proxy_url("ep"), "shop")
    await call_through(lane)
    proxy.end_episode("ep")
    late = await call_through(lane)
    await lane.close()
    assert late["status"] == 407 and "unknown episode" in late["body"].decode()
    assert len(trace(tmp_path)) == 1
    [refused] = [json.loads(line) for line in (tmp_path / "flows" / "_rejected.jsonl").read_text().splitlines()]
    assert refused["episode"] == "ep" and refused["url"] == "http://shop.stdio.invalid/mcp"


async def test_a_shim_that_leaves_mid_call_leaves_the_call_in_the_trace(proxy: ProxyServer, tmp_path: Path) -> None:
    lane = await LaneClient.open(proxy.proxy_url("ep"), "shop")
    _, word = await lane.send(CALL)
    assert word["forward"]  # the server has it; the shim dies before it answers
    await lane.close()
    proxy.end_episode("ep")
    [line] = trace(tmp_path)
    assert line["forwarded"] and line["upstream"] is None
    assert line["client"]["outcome"] == "client_gone" and "cut_short" in line


async def test_a_proxy_that_goes_away_loses_the_calls_in_flight_and_after(tmp_path: Path) -> None:
    scenario = tmp_path / "lane.yaml"
    scenario.write_text(SCENARIO)
    with ProxyServer(scenario, trace_dir=tmp_path / "flows") as server:
        lane = await LaneClient.open(server.proxy_url("ep"), "shop")
        _, word = await lane.send(CALL)
        assert word["forward"]
        pending = asyncio.create_task(lane.answer(1, 200, [], ANSWER))
        await asyncio.sleep(0)
    assert await asyncio.wait_for(pending, 30) == {"lost": True}  # the proxy stopped: no answer, no hang
    assert (await lane.send(CALL))[1] == {"lost": True}
    await lane.close()
