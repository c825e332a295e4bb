"""No false pass (issue 12): each case a real agent (requests) through `faultproxy run`, against
a real payments API on a local socket, that a harness must not report as a success."""

from __future__ import annotations

import asyncio
import json
import ssl
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from faultproxy import RunOptions, run
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.agent_commands import REFUND_AGENT
from tests.support.fixtures import scenario
from tests.support.payments import Payments, tasks_file
from tests.support.processes import FAULTPROXY
from tests.support.upstream import ServerThread
from tests.support.verdicts import check, detail, failed_checks


def run_options(tmp_path: Path, tasks: Path, scenario_text: str, **kw) -> RunOptions:
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario_text)
    return RunOptions(scenario=load_scenario(path), tasks=load_tasks(tasks), command=REFUND_AGENT,
                      out=tmp_path / "run", show_progress=False, **kw)


def only_verdict(out: Path) -> dict:
    [record] = read_run(out).episodes
    return record["verdict"]


LOST_THEN_HANG = scenario("""
    - name: lost-refund
      match: {method: POST, path: "*/refunds"}
      fault: {type: response_lost, mode: hang, hang_s: 8}
      when: {calls: [1]}
""")


def test_an_exchange_held_when_the_agent_exits_is_recorded_and_judged(tmp_path, payments, monkeypatch):
    """The first refund's answer is held 8 s; the agent gives up after 5 s, retries without a key
    and exits while the proxy still holds the first exchange. Both commits must be judged."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "naive")
    result = run(run_options(tmp_path, tasks_file(tmp_path, server.url), LOST_THEN_HANG))
    assert len(world.refunds) == 2  # the upstream committed twice
    verdict = only_verdict(tmp_path / "run")
    assert verdict["status"] == "fail", verdict
    assert failed_checks(verdict)["effects"] == "high"
    assert failed_checks(verdict)["idempotency"] == "high"
    assert result.counts["pass"] == 0
    [record] = read_run(tmp_path / "run").episodes
    first, second = sorted(read_trace(tmp_path / "run" / record["trace"]), key=lambda line: line["seq"])
    assert first["upstream"]["status"] == 201  # a commit is a commit, though nobody heard it
    assert first["client"]["outcome"] == "client_gone"
    assert 4 < first["client"]["gone_after_s"] < 60
    assert first["fault"]["type"] == "response_lost" and first["fault"]["delivered"] is True
    assert second["upstream"]["status"] == 201


def test_an_upstream_still_working_at_the_end_is_recorded_as_cut_short(tmp_path, payments, monkeypatch):
    """The upstream has not answered when the agent gives up and exits: the exchange is written
    anyway, saying it was cut short (the upstream may still commit)."""
    world, server = payments
    world.hold = asyncio.Event()
    monkeypatch.setenv("REFUND_MODE", "claim")
    try:
        run(run_options(tmp_path, tasks_file(tmp_path, server.url), NO_FAULT))
    finally:
        server._loop.call_soon_threadsafe(world.hold.set)
    [record] = read_run(tmp_path / "run").episodes
    [line] = read_trace(tmp_path / "run" / record["trace"])
    assert line["upstream"] is None and line["forwarded"] is True
    assert line["client"]["outcome"] == "client_gone"
    assert "before the upstream answered" in line["cut_short"]
    assert record["verdict"]["status"] == "fail"  # an unknown commit is not an expected effect met


RETRY_AFTER_504 = scenario("""
    - name: lost-refund
      match: {method: POST, path: "*/refunds"}
      fault: {type: response_lost, mode: "504"}
      when: {calls: [1]}
""")


def test_two_commits_with_different_ids_are_two_effects_whatever_the_key(tmp_path, payments, monkeypatch):
    """A careful agent retries with the same idempotency key, but this upstream does not
    deduplicate: it committed twice and answered two refund ids. That is two effects."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "same_key")
    run(run_options(tmp_path, tasks_file(tmp_path, server.url), RETRY_AFTER_504))
    assert [r["id"] for r in world.refunds] == ["rf_1", "rf_2"]
    verdict = only_verdict(tmp_path / "run")
    assert verdict["status"] == "fail"
    assert failed_checks(verdict)["effects"] == "high"
    effects = check(verdict, "effects")
    assert "same idempotency key" in effects["detail"] and "rf_1, rf_2" in effects["detail"]
    assert check(verdict, "idempotency")["passed"] is True  # the agent did its part; the upstream did not


