"""What stale_state's after_write counts as a write (proxy/flow_kinds.py `writes`): what
tasks.request_class.classify calls one. MCP plumbing never writes, nor does a call of a tool
nobody annotated or named; a tool annotated (or declared) a write does, and plain HTTP goes by
its method and the task's declarations. A scenario with no fault that remembers reads
classifies nothing. An MCP answer that came as an event stream is served stale with this call's id."""

from __future__ import annotations

import json
from pathlib import Path

from mitmproxy import flow as flow_module
from mitmproxy import http
from mitmproxy.test import tflow

from faultproxy.proxy.attribution import DEFAULT_EPISODE
from faultproxy.proxy.exchange import EXCHANGE_KEY
from faultproxy.proxy.injector import FaultInjector
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.request_class import Declared
from faultproxy.tasks.task_model import EndpointPattern

URL = "http://depot.internal:9000/gateway/rpc"
TOOLS = [{"name": "odometer", "annotations": {"readOnlyHint": True}, "inputSchema": {"type": "object"}},
         {"name": "log_trip", "annotations": {"readOnlyHint": False}, "inputSchema": {"type": "object"}},
         {"name": "ping_depot", "inputSchema": {"type": "object"}}]
SESSION = {"mcp-session-id": "s-1"}


def rpc(method: str, params: dict | None = None, rpc_id: int | None = 1) -> dict:
    message = {"jsonrpc": "2.0", "method": method, **({"params": params} if params is not None else {})}
    return message if rpc_id is None else {**message, "id": rpc_id}


def call(tool: str) -> dict:
    return rpc("tools/call", {"name": tool, "arguments": {"vin": "V7"}})


async def send(injector: FaultInjector, body: dict | None, method: str = "POST", url: str = URL,
               answer: dict | bytes | None = None, headers: dict | None = None, left: bool = False) -> http.HTTPFlow:
    """One request through the injector's hooks, answered with `answer` as the upstream's (bytes:
    an event stream, passed through its stream function as mitmproxy does) unless a fault answered;
    `left`: the client disconnected before the stream's end."""
    flow = tflow.tflow()
    flow.request = http.Request.make(method, url, json.dumps(body) if body is not None else b"",
                                     {"content-type": "application/json", **(headers or {})})
    await injector.request(flow)
    if flow.response is None:
        events = isinstance(answer, bytes)
        flow.response = http.Response.make(200, answer if events else json.dumps(answer or {}),
                                           {"content-type": "text/event-stream" if events else "application/json"})
    await injector.responseheaders(flow)
    if callable(flow.response.stream):
        flow.response.stream(flow.response.raw_content)
        if left:
            flow.error = flow_module.Error("Client disconnected.")
            injector.error(flow)
            return flow
        flow.response.stream(b"")
    await injector.response(flow)
    return flow


def written(injector: FaultInjector) -> dict[str, int]:
    """The resources the episode noted written (host and path), and at which exchange."""
    return {host + path: seq for (host, path), seq in injector.episodes.peek(DEFAULT_EPISODE).writes.items()}


async def test_mcp_plumbing_reads_and_unknown_tools_never_write(tmp_path: Path) -> None:
    injector = FaultInjector(load_scenario("stale_state", {"lambda": 1.0}))
    await send(injector, rpc("initialize", {"protocolVersion": "2025-06-18"}))
    await send(injector, rpc("notifications/initialized", rpc_id=None), headers=SESSION)
    await send(injector, rpc("tools/list"), answer={"jsonrpc": "2.0", "id": 1, "result": {"tools": TOOLS}},
               headers=SESSION)
    await send(injector, None, method="GET", headers=SESSION)  # the session's event stream
    for message in (rpc("ping"), call("odometer"), call("ping_depot"), call("odometer")):
        await send(injector, message, headers=SESSION)
    assert written(injector) == {}
    flow = await send(injector, call("log_trip"), headers=SESSION)
    assert written(injector) == {"depot.internal:9000/gateway/rpc": flow.metadata[EXCHANGE_KEY].seq}
    await send(injector, None, method="DELETE", headers=SESSION)  # the session's end: plumbing
    assert written(injector) == {"depot.internal:9000/gateway/rpc": flow.metadata[EXCHANGE_KEY].seq}


