"""Sweep analysis from crafted run directories and hand-made tables: curves, surface, flags,
acceptance, the model matrix; `faultproxy sweep` / `sweep-report` input errors and exit statuses."""

from __future__ import annotations

import io
import json
import pickle
import textwrap
from pathlib import Path

import pytest
from rich.console import Console

from faultproxy.evaluator.rendering import print_sweep
from faultproxy.evaluator.statistics import compare, metrics, stats
from faultproxy.evaluator.sweeps import SweepError, acceptance_rules, analyse_sweep, exit_status, is_sweep
from faultproxy.evaluator.sweeps.outcomes import OutcomeSink, Outcomes
from faultproxy.evaluator.sweeps.sweep_analysis import analyse
from faultproxy.formats.rundir import EpisodeLog, write_plan
from faultproxy.cli.main import main
from faultproxy.runner.plan import build_grid, episode_key
from faultproxy.cli.sweep import parse_levels
from faultproxy.runner.sweep_runs import rule_params
from faultproxy.scenarios import load_scenario

SCENARIO = """\
name: sweepable
description: refunds fail at rate lambda
seed: 3
params: {{lambda: 0.5}}
rules:
  - name: refund-503
    match: {{method: POST, path: "*/refund"}}
    fault: {{type: server_error, status: 503}}
    when: {{probability: lambda}}
{expect}"""


def write_scenario(folder: Path, expect: str = "") -> Path:
    path = folder / "scenario.yaml"
    path.write_text(SCENARIO.format(expect=textwrap.dedent(expect)))
    return path


def make_sweep(folder: Path, levels: dict, models: list[str], tasks: list[str], k: int, passes,
               scenario: Path | None = None, missing=lambda params, model, task, trial: False,
               incomplete=lambda params, model, task, trial: False) -> Path:
    """A run directory as `faultproxy sweep` leaves it: passes(params, model, task) of the k trials pass
    (the first ones), the rest fail; `missing` ones are not logged, `incomplete` ones lost their worker."""
    grid = build_grid(levels, models)
    grid_json = [point.to_json() for point in grid]
    plan = {"faultproxy_version": "test",
            "scenario": {"name": "sweepable", "digest": "x", "path": str(scenario) if scenario else None, "params": {}},
            "tasks": {"path": None, "digest": "t", "severity": {}, "prices": {},
                      "items": [{"id": t, "prompt": "p", "shape": "lookup"} for t in tasks]},
            "k": k, "grid": grid_json, "command": ["agent"], "created": "2026-01-01T00:00:00Z"}
    write_plan(folder, plan)
    log = EpisodeLog(folder, {"faultproxy_version": "test", "scenario_digest": "x", "tasks_digest": "t", "k": k,
                              "grid": grid_json, "command": ["agent"], "created": plan["created"]})
    for trial in range(k):
        for point in grid:
            params = dict(point.params)
            for task in tasks:
                if missing(params, point.model, task, trial):
                    continue
                lost = incomplete(params, point.model, task, trial)
                status = "incomplete" if lost else "pass" if trial < passes(params, point.model, task) else "fail"
                key = episode_key(task, trial, point)
                log.append({"key": key, "task_id": task, "trial": trial, "grid_label": point.label, "params": params,
                            "model": point.model, "completed": not lost, "cause": "worker_lost" if lost else None,
                            "verdict": {"v": 1, "status": status, "cause": "worker_lost" if lost else None,
                                        "episode": {"key": key, "task_id": task, "trial": trial,
                                                    "grid_label": point.label, "duration_s": 0.5}}})
    log.close()
    return folder


CURVE_PASSES = {0.0: {"a": 4, "b": 4}, 0.1: {"a": 4, "b": 3}, 0.2: {"a": 2, "b": 0}}


def curve_dir(tmp_path: Path, scenario: Path | None = None) -> Path:
    return make_sweep(tmp_path / "sweep", {"lambda": [0.2, 0.0, 0.1]}, [], ["a", "b"], 4,
                      lambda params, model, task: CURVE_PASSES[params["lambda"]][task], scenario)


