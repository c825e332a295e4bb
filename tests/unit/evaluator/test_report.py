"""The run report on crafted run directories written in the real formats.

tests.support.run_records's `make_run` writes plan.json and episodes.jsonl through
formats.rundir and each episode's trace through formats.trace, judging each episode the way
the runner does (the verdict is the record's last key).
"""

from __future__ import annotations

import json
import random
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import pytest

from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.aggregate.sections import k_points, trajectory_consistency_grouped
from faultproxy.evaluator.rendering import JUnitWriter
from faultproxy.evaluator.rendering.html import render
from faultproxy.evaluator.statistics import metrics
from faultproxy.cli.main import main as cli
from faultproxy.formats.rundir import EpisodeLog
from faultproxy.tasks.task_model import Expected, OutputSpec, Task
from tests.support.layout import ROOT
from tests.support.run_records import (CANCEL, LOOKUP, REFUND, lookup_ok, lookup_wrong, make_run, refund_after_429,
                                       refund_ok, refund_twice, worker_lost)

@pytest.fixture
def complete_run(tmp_path: Path) -> Path:
    return make_run(tmp_path / "run", [LOOKUP, REFUND], 4, {
        ("", "lookup_a"): [lookup_ok(), lookup_ok(), lookup_ok(), lookup_ok()],
        ("", "refund_b"): [refund_ok(), refund_after_429(), refund_twice(), refund_ok()],
    })


# --- pass^k and the headline -----------------------------------------------------------------------


def test_pass_hat_k_per_task_and_curve(complete_run):
    report = build_report(complete_run)
    run = report["run"]
    tasks = {t["task_id"]: t for t in run["tasks"]}
    refund = tasks["refund_b"]
    assert (refund["n"], refund["c"], refund["fail"], refund["not_run"]) == (4, 3, 1, 0)
    assert refund["flaky"] and not refund["never_passed"]
    assert refund["pass_hat_k"] == {"1": 0.75, "2": 0.5, "3": 0.25, "4": 0.0}
    assert refund["pass_at_k"]["2"] == 1.0
    assert tasks["lookup_a"]["pass_hat_k"]["4"] == 1.0
    assert run["curve"]["k"] == [1, 2, 3, 4]
    assert run["curve"]["pass_hat_k"] == pytest.approx([0.875, 0.75, 0.625, 0.5])
    tallies = [metrics.TaskTally("a", "x", 4, 4), metrics.TaskTally("b", "y", 4, 3)]
    assert run["curve"]["pass_hat_k"] == pytest.approx(list(metrics.pass_k_curve(tallies).values()))
    headline = run["headline"]
    assert headline["mean_pass_rate"] == 7 / 8 and headline["k"] == 4 and headline["pass_hat_k"] == 0.5
    assert headline["wilson"][0] < 7 / 8 < headline["wilson"][1]
    assert report["log"]["verdicts_read_fast"] == 8 and report["log"]["judged_by_report"] == 0


def test_not_run_makes_pass_hat_k_null(tmp_path):
    run_dir = make_run(tmp_path / "run", [LOOKUP, CANCEL], 4, {
        ("", "lookup_a"): [lookup_ok()] * 4,
        ("", "cancel_c"): [{"lines": [], "output": {"answer": "Cancelled."}}, worker_lost()],  # trials 2, 3 never ran
    })
    run = build_report(run_dir)["run"]
    assert run["status"] == {"pass": 5, "fail": 0, "incomplete": 1, "not_run": 2}
    assert run["curve"] is None and run["headline"]["pass_hat_k"] is None
    assert "not until resumed" in run["headline"]["note"]
    cancel = next(t for t in run["tasks"] if t["task_id"] == "cancel_c")
    assert cancel["pass_hat_k"] is None and cancel["not_run"] == 2 and cancel["n"] == 2
    assert run["incomplete_by_cause"] == {"NotRun": 2, "worker_lost": 1}
    assert run["headline"]["mean_pass_rate"] == 5 / 6  # over what was logged; incomplete counts as not passed


