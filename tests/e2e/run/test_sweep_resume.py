"""A real sweep (`python -m faultproxy.cli.main sweep`, the probe agent, the test upstream): SIGKILLed mid-way
and rerun, it ends with the same per-level numbers as a sweep that was never interrupted."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from faultproxy.formats.rundir import read_log, read_run
from tests.support.agent_commands import PROBE_AGENT
from tests.support.sweep_inputs import SCENARIO, TASKS
from tests.support.processes import FAULTPROXY


COMPARED = ("params", "models", "planned", "logged", "complete", "points", "curves", "surface", "flags", "matrix",
            "acceptance")


@pytest.fixture
def sweep(tmp_path, upstream, monkeypatch):
    _, server = upstream
    monkeypatch.setenv("PROBE_UPSTREAM", server.url)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    (tmp_path / "tasks.jsonl").write_text("".join(json.dumps(t) + "\n" for t in TASKS))

    def command(out: Path) -> list[str]:
        return [*FAULTPROXY, "sweep", "--scenario", str(tmp_path / "scenario.yaml"), "--param", "lambda=0,0.5",
                "--models", "m1,m2", "--tasks", str(tmp_path / "tasks.jsonl"), "--k", "2", "--parallel", "2",
                "--out", str(out), "--", *PROBE_AGENT, "--lambda={lambda}", "--model={model}"]

    return command


def test_a_killed_sweep_resumes_to_the_same_result(tmp_path, sweep):
    whole = subprocess.run(sweep(tmp_path / "whole"), capture_output=True, text=True, timeout=120)
    result = json.loads((tmp_path / "whole" / "sweep.json").read_text())
    assert whole.returncode == (1 if result["acceptance"]["status"] == "violated" else 0), whole.stderr
    assert result["complete"] and result["logged"] == 16  # 2 levels × 2 models × 2 tasks × k 2
    assert "Mean success and pass^2 per grid point" in whole.stdout and "pass@M" in whole.stdout
    at_half = [p for p in result["points"] if p["params"]["lambda"] == 0.5]
    assert any(p["passed"] < p["logged"] for p in at_half)  # the faults bite at lambda=0.5 ...
    assert all(p["passed"] == p["logged"] for p in result["points"] if p["params"]["lambda"] == 0)  # ... not at 0

    out = tmp_path / "killed"
    process = subprocess.Popen(sweep(out), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(read_log(out / "episodes.jsonl")[1]) < 3:
        time.sleep(0.05)
    process.send_signal(signal.SIGKILL)
    process.wait(30)
    at_kill = read_log(out / "episodes.jsonl")[1]
    assert 3 <= len(at_kill) < 16
    if len(at_kill) <= 6:  # trial-major across the whole grid: every point's trial 0 before any trial 1
        assert {e["trial"] for e in at_kill} == {0}

    resumed = subprocess.run(sweep(out), capture_output=True, text=True, timeout=120)
    assert resumed.returncode == whole.returncode, resumed.stderr
    again = json.loads((out / "sweep.json").read_text())
    assert {key: again[key] for key in COMPARED} == {key: result[key] for key in COMPARED}
    keys = [e["key"] for e in read_run(out).episodes]
    assert len(keys) == len(set(keys)) == 16  # nothing lost, nothing repeated
    assert (out / "sweep.html").read_text().count("<svg") >= 3  # curve, model bars, disagreement or more

    # each episode got its grid point: the param and model as environment and as {placeholders}
    env = {(e["params"]["lambda"], e["model"]): e["output"]["answer"] for e in read_run(out).episodes
           if e["task_id"] == "env" and e["trial"] == 1}
    answer = env[(0.5, "m2")]
    assert answer["FAULTPROXY_PARAM_LAMBDA"] == "0.5" and answer["FAULTPROXY_MODEL"] == "m2"
    assert answer["argv"] == ["--lambda=0.5", "--model=m2"]