def test_curve_values_from_a_crafted_log(tmp_path):
    analysis = analyse_sweep(curve_dir(tmp_path), rule_params={"lambda"})
    assert analysis["params"] == {"lambda": [0.0, 0.1, 0.2]} and analysis["complete"]
    assert analysis["param_roles"] == {"lambda": "fault"}
    [series] = analysis["curves"]["lambda"]
    assert series["series"] == "all" and [p["level"] for p in series["points"]] == [0.0, 0.1, 0.2]
    expected = {0.0: (8, 1.0, 2), 0.1: (7, 0.5, 1), 0.2: (2, 0.0, 0)}  # passed, pass^4, tasks all passed
    for point in series["points"]:
        c, hat, all_passed = expected[point["level"]]
        assert point["mean"] == c / 8
        assert point["wilson"] == list(stats.wilson_interval(c, 8))
        assert point["pass_hat_k"] == hat
        assert hat == sum(metrics.pass_hat_k(4, CURVE_PASSES[point["level"]][t], 4) for t in "ab") / 2
        assert point["pass_hat_k_interval"] == list(stats.wilson_interval(all_passed, 2))
    assert analysis["surface"] is None and analysis["matrix"] is None and analysis["flags"] == []


def test_a_log_read_in_parallel_gives_the_same_analysis(tmp_path):
    run = curve_dir(tmp_path)
    assert analyse_sweep(run, jobs=3) == analyse_sweep(run, jobs=1)
    shard = OutcomeSink().shard(0)
    shard.episode({"status": "pass", "episode": {"task_id": "a", "trial": 1, "grid_label": "lambda=0"}})
    back = pickle.loads(pickle.dumps(shard))  # shards travel back from forked workers
    assert back.outcomes.counts("lambda=0", "a", 4) == (1, 1)


def test_surface_of_two_params(tmp_path):
    def passes(params, model, task):
        return max(0, 2 - (params["lambda"] > 0) - (params["epsilon"] >= 0.2))

    run = make_sweep(tmp_path / "sweep", {"lambda": [0, 0.5], "epsilon": [0, 0.1, 0.2]}, [], ["a"], 2, passes)
    analysis = analyse_sweep(run, rule_params={"lambda"})
    assert analysis["param_roles"] == {"lambda": "fault", "epsilon": "perturbation"}
    surface = analysis["surface"]
    assert (surface["x"], surface["y"]) == ("lambda", "epsilon")  # λ across
    assert surface["x_levels"] == [0.0, 0.5] and surface["y_levels"] == [0.0, 0.1, 0.2]
    grids = surface["by_model"][""]
    assert grids["mean"] == [[1.0, 0.5], [1.0, 0.5], [0.5, 0.0]]
    assert grids["pass_hat_k"] == [[1.0, 0.0], [1.0, 0.0], [0.0, 0.0]]
    assert [s["series"] for s in analysis["curves"]["lambda"]] == ["epsilon=0", "epsilon=0.1", "epsilon=0.2"]
    assert [s["series"] for s in analysis["curves"]["epsilon"]] == ["lambda=0", "lambda=0.5"]
    # max_drop is about lambda, checked at every epsilon level
    met = analyse_sweep(run, expect={"max_drop": {"at": 0.5, "drop": 0.5}})["acceptance"]
    assert met["status"] == "met" and len(met["results"]) == 3
    violated = analyse_sweep(run, expect={"max_drop": {"at": 0.5, "drop": 0.4}})
    assert violated["acceptance"]["status"] == "violated" and exit_status(violated) == 1


