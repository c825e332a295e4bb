"""The gate's error rates, measured: false BLOCK, INCONCLUSIVE and power per cell.

    .venv/bin/python bench/gate_calibration.py              # ~1–2 min on 2 cores
    .venv/bin/python bench/gate_calibration.py --pairs 200  # quicker, wider error bars

For every cell of tasks ∈ {2, 4, 12, 50} × k ∈ {3, 8, 16} × {flaky, steady} pass rates it draws
pairs of runs (baseline and run, each task's passes ~ Binomial(k, rate)):
- no change: both sides at the same rates. false BLOCK is the share of exit 1, and should be
  ≤ α; INCONCLUSIVE and PASS the shares of exit 3 and 0;
- a drop of the margin: every task's rate 0.2 lower in the run. power is the share of BLOCK,
  and "PASS at −0.2" the share that passed although the agent lost the margin (the error the
  interval is there to bound).
Then the issue's targeted cases, each printed with met / not met.

Every pair is judged by the real gate, evaluator.gate.evaluate_counts, on per-task counts. The
first --files pairs of every cell (and every targeted case) are also written as two run
directories through the project's own writer (formats.rundir: write_plan and EpisodeLog, one
episode line per trial with a medium-severity failed check on every failure), read back by
evaluator.aggregate.report.build_report and judged by evaluate_gate; the bench stops if the two paths ever
give different lines. evaluate_gate is gate_input(report) followed by evaluate_counts, so the
counts path is the same computation without the file round trip (tests/unit/evaluator/test_gate.py checks it).
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path

from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.gate import ALPHA, MARGIN, GateInput, TaskCounts, evaluate_counts, evaluate_gate
from faultproxy.formats.rundir import EpisodeLog, write_plan
from faultproxy.tasks.task_model import Expected, Task

TASKS = (2, 4, 12, 50)
KS = (3, 8, 16)
PROFILES = ("flaky", "steady")
DROP = MARGIN
NIGHTLY = ("flaky", 12, 8)


def rates(profile: str, tasks: int) -> list[float]:
    """flaky: evenly spread over 0.3–0.9; steady: mostly 1.0, some 0.9–0.95 (never below DROP,
    so "every task drops 0.2" is a mean drop of exactly 0.2)."""
    if profile == "flaky":
        return [0.3 + 0.6 * i / (tasks - 1) for i in range(tasks)]
    return [(1.0, 1.0, 0.95, 1.0, 0.9, 1.0)[i % 6] for i in range(tasks)]


# --- run directories through the project's writer --------------------------------------------------


def write_run(run_dir: Path, counts: Mapping[str, Sequence[tuple[str, int, int]]], k: int, *,
              scenario_digest: str = "scenario", tasks_digest: str = "tasks",
              high: Mapping[str, int] | None = None) -> Path:
    """A run directory whose grid labels are counts' keys ("" alone for a plain run) and where
    task t of label L logged n episodes, the first c passing (planned: k each; the rest not run).
    high[t]: that many of t's failures carry a high-severity check instead of a medium one."""
    labels = list(counts)
    task_ids = list(dict.fromkeys(t for rows in counts.values() for t, _, _ in rows))
    grid = [{"label": label, "params": {"lambda": i} if len(labels) > 1 else {}, "model": None}
            for i, label in enumerate(labels)]
    items = [Task(id=t, prompt=f"Do {t}.", shape="lookup", expected=Expected()).to_json() for t in task_ids]
    identity = {"faultproxy_version": "bench", "k": k, "grid": grid, "command": ["agent"],
                "created": "2026-01-01T00:00:00Z"}
    write_plan(run_dir, {**identity, "scenario": {"name": "bench", "digest": scenario_digest, "path": "s.yaml",
                                                  "params": {}},
                         "tasks": {"path": "tasks.yaml", "digest": tasks_digest, "severity": {}, "prices": {},
                                   "items": items}})
    log = EpisodeLog(run_dir, {**identity, "scenario_digest": scenario_digest, "tasks_digest": tasks_digest})
    high_left = dict(high or {})
    for trial in range(k):  # trial-major, as the runner plans
        for label, rows in counts.items():
            for task_id, c, n in rows:
                if trial >= n:
                    continue
                passed = trial < c
                severity = "high" if not passed and high_left.get(task_id, 0) > 0 else "medium"
                if severity == "high":
                    high_left[task_id] -= 1
                failed = [] if passed else [{"name": "end_state" if severity == "medium" else "idempotency",
                                             "severity": severity, "detail": "synthetic"}]
                key = f"{task_id}.t{trial}" + (f".{label}" if label else "")
                log.append({"key": key, "task_id": task_id, "trial": trial, "variant": trial, "grid_label": label,
                            "params": {}, "model": None, "completed": True, "cause": None, "duration_s": 1.0,
                            "verdict": {"status": "pass" if passed else "fail", "failed": failed,
                                        "checks": [{**f, "passed": False} for f in failed]}})
    log.close()
    return run_dir


