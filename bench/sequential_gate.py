"""The sequential gate's operating characteristics beside the fixed-k gate's, by simulation.

    .venv/bin/python bench/sequential_gate.py               # ~1–2 min on 2 cores
    .venv/bin/python bench/sequential_gate.py --pairs 100 --drop-pairs 100   # quicker, wider error bars

For tasks ∈ {2, 4, 12, 50} × {flaky, steady} pass rates (bench/gate_calibration.py's) × max-k ∈
{8, 16, 32}, with min-k 2 (looks at 2, 4, 8, …, max-k trials per task) and a baseline of max-k
trials per task, it draws pairs of runs and judges each twice, on the same draws (so the two
columns differ by the design, not by luck):
- sequentially, with evaluator.gate.sequential_looks.replay_looks (the gate at each look's level, stopping
  at the first PASS or BLOCK), counting the run's episodes it used;
- with the fixed-k gate at k = max-k (gate_calibration.judge_pair: evaluate_counts at α), which
  always uses max-k × tasks episodes.
Three cases: no change (false BLOCK, PASS), every task's rate 0.2 lower and 0.3 lower (power:
the share of BLOCK). Then the issue's targets, each printed with met / NOT MET.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.gate_calibration import PROFILES, TASKS, draw, error_bar, judge_pair, pct, rates  # noqa: E402
from faultproxy.evaluator.gate import ALPHA, BLOCK, MARGIN, PASS, Design, GateInput, TaskCounts, replay_looks  # noqa: E402
from faultproxy.evaluator.statistics import percentile  # noqa: E402

MAX_KS = (8, 16, 32)
MIN_K = 2
DROPS = (0.0, 0.2, 0.3)
TARGET = ("flaky", 12, 16)


def design(max_k: int) -> Design:
    return Design(alpha=ALPHA, margin=MARGIN, max_high=0, min_k=MIN_K, max_k=max_k, baseline_digest="bench")


def sequential_pair(rng: random.Random, base_rates: Sequence[float], run_rates: Sequence[float],
                    plan: Design) -> tuple[str, int, str]:
    """One pair judged sequentially and by the fixed-k gate at k = max-k, on the same draws:
    (sequential verdict, run episodes it used, fixed-k verdict). Each task's trials are drawn
    once, in order; look kⱼ sees the first kⱼ of them, the fixed-k gate all of them."""
    base = draw(rng, base_rates, plan.max_k)
    trials = [[rng.random() < p for _ in range(plan.max_k)] for p in run_rates]

    def at_look(k: int) -> GateInput:
        return GateInput({"": [TaskCounts(f"t{i:02d}", sum(t[:k]), k) for i, t in enumerate(trials)]}, k=k)

    look, _, result = replay_looks(at_look, GateInput({"": base}), plan)
    fixed = judge_pair(at_look(plan.max_k).scopes[""], base, plan.max_k, None)
    return result.verdict, plan.looks[look] * len(run_rates), fixed


def unit(job: tuple[str, int, int, float, int, int]) -> tuple[tuple, dict]:
    """One configuration and drop: the share of each verdict, sequential and fixed-k, and the
    episodes the sequential gate used (as a share of max-k × tasks)."""
    profile, tasks, max_k, drop, pairs, seed = job
    base_rates = rates(profile, tasks)
    run_rates = [max(0.0, p - drop) for p in base_rates]
    rng, plan = random.Random(f"{seed}:{profile}:{tasks}:{max_k}:{drop}"), design(max_k)
    judged = [sequential_pair(rng, base_rates, run_rates, plan) for _ in range(pairs)]
    used = [n for _, n, _ in judged]
    share = lambda verdict, at: sum(j[at] == verdict for j in judged) / pairs  # noqa: E731
    return (profile, tasks, max_k, drop), {
        "seq": {BLOCK: share(BLOCK, 0), PASS: share(PASS, 0)}, "fixed": {BLOCK: share(BLOCK, 2), PASS: share(PASS, 2)},
        "mean": sum(used) / pairs / (max_k * tasks), "p90": percentile(used, 90) / (max_k * tasks)}


def jobs(args: argparse.Namespace) -> list[tuple]:
    out = [(profile, tasks, max_k, drop, args.pairs if drop == 0 else args.drop_pairs, args.seed)
           for profile in PROFILES for tasks in TASKS for max_k in MAX_KS for drop in DROPS]
    return sorted(out, key=lambda j: -j[1] * j[2])  # the slowest (many tasks, many trials) first


def table(cells: dict) -> list[str]:
    rows = ["| rates | tasks | max-k | false BLOCK seq / fixed | PASS seq / fixed | episodes, no change: mean / p90 "
            "| power −0.2 seq / fixed | power −0.3 seq / fixed | episodes at −0.3: mean / p90 |",
            "|---|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for profile in PROFILES:
        for tasks in TASKS:
            for max_k in MAX_KS:
                cell = {d: cells[(profile, tasks, max_k, d)] for d in DROPS}
                seq = {d: cell[d]["seq"] for d in DROPS}
                fix = {d: cell[d]["fixed"] for d in DROPS}
                rows.append(
                    f"| {profile} | {tasks} | {max_k} | {pct(seq[0.0][BLOCK])} / {pct(fix[0.0][BLOCK])} "
                    f"| {pct(seq[0.0][PASS])} / {pct(fix[0.0][PASS])} | {pct(cell[0.0]['mean'])} / "
                    f"{pct(cell[0.0]['p90'])} | {pct(seq[0.2][BLOCK])} / {pct(fix[0.2][BLOCK])} "
                    f"| {pct(seq[0.3][BLOCK])} / {pct(fix[0.3][BLOCK])} | {pct(cell[0.3]['mean'])} / "
                    f"{pct(cell[0.3]['p90'])} |")
    return rows


def targets(cells: dict, args: argparse.Namespace) -> list[tuple[str, bool | None]]:
    """The issue's targets, met or not; None for a line printed for information only."""
    seq = {key: {**value["seq"], "mean": value["mean"]} for key, value in cells.items()}
    fix = {key: value["fixed"] for key, value in cells.items()}
    worst = max((key for key in seq if key[3] == 0.0), key=lambda key: seq[key][BLOCK])
    bound = ALPHA + error_bar(ALPHA, args.pairs)
    out = [(f"false BLOCK ≤ α + 2 s.e. = {pct(bound)} in every configuration (worst {pct(seq[worst][BLOCK])} at "
            f"{worst[0]}, {worst[1]} tasks, max-k {worst[2]})", seq[worst][BLOCK] <= bound)]
    same, worse = seq[(*TARGET, 0.0)], seq[(*TARGET, 0.3)]
    episodes = TARGET[1] * TARGET[2]
    out.append((f"no change, 12 flaky tasks, max-k 16: PASS {pct(same[PASS])} ≥ 90 % using on average "
                f"{same['mean'] * episodes:.0f} of {episodes} episodes ({pct(same['mean'])} ≤ 60 %)",
                same[PASS] >= 0.9 and same["mean"] <= 0.6))
    out.append((f"every task 0.3 worse, 12 flaky tasks, max-k 16: BLOCK {pct(worse[BLOCK])} ≥ 95 % using on average "
                f"{worse['mean'] * episodes:.0f} of {episodes} episodes ({pct(worse['mean'])} ≤ 45 %)",
                worse[BLOCK] >= 0.95 and worse["mean"] <= 0.45))
    for max_k in MAX_KS:  # the target is max-k 16; the others are for information
        gaps = {key: fix[key][BLOCK] - seq[key][BLOCK] for key in seq if key[3] == 0.2 and key[2] == max_k}
        cell = max(gaps, key=lambda key: gaps[key])
        out.append((f"every task 0.2 worse, max-k {max_k}: power within 5 points of fixed k = {max_k} in every "
                    f"configuration (largest shortfall {100 * gaps[cell]:+.1f} points at {cell[0]}, {cell[1]} tasks: "
                    f"{pct(seq[cell][BLOCK])} against {pct(fix[cell][BLOCK])} on the same draws)",
                    gaps[cell] <= 0.05 if max_k == TARGET[2] else None))
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pairs", type=int, default=300, help="no-change pairs per configuration (default 300)")
    parser.add_argument("--drop-pairs", type=int, default=200, help="pairs per configuration and drop (default 200)")
    parser.add_argument("--seed", type=int, default=13)
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes (default: one per CPU)")
    args = parser.parse_args(argv)
    started = time.perf_counter()
    with ProcessPoolExecutor(args.workers) as pool:
        cells = dict(pool.map(unit, jobs(args)))
    plan = design(16)
    print(f"sequential gate: α = {ALPHA:g}, margin = {MARGIN:g}, min-k {MIN_K}, looks at doubling k "
          f"(max-k 16: {plan.looks}, levels {', '.join(f'{a:.4f}' for a in plan.levels)}); baseline max-k trials "
          f"per task; fixed: the fixed-k gate at k = max-k. Episodes are the run's, as a share of max-k × tasks.\n")
    print("\n".join(table(cells)))
    print(f"\n{args.pairs} no-change pairs and {args.drop_pairs} per drop in each configuration, each judged both "
          f"ways; ±{pct(error_bar(ALPHA, args.pairs))} is two simulation standard errors at α.\n")
    checks = targets(cells, args)
    for text, met in checks:
        print(f"- {'for information' if met is None else 'met' if met else 'NOT MET'}: {text}")
    print(f"\n{time.perf_counter() - started:.0f} s")
    return 0 if all(met is not False for _, met in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
