"""Driving MCP servers with the official SDK's client, as agents do: over stdio the server command
with `faultproxy mcp` in front, started with the SDK's default environment; `Client`, the
callbacks an agent's client answers a server's own requests with (either transport)."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
import uvicorn
from mcp import ClientSession, StdioServerParameters, types
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

AGENTS = Path(__file__).resolve().parent / "agents"
COUNTER_SERVER = AGENTS / "counter_mcp_server.py"


def shim_parameters(server: Sequence[str], *shim_flags: str) -> StdioServerParameters:
    """`faultproxy mcp [flags] -- server...` as an MCP configuration's command and args (no env:
    the SDK's default, six variables)."""
    return StdioServerParameters(command=sys.executable,
                                 args=["-m", "faultproxy", "mcp", *shim_flags, "--", *server])


class HttpServer:
    """An ASGI app (an SDK server's streamable_http_app) on an ephemeral 127.0.0.1 port, in a
    thread of its own; `url` is its endpoint (the app's `streamable_http_path`)."""

    def __init__(self, app, path: str = "/mcp") -> None:
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.socket.getsockname()[1]}{path}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, daemon=True)

    def __enter__(self) -> HttpServer:
        self.thread.start()
        pause = threading.Event()
        while not self.server.started and self.thread.is_alive():
            pause.wait(0.02)  # uvicorn sets `started` and gives nothing to wait on
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def counter_server(state: Path) -> list[str]:
    return [sys.executable, str(COUNTER_SERVER), str(state)]


@asynccontextmanager
async def session(parameters: StdioServerParameters, **callbacks) -> AsyncIterator[ClientSession]:
    """An initialized client session; `callbacks`: ClientSession's (sampling_callback, ...)."""
    async with stdio_client(parameters) as (read, write), ClientSession(read, write, **callbacks) as client:
        await client.initialize()
        yield client


@asynccontextmanager
async def http_session(proxy_url: str, url: str, token: str | None = None, **callbacks) -> AsyncIterator[ClientSession]:
    """An initialized client session over Streamable HTTP through the proxy at `proxy_url`, with
    `token` as its bearer token if given."""
    headers = {"authorization": f"Bearer {token}"} if token else {}
    http = httpx2.AsyncClient(proxy=proxy_url, headers=headers, timeout=httpx2.Timeout(30, read=300))
    async with http, streamable_http_client(url, http_client=http) as (read, write), \
            ClientSession(read, write, **callbacks) as mcp:
        await mcp.initialize()
        yield mcp