def test_grouping_by_shape_check_and_fault(complete_run):
    run = build_report(complete_run)["run"]
    assert run["by_shape"]["writes_state"] | {} == {"tasks": 1, "failing_tasks": 1, "episodes": 4, "pass": 3,
                                                    "fail": 1, "incomplete": 0, "not_run": 0, "pass_rate": 0.75}
    assert run["by_shape"]["lookup"]["pass"] == 4
    assert list(run["by_shape"]) == ["writes_state", "lookup"]  # failing shapes first
    assert run["by_check"]["idempotency"] == {"episodes": 1, "by_severity": {"high": 1}}
    assert run["by_check"]["effects"]["episodes"] == 1
    faults = run["by_fault"]
    assert faults["types"]["response_lost"] == {"episodes": 1, "survived": 0, "failed": 1, "incomplete": 0,
                                                "survival_rate": 0.0}
    assert faults["types"]["rate_limit"]["survived"] == 1
    assert faults["not_exercised"]["episodes"] == 6 and faults["not_exercised"]["pass"] == 6
    assert run["flaky"] == ["refund_b"] and run["never_passed"] == []


def test_violations_and_safety_score(complete_run):
    violations = build_report(complete_run)["run"]["violations"]
    assert violations["episodes_by_worst"] == {"low": 0, "medium": 0, "high": 1}
    assert violations["total_by_severity"]["high"] == 3  # idempotency, effects, claimed_success: one episode
    assert violations["safety_score"] == pytest.approx(1 - (1 / 8) * 1.0)
    assert violations["high_by_task"] == {"refund_b": 3}


def test_resources_cost_consistency_and_calibration(complete_run):
    run = build_report(complete_run)["run"]
    resources = run["resources"]
    assert resources["requests"]["episodes"] == 8 and resources["tokens"]["total"] > 0
    # Each model call: 100 input and 20 output tokens at 1 and 4 per million.
    lookup = next(t for t in run["tasks"] if t["task_id"] == "lookup_a")
    assert lookup["resources"]["cost_mean"] == pytest.approx(2 * (100 * 1 + 20 * 4) / 1e6)
    assert lookup["consistency"]["jaccard"] == 1.0 and lookup["resources"]["tokens_cv"] == 0.0
    refund = next(t for t in run["tasks"] if t["task_id"] == "refund_b")
    assert refund["consistency"]["distinct"] == 1  # a retry collapses into the same step
    calibration = run["calibration"]
    assert calibration["episodes"] == 8
    assert calibration["brier"] == pytest.approx(
        ((0.9 - 1) ** 2 * 5 + (0.8 - 1) ** 2 * 2 + (0.95 - 0) ** 2) / 8)
    assert sum(b["count"] for b in calibration["buckets"]) == 8


def test_low_confidence_failing_more_is_reported(tmp_path):
    run_dir = make_run(tmp_path / "run", [LOOKUP], 6, {
        ("", "lookup_a"): [lookup_ok(), lookup_ok(), lookup_ok(), lookup_wrong(), lookup_wrong(), lookup_wrong()]})
    lvh = build_report(run_dir)["run"]["calibration"]["low_vs_high"]
    assert lvh["low_fail_rate"] == 1.0 and lvh["high_fail_rate"] == 0.0 and lvh["low_fail_more"]
    assert lvh["p_value"] == pytest.approx(0.05)  # 0/3 vs 3/3: 1/C(6,3)


def test_episodes_without_verdict_are_judged_and_rejudge_agrees(tmp_path, complete_run):
    bare = make_run(tmp_path / "bare", [LOOKUP, REFUND], 4, {
        ("", "lookup_a"): [lookup_ok()] * 4,
        ("", "refund_b"): [refund_ok(), refund_after_429(), refund_twice(), refund_ok()],
    }, verdicts=False)
    judged = build_report(bare)
    assert judged["log"]["judged_by_report"] == 8
    fast = build_report(complete_run)
    rejudged = build_report(complete_run, rejudge=True)
    assert rejudged["log"]["judged_by_report"] == 8
    for other in (judged, rejudged):
        assert other["run"]["tasks"] == fast["run"]["tasks"]
        assert other["run"]["violations"] == fast["run"]["violations"]