async def test_declarations_say_which_tools_and_requests_write(tmp_path: Path) -> None:
    injector = FaultInjector(load_scenario("stale_state", {"lambda": 1.0}))
    injector.declared = Declared(effects=(EndpointPattern.parse("mcp:ping_depot"),),
                                 read_only=(EndpointPattern.parse("POST */search"),))
    await send(injector, call("ping_depot"), url="http://depot.internal:9000/tools")
    await send(injector, {"q": "V7"}, url="http://depot.internal:9000/fleet/search")
    await send(injector, None, method="GET", url="http://depot.internal:9000/fleet/V7")
    assert set(written(injector)) == {"depot.internal:9000/tools"}
    await send(injector, {"km": 3}, method="PUT", url="http://depot.internal:9000/fleet/V7")
    assert set(written(injector)) == {"depot.internal:9000/tools", "depot.internal:9000/fleet/V7"}


async def test_a_scenario_that_remembers_no_reads_classifies_nothing(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ndescription: d\nrules:\n"
                        "  - {name: slow, match: {path: /fleet/*}, fault: {type: delay, ms: 1}}\n")
    injector = FaultInjector(load_scenario(scenario))
    flow = await send(injector, call("log_trip"))
    assert flow.metadata[EXCHANGE_KEY].kinds is None and written(injector) == {}


async def test_tools_annotations_are_learnt_for_a_fault_that_remembers_reads_without_kinds(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: s\ndescription: d\nrules:\n"
                        "  - {name: stale, match: {path: /gateway/*}, fault: {type: stale_state, after_write: true}}\n")
    injector = FaultInjector(load_scenario(scenario))
    await send(injector, rpc("tools/list"), answer={"jsonrpc": "2.0", "id": 1, "result": {"tools": TOOLS}})
    flow = await send(injector, call("log_trip"))
    assert written(injector) == {"depot.internal:9000/gateway/rpc": flow.metadata[EXCHANGE_KEY].seq}


def events(*messages: dict) -> bytes:
    return b"".join(b"event: message\ndata: " + json.dumps(m).encode() + b"\n\n" for m in messages)


async def test_a_read_answered_as_an_event_stream_is_served_stale_with_this_calls_id(tmp_path: Path) -> None:
    injector = FaultInjector(load_scenario("stale_state", {"lambda": 1.0}))
    await send(injector, rpc("tools/list"), answer={"jsonrpc": "2.0", "id": 1, "result": {"tools": TOOLS}})
    progress = rpc("notifications/progress", {"progressToken": "p", "progress": 1}, rpc_id=None)
    result = {"content": [{"type": "text", "text": "1200 km"}], "isError": False}
    # The client leaves once it has its answer, before the stream's end: the answer is kept.
    await send(injector, {**call("odometer"), "id": 2}, answer=events(progress, {"jsonrpc": "2.0", "id": 2,
                                                                                 "result": result}), left=True)
    # Left before its answer came: nothing is kept of it.
    await send(injector, rpc("tools/call", {"name": "odometer", "arguments": {"vin": "V8"}}, 3),
               answer=events(progress), left=True)
    await send(injector, call("log_trip"))
    flow = await send(injector, {**call("odometer"), "id": 9}, answer=b"data: {}\n\n")
    assert flow.metadata[EXCHANGE_KEY].outcome == "stale"
    served = [json.loads(line[6:]) for line in flow.response.content.splitlines() if line.startswith(b"data: ")]
    assert served == [progress, {"jsonrpc": "2.0", "id": 9, "result": result}]
    flow = await send(injector, rpc("tools/call", {"name": "odometer", "arguments": {"vin": "V8"}}, 10), answer=b"")
    assert flow.metadata[EXCHANGE_KEY].detail == "no earlier response to this request"


async def test_a_write_makes_reads_stale_on_its_own_server_only(tmp_path: Path) -> None:
    """Two servers with the same paths (MCP endpoints at /mcp, HTTP services at /v1/items): a
    lagging replica of one never shows the other's writes."""
    injector = FaultInjector(load_scenario("stale_state", {"lambda": 1.0}))
    here, there = "http://depot.internal:9000/v1/items", "http://depot.internal:9001/v1/items"
    await send(injector, None, method="GET", url=here, answer={"items": 1})
    await send(injector, {"item": 2}, url=there)
    flow = await send(injector, None, method="GET", url=here, answer={"items": 2})
    assert flow.metadata[EXCHANGE_KEY].outcome == "response"
    assert flow.metadata[EXCHANGE_KEY].detail == (
        "no write to depot.internal:9000/v1/items since exchange 1; later writes touched "
        "depot.internal:9001/v1/items (write_resources names what a write touches)")
    await send(injector, {"item": 2}, url=here)
    flow = await send(injector, None, method="GET", url=here, answer={"items": 2})
    assert flow.metadata[EXCHANGE_KEY].outcome == "stale" and json.loads(flow.response.content) == {"items": 1}
