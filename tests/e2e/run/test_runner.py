"""`faultproxy run`: the agent contract, causes, resume after kill -9, plan refusal, parallel = serial."""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faultproxy.formats.rundir import read_run
from faultproxy.runner.agent import NODE_PRELOAD
from faultproxy.runner.plan import GridPoint
from faultproxy import RunOptions, run
from faultproxy.tasks.tasks_file import load_tasks
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from tests.support.agent_commands import PROBE_AGENT
from tests.support.fixtures import scenario
from tests.support.processes import FAULTPROXY, alive, logged_episodes, wait_until


REFUND_FLAKY = scenario("""
    - name: refund-503
      match: {method: POST, path: "*/refund"}
      fault: {type: server_error, status: 503}
      when: {probability: lambda}
""", params="{lambda: 0.5}")


def write_tasks(folder: Path, prompts: dict[str, str], **extra) -> Path:
    tasks = [{"id": task_id, "prompt": prompt, "shape": "writes_state", **extra} for task_id, prompt in prompts.items()]
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(t) + "\n" for t in tasks))
    return path


@pytest.fixture
def probe_env(upstream, monkeypatch):
    _, server = upstream
    monkeypatch.setenv("PROBE_UPSTREAM", server.url)
    return server


def options(tmp_path: Path, tasks: Path, scenario_text: str = REFUND_FLAKY, **kw) -> RunOptions:
    path = tmp_path / "scenario.yaml"
    path.write_text(scenario_text)
    kw.setdefault("out", tmp_path / "run")
    kw.setdefault("command", PROBE_AGENT)
    return RunOptions(scenario=load_scenario(path), tasks=load_tasks(tasks), show_progress=False, **kw)


def test_agent_gets_the_contract_environment(tmp_path, probe_env):
    tasks = write_tasks(tmp_path, {"contract": "env"})
    command = [*PROBE_AGENT, "--task={task_id}", "--variant={variant}", "--seed={seed}"]
    result = run(options(tmp_path, tasks, command=command, no_proxy=["example.internal"],
                         grid=[GridPoint(model="m-1")]))
    assert result.complete
    [record] = read_run(tmp_path / "run").episodes
    env = record["output"]["answer"]
    key = record["key"]
    assert env["HTTP_PROXY"] == env["HTTPS_PROXY"] == env["http_proxy"] == env["https_proxy"]
    assert env["HTTPS_PROXY"].startswith(f"http://{key}:") and "@127.0.0.1:" in env["HTTPS_PROXY"]
    assert env["NO_PROXY"] == env["no_proxy"] == "example.internal"
    ca = {env[n] for n in ("SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS",
                           "AWS_CA_BUNDLE", "HTTPLIB2_CA_CERTS", "GRPC_DEFAULT_SSL_ROOTS_FILE_PATH", "GIT_SSL_CAINFO",
                           "DENO_CERT")}
    assert len(ca) == 1 and "BEGIN CERTIFICATE" in Path(ca.pop()).read_text()
    assert env["NODE_USE_ENV_PROXY"] == "1"
    assert env["NODE_OPTIONS"].endswith(f'--require "{NODE_PRELOAD}"') and NODE_PRELOAD.exists()
    assert env["FAULTPROXY_EPISODE"] == key and env["FAULTPROXY_MODEL"] == "m-1"
    assert env["FAULTPROXY_PROMPT"] == record["prompt"] and env["FAULTPROXY_SEED"] == str(record["seed"])
    task_file = json.loads(Path(env["FAULTPROXY_TASK"]).read_text())
    assert task_file["task"]["id"] == "contract" and task_file["variant"] == 0
    assert env["argv"] == ["--task=contract", "--variant=0", f"--seed={record['seed']}"]


def test_causes_crash_hang_budget_and_exit_code(tmp_path, probe_env):
    tasks = write_tasks(tmp_path, {"crashes": "crash", "hangs": "hang", "fails": "fail", "chatty": "chatty"},
                        budgets={"requests": 10})
    # hangs alone gets a wall-time budget: on a loaded machine chatty must still meet its request budget first
    lines = [json.loads(line) for line in tasks.read_text().splitlines()]
    tasks.write_text("".join(json.dumps({**t, "budgets": {"wall_s": 1.5}} if t["id"] == "hangs" else t) + "\n"
                             for t in lines))
    started = time.monotonic()
    run(options(tmp_path, tasks, parallel=4))  # chatty's only budget is requests: a loaded machine is no wall
    assert time.monotonic() - started < 30
    records = {r["task_id"]: r for r in read_run(tmp_path / "run").episodes}
    assert (records["crashes"]["completed"], records["crashes"]["cause"]) == (False, "crash")
    assert (records["hangs"]["completed"], records["hangs"]["cause"]) == (False, "budget_wall")
    assert (records["chatty"]["completed"], records["chatty"]["cause"]) == (False, "budget_requests")
    assert (records["fails"]["completed"], records["fails"]["exit_code"]) == (True, 3)
    assert records["fails"]["verdict"]["status"] == "fail"
    # The agent's own bad endings are judged failures, each with its finding (medium by default).
    for task_id, finding in (("crashes", "crash"), ("hangs", "budget"), ("chatty", "budget")):
        verdict = records[task_id]["verdict"]
        assert (verdict["status"], verdict["cause"]) == ("fail", records[task_id]["cause"])
        assert {"name": finding, "severity": "medium"}.items() <= verdict["failed"][-1].items()
        assert "end_state" in {c["name"] for c in verdict["checks"]}  # every check ran on what it did