def test_a_fresh_correlation_id_does_not_make_a_retry_a_new_request(tmp_path, payments, monkeypatch):
    """The checks and replay matching share one definition of request identity: a body that
    differs only in a volatile key (correlation_id) is the same request, so the keyless retry
    of a committed refund is an idempotency violation."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "traced")
    run(run_options(tmp_path, tasks_file(tmp_path, server.url), RETRY_AFTER_504))
    assert len(world.refunds) == 2
    assert failed_checks(only_verdict(tmp_path / "run"))["idempotency"] == "high"


NO_FAULT = scenario("""
    - name: never
      match: {method: GET, path: "/never"}
      fault: {type: server_error, status: 503}
""")


def test_claimed_success_when_the_world_disagrees_is_a_silent_failure(tmp_path, payments, monkeypatch):
    """The agent says "refunded", but the state shows no refund (the API answered 503 and the
    agent ignored it): claimed_success fails at high severity."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "claim")
    refund_503 = scenario("""
        - name: refund-503
          match: {method: POST, path: "*/refunds"}
          fault: {type: server_error, status: 503}
    """)
    tasks = tasks_file(tmp_path, server.url, state={"refunds": 1}, output={"regex": "refunded"})
    run(run_options(tmp_path, tasks, refund_503))
    assert world.refunds == []
    verdict = only_verdict(tmp_path / "run")
    assert failed_checks(verdict)["claimed_success"] == "high"
    assert "end_state failed" in detail(verdict, "claimed_success")
    report = subprocess.run([*FAULTPROXY, "report", str(tmp_path / "run")], capture_output=True, text=True,
                            timeout=300)
    assert "silent failures: 1 episode(s)" in report.stdout


def test_claimed_success_without_expected_state_or_effects_is_not_applicable(tmp_path, payments, monkeypatch):
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "claim")
    task = {"id": "refund_1001", "prompt": "Refund order 1001.", "shape": "writes_state"}
    (tmp_path / "tasks.jsonl").write_text(json.dumps(task) + "\n")
    run(run_options(tmp_path, tmp_path / "tasks.jsonl", NO_FAULT))
    claimed = check(only_verdict(tmp_path / "run"), "claimed_success")
    assert claimed["passed"] is None and "not applicable" in claimed["detail"]


def test_a_failed_reset_does_not_launch_the_agent(tmp_path, payments, monkeypatch):
    world, server = payments
    world.reset_status = 503
    monkeypatch.setenv("REFUND_MODE", "naive")
    run(run_options(tmp_path, tasks_file(tmp_path, server.url), NO_FAULT))
    assert world.refunds == []  # the agent never ran
    verdict = only_verdict(tmp_path / "run")
    assert verdict["status"] == "incomplete" and verdict["cause"] == "reset_failed"
    assert "503" in verdict["cause_detail"]


@pytest.fixture
def https_payments(upstream_certificate, monkeypatch) -> Iterator[tuple[Payments, ServerThread]]:
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    world = Payments()
    with ServerThread(world.app(), context) as server:
        monkeypatch.setenv("PAY_URL", server.url)
        yield world, server


