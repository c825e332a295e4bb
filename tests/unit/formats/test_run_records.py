"""formats.run_records: an episode line or verdict of each older shape, read through the one
upgrade, comes out in the current shape; writers stamp the current versions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from faultproxy.evaluator.aggregate import build_report
from faultproxy.formats.run_records import RECORD_VERSION, VERDICT_VERSION, upgrade_record, upgrade_verdict
from faultproxy.formats.rundir import LOG_FILE, read_run, write_plan
from faultproxy.formats.verdict_layout import episode_line, read_verdict
from faultproxy.tasks.task_model import Task

TASK = Task(id="refund", prompt="Refund order 1001.", shape="writes_state")
EPISODE = {"key": "refund.t0", "task_id": "refund", "trial": 0, "grid_label": "", "duration_s": 1.5}
DOUBLE_REFUND = {"name": "idempotency", "passed": False, "severity": "high", "detail": "POST /refund twice"}
ANSWERED = {"name": "answer", "passed": True, "severity": "medium", "detail": "matched"}

# An episode line as faultproxy wrote it before lines carried "v" or "rewrites".
LINE_V1 = {"type": "episode", **EPISODE, "variant": 0, "seed": 7, "prompt": "Refund order 1001.", "state": None,
           "shape": "writes_state", "params": {}, "model": "model-b", "completed": True, "cause": None,
           "exit_code": 0, "started": 1764547200.0, "output": {"answer": "refunded", "confidence": 0.8},
           "output_error": None, "end_state": None, "state_error": None,
           "stats": {"exchanges": 2, "tokens": 30, "faults": 0}, "trace": "flows/refund.t0.jsonl", "log_tail": ""}
# The judge's verdict of 2026-11-29: no `failed` (a reader took the failed checks from `checks`),
# `checks` mid-way, nothing about side channels, MCP tools or conversations.
VERDICT_FIRST = {"v": 1, "status": "fail", "cause": None, "episode": EPISODE, "confidence": 0.8, "escalated": False,
                 "checks": [ANSWERED, DOUBLE_REFUND], "violations": ["high"], "faults": [], "endpoints":
                 ["POST /refund"], "tokens": 30, "requests": 2, "model_calls": 1, "tool_calls": 1, "latency_s": None,
                 "usage": {"model-b": {"input": 20, "output": 10}}}
# Version 1 from 2026-12-01 on: `failed` ahead of `escalated`, still without the later fields.
VERDICT_FAILED = {key: value for key, value in VERDICT_FIRST.items() if key not in ("escalated", "checks")} | {
    "failed": [{"name": "idempotency", "severity": "high", "detail": "POST /refund twice"}],
    "escalated": False, "cause_detail": None, "checks": [ANSWERED, DOUBLE_REFUND]}


@pytest.mark.parametrize("verdict", [VERDICT_FIRST, VERDICT_FAILED], ids=["first", "with failed"])
def test_a_version_1_verdict_comes_out_in_the_current_shape(verdict):
    upgraded = upgrade_verdict(verdict, LINE_V1)
    assert upgraded["v"] == VERDICT_VERSION
    assert upgraded["failed"] == [{"name": "idempotency", "severity": "high", "detail": "POST /refund twice"}]
    assert (upgraded["side_channel_errors"], upgraded["unclassified_tools"], upgraded["stale_tool_calls"],
            upgraded["cause_detail"]) == ([], [], 0, None)
    assert (upgraded["status"], upgraded["checks"], upgraded["usage"]) == \
        (verdict["status"], verdict["checks"], verdict["usage"])


def test_a_verdict_that_repeats_nothing_takes_the_fields_from_its_line():
    """A hand-written verdict (or one older than `episode` and `confidence`): its line has them."""
    upgraded = upgrade_verdict({"status": "incomplete", "checks": [DOUBLE_REFUND]}, {**LINE_V1, "cause": "crash"})
    assert upgraded["episode"] == EPISODE
    assert (upgraded["cause"], upgraded["confidence"], upgraded["violations"]) == ("crash", 0.8, ["high"])
    assert (upgraded["tokens"], upgraded["requests"], upgraded["faults"], upgraded["escalated"]) == (0, 0, [], False)


def test_a_current_verdict_is_left_as_it_is():
    current = upgrade_verdict(VERDICT_FAILED, LINE_V1)
    assert upgrade_verdict(current, {}) is current


@pytest.mark.parametrize("plan, rewrites", [({"rewrite_model": True}, {"model": "model-b"}), ({}, {})],
                         ids=["rewrite_model", "no rewrite"])
def test_a_line_from_before_rewrite_asks_the_model_the_plan_rewrote(plan, rewrites):
    """`rewrite_model: true` in plan.json was the whole of --rewrite-model's record."""
    upgraded = upgrade_record(LINE_V1, plan)
    assert (upgraded["v"], upgraded["rewrites"]) == (RECORD_VERSION, rewrites)
    assert upgrade_record({**LINE_V1, "rewrites": {"effort": "low"}}, plan)["rewrites"] == {"effort": "low"}


