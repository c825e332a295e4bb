"""The sequential gate: its formulas against hand values and brute force, its error rates by a
small simulation, and `run --until-decided` / `sweep --until-decided` / `gate` end to end with the
probe agent behind the real proxy, against baselines written through the project's own writer."""

from __future__ import annotations

import dataclasses
import json
import math
import random
import re
import shutil
from pathlib import Path
from statistics import NormalDist

import pytest

from bench.gate_calibration import draw, rates, write_run
from bench.sequential_gate import design, sequential_pair
from faultproxy.cli.main import main as cli
from faultproxy.evaluator.gate import ALPHA, BLOCK, PASS, Design, evaluate_sequential, sealed_design
from faultproxy.evaluator.gate.sequential_looks import doubling_looks
from faultproxy.evaluator.statistics import fixed_k_equivalent, look_levels
from faultproxy.evaluator.statistics.stats import null_se, power_spending
from faultproxy.formats.rundir import read_log, run_digest, write_plan
from tests.support.agent_commands import PROBE_AGENT
from tests.support.sweep_inputs import SCENARIO as SWEEP_SCENARIO, TASKS

SCENARIO = SWEEP_SCENARIO.split("expect:")[0]  # no expect block: the sweep here has other levels
REFUND = TASKS[0]  # a task whose agent always sends traffic (one that sends none is no_traffic under faults)


# --- the formulas ---------------------------------------------------------------------------------


def test_power_spending_and_look_levels_hand_values():
    assert power_spending(0.05, 0.5, 3) == pytest.approx(0.05 / 8)
    assert power_spending(0.05, 1, 2) == 0.05 and power_spending(0.05, 0, 2) == 0
    levels = look_levels(0.05, [2, 4, 8, 16], 3)
    assert levels == pytest.approx([0.05 / 512, 0.05 / 64 - 0.05 / 512, 0.05 / 8 - 0.05 / 64, 0.05 - 0.05 / 8])
    assert math.fsum(levels) == pytest.approx(0.05)  # the union bound's whole budget, no more
    assert look_levels(0.05, [16], 3) == [0.05]  # one look is the fixed-k gate
    for bad in ([4, 2], [2, 2], [0, 2], []):
        with pytest.raises(ValueError):
            look_levels(0.05, bad, 3)
    with pytest.raises(ValueError):
        power_spending(0.05, 1.5, 2)


def test_doubling_looks():
    assert doubling_looks(2, 16) == [2, 4, 8, 16]
    assert doubling_looks(2, 8) == [2, 4, 8]
    assert doubling_looks(2, 32) == [2, 4, 8, 16, 32]
    assert doubling_looks(3, 16) == [3, 6, 12, 16]
    assert doubling_looks(2, 2) == [2] and doubling_looks(2, 3) == [2, 3]
    with pytest.raises(ValueError):
        doubling_looks(5, 3)


def test_null_se_and_fixed_k_equivalent_by_brute_force():
    tables = [(3, 4, 7, 8), (1, 4, 2, 8)]
    pooled = [(10 + 1) / (12 + 2), (3 + 1) / (12 + 2)]  # smoothed rates of both arms together
    assert null_se(tables) == pytest.approx(math.sqrt(sum(p * (1 - p) * (1 / 4 + 1 / 8) for p in pooled)) / 2)
    assert null_se(tables, 16) == pytest.approx(math.sqrt(sum(p * (1 - p) * (1 / 16 + 1 / 8) for p in pooled)) / 2)
    z = NormalDist().inv_cdf
    power = lambda k, level: NormalDist().cdf(0.2 / null_se(tables, k) - z(1 - level))  # noqa: E731
    k = fixed_k_equivalent(tables, 0.2, 0.05, 0.02, 16)
    assert power(k, 0.05) >= power(16, 0.02) > power(k - 1, 0.05)  # the least k with the same power
    assert k < 16
    assert fixed_k_equivalent(tables, 0.2, 0.05, 0.05, 16) == 16  # no α lost to looks: nothing saved


def test_design_round_trips_and_names_its_differences():
    plan = Design(alpha=0.05, margin=0.2, max_high=0, min_k=2, max_k=16, baseline_digest="abc")
    document = json.loads(json.dumps(plan.to_json()))
    assert Design.from_json(document, "x") == plan and document["looks"] == [2, 4, 8, 16]
    other = dataclasses.replace(plan, margin=0.3, max_k=8)
    assert plan.differences(other) == ["margin 0.2 → 0.3", "max_k 16 → 8"]


# --- error rates, by a small simulation (bench/sequential_gate.py has the full table) --------------


