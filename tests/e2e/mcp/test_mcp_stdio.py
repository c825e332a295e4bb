"""MCP over stdio: `faultproxy mcp` in front of a server on the official SDK, driven by the SDK's
stdio client with its default server environment. Each fault as the client sees it, what the
server really ran (its state file), and the trace the proxy wrote."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from faultproxy.proxy.stdio.locate import locate
from faultproxy.proxy.stdio.session import SHUTDOWN_GRACE_S
from faultproxy.tasks.tasks_file import TaskError, load_tasks
from faultproxy.tasks.task_model import EndpointPattern
from tests.support.mcp_clients import AGENTS, RawClient, call, counter_server, session, shim_parameters
from tests.support.trace_views import trace_lines

pytestmark = pytest.mark.timeout(180)

ODD_SERVER = AGENTS / "odd_stdio_server.py"
BUMP = {"body": {"method": "tools/call", "params.name": "bump"}}
READ = {"body": {"method": "tools/call", "params.name": "read_counter"}}


def write_scenario(folder: Path, rules: str) -> Path:
    path = folder / "scenario.yaml"
    path.write_text(f"name: stdio\ndescription: stdio faults\nseed: 3\nrules:\n{rules}")
    return path


def rule(name: str, match: dict, call: int, fault: str) -> str:
    return f"  - name: {name}\n    match: {json.dumps(match)}\n    when: {{calls: [{call}]}}\n    fault: {fault}\n"


def faulted(lines: list[dict]) -> dict[str, dict]:
    return {line["fault"]["rule"]: line for line in lines if line["fault"]}


def leaves(error: BaseException) -> list[BaseException]:
    """The exceptions inside (nested) exception groups: the SDK raises from task groups."""
    if isinstance(error, BaseExceptionGroup):
        return [leaf for inner in error.exceptions for leaf in leaves(inner)]
    return [error]


def counter(state: Path) -> int:
    return int(state.read_text()) if state.exists() else 0


async def test_each_fault_over_stdio_as_the_sdk_client_sees_it(tmp_path: Path) -> None:
    state, flows = tmp_path / "state", tmp_path / "flows"
    scenario = write_scenario(tmp_path, "".join([
        rule("refused", BUMP, 1, "{type: jsonrpc_error, code: -32001, message: refused}"),
        rule("tool_failed", READ, 1, "{type: jsonrpc_error, mode: tool_error, message: flaky}"),
        rule("slow", READ, 2, "{type: delay, ms: 50}"),
        rule("drifted", READ, 3, "{type: schema_drift, ops: [{op: rename, path: result.content.*.text, to: body}]}"),
        rule("gateway", READ, 4, '{type: timeout, hold_s: 0, then: "504"}'),
        rule("stale", READ, 6, "{type: stale_state}"),
        rule("lost", BUMP, 3, "{type: response_lost}"),
        rule("held", BUMP, 4, "{type: timeout, hold_s: 0, then: close}"),
    ]))
    parameters = shim_parameters(counter_server(state), "--scenario", str(scenario), "--trace-dir", str(flows))
    async with session(parameters) as client:
        with pytest.raises(MCPError, match="refused"):
            await client.call_tool("bump", {"by": 1})
        assert counter(state) == 0  # an injected error: the call never reached the server
        assert (await client.call_tool("read_counter", {})).is_error  # an isError tool result
        assert (await client.call_tool("read_counter", {})).content[0].text == "0"  # delayed, then answered
        with pytest.raises(Exception, match="(?i)validation|text"):  # the drifted result fails the SDK's schema
            await client.call_tool("read_counter", {})
        with pytest.raises(MCPError, match="HTTP 504"):
            await client.call_tool("read_counter", {})
        assert (await client.call_tool("bump", {"by": 1})).content[0].text == "1"  # no rule fires on call 2
        assert (await client.call_tool("read_counter", {})).content[0].text == "1"
        stale = await client.call_tool("read_counter", {})  # the answer the same call got first (the 2nd read)
        assert stale.content[0].text == "0" and counter(state) == 1
        with pytest.raises(MCPError, match="(?i)timed out|timeout"):  # the server ran it; its answer never came
            await client.call_tool("bump", {"by": 10}, read_timeout_seconds=2)
        assert counter(state) == 11
        with pytest.raises(MCPError, match="(?i)timed out|timeout"):  # held, then closed: it never ran
            await client.call_tool("bump", {"by": 100}, read_timeout_seconds=2)
        assert counter(state) == 11
        assert (await client.call_tool("bump", {"by": 1})).content[0].text == "12"  # the session goes on
    lines = trace_lines(flows)
    assert sorted(line["seq"] for line in lines) == list(range(1, len(lines) + 1))  # every message, numbered in order
    assert all(line["request"]["url"] == "http://counter-mcp-server.stdio.invalid/mcp" for line in lines)
    faults = faulted(lines)
    assert set(faults) == {"refused", "tool_failed", "slow", "drifted", "gateway", "stale", "lost", "held"}
    assert all(line["fault"]["delivered"] for line in faults.values())
    assert {name: line["forwarded"] for name, line in faults.items()} == {
        "refused": False, "tool_failed": False, "slow": True, "drifted": True, "gateway": False,
        "stale": False, "lost": True, "held": False}
    assert json.loads(faults["lost"]["upstream"]["body"])["result"]["content"][0]["text"] == "11"
    assert faults["stale"]["client"]["outcome"] == "stale"


async def test_bundled_stale_state_over_stdio_serves_a_read_stale_only_after_a_write_tool(tmp_path: Path) -> None:
    state, flows = tmp_path / "state", tmp_path / "flows"
    parameters = shim_parameters(counter_server(state), "--scenario", "stale_state", "--param", "lambda=1",
                                 "--trace-dir", str(flows))
    async with session(parameters) as client:
        await client.list_tools()  # read_counter read-only, bump destructive: what the proxy learns
        reads = [(await client.call_tool("read_counter", {})).content[0].text]
        await client.send_ping()
        await client.list_tools()
        reads.append((await client.call_tool("read_counter", {})).content[0].text)  # only plumbing since: fresh
        assert (await client.call_tool("bump", {"by": 2})).content[0].text == "2"
        reads.append((await client.call_tool("read_counter", {})).content[0].text)
    assert reads == ["0", "0", "0"] and counter(state) == 2
    outcomes = [line["client"]["outcome"] for line in trace_lines(flows) if line.get("matched")]
    assert outcomes == ["response", "response", "stale"]


@pytest.mark.parametrize("when", ["before", "after"])
async def test_server_exit_kills_the_server_and_the_client_sees_it_gone(tmp_path: Path, when: str) -> None:
    state, flows = tmp_path / "state", tmp_path / "flows"
    scenario = write_scenario(tmp_path, rule("crash", BUMP, 2, f"{{type: server_exit, when: {when}}}"))
    parameters = shim_parameters(counter_server(state), "--scenario", str(scenario), "--trace-dir", str(flows))
    with pytest.raises(BaseException) as gone:  # noqa: PT011 — the SDK wraps "Connection closed" in a group
        async with session(parameters) as client:
            assert (await client.call_tool("bump", {"by": 1})).content[0].text == "1"
            await client.call_tool("bump", {"by": 10})
    assert any("Connection closed" in str(error) for error in leaves(gone.value)), leaves(gone.value)
    assert counter(state) == (11 if when == "after" else 1)  # after: it ran the call, then died
    crash = faulted(trace_lines(flows))["crash"]
    assert crash["fault"]["delivered"] and crash["forwarded"] is (when == "after")
    assert crash["client"]["status"] == 502


def test_stray_stdout_stderr_big_messages_and_an_exiting_server_never_corrupt_the_stream(tmp_path: Path) -> None:
    flows = tmp_path / "flows"
    client = RawClient(["--trace-dir", str(flows), "--", sys.executable, str(ODD_SERVER)])
    noisy = json.loads(client.ask(call(1, "noisy")))
    big_line = client.ask(call(2, "big", mb=5))
    big = json.loads(big_line)
    assert client.ask(call(3, "die")) == b""  # no answer: the server died; the shim closed the stream
    status, stderr = client.finish()
    assert noisy["result"]["content"][0]["text"] == "quiet now"
    assert len(big["result"]["content"][0]["text"]) == 5 * 1024 * 1024
    assert client.received.count(b"\n") == 2 and b"loading the noisy tool" not in client.received
    assert b"warning: noisy tool is deprecated" in stderr  # the server's stderr passes on to ours
    assert status == 3  # the server's own status
    lines = trace_lines(flows)
    assert ["x-faultproxy-stdio-stray", "1"] in lines[0]["upstream"]["headers"]
    assert ["x-faultproxy-stdio-stray-line", "loading the noisy tool... done"] in lines[0]["upstream"]["headers"]
    recorded = lines[1]["upstream"]  # recorded as every big body is: cut, with the whole one's length and hash
    assert recorded["body_truncated"] and recorded["body_length"] == len(big_line) - 1  # relayed byte for byte
    assert lines[2]["upstream"]["status"] == 502 and "exited with status 3" in lines[2]["upstream"]["body"]


def test_a_server_that_cannot_start_by_hand_one_line_and_status_2() -> None:
    primary, secondary = pty.openpty()  # stdin a terminal: a person typed the command
    try:
        done = subprocess.run([sys.executable, "-m", "faultproxy", "mcp", "--", "/no/such/server", "--flag"],
                              stdin=secondary, capture_output=True, timeout=120)
    finally:
        os.close(primary)
        os.close(secondary)
    assert done.returncode == 2
    assert done.stderr.decode().strip().splitlines() == ["faultproxy mcp: cannot start '/no/such/server': "
                                                         "No such file or directory"]


# A server slower to start than the relay's grace period (as any is on a loaded machine): it
# answers only after SHUTDOWN_GRACE_S, and only what it reads.
SLOW_SERVER = f"""\
import json, sys, time
time.sleep({SHUTDOWN_GRACE_S} + 1)
for line in sys.stdin:
    request = json.loads(line)
    print(json.dumps({{"jsonrpc": "2.0", "id": request["id"], "result": {{"ok": True}}}}), flush=True)
