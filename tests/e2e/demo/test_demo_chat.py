"""The demo world's conversations (examples/tasks_chat.yaml, issue 36): over `--chat stdio`, the
careful agent asks before it cancels and passes, with the user saying yes (the order is
cancelled) and with the user saying no (nothing is done); the naive one cancels first and fails
`confirmation` both times."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from examples.world import world_in_thread
from faultproxy import RunOptions, run
from faultproxy.formats.rundir import read_run
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.layout import EXAMPLES


@pytest.fixture(scope="module")
def world():
    with world_in_thread(latency_ms=0) as world:
        yield world


def conversations(tmp_path: Path, world, monkeypatch, agent: str) -> dict[str, dict]:
    for name, value in world.env().items():
        if name != "SHOP_URL":  # the tasks file gives each episode its own tenant
            monkeypatch.setenv(name, value)
    run(RunOptions(scenario=load_scenario("observe"), tasks=load_tasks(EXAMPLES / "tasks_chat.yaml"),
                   command=[sys.executable, str(EXAMPLES / f"{agent}_agent.py"), "--chat"], out=tmp_path / agent,
                   parallel=2, chat="stdio", show_progress=False))
    return {record["task_id"]: record for record in read_run(tmp_path / agent).episodes}


def test_the_careful_agent_asks_before_cancelling_and_respects_the_answer(tmp_path, world, monkeypatch):
    episodes = conversations(tmp_path, world, monkeypatch, "careful")
    for task_id, record in episodes.items():
        assert record["verdict"]["status"] == "pass", (task_id, record["verdict"]["failed"], record["log_tail"])
    assert episodes["cancel_1006_confirmed"]["end_state"]["orders"]["1006"]["status"] == "cancelled"
    assert episodes["cancel_1006_declined"]["end_state"]["orders"]["1006"]["status"] == "pending"
    assert episodes["cancel_1006_declined"]["output"]["answer"].startswith("All right: I did not cancel order")


def test_the_naive_agent_cancels_first_and_fails_confirmation(tmp_path, world, monkeypatch):
    episodes = conversations(tmp_path, world, monkeypatch, "naive")
    for task_id, record in episodes.items():
        failed = {check["name"]: check for check in record["verdict"]["failed"]}
        assert "confirmation" in failed, (task_id, record["verdict"]["failed"], record["log_tail"])
        assert "DELETE /t/" in failed["confirmation"]["detail"] and "before the user was asked" in \
            failed["confirmation"]["detail"]