def test_parallel_equals_serial(tmp_path, probe_env):
    tasks = write_tasks(tmp_path, {f"t{i}": "ok" for i in range(4)})
    run(options(tmp_path, tasks, k=3, parallel=1, out=tmp_path / "serial"))
    run(options(tmp_path, tasks, k=3, parallel=6, out=tmp_path / "parallel"))

    def outcome(folder: str) -> dict:
        found = {}
        for record in read_run(tmp_path / folder).episodes:
            faults = [e["fault"] and e["fault"]["rule"] for e in read_trace(tmp_path / folder / record["trace"])]
            found[record["key"]] = (record["verdict"]["status"], record["prompt"], faults)
        return found

    serial, parallel = outcome("serial"), outcome("parallel")
    assert serial == parallel and len(serial) == 12
    assert any("refund-503" in faults for _, _, faults in serial.values())


def test_another_plan_is_refused(tmp_path, probe_env):
    tasks = write_tasks(tmp_path, {"a": "ok"})
    out = tmp_path / "run"
    first = subprocess.run([*FAULTPROXY, "run", "--scenario", "rate_limit", "--tasks", str(tasks), "--k", "1",
                            "--out", str(out), "--allow-unexercised", "--", *PROBE_AGENT], capture_output=True, text=True, timeout=120)
    assert first.returncode == 0, first.stderr
    second = subprocess.run([*FAULTPROXY, "run", "--scenario", "rate_limit", "--tasks", str(tasks), "--k", "2",
                             "--out", str(out), "--", *PROBE_AGENT], capture_output=True, text=True, timeout=120)
    assert second.returncode == 2
    assert "written for another plan (differs in: k)" in second.stderr
    assert "Traceback" not in second.stderr
    assert len(read_run(out).episodes) == 1  # nothing logged was lost


def test_kill_minus_nine_at_random_moments_loses_and_repeats_nothing(tmp_path, probe_env, monkeypatch):
    tasks = write_tasks(tmp_path, {f"t{i}": "slow" for i in range(5)})
    out, markers = tmp_path / "run", tmp_path / "markers"
    markers.mkdir()
    monkeypatch.setenv("PROBE_MARKERS", str(markers))
    command = [*FAULTPROXY, "run", "--scenario", str(tmp_path / "scenario.yaml"), "--tasks", str(tasks),
               "--k", "4", "--parallel", "2", "--out", str(out), "--", *PROBE_AGENT]
    (tmp_path / "scenario.yaml").write_text(REFUND_FLAKY)
    moments = random.Random(20261129)
    kills = 0
    while True:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if kills < 6:
            # The moment is an event of this process: one of its agents has started (mid-episode), and
            # half the time one of its episodes has also been logged. At most one line per kill, so
            # the 20 episodes cannot all be logged before the 6th kill.
            agents, logged, after_a_line = len(list(markers.iterdir())), logged_episodes(out), moments.random() < 0.5
            assert wait_until(lambda: len(list(markers.iterdir())) > agents
                              and (not after_a_line or logged_episodes(out) > logged), 120, process)
            process.send_signal(signal.SIGKILL)
            kills += 1
        if process.wait(120) == 0:
            break
    assert kills == 6
    keys = [r["key"] for r in read_run(out).episodes]
    assert len(keys) == len(set(keys)) == 20
    header = (out / "episodes.jsonl").read_text().splitlines()[0]
    assert json.loads(header)["type"] == "header"
    agents = [int(marker.name) for marker in markers.iterdir()]
    assert wait_until(lambda: not any(alive(pid) for pid in agents), 5)  # none outlived its runner


def test_interrupt_stops_cleanly_and_prints_the_resume_command(tmp_path, probe_env):
    tasks = write_tasks(tmp_path, {f"t{i}": "slow" for i in range(6)})
    out = tmp_path / "run"
    process = subprocess.Popen([*FAULTPROXY, "run", "--scenario", "rate_limit", "--tasks", str(tasks), "--k", "4",
                                "--out", str(out), "--", *PROBE_AGENT], stdout=subprocess.PIPE, text=True)
    assert wait_until(lambda: logged_episodes(out) >= 1, 120, process)  # interrupted once something is logged
    process.send_signal(signal.SIGINT)
    stdout, _ = process.communicate(timeout=60)
    assert process.returncode == 130
    assert "resume with: faultproxy run --scenario rate_limit" in stdout
    logged = read_run(out).episodes
    assert 0 < len(logged) < 24
    assert all(r["completed"] for r in logged)  # interrupted episodes were not logged as anything
