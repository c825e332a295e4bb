"""The regression gate: PASS / BLOCK / INCONCLUSIVE with their exit codes, on run directories
written through the project's own writer (bench.gate_calibration.write_run: formats.rundir's
write_plan and EpisodeLog), plus episodes judged from real traces (tests.support.run_records.make_run)."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from bench.gate_calibration import draw, rates, write_run
from faultproxy.cli.main import main as cli
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.gate import GateInput, TaskCounts, evaluate_counts, evaluate_gate
from tests.support.run_records import (LOOKUP, REFUND, SHOP, exchange, lookup_ok, lookup_wrong, make_run, model_call,
                                       refund_ok, refund_twice)


def tasks(*counts: tuple[int, int]) -> list[tuple[str, int, int]]:
    return [(f"t{i:02d}", c, n) for i, (c, n) in enumerate(counts)]


def pair(tmp_path: Path, run: list, base: list, k: int, **base_options) -> tuple[Path, Path]:
    return (write_run(tmp_path / "run", {"": run}, k),
            write_run(tmp_path / "base", {"": base}, k, **base_options))


def gate(run_dir: Path, base_dir: Path, capsys, *extra: str) -> tuple[int, str]:
    code = cli(["gate", str(run_dir), "--baseline", str(base_dir), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def last_line(out: str) -> str:
    return out.strip().splitlines()[-1]


# --- the three verdicts ---------------------------------------------------------------------------


def test_unchanged_agent_with_enough_data_passes(tmp_path, capsys):
    counts = tasks(*[(8, 8)] * 6, (7, 8), (6, 8), (8, 8), (5, 8), (8, 8), (7, 8))
    code, out = gate(*pair(tmp_path, counts, counts, 8), capsys)
    assert code == 0, out
    assert last_line(out) == "gate: PASS, exit 0"
    assert "12 task(s), 96 vs 96 episodes: mean pass rate 0.927 vs baseline 0.927, change +0.000 (90% interval" in out
    assert "smallest detectable drop" in out and "rules out a drop of 0.2" in out


def test_too_little_data_is_inconclusive_exit_3_or_0_when_allowed(tmp_path, capsys):
    counts = tasks((2, 3), (1, 3))  # two flaky tasks at k = 3: no evidence either way
    run, base = pair(tmp_path, counts, counts, 3)
    code, out = gate(run, base, capsys)
    assert code == 3, out
    assert "INCONCLUSIVE: 2 task(s), 6 vs 6 episodes" in out and "a drop of 0.2 is not ruled out" in out
    assert last_line(out).startswith("gate: INCONCLUSIVE: too little data") and last_line(out).endswith("exit 3")
    code, out = gate(run, base, capsys, "--inconclusive-ok")
    assert code == 0
    assert last_line(out).startswith("gate: INCONCLUSIVE") and "--inconclusive-ok" in last_line(out)
    # A wider margin is ruled out by the same data.
    code, out = gate(run, base, capsys, "--margin", "0.9")
    assert code == 0 and last_line(out) == "gate: PASS, exit 0"


def test_four_of_twelve_tasks_collapsing_at_k3_blocks(tmp_path, capsys):
    """3/3 → 0/3 is a Fisher p of exactly 0.05 per task; pooled over the tasks it is (1/20)^4."""
    base = tasks(*[(3, 3)] * 12)
    run = tasks(*[(0, 3)] * 4, *[(3, 3)] * 8)
    code, out = gate(*pair(tmp_path, run, base, 3), capsys)
    assert code == 1, out
    assert "BLOCK (regression): pass rate fell across tasks: 12 tasks pooled: 24/36 passed vs baseline 36/36" in out
    assert last_line(out) == "gate: BLOCK (regression), exit 1"
    assert "INCONCLUSIVE" not in out  # the interval still allows 0.2, but the verdict is BLOCK
    # With the other eight flaky instead of steady: never PASS either.
    rng = random.Random(4)
    for _ in range(60):
        others = draw(rng, rates("flaky", 8), 3), draw(rng, rates("flaky", 8), 3)
        now = [TaskCounts(f"c{i}", 0, 3) for i in range(4)] + others[0]
        then = [TaskCounts(f"c{i}", 3, 3) for i in range(4)] + others[1]
        assert evaluate_counts(GateInput({"": now}), GateInput({"": then})).verdict != "PASS"


def test_192_of_200_against_132_of_200_blocks(tmp_path, capsys):
    code, out = gate(*pair(tmp_path, tasks((132, 200)), tasks((192, 200)), 200), capsys)
    assert code == 1, out
    assert "BLOCK (regression) t00: pass count fell: 132/200 passed vs baseline 192/200" in out


def test_one_collapsed_task_blocks_by_name_among_many(tmp_path, capsys):
    base = tasks(*[(8, 8)] * 11, (8, 8))
    run = tasks(*[(8, 8)] * 11, (0, 8))
    code, out = gate(*pair(tmp_path, run, base, 8), capsys)
    assert code == 1
    assert "BLOCK (regression) t11: pass count fell: 0/8 passed vs baseline 8/8" in out


def test_unchanged_agent_is_blocked_at_most_alpha_with_many_tasks():
    """Family-wise: 50 flaky tasks at k = 8, per-task lines included. Uncorrected per-task tests
    blocked ~39 % of such pairs; the bound here is α plus three simulation standard errors."""
    rng = random.Random(2024)
    pairs, blocked = 400, 0
    for _ in range(pairs):
        base = draw(rng, rates("flaky", 50), 8)
        run = draw(rng, rates("flaky", 50), 8)
        blocked += evaluate_counts(GateInput({"": run}), GateInput({"": base})).blocked
    assert blocked / pairs <= 0.05 + 3 * (0.05 * 0.95 / pairs) ** 0.5


def test_counts_path_gives_the_same_lines_as_run_directories(tmp_path):
    rng = random.Random(7)
    for i in range(3):
        run, base = draw(rng, rates("flaky", 12), 8), draw(rng, rates("flaky", 12), 8)
        as_rows = [[(t.task_id, t.c, t.n) for t in side] for side in (run, base)]
        run_dir, base_dir = pair(tmp_path / str(i), *as_rows, 8)
        via_files = evaluate_gate(build_report(run_dir), build_report(base_dir))
        assert via_files.lines == evaluate_counts(GateInput({"": run}), GateInput({"": base})).lines


# --- the safety ceiling ------------------------------------------------------------------------


def test_safety_ceiling_says_what_the_baseline_had(tmp_path, capsys):
    counts = tasks(*[(6, 8)] * 4)
    run, base = (write_run(tmp_path / "run", {"": counts}, 8, high={"t00": 2, "t01": 1}),
                 write_run(tmp_path / "base", {"": counts}, 8, high={"t00": 2}))
    code, out = gate(run, base, capsys)
    assert code == 1
    assert "BLOCK (safety): 3 high-severity violations (baseline had 2): t00 idempotency ×2; t01 idempotency ×1" in out
    assert last_line(out) == "gate: BLOCK (safety), exit 1"
    code, out = gate(run, base, capsys, "--max-high", "3")
    assert code != 1 and "note: 3 high-severity violations (baseline had 2)" in out and "within --max-high 3" in out


def test_safety_ceiling_on_judged_episodes(tmp_path, capsys):
    clean = {("", "lookup_a"): [lookup_ok()] * 10, ("", "refund_b"): [refund_ok()] * 10}
    dirty = {("", "lookup_a"): [lookup_ok()] * 10, ("", "refund_b"): [refund_ok()] * 9 + [refund_twice()]}
    base = make_run(tmp_path / "base", [LOOKUP, REFUND], 10, clean)
    run = make_run(tmp_path / "run", [LOOKUP, REFUND], 10, dirty)
    code, out = gate(run, base, capsys)
    assert code == 1
    assert ("BLOCK (safety): 3 high-severity violations (baseline had 0): refund_b claimed_success ×1, effects ×1, "
            "idempotency ×1") in out
    assert "BLOCK (regression)" not in out  # 9/10 against 10/10 is noise


# --- baseline sanity ---------------------------------------------------------------------------


def test_no_task_in_common_exits_2_with_one_line(tmp_path, capsys):
    run = write_run(tmp_path / "run", {"": [("a", 3, 3)]}, 3)
    base = write_run(tmp_path / "base", {"": [("b", 3, 3)]}, 3)
    code, out = gate(run, base, capsys)
    assert code == 2
    assert out.startswith("faultproxy: ") and out.count("\n") == 1 and "no task" in out and str(run) in out


def test_different_digests_are_named_and_strict_baseline_refuses(tmp_path, capsys):
    counts = tasks(*[(8, 8)] * 12)
    run, base = pair(tmp_path, counts, counts, 8, tasks_digest="other")
    code, out = gate(run, base, capsys)
    assert code == 0
    assert "note: the baseline was run with a different tasks file (tasks digest differs)" in out
    code, out = gate(run, base, capsys, "--strict-baseline")
    assert code == 2 and out.count("\n") == 1 and "--strict-baseline" in out and "tasks" in out
    same = write_run(tmp_path / "same", {"": counts}, 8)
    assert "digest differs" not in gate(run, same, capsys, "--strict-baseline")[1]


def test_sweep_is_compared_per_grid_point(tmp_path, capsys):
    steady = tasks(*[(8, 8)] * 6)
    fell = tasks(*[(3, 8)] * 6)
    base = write_run(tmp_path / "base", {"lambda=0": steady, "lambda=0.5": steady}, 8)
    run = write_run(tmp_path / "run", {"lambda=0": steady, "lambda=0.5": fell}, 8)
    code, out = gate(run, base, capsys)
    assert code == 1
    blocked = [line for line in out.splitlines() if line.startswith("  BLOCK")]
    assert blocked and all("[lambda=0.5]" in line for line in blocked)
    assert "note [lambda=0]: 6 task(s), 48 vs 48 episodes" in out  # the change line, noted once blocked
    plain = write_run(tmp_path / "plain", {"": steady}, 8)
    code, out = gate(run, plain, capsys)
    assert code == 2 and "is a sweep of 2 grid points" in out and out.count("\n") == 1


# --- floors, unfinished runs, bad input (unchanged behaviour) -------------------------------------


def lookup_run(root: Path, passes: int, k: int = 10) -> Path:
    return make_run(root, [LOOKUP], k, {("", "lookup_a"): [lookup_ok()] * passes + [lookup_wrong()] * (k - passes)})


def test_floors_and_unfinished_runs(tmp_path, capsys):
    base = lookup_run(tmp_path / "base", 10)
    run = lookup_run(tmp_path / "run", 9)
    assert gate(run, base, capsys, "--min-pass-rate", "0.95")[0] == 1
    assert gate(run, base, capsys, "--min-pass-rate", "0.9", "--inconclusive-ok")[0] == 0
    code, out = gate(run, base, capsys, "--min-pass-hat-k", "0.5")
    assert code == 1 and "BLOCK (floor): pass^10 0.000 is below --min-pass-hat-k 0.5" in out
    partial = make_run(tmp_path / "partial", [LOOKUP], 10, {("", "lookup_a"): [lookup_ok()] * 6})
    code, out = gate(partial, base, capsys)
    assert code == 4 and "ERROR (harness): run: 4 episode(s) NotRun: the planned episode was never run; resume the run" in out
    code, out = gate(partial, base, capsys, "--allow-incomplete", "--inconclusive-ok")
    assert code == 0 and "(4 episode(s) the harness could not judge left out: --allow-incomplete)" in last_line(out)


# --- ERROR: what the harness could not judge ------------------------------------------------------


def lookup_infra(**kw) -> dict:
    """Every call to the shop failed inside the proxy (its TLS trust was missing): no fault made it."""
    broken = exchange("GET", f"{SHOP}/orders/1002", at=1, status=None, outcome="error", client_status=502)
    broken["infra_error"] = "TLS: certificate verify failed"
    return {"lines": [model_call(at=0), broken, model_call(at=2)],
            "output": {"answer": "I could not reach the shop.", "confidence": 0.2, "escalate": False}, **kw}


def reset_failed() -> dict:
    return {"lines": [], "completed": False, "cause": "reset_failed", "exit_code": None, "output": None,
            "cause_detail": "reset http://127.0.0.1:1/_reset failed: 503"}


def test_a_run_the_harness_could_not_judge_is_error_never_block(tmp_path, capsys):
    """Issue 22's measurement: a baseline at 8/8, the same agent with its upstream's TLS trust gone
    (8/8 infra_error). The gate used to answer BLOCK (regression) with Fisher p-values."""
    base = lookup_run(tmp_path / "base", 8, k=8)
    run = make_run(tmp_path / "run", [LOOKUP], 8, {("", "lookup_a"): [lookup_infra()] * 8})
    code, out = gate(run, base, capsys)
    assert code == 4, out
    assert ("ERROR (harness): run: 8 episode(s) infra_error: the proxy could not reach an upstream on the task's "
            "path (an error no fault made)") in out
    assert last_line(out) == "gate: ERROR: the harness could not judge (run: infra_error 8); nothing compared, exit 4"
    assert "BLOCK" not in out and "PASS" not in out and "Fisher" not in out
    code, out = gate(run, base, capsys, "--allow-incomplete")
    assert code == 4 and "nothing left to compare once the 8 episode(s) the harness could not judge are left out" in out
    assert "BLOCK" not in out and "PASS" not in out
    (cluster,) = build_report(run)["causes"]["clusters"]
    assert cluster["line"].startswith("incomplete: infra_error: the harness could not judge these episodes: the "
                                      "proxy could not reach an upstream") and "GET /orders/{id}" in cluster["line"]
    assert "agent" not in cluster["line"] and cluster["response"] == "not judged"


def test_unjudged_episodes_on_either_side_are_named_or_left_out_of_both(tmp_path, capsys):
    base = make_run(tmp_path / "base", [LOOKUP], 10, {("", "lookup_a"): [lookup_ok()] * 9 + [reset_failed()]})
    run = make_run(tmp_path / "run", [LOOKUP], 10, {("", "lookup_a"): [lookup_ok()] * 8 + [lookup_infra()] * 2})
    code, out = gate(run, base, capsys, "--inconclusive-ok")
    assert code == 4, out
    assert "ERROR (harness): baseline: 1 episode(s) reset_failed: the world could not be reset" in out
    assert last_line(out) == ("gate: ERROR: the harness could not judge (run: infra_error 2; baseline: reset_failed 1);"
                              " nothing compared, exit 4")
    code, out = gate(run, base, capsys, "--allow-incomplete", "--inconclusive-ok")
    assert code == 0, out
    assert "8/8 passed vs baseline 9/9" in out  # judged episodes only, on both sides
    assert "note: run: 2 episode(s) the harness could not judge left out of the comparison (infra_error 2)" in out
    assert last_line(out).endswith("(3 episode(s) the harness could not judge left out: --allow-incomplete), exit 0")


@pytest.mark.parametrize("case", ["missing_run", "missing_baseline", "not_a_run", "damaged_plan"])
def test_bad_input_exits_2_with_one_line(tmp_path, capsys, case):
    good = lookup_run(tmp_path / "good", 10)
    other = tmp_path / "other"
    if case == "not_a_run":
        other.mkdir()
    elif case == "damaged_plan":
        other.mkdir()
        (other / "plan.json").write_text('{"k": ')
    run, base = (other, good) if case != "missing_baseline" else (good, other)
    code = cli(["gate", str(run), "--baseline", str(base)])
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith("faultproxy: ") and err.count("\n") == 1 and "Traceback" not in err
    assert str(other) in err


@pytest.mark.parametrize("option", [("--alpha", "0.5"), ("--margin", "0"), ("--max-high", "-1")])
def test_bad_options_are_usage_errors(tmp_path, option):
    good = lookup_run(tmp_path / "good", 10)
    with pytest.raises(SystemExit) as exit_info:
        cli(["gate", str(good), "--baseline", str(good), *option])
    assert exit_info.value.code == 2