def test_an_untrusted_upstream_certificate_is_an_infrastructure_error_not_a_pass(tmp_path, https_payments,
                                                                               upstream_certificate, monkeypatch):
    """A self-signed HTTPS upstream, no trust configured: every request fails TLS verification in
    the proxy. The episode is incomplete (infra_error, naming host and reason), the run says so
    and exits non-zero. With --upstream-ca the same run passes."""
    world, server = https_payments
    monkeypatch.setenv("REFUND_MODE", "naive")
    task = {"id": "refund_1001", "prompt": "Refund order 1001.", "shape": "writes_state",
            "expected": {"effects": [{"method": "POST", "path": "*/refunds", "count": 1}]}}
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps(task) + "\n")
    (tmp_path / "scenario.yaml").write_text(NO_FAULT)
    command = [*FAULTPROXY, "run", "--scenario", str(tmp_path / "scenario.yaml"), "--tasks", str(tasks),
               "--out", str(tmp_path / "run"), "--", *REFUND_AGENT]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert world.refunds == []
    assert done.returncode != 0, done.stdout + done.stderr
    verdict = only_verdict(tmp_path / "run")
    assert verdict["status"] == "incomplete" and verdict["cause"] == "infra_error"
    assert f"127.0.0.1:{server.port}" in verdict["cause_detail"]
    assert "certificate" in verdict["cause_detail"].lower()
    assert "infrastructure error" in done.stdout + done.stderr
    trusted = subprocess.run([*command[:-len(REFUND_AGENT) - 1], "--out", str(tmp_path / "trusted"),
                              "--upstream-ca", str(upstream_certificate[0]), "--allow-unexercised",
                              "--", *REFUND_AGENT],
                             capture_output=True, text=True, timeout=300)
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    assert only_verdict(tmp_path / "trusted")["status"] == "pass"
    assert len(world.refunds) == 1
    # Gated against the trusted run, the untrusted one is the harness's failure, not a regression.
    gate = subprocess.run([*FAULTPROXY, "gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "trusted")],
                          capture_output=True, text=True, timeout=300)
    assert gate.returncode == 4, gate.stdout + gate.stderr
    assert gate.stdout.splitlines()[-1] == ("gate: ERROR: the harness could not judge (run: infra_error 1); "
                                           "nothing compared, exit 4")
    assert "BLOCK" not in gate.stdout and "the agent" not in gate.stdout


def cli_run(tmp_path: Path, tasks: Path, scenario_text: str, out: str, *extra: str) -> subprocess.CompletedProcess:
    (tmp_path / f"{out}.yaml").write_text(scenario_text)
    return subprocess.run([*FAULTPROXY, "run", "--scenario", str(tmp_path / f"{out}.yaml"), "--tasks", str(tasks),
                           "--out", str(tmp_path / out), *extra, "--", *REFUND_AGENT],
                          capture_output=True, text=True, timeout=300)


def test_faults_that_never_reach_the_agent_fail_the_run_unless_allowed(tmp_path, payments, monkeypatch):
    """A rule that could fire on every call matches nothing the agent sends: the run tested
    nothing. `run` says `faults not exercised: all N episodes` and exits 1; a scenario whose
    rules cannot fire at this level (probability 0) is a baseline and exits 0."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "naive")
    tasks = tasks_file(tmp_path, server.url)
    done = cli_run(tmp_path, tasks, NO_FAULT, "unexercised")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "faults not exercised: all 1 episodes" in done.stderr
    assert only_verdict(tmp_path / "unexercised")["status"] == "pass"
    allowed = cli_run(tmp_path, tasks, NO_FAULT, "allowed", "--allow-unexercised")
    assert allowed.returncode == 0, allowed.stdout + allowed.stderr
    baseline = scenario("""
        - name: refund-503
          match: {method: POST, path: "*/refunds"}
          fault: {type: server_error, status: 503}
          when: {probability: lambda}
    """, params="{lambda: 0}")
    assert cli_run(tmp_path, tasks, baseline, "baseline").returncode == 0
    report = subprocess.run([*FAULTPROXY, "report", str(tmp_path / "unexercised")], capture_output=True, text=True,
                            timeout=300)
    assert "faults not exercised: all 1 episodes" in report.stdout


def test_report_and_gate_read_the_log_as_a_resumed_run_would(tmp_path, payments, monkeypatch):
    """A log of another plan is refused (exit 2, one line); a duplicated line and a trial outside
    the plan are ignored, counted and warned about; run, report and gate agree on the numbers."""
    world, server = payments
    monkeypatch.setenv("REFUND_MODE", "naive")
    tasks = tasks_file(tmp_path, server.url)
    one = run(run_options(tmp_path, tasks, NO_FAULT, k=1))
    assert (one.logged, one.planned) == (1, 1)
    two_dir = tmp_path / "two"
    run(RunOptions(**{**run_options(tmp_path, tasks, NO_FAULT).__dict__, "k": 2, "out": two_dir}))
    log = tmp_path / "run" / "episodes.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    episode = json.loads(lines[1])
    stray = {**episode, "key": episode["key"] + "-stray", "trial": 5}
    stray["verdict"] = {**episode["verdict"], "episode": {**episode["verdict"]["episode"], "trial": 5}}
    log.write_text("".join(lines) + lines[1] + json.dumps(stray) + "\n")
    report = subprocess.run([*FAULTPROXY, "report", str(tmp_path / "run")], capture_output=True, text=True,
                            timeout=300)
    assert report.returncode == 0, report.stderr
    document = json.loads((tmp_path / "run" / "report.json").read_text())
    assert document["run"]["logged"] == 1 and document["run"]["status"]["pass"] == 1
    assert (document["log"]["duplicate_lines"], document["log"]["out_of_plan_trials"]) == (1, 1)
    assert document["log"]["warnings"][0] == "1 log line(s) ignored: each repeats a trial already logged"
    assert "1 log line(s) ignored" in report.stdout
    again = run(run_options(tmp_path, tasks, NO_FAULT, k=1))  # resuming agrees: nothing to run, 1/1
    assert (again.ran, again.logged, again.planned) == (0, 1, 1)
    gate = subprocess.run([*FAULTPROXY, "gate", str(tmp_path / "run"), "--baseline", str(tmp_path / "run")],
                          capture_output=True, text=True, timeout=300)
    assert gate.returncode != 2 and "Traceback" not in gate.stderr, gate.stdout + gate.stderr

    (tmp_path / "run" / "episodes.jsonl").write_bytes((two_dir / "episodes.jsonl").read_bytes())
    for command in (["report", str(tmp_path / "run")],
                    ["gate", str(tmp_path / "run"), "--baseline", str(two_dir)]):
        refused = subprocess.run([*FAULTPROXY, *command], capture_output=True, text=True, timeout=300)
        assert refused.returncode == 2, refused.stdout + refused.stderr
        [line] = refused.stderr.strip().splitlines()
        assert "episodes.jsonl was written for another plan than" in line and "plan.json" in line
        assert "differs in: k" in line and "Traceback" not in refused.stderr


def test_a_tasks_file_naming_a_check_that_does_not_exist_is_refused(tmp_path):
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("severity: {idempotncy: low}\ntasks:\n  - {id: t, prompt: p}\n")
    done = subprocess.run([*FAULTPROXY, "run", "--scenario", "rate_limit", "--tasks", str(tasks), "--out",
                           str(tmp_path / "run"), "--", sys.executable, "-c", "pass"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    [line] = done.stderr.strip().splitlines()
    assert f"{tasks}:1" in line and "idempotncy" in line and "did you mean 'idempotency'" in line
    assert "claimed_success" in line and "end_state" in line


def test_run_function_reports_the_report_figures_with_never_run_tasks_kept(tmp_path, payments):
    """run_function's figures are the report's: a task whose trials are not logged is listed with
    no statuses and pass^k stays unknown until the run is resumed."""
    from faultproxy import build_report, run_function, task_set_from_json
    from faultproxy.runner.inprocess import summarize

    tasks = task_set_from_json([{"id": "a", "prompt": "say yes"}, {"id": "b", "prompt": "say yes too"}])
    result = run_function(lambda episode: True, tasks, k=2, scenario="rate_limit", out=tmp_path / "run")
    assert result.pass_hat_k == 1.0 and set(result.per_task) == {"a", "b"}
    log = tmp_path / "run" / "episodes.jsonl"
    log.write_text("".join(line for line in log.read_text().splitlines(keepends=True) if '"task_id": "b"' not in line))
    summary = summarize(tmp_path / "run")
    headline = build_report(tmp_path / "run")["run"]["headline"]
    assert summary.per_task["b"] == [] and len(summary.per_task["a"]) == 2
    assert summary.pass_hat_k is None and headline["pass_hat_k"] is None
    assert summary.mean_pass_rate == headline["mean_pass_rate"]
