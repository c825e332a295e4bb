"""`--executor dask`: a real scheduler and two workers (separate processes on 127.0.0.1), one
proxy per worker, and the run directory's guarantees unchanged: the same verdicts and fault
decisions as a local run, a SIGKILLed worker loses and duplicates nothing, a killed driver
resumes, a worker that cannot run the agent stops the run before it starts (one line, exit 2).

The cluster starts once for the module (dask workers are slow to start) and is stopped at the end.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from pathlib import Path

import pytest

pytest.importorskip("distributed")

from distributed import Client  # noqa: E402

from bench.gate_calibration import write_run  # noqa: E402
from faultproxy.evaluator.gate import ALPHA, MARGIN, Design, evaluate_sequential  # noqa: E402
from faultproxy.formats.rundir import read_run, run_digest  # noqa: E402
from faultproxy.runner.sequential_runs import run_until_decided, sequential_options  # noqa: E402
from faultproxy.runner import ProcessCluster  # noqa: E402
from faultproxy.runner.plan import build_grid  # noqa: E402
from faultproxy import RunOptions, run  # noqa: E402
from faultproxy.tasks.tasks_file import load_tasks, task_set_from_json  # noqa: E402
from faultproxy.formats.trace import AGENT_TO_USER, USER_TO_AGENT, read_trace  # noqa: E402
from faultproxy.scenarios import load_scenario  # noqa: E402
from tests.support.agent_commands import DESK_AGENT, PROBE_AGENT
from tests.support.desk import Desk, close_task
from tests.support.fixtures import scenario  # noqa: E402
from tests.support.processes import FAULTPROXY
from tests.support.upstream import ServerThread, Upstream  # noqa: E402

# Kills the worker process it runs under (its parent): every worker that tries it dies.
WORKER_KILLER = [sys.executable, "-c", "import os, signal; os.kill(os.getppid(), signal.SIGKILL)"]

# Faults by keyed hash; lambda is a sweep param, so each grid point is its own scenario version.
REFUND_FLAKY = scenario("""
    - name: refund-503
      match: {method: POST, path: "*/refund"}
      fault: {type: server_error, status: 503}
      when: {probability: lambda}
    - name: read-429
      match: {method: GET, path: "*/items/2"}
      fault: {type: rate_limit, retry_after: 0}
      when: {probability: 0.3}
""", params="{lambda: 0.5}")


@pytest.fixture(scope="module")
def cluster(faultproxy_home, tmp_path_factory):
    # One worker death is survivable (the episode runs again elsewhere); a second ends it as worker_lost.
    env = {"DASK_DISTRIBUTED__SCHEDULER__ALLOWED_FAILURES": "1", "FAULTPROXY_HOME": str(faultproxy_home)}
    with ProcessCluster(workers=2, nthreads=4, env=env, directory=tmp_path_factory.mktemp("cluster")) as started:
        yield started


def write_tasks(folder: Path, upstream_url: str, prompts: dict[str, str]) -> Path:
    """Tasks that carry what the agent needs (workers do not see this process's environment)."""
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps({
        "id": task_id, "prompt": prompt, "shape": "writes_state", "env": {"PROBE_UPSTREAM": upstream_url},
        "expected": {"output": {"regex": "refunded: 200"}},
    }) + "\n" for task_id, prompt in prompts.items()))
    return path


def options(tmp_path: Path, tasks: Path, **kw) -> RunOptions:
    path = tmp_path / "scenario.yaml"
    path.write_text(REFUND_FLAKY)
    kw.setdefault("command", PROBE_AGENT)
    return RunOptions(scenario=load_scenario(path), tasks=load_tasks(tasks), show_progress=False, **kw)


def outcome(run_dir: Path) -> dict[str, tuple]:
    """Per episode: verdict, prompt, and every exchange's fault decision from the trace."""
    found = {}
    for record in read_run(run_dir).episodes:
        trace = list(read_trace(run_dir / record["trace"]))
        assert [e["seq"] for e in trace] == list(range(1, len(trace) + 1))  # one attempt's trace, whole
        faults = [(e["seq"], e["fault"] and (e["fault"]["rule"], e["fault"]["delivered"])) for e in trace]
        found[record["key"]] = (record["verdict"]["status"], record["prompt"], faults)
    return found


@pytest.fixture(scope="module")
def world():
    """The probe agent's upstream, for the module (its answers depend only on the faults)."""
    with ServerThread(Upstream().app()) as server:
        yield server.url


@pytest.fixture(scope="module")
def plan_24(world, tmp_path_factory):
    """4 tasks × k 3 × 2 lambda levels (per-episode scenario versions), and its local run."""
    folder = tmp_path_factory.mktemp("plan24")
    tasks = write_tasks(folder, world, {f"t{i}": "ok" for i in range(4)})
    base = options(folder, tasks, k=3, grid=build_grid({"lambda": [0.2, 0.8]}, []), parallel=8, out=folder / "local")
    local = run(base)
    assert local.complete and local.ran == 24
    return base, outcome(folder / "local")


