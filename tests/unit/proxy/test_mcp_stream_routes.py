"""Which way an MCP server's event stream goes (proxy/mcp_http.py): through the loopback relay
when a fault may hold the server's messages on it, else handed on by mitmproxy's stream function."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from mitmproxy import http
from mitmproxy.test import tflow

from faultproxy.proxy.auth import EpisodeGate
from faultproxy.proxy.injector import FaultInjector
from faultproxy.proxy.mcp_http import McpStreams
from faultproxy.proxy.stream_tap import WATCH_KEY
from faultproxy.scenarios import load_scenario

URL = "http://tools.internal:8443/gateway/rpc"
CALL = {"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "lookup", "arguments": {}}}
OTHER_TOOL = "{match: {body: {method: tools/call, params.name: inventory}}, fault: {type: jsonrpc_error}}"
THIS_TOOL = "{match: {body: {method: tools/call, params.name: lookup}}, fault: {type: delay, ms: 1}}"
ELICITATION = "{match: {body: {method: elicitation/create}}, fault: {type: elicitation_declined}}"


@pytest.fixture
async def injector(tmp_path: Path) -> AsyncIterator[FaultInjector]:
    injector = FaultInjector()
    McpStreams(injector, EpisodeGate())
    yield injector
    await injector.relay.close()


def use(injector: FaultInjector, tmp_path: Path, *rules: str) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ndescription: d\nrules:\n" + "".join(
        f"  - {{name: r{i}, {rule[1:]}\n" for i, rule in enumerate(rules)))
    injector.scenario = load_scenario(scenario)


async def way(injector: FaultInjector, url: str = URL, accept: str = "application/json, text/event-stream") -> str:
    flow = tflow.tflow()
    flow.request = http.Request.make("POST", url, json.dumps(CALL), {"accept": accept, "content-type": "application/json"})
    await injector.request(flow)
    if injector.relay.routes(flow):
        return "relay"
    return "mitmproxy" if WATCH_KEY in flow.metadata else "not a stream"


async def test_no_rule_on_the_servers_messages_hands_the_stream_to_mitmproxy(injector: FaultInjector,
                                                                           tmp_path: Path) -> None:
    use(injector, tmp_path, OTHER_TOOL)
    assert await way(injector) == "mitmproxy"
    assert await way(injector, accept="application/json") == "not a stream"  # the server may answer JSON only


async def test_a_rule_that_may_select_them_keeps_the_relay(injector: FaultInjector, tmp_path: Path) -> None:
    use(injector, tmp_path, OTHER_TOOL, ELICITATION)
    assert await way(injector) == "relay"
    assert await way(injector, "http://tools.internal:8443/elsewhere") == "relay"  # the rule names no URL


async def test_a_fault_on_the_request_itself_or_a_replay_keeps_the_relay(injector: FaultInjector,
                                                                         tmp_path: Path) -> None:
    use(injector, tmp_path, THIS_TOOL)
    assert await way(injector) == "relay"  # the fault may pace, buffer or cut its stream
    use(injector, tmp_path, OTHER_TOOL)
    injector.replays = True  # the relay plays the recording
    assert await way(injector) == "relay"


async def test_a_monitor_seeing_endless_urls_keeps_a_bounded_memo(injector: FaultInjector, tmp_path: Path) -> None:
    use(injector, tmp_path, OTHER_TOOL)
    for n in range(1100):
        assert await way(injector, f"{URL}/{n}") == "mitmproxy"
    assert len(injector.mcp_streams._selects) <= 1024
