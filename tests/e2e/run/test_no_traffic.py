"""No verdict from an empty trace (issue 23): an agent whose requests never reach the proxy is
not judged on effects the proxy never saw, and the run says which of "no traffic reached the
proxy" and "traffic reached it, but no rule matched" happened."""

from __future__ import annotations

import sys
import subprocess
from dataclasses import replace
from pathlib import Path

from faultproxy import RunOptions, build_report, run
from faultproxy.evaluator.judging import judge_episode
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks, task_set_from_json
from tests.support.agent_commands import REFUND_AGENT
from tests.support.fixtures import scenario
from tests.support.payments import tasks_file
from tests.support.ports import closed_port
from tests.support.processes import FAULTPROXY

# Node 20's global fetch ignores HTTP(S)_PROXY (and NODE_USE_ENV_PROXY, which Node honours from 24):
# this agent refunds straight at the payments API, around the proxy, and tells the truth about it.
NODE_FETCH_AGENT = """
import { writeFileSync } from "node:fs";
const response = await fetch(process.env.PAY_URL + "/refunds", {
  method: "POST", headers: { "content-type": "application/json" },
  body: JSON.stringify({ order: "1001", amount_cents: 1250 }),
});
writeFileSync(process.env.FAULTPROXY_OUTPUT, JSON.stringify({ answer: response.ok ? "refunded" : "failed" }));
"""

LOST_REFUND = scenario("""
    - name: lost-refund
      match: {method: POST, path: "*/refunds"}
      fault: {type: response_lost, mode: "504"}
""")

RESPONSES_ONLY = scenario("""
    - name: responses-429
      match: {method: POST, path: "*/v1/responses"}
      fault: {type: rate_limit, retry_after: 1}
""")


def faultproxy_run(tmp_path: Path, scenario_text: str, tasks: Path, command: list[str], out: str,
                   *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / f"{out}.yaml").write_text(scenario_text)
    return subprocess.run([*FAULTPROXY, "run", "--scenario", str(tmp_path / f"{out}.yaml"), "--tasks", str(tasks),
                           "--out", str(tmp_path / out), *extra, "--", *command],
                          capture_output=True, text=True, timeout=300)


def test_a_node_fetch_agent_that_bypasses_the_proxy_is_no_traffic_not_a_silent_failure(tmp_path, payments):
    """The agent refunded once, directly: the proxy saw nothing. Both episodes are incomplete
    (no_traffic), no effect check ran on the empty trace, and the run says that no traffic
    reached the proxy and where the fix is, rather than calling the truthful agent a liar."""
    world, server = payments
    agent = tmp_path / "agent.mjs"  # in a folder with no node_modules: nothing can route it
    agent.write_text(NODE_FETCH_AGENT)
    tasks = tasks_file(tmp_path, server.url, output={"regex": "refunded"})
    done = faultproxy_run(tmp_path, LOST_REFUND, tasks, ["node", str(agent)], "node", "--k", "2")
    assert len(world.refunds) == 1  # the last episode's refund, straight to the API
    assert done.returncode == 1, done.stdout + done.stderr
    episodes = read_run(tmp_path / "node").episodes
    assert len(episodes) == 2
    for record in episodes:
        verdict = record["verdict"]
        assert (verdict["status"], verdict["cause"]) == ("incomplete", "no_traffic"), verdict
        assert "expects effects or an end state and has rules that could fire" in verdict["cause_detail"]
        names = {check["name"] for check in verdict["checks"]}
        assert not names & {"effects", "end_state", "claimed_success", "outcome"}, names
        assert verdict["failed"] == []
    assert "no traffic reached the proxy in 2 of 2 episode(s) (incomplete: no_traffic)" in done.stderr
    assert "docs/agents.md" in done.stderr
    assert "faults not exercised: all 2 episodes; no traffic reached the proxy" in done.stderr
    assert "silent" not in done.stdout + done.stderr