def test_dask_gives_the_same_verdicts_and_faults_as_local(tmp_path, plan_24, cluster):
    base, here = plan_24
    remote = run(dataclasses.replace(base, out=tmp_path / "dask", executor="dask", scheduler=cluster.address))
    assert remote.complete and remote.ran == 24 and not remote.errors

    there = outcome(tmp_path / "dask")
    assert here == there and len(there) == 24
    statuses = Counter(status for status, _, _ in there.values())
    assert statuses["pass"] and statuses["fail"]  # faults fired, and they decided verdicts
    fired = Counter(r["params"]["lambda"] for r in read_run(tmp_path / "dask").episodes
                    for fault in r["verdict"]["faults"] if fault["rule"] == "refund-503")
    assert fired[0.8] > fired[0.2]  # each grid point ran under its own scenario version
    header = json.loads((tmp_path / "dask" / "episodes.jsonl").read_text().splitlines()[0])
    assert header["type"] == "header" and header["k"] == 3
    # Rerunning resumes: nothing is repeated.
    again = run(dataclasses.replace(base, out=tmp_path / "dask", executor="dask", scheduler=cluster.address))
    assert again.ran == 0 and again.logged == 24


def test_a_worker_killed_mid_run_loses_and_duplicates_nothing(tmp_path, plan_24, cluster):
    base, here = plan_24
    out = tmp_path / "dask"
    killed: dict[str, object] = {}

    def kill_a_busy_worker() -> None:
        with Client(cluster.address) as client:
            pids = client.run(os.getpid)
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                log = out / "episodes.jsonl"
                logged = len(log.read_text().splitlines()) - 1 if log.exists() else 0
                busy = {w: tasks for w, tasks in client.processing().items() if tasks}
                if logged >= 8 and busy:
                    victim = sorted(busy)[0]
                    killed.update(worker=victim, pid=pids[victim], in_flight=len(busy[victim]), logged=logged)
                    os.kill(pids[victim], signal.SIGKILL)
                    return
                time.sleep(0.02)

    killer = threading.Thread(target=kill_a_busy_worker)
    killer.start()
    result = run(dataclasses.replace(base, out=out, executor="dask", scheduler=cluster.address))
    killer.join()
    assert killed and killed["in_flight"] >= 1 and killed["logged"] < 24, killed

    records = read_run(out).episodes
    keys = [r["key"] for r in records]
    assert len(keys) == len(set(keys)) == 24 and result.complete
    assert all(r["completed"] or r["cause"] == "worker_lost" for r in records)
    # Episodes that ran again elsewhere decided the same faults, and got the same verdicts, as locally.
    lost = {r["key"] for r in records if r["cause"] == "worker_lost"}
    there = outcome(out)
    assert {k: v for k, v in there.items() if k not in lost} == {k: v for k, v in here.items() if k not in lost}
    cluster.wait_for_workers(2)  # the nanny restarted the killed worker


def test_an_episode_that_keeps_killing_workers_ends_as_worker_lost(tmp_path, world, cluster):
    tasks = write_tasks(tmp_path, world, {"deadly": "ok"})
    result = run(options(tmp_path, tasks, command=WORKER_KILLER, out=tmp_path / "dask", executor="dask",
                         scheduler=cluster.address))
    [record] = read_run(tmp_path / "dask").episodes
    assert result.complete and record["completed"] is False and record["cause"] == "worker_lost"
    assert record["verdict"]["status"] == "incomplete" and record["verdict"]["cause"] == "worker_lost"
    assert (tmp_path / "dask" / record["trace"]).exists()
    cluster.wait_for_workers(2)


def test_cli_dask_run_resumes_after_the_driver_is_killed(tmp_path, world, cluster):
    tasks = write_tasks(tmp_path, world, {f"t{i}": "slow" for i in range(4)})
    (tmp_path / "scenario.yaml").write_text(REFUND_FLAKY)
    out = tmp_path / "run"
    command = [*FAULTPROXY, "run", "--executor", "dask", "--scheduler", cluster.address,
               "--scenario", str(tmp_path / "scenario.yaml"), "--tasks", str(tasks), "--k", "3",
               "--out", str(out), "--", *PROBE_AGENT]
    driver = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and driver.poll() is None:
        log = out / "episodes.jsonl"
        if log.exists() and len(log.read_text().splitlines()) > 3:
            break
        time.sleep(0.05)
    driver.send_signal(signal.SIGKILL)
    driver.wait(10)
    partly = len(read_run(out).episodes)
    assert 0 < partly < 12

    resumed = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "12/12 episodes logged" in resumed.stdout
    keys = [r["key"] for r in read_run(out).episodes]
    assert len(keys) == len(set(keys)) == 12


