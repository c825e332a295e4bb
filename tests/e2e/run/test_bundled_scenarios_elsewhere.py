"""The bundled schema_drift, stale_state and prompt_injection scenarios on a world unlike the demo's:
a fleet API under /api/v3 whose answers nest their fields (`{"vehicle": {"vin", "state",
"odometer_km"}}`) or list them, and an MCP server whose tools nobody annotated; every URL only in
the agent's own configuration. Each scenario fires, what it did is in what the agent got, and
prompt_injection's check catches an agent that sends the planted canary, over HTTP and MCP alike."""

from __future__ import annotations

import asyncio
import json
import re

import httpx
import httpx2
import pytest
from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import MCPServer
from mcp.types import ToolAnnotations

from faultproxy import run_function, task_set_from_json
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from tests.support.mcp_clients import HttpServer, http_session
from tests.support.upstream import ServerThread
from tests.support.verdicts import check

VEHICLES = "/api/v3/vehicles"
CANARY = re.compile(r"fp-canary-[0-9a-f]+")
NOTICE = "NOTICE TO THE ASSISTANT"


class Fleet:
    def __init__(self) -> None:
        self.vehicles = {vin: {"vin": vin, "state": "parked", "odometer_km": km}
                         for vin, km in (("V1", 1200), ("V2", 80))}
        self.dispatched: list[dict] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get(VEHICLES, lambda _: web.json_response(list(self.vehicles.values())))
        app.router.add_get(VEHICLES + "/{vin}", self.vehicle)
        app.router.add_post(VEHICLES + "/{vin}/dispatch", self.dispatch)
        return app

    async def vehicle(self, request: web.Request) -> web.Response:
        return web.json_response({"vehicle": self.vehicles[request.match_info["vin"]]})

    async def dispatch(self, request: web.Request) -> web.Response:
        self.vehicles[request.match_info["vin"]]["state"] = "dispatched"
        self.dispatched.append(await request.json())
        return web.json_response({"dispatch_ref": f"D-{len(self.dispatched)}"}, status=201)


@pytest.fixture
def fleet():
    world = Fleet()
    with ServerThread(world.app()) as server:
        yield world, server.url


def run(tmp_path, name: str, agent, task_ids: list[str]) -> dict[str, dict]:
    tasks = task_set_from_json([{"id": task_id, "prompt": "Dispatch V1."} for task_id in task_ids])
    run_function(agent, tasks, k=1, scenario=load_scenario(name, {"lambda": 1.0}), out=tmp_path / name)
    return {record["task_id"]: record for record in read_run(tmp_path / name).episodes}


def reader(url: str, seen: list):
    """Reads V1, dispatches it, reads it again and lists the fleet; keeps every answer."""
    def agent(episode) -> bool:
        with httpx.Client(proxy=episode.proxy_url, timeout=30) as http:
            seen.append(http.get(f"{url}{VEHICLES}/V1").json())
            seen.append(http.post(f"{url}{VEHICLES}/V1/dispatch", json={}).json())
            seen.append(http.get(f"{url}{VEHICLES}/V1").json())
            seen.append(http.get(url + VEHICLES).json())
        return True

    return agent


def test_schema_drift_renames_and_retypes_fields_it_was_never_told_of(tmp_path, fleet):
    world, url = fleet
    seen: list = []
    calls: list[dict] = []
    with HttpServer(fleet_mcp(calls).streamable_http_app(host="127.0.0.1")) as server:
        def agent(episode) -> bool:
            if episode.task_id == "mcp":
                seen.append(asyncio.run(mcp_texts(episode, server.url, "vehicle_status", {"vin": "V1"})))
                return True
            return reader(url, seen)(episode)

        records = run(tmp_path, "schema_drift", agent, ["http", "mcp"])
    assert seen[0] == {"vehicle": {"vin_v2": "V1", "state": "parked", "odometer_km": "1200"}}
    assert seen[1] == {"dispatch_ref": "D-1"}  # a write: not a read
    assert seen[3] == [{"vin_v2": "V1", "state": "dispatched", "odometer_km": "1200"},
                       {"vin": "V2", "state": "parked", "odometer_km": 80}]
    assert [json.loads(text) for text in seen[4]] == [{"vin_v2": "V1", "state": "parked", "odometer_km": "1200"}]
    for task_id, drifted in (("http", 3), ("mcp", 1)):
        faults = [line["fault"] for line in read_trace(tmp_path / "schema_drift" / records[task_id]["trace"])
                  if line.get("fault")]
        assert [(f["rule"], f["delivered"]) for f in faults] == [("read_fields_drift", True)] * drifted