def test_acceptance_violated_met_and_bad_levels(tmp_path):
    run = curve_dir(tmp_path)
    violated = analyse_sweep(run, expect={"max_drop": {"at": 0.1, "drop": 0.1}})  # 100% -> 87.5%: 12.5 points
    [result] = violated["acceptance"]["results"]
    assert (result["baseline_mean"], result["at_mean"], result["ok"]) == (1.0, 0.875, False)
    assert result["fall"] == pytest.approx(0.125) and exit_status(violated) == 1
    met = analyse_sweep(run, expect={"max_drop": {"at": 0.1, "drop": 0.125}})  # exactly at the limit
    assert met["acceptance"]["status"] == "met" and exit_status(met) == 0
    assert exit_status(analyse_sweep(run)) == 0  # no expect block
    assert exit_status(analyse_sweep(run, expect={"no_duplicate_writes": True})) == 0  # not a sweep rule
    with pytest.raises(SweepError, match=r"at 0.3 is not a swept level of lambda \(0, 0.1, 0.2\)"):
        analyse_sweep(run, expect={"max_drop": {"at": 0.3, "drop": 0.1}})
    with pytest.raises(SweepError, match="lambda=0, which is not a swept level"):
        acceptance_rules({"max_drop": {"at": 0.2, "drop": 0.1}}, {"lambda": [0.1, 0.2]})
    with pytest.raises(SweepError, match="does not say which param"):
        acceptance_rules({"max_drop": {"at": 0.2, "drop": 0.1}}, {"effort": [0, 0.2], "epsilon": [0, 0.2]})
    with pytest.raises(SweepError, match="sets no params"):
        acceptance_rules({"max_drop": {"at": 0.2, "drop": 0.1}}, {})
    assert acceptance_rules({"max_drop": {"at": 0.2, "drop": 0.1, "param": "epsilon"}},
                            {"effort": [0, 0.2], "epsilon": [0, 0.2]})[0]["param"] == "epsilon"
    assert acceptance_rules({"max_drop": {"at": 0.2, "drop": 0.1}}, {"epsilon": [0, 0.2]})[0]["param"] == "epsilon"
    with pytest.raises(SweepError, match="about lambda, which this sweep does not vary"):
        acceptance_rules({"max_drop": {"at": 0.2, "drop": 0.1, "param": "lambda"}}, {"epsilon": [0, 0.2]})


def test_mean_up_pass_hat_k_down_is_flagged(tmp_path):
    table = {0: {"a": 4, "b": 0}, 1: {"a": 3, "b": 3}, 2: {"a": 4, "b": 4}}
    run = make_sweep(tmp_path / "sweep", {"effort": [0, 1, 2]}, [], ["a", "b"], 4,
                     lambda params, model, task: table[int(params["effort"])][task])
    analysis = analyse_sweep(run, rule_params={"lambda"})
    assert analysis["param_roles"] == {"effort": "agent"}
    [flag] = analysis["flags"]  # effort 1: mean 50% -> 75%, pass^4 50% -> 0%; effort 2 rises in both
    assert (flag["param"], flag["level"], flag["previous_level"]) == ("effort", 1.0, 0.0)
    assert (flag["previous_mean"], flag["mean"], flag["previous_pass_hat_k"], flag["pass_hat_k"]) == (0.5, 0.75, 0.5, 0)
    out = io.StringIO()
    print_sweep(analysis, Console(file=out, width=140))
    text = out.getvalue()
    assert "mean ↑ pass^k ↓" in text and "flag: effort=1: mean rises 50.0% → 75.0%" in text
    assert "handed to the agent only (FAULTPROXY_PARAM_EFFORT, {effort} in CMD)" in text


def test_unfinished_sweep_has_no_pass_hat_k_and_acceptance_is_pending(tmp_path):
    run = make_sweep(tmp_path / "sweep", {"lambda": [0, 0.1]}, [], ["a"], 2, lambda params, model, task: 2,
                     missing=lambda params, model, task, trial: params["lambda"] == 0.1 and trial == 1,
                     incomplete=lambda params, model, task, trial: params["lambda"] == 0 and trial == 1)
    analysis = analyse_sweep(run, expect={"max_drop": {"at": 0.1, "drop": 0.5}})
    base, level = analysis["curves"]["lambda"][0]["points"]
    assert base["mean"] == 0.5 and base["pass_hat_k"] == 0.0  # an incomplete episode is a trial that did not pass
    assert level["mean"] == 1.0 and level["not_run"] == 1 and level["pass_hat_k"] is None
    assert "not until resumed" in level["note"] and not analysis["complete"]
    assert analysis["acceptance"]["status"] == "pending" and exit_status(analysis) == 1


# --- the model matrix ---------------------------------------------------------------------------------

MATRIX = {  # task -> model -> (trial 0, trial 1)
    "t1": {"m1": (1, 1), "m2": (1, 1), "m3": (1, 1)},
    "t2": {"m1": (1, 0), "m2": (0, 0), "m3": (1, 1)},
    "t3": {"m1": (0, 0), "m2": (0, 0), "m3": (0, 0)},
    "t4": {"m1": (1, 1), "m2": (0, 1), "m3": (0, 0)},
    "t5": {"m1": (1, 1), "m2": (1, 1), "m3": (1, 1)},  # t1's pattern again
}


