"""Agents never outlive their runner: kill -9 of `faultproxy run` ends every agent process (and the
agents' children) within seconds, and a resumed run ends what an earlier one left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from faultproxy.runner.agent_guard import PID_FILE, end_leftover_agents, process_start
from tests.support.layout import AGENTS
from tests.support.processes import FAULTPROXY, alive, wait_until

SLEEPER = [sys.executable, str(AGENTS / "sleeper_agent.py")]
OBSERVE_S = 90  # how long agents may take to start on a loaded machine
GONE_S = 5  # how long an agent may outlive its runner


def agent_pids(markers: Path) -> list[int]:
    return [pid for marker in markers.glob("*.pids") for pid in json.loads(marker.read_text())]


@pytest.fixture
def sleeper_run(tmp_path):
    """Start `faultproxy run` with three sleeping agents at once; yields (runner, markers, env)."""
    markers, hold = tmp_path / "markers", tmp_path / "hold"
    markers.mkdir()
    hold.touch()
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps({"id": f"t{i}", "prompt": "sleep"}) + "\n" for i in range(3)))
    env = {**os.environ, "SLEEPER_MARKERS": str(markers), "SLEEPER_HOLD": str(hold)}
    command = [*FAULTPROXY, "run", "--scenario", "rate_limit", "--tasks", str(tasks), "--parallel", "3",
               "--out", str(tmp_path / "run"), "--allow-unexercised", "--allow-incomplete",  # sleepers send nothing
               "--", *SLEEPER]
    runner = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    started: list[int] = []
    try:
        assert wait_until(lambda: len(list(markers.glob("*.pids"))) == 3, OBSERVE_S, runner)
        started = agent_pids(markers)
        assert len(started) == 6 and all(alive(pid) for pid in started)
        yield runner, command, env, started
    finally:
        if runner.poll() is None:
            runner.kill()
        runner.wait(30)
        for pid in started:  # whatever a failed test left behind
            if alive(pid):
                os.kill(pid, signal.SIGKILL)


def test_kill_minus_nine_of_the_runner_ends_every_agent_and_its_children(sleeper_run):
    runner, _, _, agents = sleeper_run
    runner.send_signal(signal.SIGKILL)
    runner.wait(30)
    assert wait_until(lambda: not any(alive(pid) for pid in agents), GONE_S), \
        f"still running {GONE_S} s after the runner died: {[p for p in agents if alive(p)]}"


def children_named(parent: int, word: str) -> list[int]:
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError, ValueError):
            continue
        if ppid == parent and word.encode() in cmdline:
            found.append(int(stat.parent.name))
    return found


def test_a_resumed_run_ends_the_agents_an_earlier_run_left(sleeper_run, tmp_path):
    runner, command, env, agents = sleeper_run
    [watchdog] = children_named(runner.pid, "watchdog.py")
    os.kill(watchdog, signal.SIGKILL)  # the watchdog dies first: nothing ends the agents now ...
    runner.send_signal(signal.SIGKILL)
    runner.wait(30)
    assert all(alive(pid) for pid in agents)
    assert len(list((tmp_path / "run").glob(f"episodes/*/{PID_FILE}"))) == 3

    # ... until the run is resumed: its agents finish at once (no hold file), the old ones are ended.
    resumed = subprocess.run(command, env={**env, "SLEEPER_HOLD": str(tmp_path / "no-hold")},
                             capture_output=True, text=True, timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert "3/3 episodes logged" in resumed.stdout
    assert wait_until(lambda: not any(alive(pid) for pid in agents), GONE_S)
    assert not list((tmp_path / "run").glob(f"episodes/*/{PID_FILE}"))


def test_a_pid_file_whose_process_started_at_another_time_is_left_alone(tmp_path):
    mine = subprocess.Popen(["sleep", "600"], start_new_session=True)  # a leftover agent
    stranger = subprocess.Popen(["sleep", "600"], start_new_session=True)  # its pid, reused by another
    try:
        for name, process, start in (("left", mine, process_start(mine.pid)), ("reused", stranger, "linux:1")):
            folder = tmp_path / "episodes" / name
            folder.mkdir(parents=True)
            (folder / PID_FILE).write_text(json.dumps({"pgid": process.pid, "start": start}))
        assert end_leftover_agents(tmp_path) == 1
        assert mine.wait(10) == -signal.SIGKILL
        assert stranger.poll() is None
        assert not list(tmp_path.glob(f"episodes/*/{PID_FILE}"))
    finally:
        stranger.kill()
        mine.kill()
        stranger.wait()
        mine.wait()
