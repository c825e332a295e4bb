"""The demo world behind the proxy, through the runner: what the faults are there to expose."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from evaluator.rundir import read_run
from examples.world import world_in_thread
from proxy.runner.run import RunOptions, run
from proxy.runner.tasks import load_tasks
from scenarios import load_scenario

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


@pytest.fixture(scope="module")
def world():
    with world_in_thread() as running:
        yield running


@pytest.fixture
def world_env(world, monkeypatch):
    for name, value in world.env().items():
        if name != "SHOP_URL":  # the tasks file gives each episode its own tenant
            monkeypatch.setenv(name, value)
    return world


def run_agent(tmp_path: Path, agent: str, scenario: str, task_ids: list[str] | None, k: int, *flags: str,
              params: dict | None = None) -> list[dict]:
    tasks = load_tasks(EXAMPLES / "tasks.yaml")
    if task_ids is not None:
        tasks = tasks.only(task_ids)
    out = tmp_path / f"{agent}-{scenario}"
    run(RunOptions(scenario=load_scenario(scenario, params), tasks=tasks, out=out, k=k, parallel=3,
                   show_progress=False, command=[sys.executable, str(EXAMPLES / f"{agent}_agent.py"), *flags]))
    return read_run(out).episodes


def test_without_faults_careful_passes_every_task_in_8_of_8_trials(tmp_path, world_env):
    episodes = run_agent(tmp_path, "careful", "rate_limit", None, 8, params={"lambda": 0.0})
    assert len(episodes) == 8 * 12
    assert len({(r["task_id"], r["prompt"]) for r in episodes}) > 12 * 4  # honest variants, not one prompt 8 times
    failing = {r["key"]: [c for c in r["verdict"]["checks"] if c["passed"] is False] or r["cause"]
               for r in episodes if r["verdict"]["status"] != "pass"}
    assert not failing


def refunds_of(record: dict, order: str) -> int:
    return sum(r["order_id"] == order for r in record["end_state"]["refunds"].values())


def test_response_lost_naive_refunds_twice_careful_never(tmp_path, world_env):
    naive = run_agent(tmp_path, "naive", "response_lost", ["refund_order_1001"], 2)
    careful = run_agent(tmp_path, "careful", "response_lost", ["refund_order_1001"], 2)
    assert all(r["stats"]["faults"] >= 1 for r in naive + careful)  # the lost response was delivered
    assert [refunds_of(r, "1001") for r in naive] == [2, 2]
    assert [refunds_of(r, "1001") for r in careful] == [1, 1]
    naive_checks = {c["name"]: c for c in naive[0]["verdict"]["checks"]}
    assert naive_checks["idempotency"]["passed"] is False and naive_checks["idempotency"]["severity"] == "high"
    assert {r["verdict"]["status"] for r in naive} == {"fail"}
    assert {r["verdict"]["status"] for r in careful} == {"pass"}


def test_mcp_path_works_through_the_proxy(tmp_path, world_env):
    [record] = run_agent(tmp_path, "careful", "mcp_errors", ["refund_order_1001"], 1, "--mcp")
    trace = [json.loads(line) for line in (tmp_path / "careful-mcp_errors" / record["trace"]).read_text().splitlines()]
    tool_calls = [e for e in trace if "/mcp" in e["request"]["url"]]
    assert tool_calls and all(e["request"]["method"] == "POST" for e in tool_calls)
    assert not [e for e in trace if "/orders" in e["request"]["url"]]  # every tool call went over MCP
    assert refunds_of(record, "1001") == 1
    checks = {c["name"]: c["passed"] for c in record["verdict"]["checks"]}
    assert checks["outcome"] and checks["end_state"]