def matrix_outcomes(grid, skip=()) -> Outcomes:
    outcomes = Outcomes()
    for point in grid:
        for task, by_model in MATRIX.items():
            for trial, passed in enumerate(by_model[point.model]):
                if (task, point.model, trial) not in skip:
                    outcomes.add(point.label, task, trial, bool(passed))
    return outcomes


def test_pass_at_M_pass_hat_M_disagreement_and_selection_on_a_hand_made_table():
    grid = build_grid({}, ["m1", "m2", "m3"])
    analysis = analyse([p.to_json() for p in grid], list(MATRIX), 2, matrix_outcomes(grid))
    matrix = analysis["matrix"]
    assert matrix["aligned"] == 10 and matrix["unaligned"] == 0
    # rows with some model passing: t1 2, t2 2, t3 0, t4 2, t5 2; with every model: t1 2, t5 2
    assert matrix["pass_at_M"] == 8 / 10 and matrix["pass_hat_M"] == 4 / 10
    scores = {r["task_id"]: r["score"] for r in matrix["disagreement"]}
    assert scores["t2"] == pytest.approx(1 - 1 / 3)  # rates .5, 0, 1: H(.5) − (1 + 0 + 0)/3
    assert scores["t2"] == compare.disagreement({"m1": 0.5, "m2": 0.0, "m3": 1.0})
    assert scores["t4"] == pytest.approx(2 / 3) and scores["t1"] == scores["t3"] == 0
    assert [r["task_id"] for r in matrix["disagreement"]][:2] == ["t2", "t4"]
    selection = {s["task_id"]: (s["kind"], s["pattern"]) for s in matrix["selection"]}
    assert list(selection) == ["t1", "t2", "t3", "t4"]  # t5 repeats t1's pattern: the smallest id represents it
    assert selection["t1"][0] == "all passed" and selection["t3"][0] == "all failed"  # the anchors
    assert selection["t2"] == ("mixed", {"m1": False, "m2": False, "m3": True})
    m1 = matrix["per_model"]["m1"]
    assert (m1["passed"], m1["logged"], m1["pass_hat_k"]) == (7, 10, 3 / 5)  # t1, t4, t5 pass both trials


def test_matrix_aligns_on_task_trial_and_params_only(tmp_path):
    grid = build_grid({}, ["m1", "m2", "m3"])
    outcomes = matrix_outcomes(grid, skip={("t1", "m3", 1)})
    matrix = analyse([p.to_json() for p in grid], list(MATRIX), 2, outcomes)["matrix"]
    assert (matrix["aligned"], matrix["unaligned"]) == (9, 1)
    assert matrix["pass_hat_M"] == 3 / 9
    assert "t1" not in {s["task_id"] for s in matrix["selection"]}  # a model has not finished it: no pattern yet

    # with params: rows align within each param combination; a model's weak level shows per cell
    def passes(params, model, task):
        return 0 if (model == "m2" and params["lambda"] > 0) else 2

    run = make_sweep(tmp_path / "sweep", {"lambda": [0, 0.5]}, ["m1", "m2"], ["a", "b"], 2, passes)
    matrix = analyse_sweep(run)["matrix"]
    cells = {c["cell"]: c for c in matrix["cells"]}
    assert (cells["lambda=0"]["pass_at_M"], cells["lambda=0"]["pass_hat_M"]) == (1.0, 1.0)
    assert (cells["lambda=0.5"]["pass_at_M"], cells["lambda=0.5"]["pass_hat_M"]) == (1.0, 0.0)
    assert (matrix["aligned"], matrix["pass_at_M"], matrix["pass_hat_M"]) == (8, 1.0, 0.5)
    # disagreement within each cell, then averaged: 0 at lambda=0, 1 bit at lambda=0.5
    assert [r["score"] for r in matrix["disagreement"]] == [0.5, 0.5]
    assert [(s["task_id"], s["cell"], s["kind"]) for s in matrix["selection"]] == [
        ("a", "lambda=0", "all passed"), ("a", "lambda=0.5", "mixed")]


# --- commands --------------------------------------------------------------------------------------


