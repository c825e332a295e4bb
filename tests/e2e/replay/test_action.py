"""The GitHub Action (action.yml): its steps run as a runner runs them.

The test reads action.yml, takes a step's `run:` and `env:`, fills the `${{ ... }}` expressions
the way a runner does (inputs from what the workflow gives or their defaults, the action's path),
and runs it with bash and GITHUB_OUTPUT, GITHUB_STEP_SUMMARY and RUNNER_TEMP set; so a drift
between action.yml and `faultproxy action` fails here. The install step runs into a fresh
virtualenv, from a copy of this checkout as the action's path, with no package index in reach:
faultproxy comes from the checkout; the run steps gated as they go use that virtualenv's Python,
as a job's later steps do. Elsewhere the test's Python (faultproxy installed from the checkout)
is first on PATH.

A run (a naive refund agent's double refund under a lost response): ok, its report. Its failure
frozen and replayed: ok and exit 0 while the agent still fails as recorded, mismatch and exit 1
when it no longer does. A gate: BLOCK and exit 1, with the verdict, its reason and the run's
headline on the summary. A run with until-decided on a baseline: trials added until PASS, and
BLOCK at the first round when every task fails."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
import yaml

from bench.gate_calibration import write_run
from faultproxy.formats.rundir import read_run
from faultproxy.replay_store.freeze import freeze
from tests.support.agent_commands import PROBE_AGENT, REFUND_AGENT
from tests.support.fixtures import scenario
from tests.support.layout import ROOT, copy_sources
from tests.support.payments import tasks_file

EXPRESSION = re.compile(r"\$\{\{\s*([^}]*?)\s*\}\}")
LOST = scenario("""
    - name: refund_lost
      match: {method: POST, path: "*/refunds"}
      fault: {type: response_lost, mode: reset}
      when: {calls: [1]}
""")
REFUND_503 = scenario("""
    - name: refund_down
      match: {method: POST, path: "/items/*/refund"}
      fault: {type: server_error, status: 503}
""")
# Three tasks the probe agent answers "refunded: <status>" (two reads, a refund), judged on that answer;
# the baseline (main's nightly run, downloaded) passed each 16 times out of 16.
GATED_TASKS = [f"probe_{n}" for n in range(3)]


def run_action_step(given: dict[str, str], folder: Path, env: dict[str, str] | None = None, *,
                    step_id: str = "faultproxy", action_path: Path = ROOT,
                    python: Path = Path(sys.executable)) -> tuple[int, dict, str, str]:
    """One step of the action (by id) with these inputs, `python` the job's Python first on PATH:
    exit status, outputs, step summary, log."""
    action = yaml.safe_load((ROOT / "action.yml").read_text())
    assert action["runs"]["using"] == "composite"
    inputs = {name: str(spec.get("default", "")) for name, spec in action["inputs"].items()}
    assert set(given) <= set(inputs), set(given) - set(inputs)
    inputs.update(given)
    contexts = {"inputs": inputs, "github": {"action_path": str(action_path)}}
    [step] = [step for step in action["runs"]["steps"] if step.get("id") == step_id]

    def fill(text: str) -> str:
        def value(match: re.Match) -> str:
            context, _, name = match.group(1).partition(".")
            assert name in contexts.get(context, {}), f"action.yml uses ${{{{ {match.group(1)} }}}}"
            return contexts[context][name]
        return EXPRESSION.sub(value, text)

    folder.mkdir(parents=True, exist_ok=True)
    output, summary = folder / "github_output", folder / "step_summary"
    output.touch()
    summary.write_text("earlier step's summary\n")
    runner = {name: value for name, value in os.environ.items() if name not in ("PYTHONPATH", "PYTHONHOME")}
    environment = {**runner, **(env or {}), **{name: fill(str(v)) for name, v in step.get("env", {}).items()},
                   "PATH": f"{python.parent}{os.pathsep}{os.environ['PATH']}",
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
    assert f"--until-decided --baseline {tmp_path / 'missing'}" in log
    # one line says why; no gate or report of a run that never began adds more
    [error] = [line for line in log.splitlines() if line.startswith("faultproxy: ")]
    assert "plan.json: cannot read" in error and "$ faultproxy gate" not in log and "$ faultproxy report" not in log
    assert outputs["verdict"] == "ERROR"


@pytest.fixture(scope="module")
def job_python(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The install step run into a fresh virtualenv (setup-python's Python, for the job): (its
    python, the action's path it installed from). The dependencies come from this test run's
    environment (a path line in a .pth file, which does not run that directory's .pth files: the
    checkout's editable install stays out of sight); pip may reach no index, nor build in
    isolation, so nothing comes from PyPI."""
    base = tmp_path_factory.mktemp("action-install")
    checkout = copy_sources(base / "action")
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=60)
    (site_packages(venv) / "test-dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    code, outputs, _, log = run_action_step({"command": "run"}, base / "step",
                                            {"PIP_NO_INDEX": "1", "PIP_NO_BUILD_ISOLATION": "0"},
                                            step_id="install", action_path=checkout, python=venv / "bin" / "python")
    assert code == 0 and outputs == {}, log
    return venv / "bin" / "python", checkout


