"""The demo world's realtime task: two agents on the openai SDK's Realtime client, behind the proxy,
whose session closes mid-answer (examples/realtime_close.yaml). The careful agent reconnects,
restores its conversation and refunds once; the naive agent does not survive, and the report's
cause names the close."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from examples.world import World
from faultproxy import RunOptions, run
from faultproxy.evaluator.aggregate.failure_cause import explain
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.demo_world import PARALLEL, committed, shop_log, trace_of, world_for_agents
from tests.support.layout import EXAMPLES

TASKS = load_tasks(EXAMPLES / "tasks_realtime.yaml")
CLOSE = load_scenario(EXAMPLES / "realtime_close.yaml")


@pytest.fixture(scope="module")
def realtime_world() -> World:
    with pytest.MonkeyPatch.context() as monkeypatch, world_for_agents(monkeypatch) as world:
        yield world


def run_realtime(out: Path, agent: str) -> dict:
    result = run(RunOptions(scenario=CLOSE, tasks=TASKS, out=out, k=1, parallel=PARALLEL, show_progress=False,
                            command=[sys.executable, str(EXAMPLES / f"{agent}_realtime_agent.py")]))
    assert result.complete, result.errors
    [record] = read_run(out).episodes
    return record


def sessions(out: Path, record: dict) -> list[dict]:
    return [line["websocket"] for line in read_trace(out / record["trace"]) if "websocket" in line]


def test_careful_realtime_agent_survives_a_close_mid_answer_and_refunds_once(realtime_world, tmp_path):
    record = run_realtime(tmp_path, "careful")
    assert record["verdict"]["status"] == "pass", record["verdict"]["failed"] or record["log_tail"][-800:]
    assert [(f["rule"], f["type"], f["delivered"]) for f in record["verdict"]["faults"]] == \
        [("close-mid-answer", "ws_close", True)]
    first, second = sessions(tmp_path, record)  # the closed session, then the one it restored
    assert first["close"]["by"] == "proxy" and first["close"]["code"] == 1011
    restored = [m for m in second["messages"] if m["from"] == "client" and "function_call" in m.get("text", "")]
    assert restored, "the new session was not told the calls already carried out"
    assert committed(tmp_path, record, "POST */orders/1001/refund") == 1
    assert [e["path"] for e in shop_log(realtime_world, record["key"])] == ["/orders/1001/refund"]


def test_naive_realtime_agent_does_not_survive_it_and_the_cause_names_the_close(realtime_world, tmp_path):
    record = run_realtime(tmp_path, "naive")
    verdict = record["verdict"]
    assert verdict["status"] == "fail" and record["exit_code"] != 0
    failed = {check["name"] for check in verdict["failed"]}
    assert "outcome" in failed, verdict["failed"]
    cause, at = explain(trace_of(tmp_path, record), sorted(failed), "fail", record["key"])
    assert (cause.fault_rule, cause.fault_type, cause.response) == ("close-mid-answer", "ws_close", "gave up")
    assert cause.where == "POST /v1/realtime" and at is not None
    assert len(sessions(tmp_path, record)) == 1  # it never reconnected
