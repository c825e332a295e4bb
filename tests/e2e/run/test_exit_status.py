"""Exit statuses a CI job can trust (issue 22): `faultproxy run` and `sweep`, as subprocesses, with
the probe agent against a real local upstream. An agent that crashes or overruns its budget is
judged (fail, with a `crash` or `budget` finding); what the harness could not judge (a failed
reset, an agent that could not be started) makes the command exit 1 with the counts by cause on
its last line, unless --allow-incomplete."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from faultproxy.formats.rundir import read_run
from tests.support.agent_commands import PROBE_AGENT
from tests.support.fixtures import scenario
from tests.support.processes import FAULTPROXY

REFUND_503 = scenario("""
    - name: refund-503
      match: {method: POST, path: "*/refund"}
      fault: {type: server_error, status: 503}
      when: {probability: lambda}
""", params="{lambda: 0}")


def faultproxy(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([*FAULTPROXY, *args], capture_output=True, text=True, timeout=300, env=env)


def last_line(done: subprocess.CompletedProcess) -> str:
    return done.stderr.strip().splitlines()[-1]


def verdicts(run_dir: Path) -> dict[str, dict]:
    return {r["task_id"]: r["verdict"] for r in read_run(run_dir).episodes}


def test_run_exits_1_on_what_the_harness_could_not_judge_and_0_on_what_the_agent_failed(tmp_path, upstream,
                                                                                       monkeypatch):
    _, server = upstream
    monkeypatch.setenv("PROBE_UPSTREAM", server.url)
    (tmp_path / "scenario.yaml").write_text(REFUND_503)
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(json.dumps({"severity": {"budget": "high"}, "tasks": [
        {"id": "crashes", "prompt": "crash"},
        {"id": "hangs", "prompt": "hang", "budgets": {"wall_s": 1}},
        {"id": "unreset", "prompt": "ok", "reset_url": f"{server.url}/no_reset_here"}]}))
    command = ["run", "--scenario", str(tmp_path / "scenario.yaml"), "--tasks", str(tasks), "--parallel", "3",
               "--out", str(tmp_path / "run"), "--", *PROBE_AGENT]
    done = faultproxy(*command)
    assert done.returncode == 1, done.stdout + done.stderr
    assert last_line(done) == ("1 of 3 planned episode(s) not judged by the harness: reset_failed 1; "
                               "exit 1 (--allow-incomplete to accept)")
    judged = verdicts(tmp_path / "run")
    assert judged["unreset"]["status"] == "incomplete" and judged["unreset"]["cause"] == "reset_failed"
    crash, budget = ({f["name"]: f["severity"] for f in judged[t]["failed"]} for t in ("crashes", "hangs"))
    assert judged["crashes"]["status"] == judged["hangs"]["status"] == "fail"
    assert crash["crash"] == "medium" and budget["budget"] == "high"  # the tasks file's severity
    resumed = faultproxy(*command[:-len(PROBE_AGENT) - 1], "--allow-incomplete", "--", *PROBE_AGENT)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert last_line(resumed) == ("1 of 3 planned episode(s) not judged by the harness: reset_failed 1 "
                                  "(allowed: --allow-incomplete)")


def test_an_agent_gone_after_preflight_is_incomplete_not_a_crash(tmp_path, upstream):
    """The agent's program passes the pre-flight check, then disappears (its first episode deletes
    it): the other three episodes could not start it. The harness's failure, not the agent's."""
    _, server = upstream
    agent = tmp_path / "vanishing_agent"
    agent.write_text(f"#!{sys.executable}\nimport os, sys\nos.remove(sys.argv[0])\n")
    agent.chmod(0o755)
    (tmp_path / "scenario.yaml").write_text(REFUND_503)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "prompt": "p"}) + "\n")
    done = faultproxy("run", "--scenario", str(tmp_path / "scenario.yaml"), "--tasks", str(tasks), "--k", "4",
                      "--parallel", "1", "--out", str(tmp_path / "run"), "--", str(agent))
    assert done.returncode == 1, done.stdout + done.stderr
    assert last_line(done) == ("3 of 4 planned episode(s) not judged by the harness: agent_not_started 3; "
                               "exit 1 (--allow-incomplete to accept)")
    statuses = sorted((r["verdict"]["status"], r["verdict"]["cause"]) for r in read_run(tmp_path / "run").episodes)
    assert statuses == [("incomplete", "agent_not_started")] * 3 + [("pass", None)]


def test_sweep_exits_1_with_the_counts_when_episodes_could_not_be_judged(tmp_path, upstream, monkeypatch):
    _, server = upstream
    monkeypatch.setenv("PROBE_UPSTREAM", server.url)
    (tmp_path / "scenario.yaml").write_text(REFUND_503)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "prompt": "ok", "reset_url": f"{server.url}/no_reset_here"}) + "\n")
    done = faultproxy("sweep", "--scenario", str(tmp_path / "scenario.yaml"), "--param", "lambda=0,0.5", "--tasks",
                      str(tasks), "--no-html", "--out", str(tmp_path / "sweep"), "--", *PROBE_AGENT)
    assert done.returncode == 1, done.stdout + done.stderr
    assert last_line(done) == ("2 of 2 planned episode(s) not judged by the harness: reset_failed 2; "
                               "exit 1 (--allow-incomplete to accept)")
    assert "wrote " in done.stdout  # the sweep's own report is still written