def site_packages(venv: Path) -> Path:
    (site,) = (venv / "lib").glob("python3*/site-packages")
    return site


def test_the_install_step_installs_faultproxy_from_the_actions_checkout(job_python):
    python, checkout = job_python
    site = site_packages(python.parent.parent)
    (dist_info,) = site.glob("faultproxy-*.dist-info")
    assert json.loads((dist_info / "direct_url.json").read_text())["url"] == checkout.as_uri()
    for module in ("cli/action_step.py", "runner/__init__.py"):  # this checkout's code, as it is now
        assert (site / "faultproxy" / module).read_text() == (ROOT / "faultproxy" / module).read_text(), module
    # what the job's later steps call: the command, and the package from the virtualenv, not the checkout
    done = subprocess.run([str(python.parent / "faultproxy"), "gate", "--help"], capture_output=True, text=True,
                          timeout=60, cwd=python.parent)
    assert done.returncode == 0 and "usage: faultproxy gate" in done.stdout, done.stderr
    done = subprocess.run([str(python), "-c", "import faultproxy.cli.action_step as m; print(m.__file__)"],
                          capture_output=True, text=True, timeout=60, cwd=python.parent)
    assert done.stdout.strip() == str(site / "faultproxy" / "cli" / "action_step.py"), done.stderr


def gated_run(tmp_path: Path, server_url: str, scenario_input: str, python: Path) -> tuple[int, dict, str, str]:
    """The action's `run` of the probe agent with until-decided against the baseline, k 4 (looks at
    2 and 4 trials per task)."""
    base = write_run(tmp_path / "baseline", {"": [(task, 16, 16) for task in GATED_TASKS]}, 16)
    tasks = tmp_path / "tasks.jsonl"
    lines = [{"id": task, "prompt": "ok", "expected": {"output": {"regex": "refunded: 200"}}} for task in GATED_TASKS]
    tasks.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return run_action_step({"command": "run", "scenario": scenario_input, "tasks": str(tasks),
                            "agent": " ".join(PROBE_AGENT), "k": "4", "until-decided": "true", "baseline": str(base),
                            "run": str(tmp_path / "pr")}, tmp_path / "step", {"PROBE_UPSTREAM": server_url},
                           python=python)


def test_until_decided_adds_trials_until_the_gate_passes(job_python, tmp_path, upstream):
    _, server = upstream
    code, outputs, summary, log = gated_run(tmp_path, server.url, "observe", job_python[0])
    assert code == 0, log
    assert outputs == {"verdict": "PASS", "report": str(tmp_path / "pr" / "report.json")}
    assert f"--until-decided --baseline {tmp_path / 'baseline'} --max-k 4" in log
    # two trials per task could not rule out a drop of the margin; four did
    assert sorted(r["trial"] for r in read_run(tmp_path / "pr").episodes) == sorted([0, 1, 2, 3] * 3)
    assert "## faultproxy gate: **PASS**" in summary and "## faultproxy report:" in summary


def test_until_decided_blocks_at_the_first_round_when_every_task_fails(job_python, tmp_path, upstream):
    _, server = upstream
    (tmp_path / "refund_503.yaml").write_text(REFUND_503)
    code, outputs, summary, log = gated_run(tmp_path, server.url, str(tmp_path / "refund_503.yaml"), job_python[0])
    assert code == 1, log
    assert outputs == {"verdict": "BLOCK", "report": str(tmp_path / "pr" / "report.json")}
    episodes = read_run(tmp_path / "pr").episodes
    assert sorted(r["trial"] for r in episodes) == [0, 0, 0, 1, 1, 1]  # stopped at the first look
    assert {r["verdict"]["status"] for r in episodes} == {"fail"}
    assert "## faultproxy gate: **BLOCK** (regression), exit 1" in summary and "## faultproxy report:" in summary