# --- simulation -------------------------------------------------------------------------------------


def draw(rng: random.Random, task_rates: Sequence[float], k: int) -> list[TaskCounts]:
    return [TaskCounts(f"t{i:02d}", sum(rng.random() < p for _ in range(k)), k) for i, p in enumerate(task_rates)]


def judge_pair(run: list[TaskCounts], base: list[TaskCounts], k: int, scratch: Path | None) -> str:
    """The verdict of one pair; with scratch, also through run directories, which must agree."""
    result = evaluate_counts(GateInput({"": run}), GateInput({"": base}))
    if scratch is not None:
        as_rows = lambda side: {"": [(t.task_id, t.c, t.n) for t in side]}  # noqa: E731
        run_dir = write_run(scratch / "run", as_rows(run), k)
        base_dir = write_run(scratch / "base", as_rows(base), k)
        via_files = evaluate_gate(build_report(run_dir), build_report(base_dir))
        for path in (run_dir, base_dir):
            for name in ("plan.json", "episodes.jsonl"):
                (path / name).unlink()
        if via_files.lines != result.lines:
            sys.exit(f"run directories and counts disagree:\n{via_files.lines}\n{result.lines}")
    return result.verdict


def simulate(name: str, base_rates: Sequence[float], run_rates: Sequence[float], k: int, pairs: int,
             files: int, seed: int, scratch: Path) -> Counter[str]:
    rng = random.Random(f"{seed}:{name}")
    verdicts: Counter[str] = Counter()
    for i in range(pairs):
        verdicts[judge_pair(draw(rng, run_rates, k), draw(rng, base_rates, k), k, scratch if i < files else None)] += 1
    return verdicts


def error_bar(rate: float, pairs: int) -> float:
    """Two binomial standard errors of a simulated rate."""
    return 2 * math.sqrt(rate * (1 - rate) / pairs)


# --- the table and the targets ------------------------------------------------------------------------


