"""The harness must not say pass when it could not see (issue 33 §1, §2): a world unlike the
demo's — a booking API whose writes answer {"cancellation_id"}, its URL only in the agent's own
config file, over self-signed HTTPS or reached around the proxy."""

from __future__ import annotations

import json
import ssl
from collections import Counter
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from faultproxy import RunOptions, build_report, run
from faultproxy.cli.main import main
from faultproxy.evaluator.aggregate.traffic import SeenTraffic
from faultproxy.evaluator.aggregate.unmatched import nearest, unmatched_alerts
from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support import model_upstream
from tests.support.agent_commands import BOOKING_AGENT, MCP_COMMAND_AGENT, REFUND_AGENT
from tests.support.bookings import Bookings
from tests.support.fixtures import scenario
from faultproxy.proxy.monitor_sessions import WATCHED_REQUESTS
from tests.support.monitor import MonitorProcess
from tests.support.payments import Payments
from tests.support.ports import closed_port
from tests.support.processes import wait_until
from tests.support.upstream import ServerThread


@pytest.fixture
def model(monkeypatch) -> Iterator[ServerThread]:
    with ServerThread(model_upstream.app()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        yield server


@pytest.fixture
def https_bookings(upstream_certificate) -> Iterator[tuple[Bookings, ServerThread]]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    world = Bookings()
    with ServerThread(world.app(), context) as server:
        yield world, server


def agent_config(folder: Path, url: str, tools_client: str = "proxied") -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / "agent.json"
    path.write_text(json.dumps({"bookings_url": url, "tools_client": tools_client}))
    return path


def cli(capsys: pytest.CaptureFixture, *args: str) -> tuple[int, str]:
    """`faultproxy ARGS` in this process (no interpreter to start): its exit status and stderr."""
    status = main(list(args))
    return status, capsys.readouterr().err


def test_a_tool_api_only_the_agent_knows_failing_tls_is_on_the_tasks_path(tmp_path, model, https_bookings, capsys):
    """Every cancel fails TLS inside the proxy (self-signed, no --upstream-ca); the model calls
    succeed. Nothing names the bookings host as a side channel, so the episode is incomplete
    (infra_error), `run` exits non-zero and the gate answers ERROR. Declared with --side-channel,
    or in the tasks file, the verdict stands (pass) with the side-channel warning."""
    world, server = https_bookings
    task = {"id": "cancel_bk1001", "prompt": "Cancel booking BK1001.", "expected": {"output": {"regex": "cancelled"}}}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    command = ["--", *BOOKING_AGENT, str(agent_config(tmp_path, server.url))]
    status, said = cli(capsys, "run", "--scenario", "observe", "--tasks", str(tmp_path / "tasks.jsonl"), "--out",
                       str(tmp_path / "blind"), *command)
    assert world.cancelled == []
    assert status == 1, said
    [record] = read_run(tmp_path / "blind").episodes
    verdict = record["verdict"]
    assert (verdict["status"], verdict["cause"]) == ("incomplete", "infra_error"), verdict
    assert verdict["cause_detail"].startswith(f"POST 127.0.0.1:{server.port}: ")
    assert f"--upstream-ca FILE if 127.0.0.1:{server.port}'s certificate" in verdict["cause_detail"]
    assert "--side-channel 127.0.0.1/bookings/BK1001/cancel if the task does not need it" in verdict["cause_detail"]
    assert cli(capsys, "gate", str(tmp_path / "blind"), "--baseline", str(tmp_path / "blind"))[0] == 4

    status, said = cli(capsys, "run", "--scenario", "observe", "--tasks", str(tmp_path / "tasks.jsonl"), "--out",
                       str(tmp_path / "declared"), "--side-channel", f"127.0.0.1:{server.port}/bookings/*", *command)
    assert status == 0, said
    [record] = read_run(tmp_path / "declared").episodes
    assert record["side_channels"] == [f"127.0.0.1:{server.port}/bookings/*"]
    verdict = record["verdict"]
    assert verdict["status"] == "pass", verdict
    [side] = verdict["side_channel_errors"]
    assert side["request"] == f"POST 127.0.0.1:{server.port}/bookings/BK1001/cancel"
    assert "warning: 1 episode(s) had side-channel errors" in said

    # The same blind episode, its task declaring the host in a tasks file's `side_channels:`.
    (tmp_path / "tasks.yaml").write_text(f"side_channels: ['POST 127.0.0.1:{server.port}']\ntasks:\n"
                                         f"  - {json.dumps(task)}\n")
    [declaring] = load_tasks(tmp_path / "tasks.yaml")
    [record] = read_run(tmp_path / "blind").episodes
    trace = list(read_trace(tmp_path / "blind" / record["trace"]))
    assert judge_episode(declaring, record, trace)["status"] == "pass"
    (tmp_path / "other.yaml").write_text(f"side_channels: ['POST 127.0.0.1:{server.port + 1}']\ntasks:\n"
                                         f"  - {json.dumps(task)}\n")
    [other] = load_tasks(tmp_path / "other.yaml")
    assert judge_episode(other, record, trace)["cause"] == "infra_error"  # another port names another service


def test_an_episode_in_which_no_request_got_through_is_never_pass(tmp_path, https_bookings, monkeypatch, capsys):
    """The refund agent's only request fails TLS, and it answers "refunded" anyway. Even with its
    host declared a side channel, nothing the agent did was seen working: incomplete."""
    world, server = https_bookings
    monkeypatch.setenv("PAY_URL", server.url)
    monkeypatch.setenv("REFUND_MODE", "claim")
    task = {"id": "refund_1001", "prompt": "Refund order 1001.", "expected": {"output": {"regex": "refunded"}},
            "side_channels": [f"127.0.0.1:{server.port}"]}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    status, said = cli(capsys, "run", "--scenario", "observe", "--tasks", str(tmp_path / "tasks.jsonl"), "--out",
                       str(tmp_path / "run"), "--", *REFUND_AGENT)
    assert status == 1, said
    [record] = read_run(tmp_path / "run").episodes
    assert record["output"] == {"answer": "refunded"}
    assert (record["verdict"]["status"], record["verdict"]["cause"]) == ("incomplete", "infra_error")
    assert record["verdict"]["side_channel_errors"] == []


def test_a_bad_side_channel_flag_is_one_clear_error(tmp_path, capsys):
    assert main(["run", "--scenario", "observe", "--side-channel", "api.openai.com /x", "--out", str(tmp_path / "r"),
                 "--", "true"]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith("faultproxy: --side-channel: bad side channel 'api.openai.com /x'"), line


def test_a_tools_client_that_bypasses_the_proxy_is_not_a_silent_failure(tmp_path, model):
    """The model client uses the proxy; the tools client ignores it (`trust_env=False`). The
    booking is cancelled (the end state says so) but the trace shows no commit: the episode is
    incomplete (bypass) naming the host and the fix, not a failed effect and a false claim. The
    same agent with its tools client on the proxy passes (two tasks, two booking APIs, one run)."""
    worlds = {"direct": Bookings(), "proxied": Bookings()}
    with ServerThread(worlds["direct"].app()) as direct, ServerThread(worlds["proxied"].app()) as proxied:
        servers = {"direct": direct, "proxied": proxied}
        tasks = [{"id": f"cancel_{client}", "prompt": "Cancel booking BK1001.",
                  "state_url": f"{server.url}/admin/state",
                  "env": {"BOOKING_CONFIG": str(agent_config(tmp_path / client, server.url, client))},
                  "expected": {"state": {"cancelled": ["BK1001"]}, "output": {"regex": "cancelled"},
                               "effects": [{"method": "POST", "path": "*/cancel", "count": 1}]}}
                 for client, server in servers.items()]
        (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(task) + "\n" for task in tasks))
        run(RunOptions(scenario=load_scenario("observe"), tasks=load_tasks(tmp_path / "tasks.jsonl"), parallel=2,
                       command=BOOKING_AGENT, out=tmp_path / "run", show_progress=False))
    assert [world.cancelled for world in worlds.values()] == [["BK1001"], ["BK1001"]]
    verdicts = {record["task_id"]: record["verdict"] for record in read_run(tmp_path / "run").episodes}
    assert verdicts["cancel_proxied"]["status"] == "pass", verdicts["cancel_proxied"]
    verdict = verdicts["cancel_direct"]
    assert (verdict["status"], verdict["cause"]) == ("incomplete", "bypass"), verdict
    assert verdict["cause_detail"].startswith(f"no request reached 127.0.0.1:{direct.port} through the proxy, "
                                              "though the end state and answer say the work was done")
    assert "trust_env=False" in verdict["cause_detail"] and "docs/agents.md" in verdict["cause_detail"]
    assert verdict["failed"] == [] and verdict["violations"] == []
    assert not {"effects", "claimed_success"} & {check["name"] for check in verdict["checks"]}


EXITS_EARLY = "import sys; print('loading config', file=sys.stderr); print('KeyError: BOOKINGS_TOKEN', file=sys.stderr); sys.exit(3)"


def test_an_mcp_server_that_cannot_start_is_the_harness_problem(tmp_path):
    """`faultproxy mcp -- pyhton server.py`, or a server that exits before answering initialize:
    the agent crashes for want of its tools. Each episode is incomplete (server_not_started),
    naming the command and what it said, not a failure of the agent; the report says so rather
    than blaming the scenario for a rule that matched nothing."""
    servers = {"typo": ["pyhton", "server.py"], "exits_early": [sys.executable, "-c", EXITS_EARLY]}
    (tmp_path / "tasks.jsonl").write_text("".join(
        json.dumps({"id": name, "prompt": "List the tools.", "env": {"MCP_SERVER": json.dumps(server)},
                    "expected": {"output": {"regex": "read_counter"}}}) + "\n" for name, server in servers.items()))
    (tmp_path / "scenario.yaml").write_text(scenario("""
        - name: lost-call
          match: {method: POST, path: "*/tools/read_counter"}
          fault: {type: response_lost, mode: "504"}
    """))
    run(RunOptions(scenario=load_scenario(tmp_path / "scenario.yaml"), tasks=load_tasks(tmp_path / "tasks.jsonl"),
                   command=MCP_COMMAND_AGENT, out=tmp_path / "run", parallel=2, show_progress=False))
    verdicts = {record["task_id"]: record["verdict"] for record in read_run(tmp_path / "run").episodes}
    for name, says in (("typo", "cannot start 'pyhton': No such file or directory"),
                       ("exits_early", f"`{sys.executable} -c 'import sys; print(")):
        verdict = verdicts[name]
        assert (verdict["status"], verdict["cause"]) == ("incomplete", "server_not_started"), verdict
        assert says in verdict["cause_detail"], verdict["cause_detail"]
        assert verdict["cause_detail"].endswith("→ check the server command in the agent's MCP configuration "
                                                "(faultproxy mcp -- CMD) and run it by hand")
    assert "exited with status 3; stderr: loading config | KeyError: BOOKINGS_TOKEN" in verdicts["exits_early"]["cause_detail"]
    [alert] = build_report(tmp_path / "run", causes=False)["run"]["headline"]["alerts"]
    assert alert.startswith("an MCP server could not start in 2 of 2 episode(s) (incomplete: server_not_started); "
                            "first: POST ")


def test_rules_and_task_patterns_that_matched_nothing_are_named(tmp_path, monkeypatch, capsys):
    """A scenario rule for a path this agent never calls, and a tasks-file pattern one letter off
    what it does call: `run`'s last lines and the report name both, with what was seen. A
    forbidden pattern that matches nothing and resembles nothing seen is what a good run looks
    like, and is not named."""
    world = Payments()
    with ServerThread(world.app()) as server:
        monkeypatch.setenv("PAY_URL", server.url)
        monkeypatch.setenv("REFUND_MODE", "naive")
        task = {"id": "refund_1001", "prompt": "Refund order 1001.", "irreversible": ["POST */refund"],
                "forbidden": ["DELETE */ledger/*"], "expected": {"effects": [{"method": "POST", "path": "*/refunds"}]}}
        (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
        (tmp_path / "scenario.yaml").write_text(scenario("""
            - name: refund-503
              match: {method: POST, path: "*/refunds"}
              fault: {type: server_error, status: 503}
              when: {calls: [1]}
            - name: lose-cancel
              match: {method: POST, path: "*/cancel"}
              fault: {type: response_lost, mode: "504"}
        """))
        status, said = cli(capsys, "run", "--scenario", str(tmp_path / "scenario.yaml"), "--tasks",
                           str(tmp_path / "tasks.jsonl"), "--out", str(tmp_path / "run"), "--", *REFUND_AGENT)
    assert (status, len(world.refunds)) == (0, 1), said
    rule = f"rule `lose-cancel` matched nothing; requests seen: POST 127.0.0.1:{server.port}/refunds ×2"
    pattern = (f"pattern `POST */refund` (tasks file or policy) matched no request or tool; nearest seen: "
               f"POST 127.0.0.1:{server.port}/refunds")
    assert f"warning: {rule}\n" in said and f"warning: {pattern}\n" in said, said
    alerts = build_report(tmp_path / "run", causes=False)["run"]["headline"]["alerts"]
    assert alerts == [rule, pattern]


def test_the_nearest_names_of_a_pattern_are_its_likely_typos():
    seen = {"mcp:issue_credit", "mcp:lookup_account", "POST api.example.com/bookings/{id}/cancel",
            "GET api.example.com/orders/{id}"}
    assert nearest("mcp:issue-credit", seen) == ["mcp:issue_credit"]
    assert nearest("POST */cancels", seen) == ["POST api.example.com/bookings/{id}/cancel"]
    assert nearest("GET */payments", seen) == [] and nearest("DELETE */cancel", seen) == []


def test_a_session_header_no_request_carries_is_said_live_and_in_the_report(tmp_path, upstream):
    """`monitor --episode-by header:X-Session-Id --episode-by auth`, and the agent sends
    X-Request-Id (new each request) and X-Conversation instead: after the first requests the
    monitor warns, naming the header and the headers that vary; the report says it again. Its
    telemetry, declared with --side-channel, fails and the verdict stands."""
    counter, server = upstream
    log, telemetry = tmp_path / "monitor.log", f"127.0.0.1:{closed_port()}"
    monitor = MonitorProcess(tmp_path / "run", "--episode-by", "header:X-Session-Id", "--episode-by", "auth",
                             "--idle-s", "600", "--side-channel", f"POST {telemetry}/v1/traces/*", stderr=log)
    with httpx.Client(proxy=monitor.proxy("agent-a")) as client:
        assert client.post(f"http://{telemetry}/v1/traces/ingest", json={}).status_code == 502
        for request in range(WATCHED_REQUESTS):
            client.get(f"{server.url}/items/{request}", headers={"X-Request-Id": f"r{request}",
                                                                 "X-Conversation": f"c{request % 2}"})
    warning = (f"--episode-by header:x-session-id: no request carried the header in the first {WATCHED_REQUESTS} "
               "(episodes came from auth, client instead); headers that vary: x-conversation, x-request-id")
    assert wait_until(lambda: warning in log.read_text(), 30, monitor.process), log.read_text()
    assert monitor.stop() == 0  # judges the open episode
    [record] = read_run(tmp_path / "run").episodes
    assert record["verdict"]["status"] == "pass", record["verdict"]
    assert [side["request"] for side in record["verdict"]["side_channel_errors"]] == [
        f"POST {telemetry}/v1/traces/ingest"]
    [header, side] = build_report(tmp_path / "run", causes=False)["run"]["headline"]["alerts"]
    assert header == warning.replace(f"first {WATCHED_REQUESTS}", f"first {WATCHED_REQUESTS + 1}")
    assert side.startswith("1 episode(s) had side-channel errors")


def test_rules_that_matched_nothing_share_one_line():
    seen = SeenTraffic(requests=Counter({"POST api.example.com/bookings/{id}/cancel": 3}),
                       rules=Counter({"model_429": 4}))
    assert unmatched_alerts(["model_429", "anthropic_529", "mcp_internal_error"], {}, seen) == [
        "rules `anthropic_529`, `mcp_internal_error` matched nothing; requests seen: "
        "POST api.example.com/bookings/{id}/cancel ×3"]
