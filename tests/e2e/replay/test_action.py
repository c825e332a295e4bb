"""The GitHub Action (action.yml): its `faultproxy` step run as a runner runs it.

The test reads action.yml, takes the step's `run:` and `env:`, fills the `${{ ... }}` expressions
the way a runner does (inputs from what the workflow gives or their defaults), and runs it with
bash and GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and RUNNER_TEMP set; so a drift between action.yml
and `faultproxy action` fails here. The install step is pip's (`pip install` of this checkout):
the test's Python already has faultproxy installed from it, first on PATH.

A run (a naive refund agent's double refund under a lost response): ok, its report. Its failure
frozen and replayed: ok and exit 0 while the agent still fails as recorded, mismatch and exit 1
when it no longer does. A gate: BLOCK and exit 1, with the verdict, its reason and the run's
headline on the summary."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import yaml

from bench.gate_calibration import write_run
from faultproxy.replay_store.freeze import freeze
from tests.support.agent_commands import REFUND_AGENT
from tests.support.fixtures import scenario
from tests.support.layout import ROOT
from tests.support.payments import tasks_file

EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
LOST = scenario("""
    - name: refund_lost
      match: {method: POST, path: "*/refunds"}
      fault: {type: response_lost, mode: reset}
      when: {calls: [1]}
""")


def run_action_step(given: dict[str, str], folder: Path, env: dict[str, str] | None = None) -> tuple[int, dict, str, str]:
    """The action's `faultproxy` step with these inputs: exit status, outputs, step summary, log."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    assert set(given) <= set(inputs), set(given) - set(inputs)
    inputs.update(given)
    [step] = [step for step in action["runs"]["steps"] if step.get("id") == "faultproxy"]

    def fill(text: str) -> str:
        def value(match: re.Match) -> str:
            context, _, name = match.group(1).partition(".")
            assert context == "inputs" and name in inputs, f"action.yml uses ${{{{ {match.group(1)} }}}}"
            return inputs[name]
        return EXPRESSION.sub(value, text)

    folder.mkdir(parents=True, exist_ok=True)
    output, summary = folder / "github_output", folder / "step_summary"
    output.touch()
    summary.write_text("earlier step's summary\n")
    environment = {**os.environ, **(env or {}), **{name: fill(str(v)) for name, v in step.get("env", {}).items()},
                   "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
                   "GITHUB_OUTPUT": str(output), "GITHUB_STEP_SUMMARY": str(summary), "RUNNER_TEMP": str(folder)}
    assert step["shell"] == "bash"
    done = subprocess.run(["bash", "-e", "-c", fill(step["run"])], env=environment, cwd=folder,
                          capture_output=True, text=True, timeout=240)
    outputs = dict(line.split("=", 1) for line in output.read_text().splitlines())
    return done.returncode, outputs, summary.read_text(), done.stdout + done.stderr


def test_the_action_runs_an_agent_then_replays_what_it_froze(tmp_path, payments):  # noqa: F811 - a fixture
    """`run`: a naive refund agent under a lost response (it refunds twice), reported; frozen; then
    `replay`: ok while the agent still fails as recorded, mismatch once it is fixed."""
    _, server = payments
    (tmp_path / "lost.yaml").write_text(LOST)
    agent = " ".join(REFUND_AGENT)
    code, outputs, summary, log = run_action_step(
        {"command": "run", "scenario": str(tmp_path / "lost.yaml"), "tasks": str(tasks_file(tmp_path, server.url)),
         "agent": agent, "run": str(tmp_path / "live")}, tmp_path / "run", {"REFUND_MODE": "naive"})
    assert code == 0, log  # every episode judged: the run did its job (the agent failed it)
    assert outputs == {"verdict": "ok", "report": str(tmp_path / "live" / "report.json")}
    assert "## faultproxy report: " in summary and "### Top failure causes" in summary and "idempotency" in summary

    freeze(tmp_path / "live", tmp_path / "store", failing=True)
    replay = {"command": "replay", "store": str(tmp_path / "store"), "agent": agent}
    code, outputs, summary, log = run_action_step(replay, tmp_path / "naive", {"REFUND_MODE": "naive"})
    assert code == 0, log
    assert outputs["verdict"] == "ok"
    assert Path(outputs["report"]).is_file()  # replay's results as JSON
    assert summary.startswith("earlier step's summary\n## faultproxy replay: 1/1 as expected")  # appended
    assert "| fail |" in summary and "idempotency" in summary

    # The agent fixed (one idempotency key on both sends): the failure no longer reproduces.
    code, outputs, summary, log = run_action_step(replay, tmp_path / "fixed", {"REFUND_MODE": "same_key"})
    assert code == 1, log
    assert outputs["verdict"] == "mismatch"
    assert "## faultproxy replay: 0/1 as expected" in summary and "| MISMATCH |" in summary
    assert "the failure no longer reproduces" in summary


def test_the_action_gates_a_run_on_a_baseline(tmp_path):
    base = write_run(tmp_path / "base", {"": [(f"t{i:02d}", 3, 3) for i in range(12)]}, 3)
    now = write_run(tmp_path / "now", {"": [(f"t{i:02d}", 0 if i < 4 else 3, 3) for i in range(12)]}, 3)
    code, outputs, summary, log = run_action_step({"command": "gate", "run": str(now), "baseline": str(base)},
                                                  tmp_path / "gate")
    assert code == 1, log
    assert outputs == {"verdict": "BLOCK", "report": str(now / "report.json")}
    assert (now / "report.json").is_file()
    assert "## faultproxy gate: **BLOCK** (regression), exit 1" in summary
    assert "## faultproxy report:" in summary and "| mean pass rate |" in summary

    code, outputs, summary, log = run_action_step({"command": "gate", "run": str(now)}, tmp_path / "no-baseline")
    assert code == 2 and "action input(s) baseline: needed by command gate" in log
    assert outputs == {}

    # A run gated as it goes (until-decided) on a baseline that is not there: the harness could not judge.
    code, outputs, summary, log = run_action_step(
        {"command": "run", "scenario": "observe", "agent": "python -c pass", "until-decided": "true",
         "baseline": str(tmp_path / "missing"), "run": str(tmp_path / "decided")}, tmp_path / "decided-step")
    assert code == 2, log
    assert f"--until-decided --baseline {tmp_path / 'missing'}" in log and "plan.json: cannot read" in log
    assert outputs["verdict"] == "ERROR"