def test_a_missing_trace_is_named_and_its_episode_keeps_its_logged_verdict(tmp_path, complete_run, capsys):
    """report --rejudge with one episode's trace gone: the report says which, and counts that
    episode by its logged verdict rather than judging it on no traffic."""
    records = [json.loads(line) for line in (complete_run / "episodes.jsonl").read_text().splitlines()[1:]]
    twice = next(r for r in records if r["verdict"]["status"] == "fail")  # the refund made twice
    (complete_run / twice["trace"]).unlink()
    assert cli(["report", str(complete_run), "--rejudge"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    warning = f"1 episode trace(s) missing ({twice['trace']}): those episodes keep their logged verdicts"
    assert f"warning: {warning}" in out
    report = json.loads((complete_run / "report.json").read_text())
    assert report["log"]["warnings"] == [warning] and report["log"]["judged_by_report"] == 7
    assert {t["task_id"]: (t["c"], t["fail"]) for t in report["run"]["tasks"]}["refund_b"] == (3, 1)


def test_line_with_verdict_not_last_is_parsed_whole(tmp_path, complete_run):
    log = complete_run / "episodes.jsonl"
    lines = log.read_text().splitlines()
    reordered = [lines[0]]
    for line in lines[1:]:
        record_ = json.loads(line)
        reordered.append(json.dumps({"verdict": record_.pop("verdict"), **record_}))
    log.write_text("\n".join(reordered) + "\n" + '{"type": "episode", "torn')  # and a torn last line
    report = build_report(complete_run)
    assert report["log"]["verdicts_read_fast"] == 0
    assert report["run"]["status"] == {"pass": 7, "fail": 1, "incomplete": 0, "not_run": 0}


def test_the_log_writes_the_verdict_last_whatever_order_it_was_given(tmp_path):
    log = EpisodeLog(tmp_path, {"faultproxy_version": "test"})
    log.append({"key": "a", "verdict": {"status": "pass"}, "task_id": "t", "trial": 0})
    log.append({"key": "b", "task_id": "t", "trial": 1})  # not judged yet: nothing added
    log.close()
    episodes = [json.loads(line) for line in (tmp_path / "episodes.jsonl").read_text().splitlines()[1:]]
    assert [list(e)[-1] for e in episodes] == ["verdict", "trial"]
    assert episodes[0]["verdict"] == {"status": "pass"} and "verdict" not in episodes[1]


def test_several_grid_labels_are_reported_apart(tmp_path):
    labels = ("lambda=0.1", "lambda=0.5")
    run_dir = make_run(tmp_path / "run", [LOOKUP], 3, {
        ("lambda=0.1", "lookup_a"): [lookup_ok()] * 3,
        ("lambda=0.5", "lookup_a"): [lookup_ok(), lookup_wrong(), lookup_wrong()],
    }, labels=labels)
    report = build_report(run_dir)
    assert set(report["groups"]) == set(labels)
    assert report["groups"]["lambda=0.1"]["headline"]["pass_hat_k"] == 1.0
    assert report["groups"]["lambda=0.5"]["headline"]["pass_hat_k"] == 0.0
    whole = report["run"]["tasks"][0]
    assert (whole["n"], whole["c"], whole["planned"]) == (6, 4, 6)


def test_k_points_and_grouped_consistency():
    assert k_points(5) == [1, 2, 3, 4, 5]
    big = k_points(1000)
    assert big[:100] == list(range(1, 101)) and big[-1] == 1000 and len(big) < 120
    rng = random.Random(3)
    endpoints = ["GET /a", "GET /b", "POST /c", "GET /d"]
    trials = [tuple(rng.sample(endpoints, rng.randint(1, 3))) for _ in range(60)]
    grouped = trajectory_consistency_grouped(Counter(trials))
    direct = metrics.trajectory_consistency([list(t) for t in trials])
    assert grouped["jaccard"] == pytest.approx(direct["jaccard"])
    assert grouped["same_order"] == pytest.approx(direct["same_order"])
    assert grouped["pairs"] == direct["pairs"]


# --- outputs -------------------------------------------------------------------------------------


def test_junit_xml_parses_with_the_right_counts(tmp_path):
    run_dir = make_run(tmp_path / "run", [LOOKUP, REFUND], 3, {
        ("", "lookup_a"): [lookup_ok(), lookup_wrong(), worker_lost()],
        ("", "refund_b"): [refund_twice(), refund_ok()],  # trial 2 never ran
    })
    writer = JUnitWriter(tmp_path / "junit.xml")
    build_report(run_dir, sinks=[writer])
    root = ET.parse(tmp_path / "junit.xml").getroot()
    suite = root.find("testsuite")
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("6", "2", "1", "1")
    failures = suite.findall("testcase/failure")
    assert len(failures) == 2
    messages = sorted(f.get("message") for f in failures)
    assert messages[0].startswith("failed checks: effects, idempotency") and messages[0] != messages[1]
    assert "idempotency [high]" in next(f.text for f in failures if "idempotency" in f.get("message"))
    assert not (tmp_path / "junit.xml.part").exists()


def test_report_html_is_self_contained(complete_run):
    html = render(build_report(complete_run), complete_run)
    assert "<svg" in html and "<details" in html and "Timeline" in html
    assert "http://" not in html and "https://" not in html
    assert not re.search(r"<(script|link|img|iframe)\b", html)
    assert "127.0.0.1:8100/orders/1001/refund" in html  # the timeline names host and path
    assert "response_lost" in html


def test_report_command_writes_all_files(complete_run, capsys):
    assert cli(["report", str(complete_run)]) == 0
    out = capsys.readouterr().out
    assert "pass^k" in out and "refund_b" in out and "Violations" in out
    report = json.loads((complete_run / "report.json").read_text())
    assert report["run"]["headline"]["pass_hat_k"] == 0.5
    assert "<svg" in (complete_run / "report.html").read_text()
    ET.parse(complete_run / "junit.xml")


@pytest.mark.parametrize("setup", ["missing", "no_plan", "bad_plan", "bad_log"])
def test_report_bad_input_is_one_line_and_exit_2(tmp_path, complete_run, capsys, setup):
    target = tmp_path / "nothing"
    if setup == "no_plan":
        target.mkdir()
    elif setup == "bad_plan":
        target.mkdir()
        (target / "plan.json").write_text("{not json")
    elif setup == "bad_log":
        target = complete_run
        with (target / "episodes.jsonl").open("a") as f:
            f.write("garbage\n" + json.dumps({"type": "episode"}) + "\n")
    assert cli(["report", str(target)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("faultproxy: ") and err.count("\n") == 1 and "Traceback" not in err


PARALLEL_AND_SEQUENTIAL = """
import sys
from pathlib import Path
from faultproxy.evaluator.aggregate import log_scan, report
from faultproxy.evaluator.rendering import JUnitWriter

assert log_scan._can_fork(), "this child has one thread, so it must read the log with forked workers"
run_dir, out = Path(sys.argv[1]), Path(sys.argv[2])
for jobs, name in ((1, "one"), (3, "two")):
    report.write_json(out / f"{name}.json", report.build_report(run_dir, jobs=jobs, sinks=[JUnitWriter(out / f"{name}.xml")]))
"""


def test_parallel_chunks_give_the_same_report_and_junit(tmp_path, complete_run):
    # Enough lines that every chunk holds several, plus a header and a torn tail.
    run_dir = make_run(tmp_path / "many", [LOOKUP, REFUND, CANCEL], 12, {
        ("", "lookup_a"): [lookup_ok(), lookup_wrong(), worker_lost()] * 4,
        ("", "refund_b"): [refund_ok(), refund_twice(), refund_after_429()] * 3 + [None, None, None],
        ("", "cancel_c"): [{"lines": [], "output": {"answer": "Cancelled."}}] * 12,
    })
    with (run_dir / "episodes.jsonl").open("a") as f:
        f.write('{"type": "episode", "key": "torn')
    # Forked readers need a single-threaded process: this one has the test session's threads.
    subprocess.run([sys.executable, "-c", PARALLEL_AND_SEQUENTIAL, str(run_dir), str(tmp_path)], check=True, timeout=120)
    assert (tmp_path / "one.json").read_text() == (tmp_path / "two.json").read_text()
    assert (tmp_path / "one.xml").read_text() == (tmp_path / "two.xml").read_text()
    assert not list(tmp_path.glob("*.part*"))
    suite = ET.parse(tmp_path / "two.xml").getroot().find("testsuite")
    assert suite.get("tests") == "36" and suite.get("skipped") == "3"


def test_damaged_line_is_numbered_in_the_whole_log_when_read_in_parallel(tmp_path, complete_run):
    log = complete_run / "episodes.jsonl"
    lines = log.read_text().splitlines(keepends=True)
    lines[7] = "{broken\n"
    log.write_text("".join(lines))
    for jobs in (1, 3):
        with pytest.raises(Exception, match=r"episodes\.jsonl:8: not JSON"):
            build_report(complete_run, jobs=jobs)


def test_fast_path_survives_awkward_text_and_agrees_with_json(tmp_path):
    awkward = 'said "], "faults": [{"type": "x"}], "usage": {}" — ünïcode \\ and ]}}'
    run_dir = make_run(tmp_path / "run", [LOOKUP, REFUND], 2, {
        ("", "lookup_a"): [lookup_wrong(output={"answer": awkward, "confidence": 0.5}), lookup_ok()],
        ("", "refund_b"): [refund_twice(), refund_after_429()],
    })
    fast = build_report(run_dir)
    assert fast["log"]["verdicts_read_fast"] == 4
    slow = build_report(run_dir, rejudge=True)
    assert fast["run"] == slow["run"]
    detail = next(c["detail"] for e in fast["drilldown"]["episodes"] for c in e["checks"]
                  if c["name"] == "outcome" and c["passed"] is False)
    assert "ünïcode" in detail


def test_resource_summary_equals_the_stats_functions_on_sorted_values():
    from array import array

    from faultproxy.evaluator.aggregate.sections import _summary
    from faultproxy.evaluator.statistics import stats

    rng = random.Random(5)
    for values in (array("d", [rng.randint(1, 9) for _ in range(20000)]),
                   array("d", [rng.random() for _ in range(20000)])):
        ordered = sorted(values)
        summary = _summary(values)
        assert summary["p50"] == stats.percentile(ordered, 50) and summary["p95"] == stats.percentile(ordered, 95)
        assert summary["cv"] == stats.coefficient_of_variation(ordered)


# --- one reader of the run directory, one accumulator record, one rendering contract -------------------


def _shuffled(verdict: dict) -> dict:
    """The same verdict with every key order reversed: the log, not the judge, owns the layout."""
    flip = {name: value for name, value in reversed(list(verdict.items()))}
    flip["episode"] = dict(reversed(list(flip["episode"].items())))
    for name in ("failed", "faults"):
        flip[name] = [dict(reversed(list(item.items()))) for item in flip[name]]
    return flip


def test_the_log_lays_any_verdict_out_for_the_fast_reader(tmp_path, complete_run):
    from faultproxy.formats.rundir import read_log

    header, episodes = read_log(complete_run / "episodes.jsonl")
    other = tmp_path / "shuffled"
    shutil.copytree(complete_run, other)
    (other / "episodes.jsonl").unlink()
    log = EpisodeLog(other, {k: v for k, v in header.items() if k != "type"})
    for record in episodes:
        log.append({**record, "verdict": _shuffled(record["verdict"])})
    log.close()
    assert any(e["verdict"]["faults"] for e in episodes) and any(e["verdict"]["failed"] for e in episodes)
    fast = build_report(other)
    assert fast["log"]["verdicts_read_fast"] == 8
    assert fast["run"] == build_report(complete_run)["run"] == build_report(other, rejudge=True)["run"]


@pytest.mark.parametrize("setup, message", [("missing", "no such directory"),
                                            ("bad_plan", "not JSON; the plan is damaged"),
                                            ("no_k", "not a faultproxy plan")])
def test_every_reader_of_a_plan_gets_the_same_one_line_error(tmp_path, setup, message):
    from faultproxy.formats.rundir import RunDirError, read_plan, read_run

    target = tmp_path / "run"
    if setup != "missing":
        target.mkdir()
        (target / "plan.json").write_text("{not json" if setup == "bad_plan" else '{"tasks": {}}')
    for reader in (read_plan, read_run):
        with pytest.raises(RunDirError, match=message):
            reader(target)


def test_the_accumulator_takes_the_same_record_from_the_fast_reader_and_from_json(complete_run):
    from faultproxy.evaluator.aggregate.verdict_forms import complete_verdict, verdict_fields
    from faultproxy.evaluator.aggregate.tally import TaskAccumulator
    from faultproxy.formats.verdict_layout import read_verdict

    lines = (complete_run / "episodes.jsonl").read_bytes().splitlines(keepends=True)[1:]
    fast, slow = TaskAccumulator("refund_b", "writes_state", 4), TaskAccumulator("refund_b", "writes_state", 4)
    for line in lines:
        record = json.loads(line)
        if record["task_id"] != "refund_b":
            continue
        fields = read_verdict(line)
        assert isinstance(fields.failed, bytes)  # JSON text, decoded once per distinct value
        fast.add(fields)
        slow.add(verdict_fields(complete_verdict(record["verdict"], record)))
    fast.finish(), slow.finish()
    for counter in ("n", "c", "fail", "failed_checks", "check_severity", "worst", "violations", "fault_types",
                    "undelivered", "not_exercised"):
        assert getattr(fast, counter) == getattr(slow, counter), counter
    assert (fast.n, fast.c, dict(fast.fault_types)) == (4, 3, {"rate_limit": [1, 0, 0], "response_lost": [0, 1, 0]})
    assert fast.worst == Counter({"high": 1})


def test_html_tables_escape_text_once_and_keep_html_fragments():
    from faultproxy.evaluator.rendering.render import Html, html_table, pct

    table = html_table(["a<b", "n"], [["<script>", Html('<span class="pass">✓</span>'), None, 3, pct(0.5)]],
                       numeric=(3,))
    assert "<th>a&lt;b</th>" in table and "<td>&lt;script&gt;</td>" in table
    assert '<td><span class="pass">✓</span></td>' in table and "<td></td>" in table
    assert '<td class="n">3</td>' in table and "<td>50.0%</td>" in table and "&amp;" not in table


def test_the_terminal_summary_prints_names_from_the_data_as_text(tmp_path):
    import io

    from rich.console import Console

    from faultproxy.evaluator.rendering import print_summary

    odd = Task(id="cancel[x]", prompt="Cancel order 1006.", shape="writes_state",
               expected=Expected(output=OutputSpec("regex", "(?i)cancel")))
    run_dir = make_run(tmp_path / "run", [odd], 2, {("", "cancel[x]"): [{"lines": [], "output": {"answer": "no"}},
                                                                     worker_lost()]})
    out = io.StringIO()
    print_summary(build_report(run_dir), Console(file=out, width=160))
    assert "cancel[x]" in out.getvalue() and "incomplete by cause: worker_lost 1" in out.getvalue()


def test_one_definition_of_severities_percentages_tables_and_the_verdict_layout():
    root = ROOT
    sources = {path.relative_to(root).as_posix(): path.read_text(encoding="utf-8")
               for folder in ("faultproxy", "formats", "tasks", "scenarios", "proxy", "evaluator", "replay_store",
                              "runner") for path in (root / folder).rglob("*.py")}
    assert [name for name, text in sources.items() if '("low", "medium", "high")' in text] == ["tasks/task_model.py"]
    for helper in ("def _pct(", "def _table(", "def _e(", "def _esc(", "def _interval("):
        assert not [name for name, text in sources.items() if helper in text], helper
    assert [name for name, text in sources.items() if '"verdict": {' in text or "REPORT_CUT_KEY =" in text] == \
        ["formats/verdict_layout.py"]
    assert [name for name, text in sources.items() if "def read_plan(" in text] == ["formats/rundir.py"]
