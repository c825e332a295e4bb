"""The demo world's stdio MCP task end to end: `faultproxy run` with examples/mcp_agent.py (the
official SDK's stdio client, default server environment, `faultproxy mcp` in its server command)
and the same task over the shop's Streamable HTTP endpoint (the SDK's HTTP client), one scenario
faulting refund_order on both; the report; freeze; hermetic replay and its divergence."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from examples.world import world_in_thread
from faultproxy import RunOptions, run
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.checks import check_policy
from faultproxy.evaluator.checks.check_effects import check_effects
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.plan import GridPoint
from faultproxy.runner.replay_agents import replay
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.layout import EXAMPLES

pytestmark = pytest.mark.timeout(600)

AGENT = [sys.executable, str(EXAMPLES / "mcp_agent.py")]
STDIO_URL = "http://shop-mcp-stdio.stdio.invalid/mcp"
NO_WORLD = {"SHOP_ROOT": "http://127.0.0.1:9"}  # nothing listens there: replay must not need the shop


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("mcp") / "run"
    patch = pytest.MonkeyPatch()
    with world_in_thread() as world:
        for name, value in world.env().items():
            if name != "SHOP_URL":
                patch.setenv(name, value)
        patch.setenv("MCP_CALL_TIMEOUT_S", "3")  # how long the agent waits for a lost answer
        result = run(RunOptions(scenario=load_scenario(EXAMPLES / "mcp_refund_lost.yaml"),
                                tasks=load_tasks(EXAMPLES / "tasks_stdio.yaml"), out=out, k=1,
                                grid=[GridPoint()], parallel=2, show_progress=False, command=AGENT))
    patch.undo()
    assert result.complete, result.errors
    return out


def episodes(out: Path) -> dict[str, dict]:
    return {record["task_id"]: record for record in read_run(out).episodes}


def test_one_scenario_faults_the_tool_over_both_transports_and_the_report_shows_both(demo_run: Path) -> None:
    by_task = episodes(demo_run)
    stdio, http = by_task["refund_order_1001_stdio"], by_task["refund_order_1001_mcp_http"]
    for record in (stdio, http):
        assert [(f["rule"], f["type"], f["delivered"]) for f in record["verdict"]["faults"]] == \
            [("refund_lost", "response_lost", True)]
    stdio_trace = list(read_trace(demo_run / stdio["trace"]))
    tool_lines = [line for line in stdio_trace if line["request"]["url"] == STDIO_URL]
    assert [json.loads(line["request"]["body"]).get("method") for line in tool_lines][:3] == \
        ["initialize", "notifications/initialized", "tools/list"]
    assert any("/chat/completions" in line["request"]["url"] for line in stdio_trace)  # one trace, both kinds
    assert sorted(line["seq"] for line in stdio_trace) == list(range(1, len(stdio_trace) + 1))  # one numbering
    assert all("/mcp" in line["request"]["url"] and "stdio" not in line["request"]["url"]
               for line in read_trace(demo_run / http["trace"]) if "chat" not in line["request"]["url"])
    # The agent retried the refund whose answer was lost, without a key: the irreversible tool
    # (irreversible: ["mcp:refund_order"]) committed twice, and the checks say so.
    failed = {check["name"]: check for check in stdio["verdict"]["failed"]}
    assert failed["idempotency"]["severity"] == "high" and "refund_order" in failed["idempotency"]["detail"]
    assert "*/tools/refund_order: 2 committed, expected 1" in failed["effects"]["detail"]
    assert stdio["end_state"]["orders"]["1001"]["refunded_cents"] == 4800

    report = build_report(demo_run)
    drilled = {e["episode"]["key"]: [f["type"] for f in e["faults"]] for e in report["drilldown"]["episodes"]}
    assert drilled == {stdio["key"]: ["response_lost"], http["key"]: ["response_lost"]}
    tasks = {t["task_id"]: t for t in report["run"]["tasks"]}
    assert tasks["refund_order_1001_stdio"]["high_checks"] == {"effects": 1, "idempotency": 1,
                                                                  "claimed_success": 1}
    assert any("tools/call:refund_order" in c["where"] for c in report["causes"]["clusters"])


def test_a_frozen_stdio_episode_replays_without_the_server_and_divergence_is_reported(demo_run: Path,
                                                                                      tmp_path: Path) -> None:
    key = episodes(demo_run)["refund_order_1001_stdio"]["key"]
    store = tmp_path / "store"
    [frozen] = freeze(demo_run, store, episodes=[key])
    entry = har.read_entry(frozen.path)
    assert sum(STDIO_URL == recorded.url for recorded in entry.exchanges) >= 6  # the stdio exchanges travel along
    options = ReplayOptions(env={**NO_WORLD, "MCP_CALL_TIMEOUT_S": "3"}, out=tmp_path / "replayed")
    [result] = replay(store, AGENT, options)
    assert result.meets_expectation, result.explain()  # fails as recorded: effects, idempotency
    assert set(result.failed) == {"effects", "idempotency", "claimed_success"}
    replayed = list(read_trace(result.trace))
    assert sum(line["request"]["url"] == STDIO_URL for line in replayed) >= 6

    # Drop the recorded retry: the agent's second refund_order has nothing to answer it.
    har_path = frozen.path / har.HAR_FILE
    document = json.loads(har_path.read_text())
    calls = [i for i, e in enumerate(document["log"]["entries"]) if e["request"]["url"] == STDIO_URL
             and '"refund_order"' in (e["request"].get("postData") or {}).get("text", "")]
    del document["log"]["entries"][calls[-1]]
    har_path.write_text(json.dumps(document))
    [diverged] = replay(store, AGENT, ReplayOptions(env=options.env, out=tmp_path / "diverged"))
    assert diverged.diverged and diverged.diverged[0]["url"] == STDIO_URL
    assert not diverged.meets_expectation and "diverged" in diverged.explain()


def test_policy_and_effects_name_stdio_tool_calls_by_mcp_patterns(demo_run: Path, tmp_path: Path) -> None:
    record = episodes(demo_run)["refund_order_1001_stdio"]
    exchanges = parse_trace(read_trace(demo_run / record["trace"]))
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("""
tasks:
  - {id: a, prompt: p, forbidden: ["mcp:refund_*"]}
  - {id: b, prompt: p, forbidden: ["POST */refund"]}      # an HTTP route: not a tool call's name
  - {id: c, prompt: p, expected: {effects: [{mcp: refund_order, count: 2}]}, irreversible: ["mcp:refund_order"]}
""")
    by_id = {task.id: task for task in load_tasks(tasks)}
    policy = check_policy(by_id["a"], record, exchanges)
    assert policy.passed is False and policy.detail.count("mcp:refund_*") == 2  # both refund_order calls
    assert check_policy(by_id["b"], record, exchanges).passed is True
    effects = check_effects(by_id["c"], record, exchanges).detail
    assert effects.startswith("effects as expected (2 irreversible commit(s): POST /mcp refund_order #")
    assert effects.count("refund_order #") == 2