def test_optional_stopping_keeps_false_block_under_alpha_and_saves_trials():
    rng = random.Random(5)
    flaky, plan = rates("flaky", 12), design(8)
    same = [sequential_pair(rng, flaky, flaky, plan) for _ in range(150)]
    worse = [sequential_pair(rng, flaky, [p - 0.3 for p in flaky], plan) for _ in range(60)]
    blocked = sum(v == BLOCK for v, _, _ in same) / len(same)
    assert blocked <= ALPHA + 2 * math.sqrt(ALPHA * (1 - ALPHA) / len(same))
    assert sum(v == PASS for v, _, _ in same) / len(same) >= 0.8
    assert sum(v == BLOCK for v, _, _ in worse) / len(worse) >= 0.9
    assert sum(n for _, n, _ in worse) / len(worse) < 0.6 * 12 * 8  # clear cases stop early
    assert all(fixed == BLOCK for _, _, fixed in worse)  # the fixed-k gate at k = 8, on the same draws


# --- end to end -----------------------------------------------------------------------------------


@pytest.fixture
def world(tmp_path, upstream, monkeypatch, faultproxy_home):
    """The scenario, the tasks, and a baseline where both tasks passed 8 of 8."""
    _, server = upstream
    monkeypatch.setenv("PROBE_UPSTREAM", server.url)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    (tmp_path / "tasks.jsonl").write_text(json.dumps(REFUND) + "\n")
    return tmp_path


def baseline(folder: Path, labels: tuple[str, ...] = ("",), refund: int = 8) -> Path:
    return write_run(folder, {label: [("refund", refund, 8)] for label in labels}, 8)


def command(world: Path, out: Path, base: Path, *extra: str, verb: str = "run") -> list[str]:
    return [verb, "--scenario", str(world / "scenario.yaml"), "--tasks", str(world / "tasks.jsonl"),
            "--until-decided", "--baseline", str(base), "--min-k", "2", "--max-k", "8", "--parallel", "2",
            "--out", str(out), *extra, "--", *PROBE_AGENT]


def call(args: list[str], capsys) -> tuple[int, str]:
    code = cli(args)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def gate_block(out: str) -> list[str]:
    """The gate's lines as printed, from its header on (the run prints them last)."""
    lines = out.splitlines()
    start = max(i for i, line in enumerate(lines) if line.startswith("gate: ") and " against baseline " in line)
    return lines[start + 1:]


def logged(out: Path) -> list[dict]:
    return read_log(out / "episodes.jsonl")[1]


def test_a_regression_blocks_at_the_second_round_and_gate_reproduces_it(world, capsys):
    base, out = baseline(world / "base"), world / "run"
    code, text = call(command(world, out, base, "--param", "lambda=1"), capsys)
    assert code == 1, text
    # The refund fails every time: 0/2 is not enough at round 1's α (Fisher p = 1/45), 0/4 is (1/495).
    assert "sequential: stopped at round 2 of 3 (k = 4 per task, looks at [2, 4, 8])" in text
    assert "4 episodes decide it (4 logged) of 8 at max-k 8" in text
    assert "a fixed-k gate with the same power against a drop of 0.2 needs k = " in text
    assert gate_block(text)[-1] == "gate: BLOCK (regression), exit 1"
    assert sorted({e["trial"] for e in logged(out)}) == [0, 1, 2, 3]
    plan = json.loads((out / "plan.json").read_text())
    assert plan["k"] == 8 and plan["sequential"]["looks"] == [2, 4, 8] and plan["sequential"]["alpha"] == 0.05
    assert sealed_design(out) == evaluate_sequential(out, base, sealed_design(out)).design

    code, again = call(["gate", str(out), "--baseline", str(base)], capsys)
    assert code == 1 and gate_block(again) == gate_block(text)
    code, shown = call(["report", str(out), "--no-junit", "--quiet"], capsys)
    section = json.loads((out / "report.json").read_text())["sequential"]
    assert code == 0 and "sequential: stopped at round 2 of 3" in shown and "verdict BLOCK" in shown
    assert (section["verdict"], section["round"], section["k"], section["episodes_used"]) == ("BLOCK", 2, 4, 4)
    assert 1 <= section["fixed_k"] <= 8 and section["baseline"] == str(base.resolve())
    page = (out / "report.html").read_text()  # the looks, where it stopped, and what it saved
    assert '<h2>Sequential gate</h2><p><span class="badge b-fail">BLOCK</span> sequential: stopped at round 2' in page
    section_html = page.split("<h2>Sequential gate</h2>")[1].split("<h2>")[0]
    looks = re.findall(r"<tr><td class=\"n\">(\d)</td><td class=\"n\">(\d)</td>.*?<td>([^<]*)</td></tr>", section_html)
    assert looks == [("1", "2", "no decision: went on"), ("2", "4", "decided: BLOCK"), ("3", "8", "not needed")]
    assert re.search(r">decided on</text><rect [^>]*/><text [^>]*>4</text>.*>at max-k</text>", section_html)

    # Another design, or another baseline, is refused in one line: the error rates are the sealed design's.
    for args in (["gate", str(out), "--baseline", str(base), "--alpha", "0.1"],
                 ["gate", str(out), "--baseline", str(baseline(world / "other", refund=7))],
                 command(world, out, base, "--param", "lambda=1", "--margin", "0.3")):
        code, refused = call(args, capsys)
        assert code == 2 and len(refused.strip().splitlines()) == 1, refused
        assert "sealed" in refused or "not the baseline" in refused

    # A kill leaves a prefix of the log: here round 1 and one episode of round 2.
    lines = (out / "episodes.jsonl").read_text().splitlines(keepends=True)
    (out / "episodes.jsonl").write_text("".join(lines[:1 + 2 + 1]))
    code, _ = call(["gate", str(out), "--baseline", str(base)], capsys)
    assert code == 4  # ERROR: planned episodes of the unfinished round are missing, no verdict on the agent yet
    code, resumed = call(command(world, out, base, "--param", "lambda=1"), capsys)
    assert code == 1 and gate_block(resumed) == gate_block(text)
    assert len(logged(out)) == 4 and len({e["key"] for e in logged(out)}) == 4