"""


def test_a_relayed_server_slower_than_the_grace_period_still_gets_to_answer(tmp_path: Path) -> None:
    (tmp_path / "requests.jsonl").write_text(json.dumps(INITIALIZE) + "\n")
    with (tmp_path / "requests.jsonl").open("rb") as requests:
        done = subprocess.run([sys.executable, "-m", "faultproxy", "mcp", "--", sys.executable, "-c", SLOW_SERVER],
                              stdin=requests, capture_output=True, timeout=120)
    assert b"BrokenPipeError" not in done.stderr and done.returncode == 0, done.stderr.decode()[-2000:]
    assert [json.loads(line) for line in done.stdout.splitlines()] == [{"jsonrpc": "2.0", "id": 1, "result": {"ok": True}}]

@pytest.mark.parametrize("flags", [[], ["--trace-dir", "FLOWS"]], ids=["relay", "proxied"])
async def test_a_server_that_cannot_start_under_an_agent_is_a_jsonrpc_error(tmp_path: Path, flags: list[str]) -> None:
    flags = [str(tmp_path / "flows") if flag == "FLOWS" else flag for flag in flags]
    with pytest.raises(BaseException) as refused:  # noqa: PT011 — raised inside the SDK's task group
        async with session(shim_parameters(["/no/such/server"], *flags)):
            pass
    errors = leaves(refused.value)
    assert any(isinstance(e, MCPError) and "cannot start '/no/such/server'" in str(e) for e in errors), errors
    if flags:
        [line] = trace_lines(tmp_path / "flows")
        assert line["upstream"]["status"] == 502 and "cannot start" in line["upstream"]["body"]


def test_the_episode_is_found_in_an_ancestor_when_the_client_passes_no_environment(tmp_path: Path) -> None:
    probe = ("from faultproxy.proxy.stdio.locate import locate; import os; "
             "print(sorted(set(os.environ) - {'PATH', 'LC_CTYPE'}), locate())")
    agent_env = {**os.environ, "FAULTPROXY_EPISODE": "ep-7", "HTTP_PROXY": "http://ep-7:tok@127.0.0.1:9",
                 "FAULTPROXY_REPLAY": "1"}
    # The agent (sh, with the episode's variables) starts the server as the SDK does: a bare environment.
    done = subprocess.run(["sh", "-c", f'env -i PATH="$PATH" {sys.executable} -c "{probe}"; true'],
                          env=agent_env, capture_output=True, text=True, timeout=120)
    assert done.stdout.startswith("[] "), done.stdout + done.stderr  # nothing came through the environment
    assert "Located(episode='ep-7', proxy_url='http://ep-7:tok@127.0.0.1:9', replay=True" in done.stdout
    assert locate(env={}) is None or locate(env={}).episode != "ep-7"  # this test process is in no episode


@pytest.mark.parametrize(("entry", "field", "phrase"), [
    ('irreversible: ["mcp:"]', "tasks[0].irreversible[0]", "expected mcp:TOOL"),
    ("expected: {effects: [{mcp: refund_order, method: POST}]}", "tasks[0].expected.effects[0]",
     "either mcp: TOOL or method and path"),
    ("expected: {effects: [{mcp: ''}]}", "tasks[0].expected.effects[0].mcp", ""),
])
def test_mcp_tool_patterns_in_a_tasks_file_are_checked(tmp_path: Path, entry: str, field: str, phrase: str) -> None:
    path = tmp_path / "tasks.yaml"
    path.write_text(f"tasks:\n  - id: a\n    prompt: p\n    {entry}\n")
    with pytest.raises(TaskError) as caught:
        load_tasks(path)
    assert (caught.value.line, caught.value.field) == (4, field) and phrase in caught.value.message


def test_mcp_tool_patterns_round_trip_through_the_plan() -> None:
    pattern = EndpointPattern.parse("mcp:refund_*")
    assert pattern == EndpointPattern("*", "*/tools/refund_*")
    assert str(pattern) == "mcp:refund_*" and EndpointPattern.parse(str(pattern)) == pattern  # as plan.json keeps it


INITIALIZE = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
              "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                         "clientInfo": {"name": "file-client", "version": "1"}}}


@pytest.mark.parametrize("flags", [[], ["--trace-dir", "FLOWS"]], ids=["relay", "proxied"])
def test_stdin_and_stdout_that_cannot_be_polled_work(tmp_path: Path, flags: list[str]) -> None:
    """Requests from a file, answers into a file (the event loop cannot poll either): the session
    runs and ends at the file's end, once the requests in flight are answered (a plain relay
    closes the server's input, MCP's shutdown, and relays its answers until it exits); /dev/null
    ends it at once; a missing server is status 2."""
    flags = [str(tmp_path / "flows") if flag == "FLOWS" else flag for flag in flags]
    shim = [sys.executable, "-m", "faultproxy", "mcp", *flags, "--"]
    (tmp_path / "requests.jsonl").write_text(json.dumps(INITIALIZE) + "\n")
    with (tmp_path / "requests.jsonl").open("rb") as requests, (tmp_path / "answers.jsonl").open("wb") as answers:
        done = subprocess.run([*shim, *counter_server(tmp_path / "state")], stdin=requests, stdout=answers,
                              stderr=subprocess.PIPE, timeout=120)
    assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
    [answer] = [json.loads(line) for line in (tmp_path / "answers.jsonl").read_text().splitlines()]
    assert answer["id"] == 1 and answer["result"]["serverInfo"]["name"] == "counter"
    if flags:
        assert [line["request"]["body"] for line in trace_lines(tmp_path / "flows")] == [json.dumps(INITIALIZE)]
    with open(os.devnull, "rb") as nothing:
        done = subprocess.run([*shim, *counter_server(tmp_path / "state")], stdin=nothing, capture_output=True,
                              timeout=120)
        assert done.returncode == 0 and b"Traceback" not in done.stderr, done.stderr.decode()[-2000:]
        done = subprocess.run([*shim, "/no/such/server"], stdin=nothing, capture_output=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.decode().splitlines() == ["faultproxy mcp: cannot start '/no/such/server': "
                                                 "No such file or directory"]