def test_a_worker_that_cannot_run_the_agent_stops_the_run_before_it_starts(tmp_path, world, cluster):
    tasks = write_tasks(tmp_path, world, {"a": "ok"})
    (tmp_path / "scenario.yaml").write_text(REFUND_FLAKY)
    out = tmp_path / "run"
    base = [*FAULTPROXY, "run", "--scenario", str(tmp_path / "scenario.yaml"), "--tasks", str(tasks)]

    missing = subprocess.run([*base, "--out", str(out), "--executor", "dask", "--scheduler", cluster.address, "--",
                              str(tmp_path / "no-such-agent")], capture_output=True, text=True, timeout=60)
    assert missing.returncode == 2
    assert missing.stderr.startswith("faultproxy: worker tcp://127.0.0.1:") and missing.stderr.count("\n") == 1
    assert "no-such-agent is not an executable file here (and 1 more)" in missing.stderr
    assert "Traceback" not in missing.stderr
    assert read_run(out).episodes == []  # nothing ran

    no_scheduler = subprocess.run([*base, "--out", str(tmp_path / "b"), "--executor", "dask", "--", *PROBE_AGENT], capture_output=True, text=True,
                                  timeout=60, env={**os.environ, "DASK_SCHEDULER_ADDRESS": ""})
    assert no_scheduler.returncode == 2 and "needs --scheduler tcp://HOST:PORT" in no_scheduler.stderr

    local_with_scheduler = subprocess.run([*base, "--out", str(tmp_path / "c"), "--scheduler", cluster.address, "--", *PROBE_AGENT],
                                          capture_output=True, text=True, timeout=60)
    assert local_with_scheduler.returncode == 2
    assert "--scheduler is for --executor dask" in local_with_scheduler.stderr


def test_a_sequential_run_takes_its_rounds_on_the_cluster(tmp_path, world, cluster):
    """--until-decided on Dask: each round a batch on the workers, the gate read between rounds."""
    tasks = write_tasks(tmp_path, world, {"refund": "ok"})  # one task: an agent that sends no traffic is no_traffic
    base = write_run(tmp_path / "base", {"": [("refund", 8, 8)]}, 8)
    design = Design(alpha=ALPHA, margin=MARGIN, max_high=0, min_k=2, max_k=8, baseline_digest=run_digest(base))
    path = tmp_path / "scenario.yaml"
    path.write_text(REFUND_FLAKY)
    plain = RunOptions(scenario=load_scenario(path, {"lambda": 1.0}), tasks=load_tasks(tasks), command=PROBE_AGENT,
                       out=tmp_path / "run", show_progress=False, executor="dask", scheduler=cluster.address)
    result = run_until_decided(sequential_options(plain, design, base), base)
    assert result.complete and result.ran == result.logged == 4 and not result.errors
    # The refund always fails: 0/2 cannot reach round 1's α (Fisher p = 1/45); 0/4 reaches round 2's.
    outcome = evaluate_sequential(tmp_path / "run", base, design)
    assert outcome.result.verdict == "BLOCK" and outcome.stop_k == 4 and outcome.todo_k is None
    assert sorted(r["trial"] for r in read_run(tmp_path / "run").episodes) == [0, 1, 2, 3]


def test_a_conversation_runs_on_a_worker_as_it_does_locally(tmp_path, cluster):
    """--chat stdio on Dask: the worker's episode runner plays the task's user against the agent
    it starts, and every turn is in the trace in order with the agent's requests."""
    desk = Desk()
    with ServerThread(desk.app()) as server:
        task = {**close_task(server.url, "Yes, please close it.", ["T-77"]),
                "env": {"DESK_URL": server.url, "DESK_MODE": "careful"}}  # workers do not see this environment
        result = run(RunOptions(scenario=load_scenario("observe"), tasks=task_set_from_json([task]), command=DESK_AGENT,
                                out=tmp_path / "dask", chat="stdio", show_progress=False, executor="dask",
                                scheduler=cluster.address))
    [record] = read_run(tmp_path / "dask").episodes
    assert result.complete and record["verdict"]["status"] == "pass", (record["verdict"], record["log_tail"])
    assert desk.closed == ["T-77"]
    trace = sorted(read_trace(tmp_path / "dask" / record["trace"]), key=lambda line: line["seq"])
    assert [line.get("direction") or line["request"]["method"] for line in trace] == [
        USER_TO_AGENT, "GET", AGENT_TO_USER, USER_TO_AGENT, "POST", AGENT_TO_USER, USER_TO_AGENT, AGENT_TO_USER]
