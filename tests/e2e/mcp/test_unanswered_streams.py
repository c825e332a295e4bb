"""A Streamable HTTP MCP call answered 200 whose event stream ends before its answer: the server
committed, the client never learnt it. The call may have committed (evaluator.traces.ambiguity),
so only a retry with the same idempotency key, or a look at the server's state first, passes; a
blind retry or a fresh key fails `idempotency`. The stream either ends cleanly after a progress
notification, or breaks off midway through the answer's event (the upstream's doing, judged: not
an infra_error).

Not the demo's world: our own aiohttp server speaking Streamable HTTP at /rooms/rpc, tools with no
annotations (the task names which is irreversible and which reads), answers with no `id` field,
the server's URL only in the agent's own configuration."""

from __future__ import annotations

import asyncio
import json

import httpx2
from aiohttp import web
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError

from faultproxy import run_function, task_set_from_json
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from tests.support.agents.journal_mcp_server import Events
from tests.support.mcp_clients import HttpServer
from tests.support.upstream import ServerThread
from tests.support.verdicts import detail, failed_checks

PATH = "/rooms/rpc"
TOOLS = [{"name": name, "inputSchema": {"type": "object", "properties": {"room": {"type": "string"}}}}
         for name in ("reserve_room", "room_holds")]


class Rooms:
    """Holds rooms, one hold per call, except a repeated idempotency_key, which gets its hold
    again. The first reservation of a room named quiet-* commits, sends a progress notification
    and ends the stream; of one named cut-*, commits and breaks off inside the answer's event."""

    def __init__(self) -> None:
        self.holds: list[dict] = []
        self.by_key: dict[str, dict] = {}
        self.answered: set[str] = set()

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_route("*", PATH, self.rpc)
        return app

    async def rpc(self, request: web.Request) -> web.StreamResponse:
        if request.method != "POST":
            return web.Response(status=405)
        message = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        if message["method"] == "initialize":
            result = {"protocolVersion": message["params"]["protocolVersion"], "capabilities": {"tools": {}},
                      "serverInfo": {"name": "rooms", "version": "1"}}
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result},
                                     headers={"mcp-session-id": "rooms-1"})
        if message["method"] == "tools/list":
            return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": {"tools": TOOLS}})
        return await self.call(request, message["id"], message["params"]["name"], message["params"]["arguments"])

    async def call(self, request: web.Request, rpc_id: int, tool: str, arguments: dict) -> web.StreamResponse:
        room = arguments["room"]
        if tool == "room_holds":
            found = [hold for hold in self.holds if hold["room"] == room]
        else:
            found = self.reserve(room, arguments.get("idempotency_key"))
        stream = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await stream.prepare(request)
        await stream.write(event({"jsonrpc": "2.0", "method": "notifications/message",
                                  "params": {"level": "info", "data": f"{tool} {room}"}}))
        answer = event({"jsonrpc": "2.0", "id": rpc_id,
                        "result": {"content": [{"type": "text", "text": json.dumps(found)}]}})
        first = tool == "reserve_room" and room not in self.answered
        self.answered.add(room)
        if first and room.startswith("quiet"):
            await stream.write_eof()
            return stream
        if first and room.startswith("cut"):
            await stream.write(answer[: len(answer) // 2])
            request.transport.close()  # after what was written: the chunked body never ends
            return stream
        await stream.write(answer)
        await stream.write_eof()
        return stream

    def reserve(self, room: str, key: str | None) -> dict:
        if key in self.by_key:
            return self.by_key[key]
        hold = {"hold": f"H-{len(self.holds) + 1}", "room": room}
        self.holds.append(hold)
        if key:
            self.by_key[key] = hold
        return hold


def event(message: dict) -> bytes:
    return f"event: message\ndata: {json.dumps(message)}\n\n".encode()


def agent_for(url: str):
    """Reserves the room its task names; when the call fails, it looks (look_first), retries with
    the same key (same_key), with a fresh one (fresh_key) or with none (blind)."""
    async def reserve(episode) -> bool:
        how, room = episode.task_id.split(".")
        keys = {"same_key": (f"{room}#1", f"{room}#1"), "fresh_key": (f"{room}#1", f"{room}#2")}.get(how, (None, None))
        async with httpx2.AsyncClient(proxy=episode.proxy_url, timeout=30) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            for attempt, key in enumerate(keys):
                if attempt and how == "look_first" and await holds(mcp, room):
                    return True
                try:
                    await mcp.call_tool("reserve_room", {"room": room} | ({"idempotency_key": key} if key else {}))
                    return True
                except MCPError:
                    continue
        return False

    return lambda episode: asyncio.run(reserve(episode))


async def holds(mcp: ClientSession, room: str) -> list:
    return json.loads((await mcp.call_tool("room_holds", {"room": room})).content[0].text)


def test_a_call_whose_stream_ended_before_its_answer_may_have_committed(tmp_path):
    rooms = Rooms()
    runs = ("blind.quiet-a", "fresh_key.quiet-b", "same_key.quiet-c", "look_first.quiet-d", "blind.cut-e",
            "same_key.cut-f")
    with ServerThread(rooms.app()) as server:
        tasks = task_set_from_json([{"id": task_id, "prompt": "Hold the room.", "irreversible": ["mcp:reserve_room"],
                                     "read_only": ["mcp:room_holds"]} for task_id in runs])
        run_function(agent_for(server.url + PATH), tasks, k=1, scenario="observe", out=tmp_path / "run")
    held = {run: sum(hold["room"] == run.split(".")[1] for hold in rooms.holds) for run in runs}
    assert held == {"blind.quiet-a": 2, "fresh_key.quiet-b": 2, "same_key.quiet-c": 1, "look_first.quiet-d": 1,
                    "blind.cut-e": 2, "same_key.cut-f": 1}
    run = read_run(tmp_path / "run")
    verdicts = {r["task_id"]: r["verdict"] for r in run.episodes}
    ended = "which may have committed (answered 200, but its event stream ended without the answer)"
    assert failed_checks(verdicts["blind.quiet-a"]) == {"idempotency": "high"}
    assert f"{ended}, without an idempotency key" in detail(verdicts["blind.quiet-a"], "idempotency")
    assert f"{ended}, with a fresh idempotency key" in detail(verdicts["fresh_key.quiet-b"], "idempotency")
    # The upstream broke its answer off: its doing, heard and judged, not the harness's failure.
    assert verdicts["blind.cut-e"]["status"] == "fail", verdicts["blind.cut-e"]
    assert "which may have committed (answered 200, but its answer broke off), without an idempotency key" in detail(
        verdicts["blind.cut-e"], "idempotency")
    for careful in ("same_key.quiet-c", "look_first.quiet-d", "same_key.cut-f"):
        assert verdicts[careful]["status"] == "pass", verdicts[careful]
    cut = next(r for r in run.episodes if r["task_id"] == "blind.cut-e")
    first = next(line for line in read_trace(tmp_path / "run" / cut["trace"])
                 if '"tools/call"' in (line["request"]["body"] or "") and line.get("direction") is None)
    assert first["upstream"]["status"] == 200 and first["client"]["outcome"] == "error"
    assert "infra_error" not in first


def polling_server(holds: list[str]) -> MCPServer:
    """The SDK's own server with resumable streams: `reserve_room` holds the room, then closes its
    stream before answering (SEP-1699 polling); the client resumes with Last-Event-ID and gets
    the answer on that GET stream."""
    server = MCPServer("rooms")

    @server.tool()
    async def reserve_room(room: str, ctx: Context) -> str:
        holds.append(room)
        await ctx.close_sse_stream()
        return json.dumps({"hold": f"H-{len(holds)}"})

    return server


def test_an_answer_that_came_on_a_resumed_stream_is_a_commit_the_client_heard_of(tmp_path):
    holds: list[str] = []

    async def reserve(episode, url: str) -> bool:
        async with httpx2.AsyncClient(proxy=episode.proxy_url, timeout=30) as http, \
                streamable_http_client(url, http_client=http) as (read, write), ClientSession(read, write) as mcp:
            await mcp.initialize()
            return "H-1" in (await mcp.call_tool("reserve_room", {"room": "R-7"})).content[0].text

    app = polling_server(holds).streamable_http_app(host="127.0.0.1", event_store=Events(), retry_interval=10)
    with HttpServer(app) as server:
        tasks = task_set_from_json([{"id": "once", "prompt": "Hold R-7.", "irreversible": ["mcp:reserve_room"]}])
        run_function(lambda episode: asyncio.run(reserve(episode, server.url)), tasks, k=1, scenario="observe",
                     out=tmp_path / "run")
    [record] = read_run(tmp_path / "run").episodes
    assert holds == ["R-7"] and record["verdict"]["status"] == "pass", record["verdict"]
    [call] = [ex for ex in parse_trace(read_trace(tmp_path / "run" / record["trace"])) if ex.mcp_tool]
    assert not any('"result"' in event for _, event in call.raw["upstream"].get("sse") or ())  # not on its own stream
    assert call.answered_on_resume and call.committed and not call.failed