def test_sweep_report_exit_status_and_offline_html(tmp_path, capsys):
    scenario = write_scenario(tmp_path, """\
        expect:
          max_drop: {at: 0.1, drop: 0.1}
    """)
    run = curve_dir(tmp_path, scenario)
    assert main(["sweep-report", str(run)]) == 1
    out = capsys.readouterr().out
    assert "acceptance VIOLATED: max_drop lambda=0.1: mean 87.5% against 100.0% at lambda=0" in out
    html = (run / "sweep.html").read_text()
    assert "<svg" in html and "pass^4" in html
    assert not any(marker in html for marker in ("<script", "src=", "href=", "http://", "https://", "@import"))
    saved = json.loads((run / "sweep.json").read_text())
    assert saved["acceptance"]["status"] == "violated" and len(saved["points"]) == 3

    scenario.write_text(SCENARIO.format(expect="expect:\n  max_drop: {at: 0.1, drop: 0.2}\n"))
    assert main(["sweep-report", str(run), "--no-html"]) == 0
    assert "its digest changed" in capsys.readouterr().err

    scenario.write_text(SCENARIO.format(expect="expect:\n  max_drop: {at: 0.15, drop: 0.2}\n"))
    assert main(["sweep-report", str(run)]) == 2
    err = capsys.readouterr().err
    assert "at 0.15 is not a swept level of lambda" in err and len(err.strip().splitlines()) == 2  # note + error


def test_plain_runs_are_not_sweeps(tmp_path, capsys):
    run = make_sweep(tmp_path / "plain", {}, [], ["a"], 1, lambda params, model, task: 1)
    assert not is_sweep(json.loads((run / "plan.json").read_text()))
    assert main(["sweep-report", str(run)]) == 2
    assert "is not a sweep" in capsys.readouterr().err
    assert main(["sweep-report", str(tmp_path / "nothing")]) == 2


@pytest.mark.parametrize("args, message", [
    (["--param", "lambda=0,abc"], "--param lambda: level 'abc' is not a number"),
    (["--param", "lambda=0,1.5"], "a probability must be between 0 and 1"),
    (["--param", "epsilon=0,2"], "--param epsilon: level 2 is outside [0, 1]"),
    (["--param", "lambda=0,0.1,0.10"], "--param lambda: level 0.10 is the same as 0.1"),
    (["--param", "lambda=0", "--param", "lambda=0.1"], "--param lambda is given twice"),
    (["--param", "lambda=0,,0.1"], "an empty level"),
    (["--param", "lambda=0,0.05"], "expect.max_drop.at 0.1 is not a swept level of lambda (0, 0.05)"),
    (["--param", "effort=0,1"], "expect.max_drop.at 0.1 is not a swept level of effort (0, 1)"),  # the only param
    (["--models", "a,b,a"], "--models: a is given twice"),
    (["--models", "a/b,a_b"], "would share episode keys"),
    ([], "nothing to sweep"),
])
def test_bad_sweep_input_is_one_line_and_exit_2(tmp_path, capsys, args, message):
    scenario = write_scenario(tmp_path, """\
        expect:
          max_drop: {at: 0.1, drop: 0.1}
    """)
    if args and args[0] == "--models":
        scenario.write_text(SCENARIO.format(expect=""))
    out = tmp_path / "never"
    code = main(["sweep", "--scenario", str(scenario), *args, "--out", str(out), "--", "agent"])
    err = capsys.readouterr().err
    assert code == 2
    assert message in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert not out.exists()  # failed before anything ran


def test_parse_levels_and_agent_knobs_reach_the_scenario(tmp_path):
    assert parse_levels(["lambda=0, 0.05,0.1", "effort=-0,1,2"]) == {"lambda": [0, 0.05, 0.1], "effort": [0, 1, 2]}
    path = write_scenario(tmp_path)
    base = load_scenario(path)
    knob = load_scenario(path, {"effort": 2})  # a param no rule names: added, handed to the agent
    assert knob.params == {"lambda": 0.5, "effort": 2.0} and knob.digest != base.digest
    assert rule_params(knob) == {"lambda"}
    assert load_scenario(path, {"lambda": 0.1}).params["lambda"] == 0.1


def test_report_html_of_a_sweep_carries_its_curves(tmp_path, capsys):
    run = curve_dir(tmp_path)
    assert main(["report", str(run), "--quiet"]) == 0
    html = (run / "report.html").read_text()
    assert "<h2>Sweep</h2>" in html and html.count("<svg") > 2
    plain = make_sweep(tmp_path / "plain", {}, [], ["a"], 2, lambda params, model, task: 2)
    assert main(["report", str(plain), "--quiet"]) == 0
    assert "<h2>Sweep</h2>" not in (plain / "report.html").read_text()
