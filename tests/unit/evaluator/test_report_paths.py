"""The report is the same whichever way the log is read, and the shortcuts a large run takes
(the fast reader, forked chunks, counted rather than listed values, the first traces by name)
give what the plain definitions give, to the last bit."""

from __future__ import annotations

import json
import math
import random
import shutil
from collections import Counter
from pathlib import Path

import pytest

from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.aggregate.traffic import seen_traffic
from faultproxy.evaluator.statistics import (brier_score, calibration_buckets, coefficient_of_variation,
                                             counted_coefficient_of_variation, counted_safety_score, safety_score)
from faultproxy.formats.verdict_layout import episode_line
from tests.support.run_records import (CANCEL, LOOKUP, REFUND, exchange, lookup_ok, lookup_wrong, make_large_run,
                                       refund_after_429, refund_ok, refund_twice, worker_lost, write_trace)


def test_a_large_report_is_the_same_read_fast_in_chunks_or_whole(tmp_path):
    run = make_large_run(tmp_path / "run", [LOOKUP, REFUND, CANCEL], 400, {
        "lookup_a": [lookup_ok(), lookup_wrong(), worker_lost()],
        "refund_b": [refund_ok(), refund_after_429(), refund_twice()],
        "cancel_c": [lookup_wrong(output={"answer": "Cancelled.", "confidence": 0.7}), worker_lost()],
    }, labels=("a", "b"))
    _list_more(run / "episodes.jsonl")
    fast = build_report(run, jobs=1)
    assert fast["log"]["verdicts_read_fast"] == fast["log"]["episodes_logged"] == 2400  # v2 lines, current writer
    assert build_report(run, jobs=3) == fast
    # The same lines without the layout's spacing: the fast reader declines each, json reads it.
    whole = tmp_path / "whole"
    shutil.copytree(run, whole)
    log = whole / "episodes.jsonl"
    log.write_text("".join(json.dumps(json.loads(line), separators=(",", ":"), ensure_ascii=False) + "\n"
                           for line in log.read_text(encoding="utf-8").splitlines()), encoding="utf-8")
    slow = build_report(whole, jobs=1)
    assert slow["log"]["verdicts_read_fast"] == 0
    assert {**slow, "run_dir": None, "log": None} == {**fast, "run_dir": None, "log": None}
    calibration = fast["run"]["calibration"]
    assert calibration["episodes"] > 1000 and len({b["count"] for b in calibration["buckets"]}) > 1
    side, unclassified = fast["run"]["headline"]["alerts"][-2:]
    assert side.startswith("343 episode(s) had side-channel errors") and "GET 127.0.0.1:9/telemetry" in side
    assert unclassified.startswith("219 episode(s) called MCP tools") and "(probe_tool)" in unclassified


def _list_more(log: Path) -> None:
    """Some verdicts list side-channel errors or unclassified MCP tools; some agents' outputs
    carry such keys too, outside the verdict, where they count for nothing."""
    lines = log.read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines[1:]]
    for i, record in enumerate(records):
        if i % 7 == 0:
            record["verdict"]["side_channel_errors"] = [{"seq": 1, "request": "GET 127.0.0.1:9/telemetry",
                                                         "error": "refused", "fix": "--side-channel"}]
        if i % 11 == 0:
            record["verdict"]["unclassified_tools"] = ["probe_tool"]
        if i % 5 == 0:
            record["output"] = {"side_channel_errors": [{"seq": 2}], "unclassified_tools": ["decoy"]}
    log.write_text("\n".join(lines[:1] + [episode_line(r).rstrip("\n") for r in records]) + "\n", encoding="utf-8")


def test_the_first_traces_by_name_are_read_and_the_rest_said(tmp_path):
    flows = tmp_path / "flows"
    for name in ("c", "a", "_rejected", "b"):
        write_trace(flows / f"{name}.jsonl", [exchange("GET", f"http://127.0.0.1:9/{name}")])
    (flows / "notes.txt").write_text("not a trace")
    seen = seen_traffic(tmp_path, traces=2)
    assert sorted(seen.requests) == ["GET 127.0.0.1:9/a", "GET 127.0.0.1:9/b"] and seen.capped
    everything = seen_traffic(tmp_path, traces=3)
    assert len(everything.requests) == 3 and not everything.capped
    assert seen_traffic(tmp_path / "nowhere").total == 0


def test_spread_and_calibration_equal_their_definitions_on_many_repeated_values():
    rng = random.Random(7)
    values = [rng.choice((0.1, 0.3, 1 / 3, 2.5, 1e6, 7.0)) + rng.randrange(3) * 1e-9 for _ in range(20000)]
    mean = math.fsum(values) / len(values)
    cv = math.sqrt(math.fsum((x - mean) ** 2 for x in values) / len(values)) / abs(mean)
    assert coefficient_of_variation(values) == counted_coefficient_of_variation(Counter(values)) == cv
    confidences = [round(rng.random(), 2) for _ in range(20000)] + [0.0, 1.0]
    outcomes = [rng.random() < p for p in confidences]
    assert brier_score(confidences, outcomes) == math.fsum((p - float(o)) ** 2 for p, o in
                                                           zip(confidences, outcomes)) / len(outcomes)
    edges = (0, .2, .4, .6, .8, 1.0)
    for row in calibration_buckets(confidences, outcomes, edges):
        last = row["hi"] == edges[-1]
        members = [(p, o) for p, o in zip(confidences, outcomes) if row["lo"] <= p and (p < row["hi"] or last)]
        assert row["count"] == len(members)
        assert row["mean_confidence"] == math.fsum(p for p, _ in members) / len(members)
        assert row["success_rate"] == sum(o for _, o in members) / len(members)


def test_the_safety_score_from_counts_is_the_one_from_each_episode():
    rng = random.Random(3)
    episodes = [rng.sample(("low", "medium", "high"), rng.randrange(4)) if rng.random() < 0.3 else []
                for _ in range(5000)]
    worst = Counter(max(e, key=("low", "medium", "high").index) for e in episodes if e)
    assert counted_safety_score(worst, len(episodes)) == safety_score(episodes) < 1.0
    assert counted_safety_score({"high": 0}, 3) == safety_score([[], [], []]) == 1.0
    with pytest.raises(ValueError, match="unknown severity 'huge'"):
        counted_safety_score({"huge": 1}, 2)