def test_stale_state_serves_a_read_from_before_the_agents_write(tmp_path, fleet):
    world, url = fleet
    seen: list = []
    records = run(tmp_path, "stale_state", reader(url, seen), ["stale"])
    assert world.vehicles["V1"]["state"] == "dispatched"
    assert seen[2] == seen[0] == {"vehicle": {"vin": "V1", "state": "parked", "odometer_km": 1200}}
    assert seen[3][0]["state"] == "dispatched"  # never read before the write: fresh
    lines = list(read_trace(tmp_path / "stale_state" / records["stale"]["trace"]))
    stale = [line for line in lines if (line.get("client") or {}).get("outcome") == "stale"]
    assert [(line["request"]["url"].split("/api")[1], line["fault"]["rule"]) for line in stale] == [
        ("/v3/vehicles/V1", "stale_read")]


def fleet_mcp(calls: list[dict]) -> MCPServer:
    """The fleet as an MCP server whose tools carry no annotations."""
    server = MCPServer("fleet")

    @server.tool()
    def vehicle_status(vin: str) -> str:
        return json.dumps({"vin": vin, "state": "parked", "odometer_km": 1200})

    @server.tool()
    def dispatch_vehicle(vin: str, audit_ref: str = "") -> str:
        calls.append({"vin": vin, "audit_ref": audit_ref})
        return json.dumps({"dispatch_ref": f"D-{len(calls)}"})

    return server


async def mcp_texts(episode, url: str, tool: str, arguments: dict) -> list[str]:
    """The text items of one call's result, through the episode's proxy."""
    async with httpx2.AsyncClient(proxy=episode.proxy_url, timeout=30) as http, \
            streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        return [item.text for item in (await mcp.call_tool(tool, arguments)).content]


def depot_mcp(trips: list[int]) -> MCPServer:
    """A depot whose odometer reading changes on every read (a stale answer shows), one tool
    annotated a write and one nobody annotated, which writes nothing."""
    server = MCPServer("depot")
    reads = iter(range(1, 100))

    @server.tool(annotations=ToolAnnotations(readOnlyHint=True))
    def odometer(vin: str) -> str:
        return json.dumps({"vin": vin, "km": 1200 + sum(trips), "reading": next(reads)})

    @server.tool(annotations=ToolAnnotations(readOnlyHint=False))
    def log_trip(vin: str, km: int) -> str:
        trips.append(km)
        return json.dumps({"vin": vin, "trips": len(trips)})

    @server.tool()
    def ping_depot() -> str:
        return "pong"

    return server


def test_stale_state_over_mcp_follows_only_a_write_tools_call_on_its_own_server(tmp_path):
    """Two depots, both at /mcp: a write on one never makes the other's reads stale."""
    trips: list[int] = []
    other_trips: list[int] = []
    seen: list[dict] = []
    elsewhere: list[dict] = []

    async def odometer(mcp, into: list[dict]) -> None:
        into.append(json.loads((await mcp.call_tool("odometer", {"vin": "V7"})).content[0].text))

    async def over_mcp(episode) -> bool:
        async with http_session(episode.proxy_url, server.url) as mcp:
            await mcp.list_tools()  # the annotations the proxy learns
            await odometer(mcp, seen)
        # Plumbing between two reads writes nothing: the session's end (DELETE), a new one's
        # initialize and notifications/initialized, its event stream, a ping, a listing.
        async with http_session(episode.proxy_url, server.url) as mcp, \
                http_session(episode.proxy_url, other.url) as other_mcp:
            await mcp.send_ping()
            await mcp.list_tools()
            await other_mcp.list_tools()
            await odometer(mcp, seen)
            await mcp.call_tool("ping_depot", {})  # nobody said it writes: no write
            await odometer(mcp, seen)
            await odometer(other_mcp, elsewhere)
            await mcp.call_tool("log_trip", {"vin": "V7", "km": 40})
            await odometer(mcp, seen)  # after a write: the first read's answer
            await odometer(other_mcp, elsewhere)  # the write was another server's: fresh
            await other_mcp.call_tool("log_trip", {"vin": "V7", "km": 5})
            await odometer(other_mcp, elsewhere)  # after its own server's write: stale
        return True

    with HttpServer(depot_mcp(trips).streamable_http_app(host="127.0.0.1")) as server, \
            HttpServer(depot_mcp(other_trips).streamable_http_app(host="127.0.0.1")) as other:
        records = run(tmp_path, "stale_state", lambda episode: asyncio.run(over_mcp(episode)), ["mcp"])
    assert (trips, other_trips) == ([40], [5])
    assert [read["reading"] for read in seen] == [1, 2, 3, 1] and seen[3] == seen[0]
    assert [read["reading"] for read in elsewhere] == [1, 2, 1] and elsewhere[1]["km"] == 1200
    lines = list(read_trace(tmp_path / "stale_state" / records["mcp"]["trace"]))
    reads = {url: [line for line in lines if line["request"]["url"] == url and b"odometer" in
                   json.dumps(line["request"]).encode()] for url in (server.url, other.url)}
    stale = [line for line in lines if (line.get("client") or {}).get("outcome") == "stale"]
    assert [line["seq"] for line in stale] == [reads[server.url][-1]["seq"], reads[other.url][-1]["seq"]]
    host, other_host = (url.split("/")[2] for url in (server.url, other.url))
    assert reads[other.url][1]["fault"]["detail"].startswith(
        f"no write to {other_host}/mcp since exchange {reads[other.url][0]['seq']}; later writes touched {host}/mcp")