def test_a_line_of_the_current_version_is_not_given_rewrites_it_lacks():
    assert "rewrites" not in upgrade_record({**LINE_V1, "v": RECORD_VERSION}, {"rewrite_model": True})


def test_a_hand_edited_version_that_is_no_number_counts_as_the_first():
    upgraded = upgrade_record({**LINE_V1, "v": "x", "verdict": {**VERDICT_FIRST, "v": True}}, {"rewrite_model": True})
    assert (upgraded["v"], upgraded["rewrites"]) == (RECORD_VERSION, {"model": "model-b"})
    assert upgraded["verdict"]["v"] == VERDICT_VERSION and upgraded["verdict"]["failed"]


def test_the_writer_stamps_the_current_record_version_second():
    line = json.loads(episode_line({**LINE_V1, "v": 1, "verdict": VERDICT_FAILED}))
    assert list(line)[:2] == ["type", "v"] and line["v"] == RECORD_VERSION
    assert list(line)[-1] == "verdict" and list(line["verdict"])[-1] == "checks"


def test_a_version_1_verdict_in_the_current_layout_is_read_fast():
    """Its layout carries every field the report reads, so an old log keeps the fast path."""
    old, new = (episode_line({**LINE_V1, "verdict": upgrade_verdict(VERDICT_FAILED, LINE_V1) | {"v": v}}).encode()
                for v in (1, VERDICT_VERSION))
    assert read_verdict(old) == read_verdict(new) is not None
    assert read_verdict(episode_line({**LINE_V1, "verdict": VERDICT_FIRST}).encode()) is None  # another layout


def _old_run(root: Path, plan_extra: dict[str, Any], verdicts: list[dict[str, Any]]) -> Path:
    """A run directory whose log lines are in the old shapes, as an older faultproxy wrote them."""
    grid = [{"label": "", "params": {}, "model": "model-b"}]
    write_plan(root, {"faultproxy_version": "0.1", "scenario": {"name": "s", "digest": "d", "path": "s.yaml", "params": {}},
                      "tasks": {"path": "tasks.yaml", "digest": "t", "severity": {}, "prices": {},
                                "items": [TASK.to_json()]},
                      "k": len(verdicts), "grid": grid, "command": ["agent"], "created": "2026-11-29", **plan_extra})
    header = {"type": "header", "faultproxy_version": "0.1", "scenario_digest": "d", "tasks_digest": "t",
              "k": len(verdicts), "grid": grid, "command": ["agent"], "created": "2026-11-29"}
    lines = [json.dumps({**LINE_V1, "key": f"refund.t{trial}", "trial": trial,
                         "verdict": {**verdict, "episode": {**EPISODE, "key": f"refund.t{trial}", "trial": trial}}})
             for trial, verdict in enumerate(verdicts)]
    (root / LOG_FILE).write_text("\n".join([json.dumps(header), *lines]) + "\n")
    return root


def test_read_run_upgrades_every_line(tmp_path):
    run = read_run(_old_run(tmp_path, {"rewrite_model": True}, [VERDICT_FIRST, VERDICT_FAILED]))
    assert [(e["v"], e["rewrites"], e["verdict"]["v"]) for e in run.episodes] == \
        [(RECORD_VERSION, {"model": "model-b"}, VERDICT_VERSION)] * 2
    assert [e["verdict"]["failed"][0]["name"] for e in run.episodes] == ["idempotency"] * 2


def test_a_report_counts_an_old_log_as_it_counts_a_current_one(tmp_path):
    passed = {**VERDICT_FIRST, "status": "pass", "checks": [ANSWERED], "violations": []}
    report = build_report(_old_run(tmp_path, {}, [VERDICT_FIRST, passed]))
    task = report["run"]["tasks"][0]
    assert (task["n"], task["c"], task["fail"]) == (2, 1, 1)
    assert task["failed_checks"] == {"idempotency": 1}
