"""The stdio lane (proxy/stdio/lane.py): a `faultproxy mcp` shim in an episode hands its session
to a proxy with a run's token and episodes, as `faultproxy run` starts it. Who may hand one over,
what an ended episode's call gets, and what each side's going away leaves: in the trace, to the
client, to the server."""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest
import requests

from faultproxy.formats.trace import read_trace
from faultproxy.proxy.server import ProxyServer
from faultproxy.proxy.stdio import lane as lane_module
from faultproxy.proxy.stdio.lane import LANE_URL, encode
from tests.support.mcp_clients import AGENTS, RawClient, call

pytestmark = pytest.mark.timeout(120)

TOKEN = "lane-test-token-0123456789"
ODD_SERVER = [sys.executable, str(AGENTS / "odd_stdio_server.py")]
URL = "http://odd-stdio-server.stdio.invalid/mcp"
SCENARIO = """name: lane
description: refuse the second refund
seed: 5
rules:
  - name: refund_refused
    match: {body: {method: tools/call, params.name: refund}}
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


def in_episode(proxy_url: str, episode: str = "ep") -> dict[str, str]:
    """What a shim started by an agent of the episode finds (here in its own environment)."""
    return {"PATH": os.environ["PATH"], "FAULTPROXY_EPISODE": episode, "HTTP_PROXY": proxy_url}


def trace(folder: Path) -> list[dict]:
    return list(read_trace(folder / "flows" / "ep.jsonl"))


def rejected(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "flows" / "_rejected.jsonl").read_text().splitlines()]


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_the_proxy_relays_a_handed_over_session_through_its_injector(proxy: ProxyServer, tmp_path: Path) -> None:
    client = RawClient(["--", *ODD_SERVER], env=in_episode(proxy.proxy_url("ep")))
    first, second = json.loads(client.ask(call(1, "refund"))), json.loads(client.ask(call(2, "refund")))
    status, _ = client.finish()
    assert status == 0 and first == {"jsonrpc": "2.0", "id": 1, "result": {}}
    assert second["error"] == {"code": -32001, "message": "refused"} and second["id"] == 2
    lines = trace(tmp_path)
    assert [(line["seq"], line["request"]["url"], line["forwarded"]) for line in lines] == [(1, URL, True), (2, URL, False)]
    assert lines[1]["fault"]["rule"] == "refund_refused" and lines[0]["upstream"]["body"] == '{"jsonrpc": "2.0", "id": 1, "result": {}}'


@pytest.mark.parametrize(("episode", "token", "said"), [
    ("ep", "wrong-token-0123456789", "wrong token"),
    ("never-begun", TOKEN, "unknown episode"),
])
def test_no_session_is_taken_without_the_runs_token_for_an_episode_it_began(
        proxy: ProxyServer, tmp_path: Path, episode: str, token: str, said: str) -> None:
    client = RawClient(["--", *ODD_SERVER], env=in_episode(f"http://{episode}:{token}@127.0.0.1:{proxy.port}", episode))
    answer = json.loads(client.ask(call(1, "refund")))
    status, stderr = client.finish()
    assert status == 2 and f"HTTP 407: faultproxy: {said}" in answer["error"]["message"]  # the agent can say why
    assert f"faultproxy: {said}" in stderr.decode()
    [refused] = rejected(tmp_path)
    assert refused["reason"] == said and refused["url"] == LANE_URL
    assert trace(tmp_path) == []  # nothing was relayed unseen


def hand(path: str, ticket: str | None, fds: list[int]) -> socket.socket:
    lane = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    lane.connect(path)
    socket.send_fds(lane, [encode({"ticket": ticket, "server": "hand"})], fds)
    lane.settimeout(60)
    return lane


def test_a_made_up_ticket_hands_nothing_over_and_a_ticket_opens_one_session(proxy: ProxyServer) -> None:
    where = requests.get(LANE_URL, proxies={"http": proxy.proxy_url("ep")}, timeout=30).json()
    client_in, to_proxy = os.pipe()
    from_proxy, client_out = os.pipe()
    assert hand(where["socket"], "made-up", [client_in, client_out]).recv(100) == b""  # closed without a word
    taken = hand(where["socket"], where["ticket"], [client_in, client_out])
    for fd in (client_in, client_out):  # the proxy has its own copies now
        os.close(fd)
    os.write(to_proxy, json.dumps(call(1, "refund")).encode() + b"\n")
    with os.fdopen(from_proxy, "rb") as answers:
        assert "no server runs" in json.loads(answers.readline())["error"]["message"]  # handed over: no server pipes
        assert hand(where["socket"], where["ticket"], [to_proxy]).recv(100) == b""  # a ticket opens one session
        assert json.loads(taken.recv(100)) == {"end": 2}  # as a server that could not start
    os.close(to_proxy)


def test_after_its_episode_ends_a_call_is_refused_and_the_trace_untouched(proxy: ProxyServer, tmp_path: Path) -> None:
    client = RawClient(["--", *ODD_SERVER], env=in_episode(proxy.proxy_url("ep")))
    client.ask(call(1, "refund"))
    proxy.end_episode("ep")
    late = json.loads(client.ask(call(2, "refund")))
    client.finish()
    assert "HTTP 407" in late["error"]["message"] and "unknown episode" in late["error"]["message"]
    assert len(trace(tmp_path)) == 1
    [refused] = rejected(tmp_path)
    assert (refused["episode"], refused["url"]) == ("ep", URL)


def test_a_shim_killed_mid_call_leaves_the_call_in_the_trace_and_the_client_an_eof(
        proxy: ProxyServer, tmp_path: Path) -> None:
    client = RawClient(["--", *ODD_SERVER], env=in_episode(proxy.proxy_url("ep")))
    client.process.stdin.write(json.dumps(call(1, "hang")).encode() + b"\n")
    client.process.stdin.flush()
    wait_for(lambda: proxy.episode_stats("ep").exchanges == 1, "the call to reach the proxy")
    client.process.send_signal(signal.SIGKILL)  # as the SDK's client ends a server that will not stop
    assert client.process.stdout.read() == b""  # the proxy let go of the client's stream: EOF, no hang
    client.finish()
    proxy.end_episode("ep")
    [line] = trace(tmp_path)
    assert line["forwarded"] and line["upstream"] is None and line["client"]["outcome"] == "client_gone"


def test_a_proxy_that_goes_away_ends_the_session_and_the_server(tmp_path: Path) -> None:
    scenario = tmp_path / "lane.yaml"
    scenario.write_text(SCENARIO)
    with ProxyServer(scenario, trace_dir=tmp_path / "flows") as server:
        client = RawClient(["--", *ODD_SERVER], env=in_episode(server.proxy_url("ep")))
        assert json.loads(client.ask(call(1, "refund")))["result"] == {}
    assert client.process.stdout.read() == b""  # EOF to the client
    status, stderr = client.finish()
    assert status == 1 and b"proxy_gone" in stderr  # the shim killed the server and said why


def test_a_temporary_directory_too_deep_for_a_socket_address_still_gets_a_lane(
        proxy: ProxyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60)  # as macOS's per-user $TMPDIR, and then some
    deep.mkdir(parents=True)
    monkeypatch.setattr(tempfile, "tempdir", str(deep))
    where = requests.get(LANE_URL, proxies={"http": proxy.proxy_url("ep")}, timeout=30).json()
    assert Path(where["socket"]).is_socket() and len(os.fsencode(where["socket"])) < 104


def test_a_lane_that_cannot_be_opened_is_a_503_saying_why_and_no_exchange(
        proxy: ProxyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lane_module, "_socket_parent", lambda: str(tmp_path / "no" / "such" / "folder"))
    answer = requests.get(LANE_URL, proxies={"http": proxy.proxy_url("ep")}, timeout=30)
    assert answer.status_code == 503 and "cannot open the stdio lane" in answer.text
    assert proxy.episode_stats("ep").exchanges == 0  # the lane request is never an exchange of the episode
