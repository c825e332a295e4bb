"""`run --until-decided`: trials in rounds until the sequential gate says PASS or BLOCK.

    options = sequential_options(options, design, baseline_dir)
    result = run_until_decided(options, baseline_dir)
    outcome = evaluate_sequential(options.out, baseline_dir, design)   # what the gate says, from the log

Round j runs every task's trials below the j-th look's k (evaluator.gate.sequential_looks: min-k, doubling,
max-k), with the run's executor and parallelism (a round is one batch), then the gate reads the
log at that look. Each round is a call of runner.run_loop.run with `upto`, so the log's rules hold: a
killed run resumes the round it had not finished (the looks stay the declared ones), and the
plan, k = max-k and the design included, is sealed by the first round.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from faultproxy.evaluator.gate import BASELINE_KEY, Design, Outcome, evaluate_sequential
from faultproxy.formats.rundir import PLAN_FILE
from faultproxy.otel import OtelExport
from faultproxy.runner.episode import EpisodeRunner
from faultproxy.runner.run_loop import run
from faultproxy.runner.run_options import RunOptions, RunResult


def sequential_options(options: RunOptions, design: Design, baseline: Path) -> RunOptions:
    """The run's options with max-k trials planned and the design to seal (with where the baseline
    was, for the report; its digest is what binds)."""
    return dataclasses.replace(options, k=design.max_k,
                               sequential={**design.to_json(), BASELINE_KEY: str(baseline.resolve())})


def standing(out: Path, baseline: Path, design: Design) -> Outcome | None:
    """The gate on what is logged so far; None before the first round wrote a plan."""
    return evaluate_sequential(out, baseline, design) if (out / PLAN_FILE).exists() else None


def run_until_decided(options: RunOptions, baseline: Path, runner_class: type[EpisodeRunner] | None = None,
                      export: OtelExport | None = None) -> RunResult:
    """Rounds until the gate decides or max-k is reached; stops early when interrupted or when a
    round could not run every episode (those run on resume). The result counts the episodes
    through the last round, `ran` over every round of this call; runner_class and export as run's."""
    if options.sequential is None:
        raise ValueError("run_until_decided needs options made by sequential_options")
    design = Design.from_json(options.sequential, "the run's options")
    ran = 0
    while True:
        outcome = standing(options.out, baseline, design)
        upto = design.looks[0] if outcome is None else outcome.todo_k or outcome.stop_k
        result = run(options, runner_class, export, upto)
        ran += result.ran
        if (outcome is not None and outcome.todo_k is None) or result.interrupted or not result.complete:
            return dataclasses.replace(result, ran=ran)
