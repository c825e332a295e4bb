"""The regression gate on synthetic baselines: real drops block, noise does not."""

from __future__ import annotations

from pathlib import Path

import pytest

from faultproxy.cli.main import main as cli
from faultproxy.evaluator.gate import evaluate_gate, sign_flip_p
from faultproxy.evaluator.report import build_report
from tests.test_report import LOOKUP, REFUND, lookup_ok, lookup_wrong, make_run, refund_ok, refund_twice


def lookup_run(root: Path, passes: int, k: int = 10, extra: dict | None = None) -> Path:
    episodes = {("", "lookup_a"): [lookup_ok()] * passes + [lookup_wrong()] * (k - passes)}
    tasks = [LOOKUP]
    if extra:
        tasks.append(REFUND)
        episodes |= extra
    return make_run(root, tasks, k, episodes)


def gate(run_dir: Path, base_dir: Path, capsys, *extra: str) -> tuple[int, str]:
    code = cli(["gate", str(run_dir), "--baseline", str(base_dir), *extra])
    captured = capsys.readouterr()
    return code, captured.out + captured.err


def test_real_drop_blocks(tmp_path, capsys):
    base, run = lookup_run(tmp_path / "base", 10), lookup_run(tmp_path / "run", 3)
    code, out = gate(run, base, capsys)
    assert code == 1
    assert "BLOCK lookup_a: pass count fell: 3/10 passed vs baseline 10/10" in out
    assert "gate: BLOCKED" in out


def test_noise_does_not_block(tmp_path, capsys):
    base, run = lookup_run(tmp_path / "base", 10), lookup_run(tmp_path / "run", 9)
    code, out = gate(run, base, capsys)
    assert code == 0, out
    assert "ok    lookup_a: 9/10 passed vs baseline 10/10 (one-sided Fisher p = 0.500)" in out
    assert "gate: passed" in out


def test_new_high_severity_violation_blocks(tmp_path, capsys):
    clean = {("", "refund_b"): [refund_ok()] * 10}
    dirty = {("", "refund_b"): [refund_ok()] * 9 + [refund_twice()]}
    base = lookup_run(tmp_path / "base", 10, extra=clean)
    run = lookup_run(tmp_path / "run", 10, extra=dirty)
    code, out = gate(run, base, capsys)
    assert code == 1
    assert "BLOCK refund_b: 2 high-severity violation(s): " in out and "idempotency ×1" in out
    # The pass count itself (9/10 against 10/10) is noise: only the violation blocks.
    assert "ok    refund_b: 9/10 passed" in out


def test_pass_hat_k_drop_across_tasks_blocks_even_when_each_task_is_noise():
    def report(c: int, tasks: int = 8) -> dict:
        entries = [{"task_id": f"t{i}", "n": 10, "c": c, "pass_hat_k": {"10": 1.0 if c == 10 else 0.0},
                    "violations": {}, "high_checks": {}} for i in range(tasks)]
        scope = {"tasks": entries, "status": {"not_run": 0}, "headline": {"k": 10, "mean_pass_rate": c / 10,
                                                                          "pass_hat_k": 1.0 if c == 10 else 0.0},
                 "violations": {"high_by_task": {}}}
        return {"run": scope, "groups": {}}

    result = evaluate_gate(report(9), report(10))
    assert result.blocked
    assert not any(line.verdict == "BLOCK" and line.task_id for line in result.lines)  # per task: noise
    assert any(line.verdict == "BLOCK" and "pass^10" in line.message for line in result.lines)
    assert not evaluate_gate(report(10), report(10)).blocked


def test_sign_flip_p():
    assert sign_flip_p([0, 0]) == 1.0
    assert sign_flip_p([-1, -1, -1]) == pytest.approx(1 / 8)
    assert sign_flip_p([1, 1, 1]) == 1.0
    assert sign_flip_p([-0.5] * 20) < 0.001  # the random-flip branch
    assert sign_flip_p([-0.5] * 20) == sign_flip_p([-0.5] * 20)  # seeded: the same answer every time


def test_floors_and_unfinished_runs(tmp_path, capsys):
    base = lookup_run(tmp_path / "base", 10)
    run = lookup_run(tmp_path / "run", 9)
    assert gate(run, base, capsys, "--min-pass-rate", "0.95")[0] == 1
    assert gate(run, base, capsys, "--min-pass-rate", "0.9")[0] == 0
    code, out = gate(run, base, capsys, "--min-pass-hat-k", "0.5")
    assert code == 1 and "pass^10 0.000 is below --min-pass-hat-k 0.5" in out
    partial = make_run(tmp_path / "partial", [LOOKUP], 10, {("", "lookup_a"): [lookup_ok()] * 6})
    code, out = gate(partial, base, capsys)
    assert code == 1 and "4 planned episode(s) not run" in out
    assert gate(partial, base, capsys, "--allow-incomplete")[0] == 0


def test_compares_per_grid_label_when_both_have_them(tmp_path):
    labels = ("lambda=0", "lambda=0.5")
    base = make_run(tmp_path / "base", [LOOKUP], 10, {(label, "lookup_a"): [lookup_ok()] * 10 for label in labels},
                    labels=labels)
    run = make_run(tmp_path / "run", [LOOKUP], 10, {("lambda=0", "lookup_a"): [lookup_ok()] * 10,
                                                    ("lambda=0.5", "lookup_a"): [lookup_ok()] * 2
                                                    + [lookup_wrong()] * 8}, labels=labels)
    result = evaluate_gate(build_report(run), build_report(base))
    blocked = [line for line in result.lines if line.verdict == "BLOCK"]
    assert [(line.scope, line.task_id) for line in blocked if line.task_id] == [("lambda=0.5", "lookup_a")]


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


def test_bad_alpha_is_a_usage_error(tmp_path, capsys):
    good = lookup_run(tmp_path / "good", 10)
    with pytest.raises(SystemExit) as exit_info:
        cli(["gate", str(good), "--baseline", str(good), "--alpha", "2"])
    assert exit_info.value.code == 2
