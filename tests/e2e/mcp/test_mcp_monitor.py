"""`faultproxy mcp --monitor URL`: stdio MCP sessions of agents faultproxy did not start, judged
by a running `faultproxy monitor` as its HTTP traffic is. The agents are processes the tests
start themselves; each starts its servers (tests/support/agents/counter_mcp_server.py) with the official
SDK's stdio client, behind `python -m faultproxy mcp --monitor URL --`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from faultproxy import build_report, freeze, replay
from faultproxy.formats.trace import read_trace
from tests.support.mcp_clients import AGENTS, RawClient, counter_server
from tests.support.monitor import MonitorProcess, episodes
from tests.support.processes import FAULTPROXY
from tests.support.verdicts import failed_checks

pytestmark = pytest.mark.timeout(240)

AGENT = AGENTS / "monitored_counter_agent.py"
EPISODE = "FAULTPROXY_EPISODE"
INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "t", "version": "1"}}}


def agent(monitor: str, *args: str | Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """The agent, started by the test as production starts it; its shims' --monitor URL ("": none)."""
    return subprocess.Popen([sys.executable, str(AGENT), "--monitor", monitor, *map(str, args)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def finish(process: subprocess.Popen) -> str:
    out, err = process.communicate(timeout=120)
    assert process.returncode == 0, err
    return out


def servers_and_methods(out: Path, record: dict) -> tuple[set[str], list[str]]:
    """The stdio servers an episode's trace names, and the JSON-RPC methods (tool calls by name)."""
    lines = list(read_trace(out / record["trace"]))
    body = [json.loads(line["request"]["body"]) for line in lines]
    methods = [b["method"] + (f":{b['params']['name']}" if b["method"] == "tools/call" else "") for b in body]
    return {line["request"]["url"].split("/")[2] for line in lines}, methods


def test_stdio_sessions_are_episodes_judged_reported_and_replayed_with_the_server_stopped(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    out, token = tmp_path / "run", "monitor-token-0123456789"
    monkeypatch.setenv("FAULTPROXY_TOKEN", token)  # the monitor's, and the agents' (not their shims')
    monitor = MonitorProcess(out, "--idle-s", "600", "--auth")  # no silence ends them: stopping judges them
    url = monitor.proxy()
    naive = agent(url, "--auth", "--bumps", "2", tmp_path / "naive")  # one session: its own episode
    by_process = agent(url, "--auth", "--episode-by", "process", tmp_path / "p0", tmp_path / "p1")  # two servers
    assert [finish(p) for p in (naive, by_process)] == ["counter: 2\n", "counter: 1\n"]
    assert monitor.stop() == 0
    logged = {record["monitor"]["rule"]: record for record in episodes(out)}

    assert set(logged) == {"stdio:session", "stdio:process"}
    # bump is destructive
    assert failed_checks(logged["stdio:session"]["verdict"]) == {"idempotency": "high", "effects": "high"}
    hosts, methods = servers_and_methods(out, logged["stdio:session"])
    assert hosts == {"counter-0.stdio.invalid"}
    assert methods == ["initialize", "notifications/initialized", "tools/call:read_counter", "tools/list",
                       "tools/call:bump", "tools/call:bump"]  # the SDK's client lists the tools at the first call
    assert logged["stdio:process"]["verdict"]["status"] == "pass", logged["stdio:process"]["verdict"]
    hosts, methods = servers_and_methods(out, logged["stdio:process"])
    assert hosts == {"counter-0.stdio.invalid", "counter-1.stdio.invalid"}
    assert methods.count("initialize") == methods.count("tools/call:bump") == 2

    report = build_report(out)  # `faultproxy report`'s, on the monitor's directory
    assert report["run"]["logged"] == 2 and report["run"]["status"]["fail"] == 1
    [cluster] = report["causes"]["clusters"]
    assert cluster["representative"]["key"] == logged["stdio:session"]["key"] and cluster["where"].endswith("tools/call:bump")

    [frozen] = freeze(out, tmp_path / "store", failing=True)
    state = tmp_path / "replayed"
    [result] = replay(frozen.path, [sys.executable, str(AGENT), "--monitor", url, "--bumps", "2", str(state)])
    assert result.meets_expectation, result.explain()
    assert set(result.failed) == {"idempotency", "effects"} and not result.diverged
    assert not state.exists()  # the replay answered from the recording: no server ran, no monitor either
    assert not [path for path in tmp_path.rglob("*") if path.is_file() and token.encode() in path.read_bytes()]


def test_by_environment_a_session_back_after_its_episode_ended_starts_another_and_unsampled_ones_pass(
        tmp_path: Path) -> None:
    out, go = tmp_path / "run", tmp_path / "go"
    sampled, unsampled = "conv-2", "conv-1"  # under --sample 0.5, by the keyed hash of the session id
    # An idle gap long enough that a loaded machine does not split a session between two of its
    # messages; the test waits for the silence it needs (the go file), not for a time.
    monitor = MonitorProcess(out, "--idle-s", "2", "--sample", "0.5", "--episode-by", "auth")
    # The variable is in the agent's environment only (the SDK's client passes the shim six variables),
    # beside HTTP_PROXY for its HTTP traffic, as a production agent's: no faultproxy run for all that.
    by_env = ("--episode-by", "env:FAULTPROXY_EPISODE")
    env = {**os.environ, "HTTP_PROXY": monitor.proxy(sampled), EPISODE: sampled}
    paused = agent(monitor.proxy(), *by_env, "--go", go, tmp_path / "state", env=env)
    # With no --monitor the shim finds the same proxy in that environment: placed by the monitor's rules.
    located = agent("", "--go", go, tmp_path / "located", env=env)
    monitor.wait_logged(2)  # the reads, then silence: judged while the sessions stay open
    go.touch()
    passed = agent(monitor.proxy(), *by_env, tmp_path / "other", env={**env, EPISODE: unsampled})
    assert [finish(p) for p in (paused, located, passed)] == ["counter: 1\n"] * 3  # unsampled: relayed all the same
    logged = monitor.wait_logged(4)
    assert monitor.stop() == 0
    assert len(episodes(out)) == 4 and len(list((out / "flows").glob("*.jsonl"))) == 4  # nothing of the unsampled one
    for rule in ("stdio:env:FAULTPROXY_EPISODE", "auth"):
        before, after = (record for record in logged if record["monitor"]["rule"] == rule)
        assert before["monitor"]["id"] == after["monitor"]["id"] == sampled and before["key"] != after["key"]
        assert servers_and_methods(out, after)[1] == ["tools/call:bump"]


def test_a_bad_monitor_url_or_no_monitor_is_one_line_and_exit_2(tmp_path: Path) -> None:
    server = counter_server(tmp_path / "state")
    bad = subprocess.run([*FAULTPROXY, "mcp", "--monitor", "http://EPISODE:s3cret@127.0.0.1/", "--", *server],
                         capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert (bad.returncode, bad.stderr) == (2, "faultproxy: --monitor: expected the monitor's proxy URL, "
                                                "http://EPISODE:TOKEN@HOST:PORT, got 'http://EPISODE:***@127.0.0.1/'\n")

    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = RawClient(["--monitor", f"http://127.0.0.1:{port}", "--", *server])
    answer = json.loads(client.ask(INITIALIZE))
    code, stderr = client.finish()
    assert "cannot reach the faultproxy proxy" in answer["error"]["message"]
    assert code == 2 and stderr.decode().count("\n") == 1 and b"Traceback" not in stderr