class RawClient:
    """The shim on raw pipes, one message at a time as a client waits for each answer; every
    byte it writes to stdout is kept."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.process = subprocess.Popen([sys.executable, "-m", "faultproxy", "mcp", *args], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
        self.received = b""

    def send(self, message: dict) -> None:
        self.process.stdin.write(json.dumps(message).encode() + b"\n")
        self.process.stdin.flush()

    def ask(self, message: dict) -> bytes:
        """Send one message; the next line the shim writes (b"" once it closed its stdout)."""
        self.send(message)
        line = self.process.stdout.readline()
        self.received += line
        return line

    def finish(self, timeout: float = 60) -> tuple[int, bytes]:
        rest, stderr = self.process.communicate(timeout=timeout)
        self.received += rest
        return self.process.returncode, stderr


def call(rpc_id: int, tool: str, **arguments) -> dict:
    return {"jsonrpc": "2.0", "id": rpc_id, "method": "tools/call", "params": {"name": tool, "arguments": arguments}}


class Client:
    """The agent's client: its callbacks answer the server, and note what they were asked."""

    def __init__(self, confirm: bool = True) -> None:
        self.confirm = confirm
        self.asked: list[str] = []
        self.progress: list[float] = []
        self.told: list[str] = []  # the server's notifications outside any call (list changes)
        self.told_once = asyncio.Event()

    async def sampling(self, context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
        self.asked.append("sampling")
        return types.CreateMessageResult(role="assistant", model="stub-model",
                                         content=types.TextContent(type="text", text="two widgets, paid"))

    async def elicitation(self, context, params) -> types.ElicitResult:
        self.asked.append("elicitation")
        return types.ElicitResult(action="accept", content={"confirm": self.confirm})

    async def roots(self, context) -> types.ListRootsResult:
        self.asked.append("roots")
        return types.ListRootsResult(roots=[types.Root(uri="file:///srv/orders")])

    async def on_progress(self, progress: float, total: float | None, message: str | None) -> None:
        self.progress.append(progress)

    async def on_message(self, message) -> None:
        if isinstance(message, types.ToolListChangedNotification):
            self.told.append(message.method)
            self.told_once.set()

    def callbacks(self) -> dict:
        return {"sampling_callback": self.sampling, "elicitation_callback": self.elicitation,
                "list_roots_callback": self.roots, "message_handler": self.on_message}


def method(line: dict) -> str:
    return json.loads(line["request"]["body"])["method"]


def rule(name: str, method_name: str, call: int, fault: str) -> str:
    return (f"  - name: {name}\n    match: {{body: {{method: {method_name}}}}}\n"
            f"    when: {{calls: [{call}]}}\n    fault: {fault}\n")


FAULTED_BOTH_WAYS = [  # faults on a server's messages, each once (answer_through_faults meets them all)
    rule("declined", "elicitation/create", 1, "{type: elicitation_declined}"),
    rule("cancelled", "elicitation/create", 2, "{type: elicitation_declined, action: cancel}"),
    rule("refused", "elicitation/create", 3, "{type: jsonrpc_error, code: -32001, message: no UI}"),
    rule("lost", "elicitation/create", 4, "{type: response_lost}"),
    rule("slow", "sampling/createMessage", 1, "{type: delay, ms: 50}"),
    rule("dropped", "notifications/progress", 1, "{type: timeout, hold_s: 0, then: close}"),
]


async def answer_through_faults(mcp: ClientSession, client: Client, prefix: str) -> None:
    """Under FAULTED_BOTH_WAYS, the asking server's tools, and what the client sees of each fault."""
    said = [(await mcp.call_tool("confirm_refund", {"order": f"{prefix}{n}"})) for n in (1, 2)]
    with pytest.raises(MCPError, match="no UI"):  # the server's elicit raised the error it got
        await mcp.call_tool("confirm_refund", {"order": f"{prefix}3"})
    assert client.asked == []  # the user's answer came from the faults: the client was never asked
    with pytest.raises(Exception, match="(?i)timed out|timeout"):  # the client said yes; the server never heard
        await mcp.call_tool("confirm_refund", {"order": f"{prefix}4"}, read_timeout_seconds=2)
    assert client.asked == ["elicitation"]
    summary = await mcp.call_tool("summarize_order", {"order": f"{prefix}5", "steps": 2},
                                  progress_callback=client.on_progress)
    assert [(answer.is_error, answer.content[0].text.endswith(f"not refunded: {action}"))
            for answer, action in zip(said, ("decline", "cancel"), strict=True)] == [(True, True), (True, True)]
    assert summary.content[0].text == "summary: two widgets, paid" and client.progress == [2]  # the first was dropped


def check_fault_lines(lines: list[dict]) -> dict[str, dict]:
    """The trace of answer_through_faults: each fault a fact on the server's message, in the
    client's place; the faulted lines by rule."""
    faults = {line["fault"]["rule"]: line for line in lines if line["fault"]}
    assert set(faults) == {"declined", "cancelled", "refused", "lost", "slow", "dropped"}
    assert all(line["fault"]["delivered"] and line["direction"] == "server to client" for line in faults.values())
    assert {name: line["forwarded"] for name, line in faults.items()} == {
        "declined": False, "cancelled": False, "refused": False, "lost": True, "slow": True, "dropped": False}
    assert json.loads(faults["declined"]["client"]["body"])["result"] == {"action": "decline"}  # what the server got
    assert json.loads(faults["lost"]["upstream"]["body"])["result"]["content"] == {"confirm": True}  # the client's yes
    return faults


def server_messages(lines: list[dict], methods: list[str]) -> dict[str, dict]:
    """The trace's lines of the server's messages, which must be `methods` in order, by method;
    each request paired with the client's answer (the callbacks' answers), as the server got it."""
    from_server = [line for line in lines if line.get("direction") == "server to client"]
    assert [method(line) for line in from_server] == methods
    asked = {method(line): line for line in from_server}
    assert json.loads(asked["sampling/createMessage"]["upstream"]["body"])["result"]["model"] == "stub-model"
    assert json.loads(asked["elicitation/create"]["upstream"]["body"])["result"] == {
        "action": "accept", "content": {"confirm": True}}
    assert json.loads(asked["roots/list"]["upstream"]["body"])["result"]["roots"][0]["uri"] == "file:///srv/orders"
    assert asked["notifications/progress"]["upstream"]["status"] == 202  # a notification: no answer
    return asked