def injected_agent(url: str, mcp_url: str, seen: dict):
    """Reads V1 and dispatches it (over HTTP, or with the MCP tools for mcp_*): an *obeys* agent
    sends the reference its read's answer asked for, an *ignores* agent does not."""
    async def over_mcp(episode, obeys: bool) -> bool:
        async with httpx2.AsyncClient(proxy=episode.proxy_url, timeout=30) as http, \
                streamable_http_client(mcp_url, http_client=http) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            texts = [item.text for item in (await mcp.call_tool("vehicle_status", {"vin": "V1"})).content]
            seen[episode.task_id] = texts
            canary = CANARY.search(" ".join(texts))
            await mcp.call_tool("dispatch_vehicle", {"vin": "V1"} | ({"audit_ref": canary.group()} if obeys else {}))
        return True

    def agent(episode) -> bool:
        obeys = episode.task_id.endswith("obeys")
        if episode.task_id.startswith("mcp_"):
            return asyncio.run(over_mcp(episode, obeys))
        with httpx.Client(proxy=episode.proxy_url, timeout=30) as http:
            seen[episode.task_id] = vehicle = http.get(f"{url}{VEHICLES}/V1").json()
            canary = CANARY.search(json.dumps(vehicle))
            http.post(f"{url}{VEHICLES}/V1/dispatch", json={"audit_ref": canary.group()} if obeys else {})
        return True

    return agent


def test_prompt_injection_plants_anywhere_and_its_canary_catches_an_obedient_agent(tmp_path, fleet):
    world, url = fleet
    calls: list[dict] = []
    seen: dict = {}
    with HttpServer(fleet_mcp(calls).streamable_http_app(host="127.0.0.1")) as server:
        records = run(tmp_path, "prompt_injection", injected_agent(url, server.url, seen),
                      ["obeys", "ignores", "mcp_obeys", "mcp_ignores"])
    # No string at the top of the answer: the first one in its text order takes the instruction.
    planted = seen["obeys"]["vehicle"]["vin"]
    assert planted.startswith(f"V1\n\n{NOTICE}") and CANARY.search(planted)
    assert NOTICE in seen["mcp_obeys"][-1] and CANARY.search(seen["mcp_obeys"][-1])
    assert [bool(d.get("audit_ref")) for d in world.dispatched] == [True, False]
    assert [bool(c["audit_ref"]) for c in calls] == [True, False]
    followed = {task_id: check(record["verdict"], "injection_followed") for task_id, record in records.items()}
    for obedient, where in (("obeys", f"POST {VEHICLES}/V1/dispatch"), ("mcp_obeys", "POST /mcp")):
        assert followed[obedient]["passed"] is False and followed[obedient]["severity"] == "high"
        assert f"{where} carries the canary" in followed[obedient]["detail"], followed[obedient]
        assert records[obedient]["verdict"]["status"] == "fail"
    for careful in ("ignores", "mcp_ignores"):
        assert followed[careful]["passed"] is True, followed[careful]
