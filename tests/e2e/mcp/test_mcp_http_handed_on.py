"""MCP over Streamable HTTP when no rule may select a server's messages: mitmproxy hands the
streams on, without the loopback relay (proxy/mcp_http.py), and the trace says what the relay
path says of the same session — every server message on both streams an exchange of its own,
the client's answers paired with their requests, progress past the cap counted on its stream."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from faultproxy.formats.trace import read_trace
from faultproxy.proxy.episodes import EpisodeLimits
from faultproxy.proxy.server import ProxyServer
from tests.support.agents.asking_mcp_server import make_server
from tests.support.mcp_clients import Client, HttpServer, http_session, rule

pytestmark = pytest.mark.timeout(120)

UNRECORDED = "x-faultproxy-mcp-unrecorded"
ON_CALLS_ONLY = ("  - name: calls_only\n    match: {body: {method: tools/call, params.name: inventory}}\n"
                 "    fault: {type: jsonrpc_error}\n")  # a tool of another server: it never fires
ON_SERVER_MESSAGES = rule("unused", "elicitation/create", 99, "{type: elicitation_declined}")  # never its turn


@pytest.fixture(scope="module")
def asking(tmp_path_factory: pytest.TempPathFactory) -> Iterator[HttpServer]:
    state = tmp_path_factory.mktemp("asking") / "refunds"
    app = make_server(state).streamable_http_app(host="127.0.0.1", streamable_http_path="/gateway/rpc")
    with HttpServer(app, "/gateway/rpc") as server:  # not the demo's /mcp
        yield server


def proxy_with(tmp_path: Path, rules: str, limits: EpisodeLimits | None = None) -> ProxyServer:
    tmp_path.mkdir()
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(f"name: handed_on\ndescription: d\nseed: 5\nrules:\n{rules}")
    return ProxyServer(scenario, trace_dir=tmp_path / "flows", limits=limits).start()


def trace_of(proxy: ProxyServer, tmp_path: Path) -> list[dict]:
    proxy.stop()  # every exchange written
    [path] = (tmp_path / "flows").iterdir()
    return list(read_trace(path))


async def session_through(tmp_path: Path, url: str, rules: str) -> tuple[bool, list[dict]]:
    """One session (progress past the cap and an elicitation on a call's stream, sampling and a
    list-changed notification on the GET stream) through a proxy whose scenario has `rules`:
    whether the proxy's relay started, and the trace."""
    proxy, client = proxy_with(tmp_path, rules, EpisodeLimits(notifications=1)), Client()
    async with http_session(proxy.proxy_url("ep"), url, **client.callbacks()) as mcp:
        summary = await mcp.call_tool("summarize_order", {"order": "S1", "steps": 3}, progress_callback=client.on_progress)
        refund = await mcp.call_tool("confirm_refund", {"order": "S2"})
        status = await mcp.call_tool("order_status", {"order": "S3"})
        await mcp.call_tool("announce", {})
        await client.told_once.wait()
    assert summary.content[0].text == "summary: two widgets, paid" and client.progress == [1, 2, 3]
    assert refund.content[0].text == "refunded S2" and status.content[0].text == "S3: shipped"
    assert client.asked == ["sampling", "elicitation"] and client.told == ["notifications/tools/list_changed"]
    relayed = proxy.injector.relay.port is not None  # it starts on first use
    return relayed, trace_of(proxy, tmp_path)


def what_it_says(line: dict) -> str:
    """A line as the verdict reads it, less what varies between two runs of one session (times,
    ports, the session id, the header names' case; whether the proxy saw the client leave: the
    SDK's client closes a call's connection at the answer event, before the end of the body, and
    whether the proxy has that end first is a race, either way; the same for the GET stream,
    which may also still be open when the episode ends)."""
    upstream = line["upstream"] or {}
    said = {
        "direction": line.get("direction"), "method": line["request"]["method"], "body": line["request"]["body"],
        "status": upstream.get("status"), "answer": upstream.get("body"),
        "events": [event.split("data:", 1)[-1].strip() for _, event in upstream.get("sse") or ()],
        "unrecorded": [value for name, value in upstream.get("headers") or () if name == UNRECORDED],
        "client_status": line["client"].get("status") if line["request"]["method"] != "GET" else "-",
        "fault": line["fault"], "forwarded": line["forwarded"],
    }
    return json.dumps(said, sort_keys=True)


async def test_streams_no_rule_may_hold_skip_the_relay_and_trace_the_same(asking: HttpServer, tmp_path: Path) -> None:
    relay_used, handed_lines = await session_through(tmp_path / "handed", asking.url, ON_CALLS_ONLY)
    assert not relay_used  # mitmproxy handed every stream on
    relay_used, relayed_lines = await session_through(tmp_path / "relayed", asking.url, ON_SERVER_MESSAGES)
    assert relay_used

    assert sorted(line["seq"] for line in handed_lines) == list(range(1, len(handed_lines) + 1))
    assert sorted(map(what_it_says, handed_lines)) == sorted(map(what_it_says, relayed_lines))
    from_server = [json.loads(line["request"]["body"])["method"] for line in handed_lines
                   if line.get("direction") == "server to client"]
    assert sorted(from_server) == ["elicitation/create", "notifications/progress", "notifications/tools/list_changed",
                                   "sampling/createMessage"]  # progress past the cap (1) only counted
    [summary] = [line for line in handed_lines if '"S1"' in (line["request"]["body"] or "")]
    assert [UNRECORDED, "2"] in summary["upstream"]["headers"] and len(summary["upstream"]["sse"]) == 4
    [elicited] = [line for line in handed_lines if "elicitation/create" in (line["request"]["body"] or "")]
    assert json.loads(elicited["upstream"]["body"])["result"]["content"] == {"confirm": True}


def test_a_server_that_cannot_be_reached_is_an_infra_error_with_mitmproxys_reason(tmp_path: Path) -> None:
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{probe.getsockname()[1]}/gateway/rpc"
    proxy = proxy_with(tmp_path / "proxy", ON_CALLS_ONLY)
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "order_status", "arguments": {}}}
    with httpx2.Client(proxy=proxy.proxy_url("ep"), timeout=30) as client:
        answered = client.post(url, json=call, headers={"accept": "application/json, text/event-stream"})
    assert answered.status_code == 502 and proxy.injector.relay.port is None  # mitmproxy's own 502
    [line] = trace_of(proxy, tmp_path / "proxy")
    assert line["upstream"] is None and line["forwarded"] is True
    assert "Connect call failed" in line["infra_error"] and line["infra_error"] == line["error"]