def test_traffic_that_no_rule_matches_is_told_apart_and_listed(tmp_path, payments, monkeypatch):
    """The agent's requests reach the proxy, but the scenario only matches the Responses API: the
    run lists what it saw (method, host, path, count) instead of suspecting the proxy settings.
    The episodes are judged: the proxy saw what they did."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "naive")
    (tmp_path / "responses.yaml").write_text(RESPONSES_ONLY)
    run(RunOptions(scenario=load_scenario(tmp_path / "responses.yaml"), k=2, command=REFUND_AGENT,
                   tasks=load_tasks(tasks_file(tmp_path, server.url)), out=tmp_path / "unmatched", show_progress=False))
    assert [r["verdict"]["status"] for r in read_run(tmp_path / "unmatched").episodes] == ["pass", "pass"]
    alerts = build_report(tmp_path / "unmatched", causes=False)["run"]["headline"]["alerts"]
    assert alerts == [f"faults not exercised: all 2 episodes; traffic reached the proxy, but no rule matched: "
                      f"POST 127.0.0.1:{server.port}/refunds ×2 (match these in the scenario's rules)",
                      f"rule `responses-429` matched nothing; requests seen: POST 127.0.0.1:{server.port}/refunds ×2"]
    for trace in (tmp_path / "unmatched" / "flows").glob("*.jsonl"):
        [line] = list(read_trace(trace))
        assert "matched" not in line  # no rule selected it: the trace says so by leaving `matched` out


def test_rules_that_match_but_do_not_fire_are_a_third_reason(tmp_path, payments, monkeypatch):
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "naive")
    (tmp_path / "later.yaml").write_text(scenario("""
        - name: fifth-refund
          match: {method: POST, path: "*/refunds"}
          fault: {type: server_error, status: 503}
          when: {calls: [5]}
    """))
    run(RunOptions(scenario=load_scenario(tmp_path / "later.yaml"), tasks=load_tasks(tasks_file(tmp_path, server.url)),
                   command=REFUND_AGENT, out=tmp_path / "later", show_progress=False))
    alerts = build_report(tmp_path / "later", causes=False)["run"]["headline"]["alerts"]
    assert alerts == ["faults not exercised: all 1 episodes; rules matched 1 of 1 request(s), but no fault was "
                      "delivered (see the rules' probability and `when`)"]
    [line] = list(read_trace(next((tmp_path / "later" / "flows").glob("*.jsonl"))))
    assert line["matched"] == ["fifth-refund"] and line["fault"] is None


def test_an_empty_trace_is_judged_when_the_task_expects_no_traffic_and_no_rule_could_fire():
    """An agent that only answers (no effects or state expected, no rule that could fire) is judged
    as before: an empty trace is what such a task looks like. Expecting an end state, it is not."""
    [answers, stateful] = task_set_from_json([
        {"id": "hello", "prompt": "Say hello.", "expected": {"output": {"regex": "hello"}}},
        {"id": "greet", "prompt": "Greet.", "expected": {"state": {"greeted": True}}}]).tasks
    record = {"key": "hello.t0", "completed": True, "cause": None, "output": {"answer": "hello"},
              "faults_possible": False}
    assert judge_episode(answers, record, [])["status"] == "pass"
    assert judge_episode(answers, {**record, "faults_possible": True}, [])["cause"] == "no_traffic"
    verdict = judge_episode(stateful, record, [])
    assert (verdict["status"], verdict["cause"]) == ("incomplete", "no_traffic")
    assert "expects effects or an end state:" in verdict["cause_detail"]


def test_a_failed_side_channel_is_recorded_and_the_verdict_stands(tmp_path, payments, monkeypatch):
    """Side channels (issue 23, 33): the agent reports to a telemetry endpoint that refuses
    connections, beside its real work, and the run declares it a side channel. The refund's 503 is
    survived (one retry, one refund): the episode passes, the error is kept as a side-channel
    error with `--no-proxy HOST` as its fix. When the task's own API is what cannot be reached,
    the episode is incomplete, with the fix for that reason."""
    world, server = payments
    telemetry = f"127.0.0.1:{closed_port()}"
    monkeypatch.setenv("REFUND_MODE", "telemetry")
    monkeypatch.setenv("TELEMETRY_URL", f"http://{telemetry}/v1/traces/ingest")
    (tmp_path / "refund503.yaml").write_text(scenario("""
        - name: refund-503
          match: {method: POST, path: "*/refunds"}
          fault: {type: server_error, status: 503}
          when: {calls: [1]}
    """))
    options = RunOptions(scenario=load_scenario(tmp_path / "refund503.yaml"), command=REFUND_AGENT,
                         tasks=load_tasks(tasks_file(tmp_path, server.url)), out=tmp_path / "side", show_progress=False,
                         side_channels=[f"POST {telemetry}/v1/traces/*"])
    run(options)
    assert len(world.refunds) == 1
    [record] = read_run(tmp_path / "side").episodes
    verdict = record["verdict"]
    assert verdict["status"] == "pass", verdict
    [side] = verdict["side_channel_errors"]
    assert side["request"] == f"POST {telemetry}/v1/traces/ingest" and side["error"]
    assert side["fix"].startswith(f"--no-proxy {telemetry}")
    [alert] = build_report(tmp_path / "side", causes=False)["run"]["headline"]["alerts"]
    assert alert.startswith("1 episode(s) had side-channel errors (requests the task does not depend on; verdicts "
                            f"stand); first: POST {telemetry}/v1/traces/ingest")
    assert "--upstream-ca" not in alert

    monkeypatch.setenv("PAY_URL", f"http://{telemetry}")  # now the task's own API is unreachable
    world.refunds.clear()
    run(replace(options, out=tmp_path / "on_path"))
    [record] = read_run(tmp_path / "on_path").episodes
    assert (record["verdict"]["status"], record["verdict"]["cause"]) == ("incomplete", "infra_error")
    assert record["verdict"]["cause_detail"].endswith(f"→ check that {telemetry} is up and its name resolves from here "
                                                      f"(or --side-channel 127.0.0.1/refunds if the task does not need it)")
    # the declared telemetry request stays a side channel, though its host is now the task's
    assert [side["request"] for side in record["verdict"]["side_channel_errors"]] == [f"POST {telemetry}/v1/traces/ingest"]


def test_an_agent_that_dies_before_sending_anything_is_told_by_its_last_words(tmp_path, payments):
    """An agent that cannot start (a module missing from the interpreter it runs under) is the
    agent's failure, and the verdict and the report's cause say why in the words the agent
    printed, rather than "exited with status 1" and "unknown (no trace)"."""
    world, server = payments
    (tmp_path / "lost.yaml").write_text(LOST_REFUND)
    command = [sys.executable, "-c", "import a_module_this_venv_lacks"]
    run(RunOptions(scenario=load_scenario(tmp_path / "lost.yaml"), tasks=load_tasks(tasks_file(tmp_path, server.url)),
                   command=command, out=tmp_path / "dead", show_progress=False))
    [record] = read_run(tmp_path / "dead").episodes
    outcome = next(c for c in record["verdict"]["failed"] if c["name"] == "outcome")
    assert outcome["detail"] == ("the agent exited with status 1: ModuleNotFoundError: "
                                 "No module named 'a_module_this_venv_lacks'")
    [cause] = build_report(tmp_path / "dead")["causes"]["clusters"]
    assert cause["line"].endswith("the agent sent no request"), cause["line"]
    assert world.refunds == []