def test_an_unchanged_agent_passes_once_the_margin_is_ruled_out(world, capsys):
    base, out = baseline(world / "base"), world / "run"
    code, text = call(command(world, out, base, "--param", "lambda=0", "--min-k", "4", "--margin", "0.3"), capsys)
    assert code == 0, text
    assert gate_block(text)[-1] == "gate: PASS, exit 0"
    assert "stopped at round 2 of 2 (k = 8 per task, looks at [4, 8])" in text and len(logged(out)) == 8
    # Resuming a decided run runs nothing and says the same.
    code, again = call(command(world, out, base, "--param", "lambda=0", "--min-k", "4", "--margin", "0.3"), capsys)
    assert code == 0 and gate_block(again) == gate_block(text) and len(logged(out)) == 8
    # A fixed-k resume of a sequential run, and options that only --until-decided takes, are refused.
    code, refused = call([a for a in command(world, out, base) if a != "--until-decided"], capsys)
    assert code == 2 and "--baseline is for --until-decided" in refused
    fixed = ["run", "--scenario", str(world / "scenario.yaml"), "--tasks", str(world / "tasks.jsonl"), "--k", "8",
             "--param", "lambda=0", "--out", str(out), "--", *PROBE_AGENT]
    code, refused = call(fixed, capsys)
    assert code == 2 and "was run with --until-decided; it cannot be resumed with a fixed k" in refused, refused
    assert len(logged(out)) == 8


def test_a_sweep_is_gated_per_grid_point_in_the_same_rounds(world, capsys):
    labels = ("lambda=0", "lambda=1")
    base, out = baseline(world / "base", labels), world / "sweep"
    code, text = call(command(world, out, base, "--param", "lambda=0,1", verb="sweep"), capsys)
    assert code == 1, text
    assert "BLOCK (regression) [lambda=1] refund: pass count fell" in text
    assert "stopped at round 2 of 3" in text and len(logged(out)) == 2 * 1 * 4
    assert (out / "sweep.json").exists()
    code, again = call(["gate", str(out), "--baseline", str(base)], capsys)
    assert code == 1 and gate_block(again) == gate_block(text)


def test_bad_sequential_options_are_one_line_exit_2(world, capsys):
    base = baseline(world / "base")
    for extra, message in ((["--k", "4"], "--max-k"), (["--max-k", "1"], "--max-k must be")):
        code, text = call(command(world, world / "run", base, *extra), capsys)
        assert code == 2 and message in text and len(text.strip().splitlines()) == 1, text
    code, text = call(command(world, world / "run", world / "nowhere"), capsys)
    assert code == 2 and "nowhere" in text
    shutil.rmtree(world / "base")


def test_the_safety_ceiling_blocks_at_the_first_round_it_is_crossed(tmp_path):
    base = baseline(tmp_path / "base")
    run_dir = write_run(tmp_path / "run", {"": [("refund", 1, 2)]}, 8, high={"refund": 1})  # round 1 only
    plan = Design(alpha=ALPHA, margin=0.2, max_high=0, min_k=2, max_k=8, baseline_digest=run_digest(base))
    document = json.loads((run_dir / "plan.json").read_text())
    write_plan(run_dir, {**document, "sequential": plan.to_json()})
    outcome = evaluate_sequential(run_dir, base, plan)
    assert outcome.result.verdict == BLOCK and outcome.result.reasons == ["safety"]
    assert outcome.look == 0 and outcome.todo_k is None  # decided: no more rounds
    lenient = dataclasses.replace(plan, max_high=1)
    write_plan(run_dir, {**document, "sequential": lenient.to_json()})
    assert evaluate_sequential(run_dir, base, lenient).todo_k == 4  # within the ceiling: round 2 is next