def grid_table(args: argparse.Namespace, scratch: Path) -> tuple[list[str], dict]:
    rows = ["| rates | tasks | k | pairs | false BLOCK | INCONCLUSIVE | PASS | power (drop 0.2) | PASS at drop 0.2 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    cells = {}
    for profile in PROFILES:
        for tasks in TASKS:
            for k in KS:
                base = rates(profile, tasks)
                same = simulate(f"same:{profile}:{tasks}:{k}", base, base, k, args.pairs, args.files, args.seed, scratch)
                worse = [p - DROP for p in base]
                drop = simulate(f"drop:{profile}:{tasks}:{k}", base, worse, k, args.drop_pairs, args.files, args.seed,
                                scratch)
                cell = {name: same[name] / args.pairs for name in ("BLOCK", "INCONCLUSIVE", "PASS")}
                cell |= {"power": drop["BLOCK"] / args.drop_pairs, "false_pass": drop["PASS"] / args.drop_pairs}
                cells[(profile, tasks, k)] = cell
                rows.append(f"| {profile} | {tasks} | {k} | {args.pairs} + {args.drop_pairs} | {pct(cell['BLOCK'])} | "
                            f"{pct(cell['INCONCLUSIVE'])} | {pct(cell['PASS'])} | {pct(cell['power'])} | "
                            f"{pct(cell['false_pass'])} |")
    return rows, cells


def targets(args: argparse.Namespace, cells: dict, scratch: Path) -> list[tuple[str, bool]]:
    worst = max(cells, key=lambda c: cells[c]["BLOCK"])
    bound = ALPHA + error_bar(ALPHA, args.pairs)
    out = [(f"false BLOCK ≤ α + 2 s.e. = {pct(bound)} in every cell (worst: {pct(cells[worst]['BLOCK'])} "
            f"at {worst[0]}, {worst[1]} tasks, k = {worst[2]})", cells[worst]["BLOCK"] <= bound)]
    nightly = cells[NIGHTLY]["PASS"]
    out.append((f"no change, 12 flaky tasks, k = 8: PASS {pct(nightly)} ≥ 80 % with margin {MARGIN:g}",
                nightly >= 0.8))
    four = simulate("four", [1.0] * 4 + rates("flaky", 8), [0.0] * 4 + rates("flaky", 8), 3, args.drop_pairs,
                    args.drop_pairs, args.seed, scratch)
    out.append((f"4 of 12 tasks 3/3 → 0/3 at k = 3 (8 flaky unchanged): PASS {four['PASS']} of {args.drop_pairs} "
                f"(BLOCK {four['BLOCK']}) — never PASS", four["PASS"] == 0))
    spread = cells[NIGHTLY]["power"]
    out.append((f"12 flaky tasks each dropping 0.2 at k = 8: BLOCK {pct(spread)} ≥ 80 %", spread >= 0.8))
    one = simulate("one", [0.9] + [1.0] * 11, [0.3] + [1.0] * 11, 8, args.drop_pairs, args.files, args.seed, scratch)
    share = one["BLOCK"] / args.drop_pairs
    out.append((f"1 task 0.9 → 0.3, 11 unchanged that always pass, k = 8: BLOCK {pct(share)} ≥ 60 %", share >= 0.6))
    single = judge_pair([TaskCounts("t00", 132, 200)], [TaskCounts("t00", 192, 200)], 200, scratch)
    out.append((f"1 task, 192/200 in the baseline against 132/200: {single}", single == "BLOCK"))
    return out


def pct(rate: float) -> str:
    return f"{100 * rate:.1f} %"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=1000, help="no-change pairs per cell (default 1000)")
    parser.add_argument("--drop-pairs", type=int, default=400, help="pairs per cell with a drop (default 400)")
    parser.add_argument("--files", type=int, default=2, help="pairs per cell also judged through run directories")
    parser.add_argument("--seed", type=int, default=13)
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="gate-calibration-") as tmp:
        scratch = Path(tmp)
        rows, cells = grid_table(args, scratch)
        checks = targets(args, cells, scratch)
    print(f"gate calibration: α = {ALPHA:g}, margin = {MARGIN:g}; the no-change share of exit 1 is 'false BLOCK'; "
          f"±{pct(error_bar(ALPHA, args.pairs))} is two simulation standard errors at α\n")
    print("\n".join(rows))
    print("\nflaky: rates spread over 0.3–0.9; steady: mostly 1.0, some 0.9–0.95. "
          "power and 'PASS at drop 0.2': every task's rate 0.2 lower in the run.\n")
    for text, met in checks:
        print(f"- {'met' if met else 'NOT MET'}: {text}")
    print(f"\n{time.perf_counter() - started:.0f} s; the first {args.files} pairs of every cell and every targeted "
          "case also went through run directories (write_plan + EpisodeLog → build_report → evaluate_gate), "
          "with the same lines")
    return 0 if all(met for _, met in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
