"""What `faultproxy action` does (its registration is in cli/action.py): the GitHub Action's step.

It runs one command, the way a person would type it:

    INPUT_COMMAND=replay  faultproxy replay STORE --json R --markdown M [-- AGENT]
    INPUT_COMMAND=run     faultproxy run --scenario S --tasks T --k K --out RUN -- AGENT
                          (until-decided: --until-decided --baseline B [--max-k K] in place of --k K)
                          then faultproxy report RUN --markdown M (and gate --markdown when decided on a baseline)
    INPUT_COMMAND=gate    faultproxy gate RUN --baseline B --markdown M, then faultproxy report RUN --markdown M

then appends the Markdown summary to $GITHUB_STEP_SUMMARY, sets the outputs `verdict` (PASS,
BLOCK, INCONCLUSIVE, ERROR for a gate; ok, mismatch, ERROR for replay and a run without a
baseline) and `report` (the results file: replay's JSON, the run's report.json), uploads nothing,
and exits with the command's status. The commands run in this process, through the entry point:
gate and report start without loading the proxy.
"""

from __future__ import annotations

import argparse
import os
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path

from faultproxy.cli import entry
from faultproxy.evaluator.rendering import bounded
from faultproxy.formats.errors import UsageError
from faultproxy.formats.rundir import PLAN_FILE

COMMANDS = ("replay", "run", "gate")
GATE_VERDICTS = {0: "PASS", 1: "BLOCK", 3: "INCONCLUSIVE"}  # anything else: ERROR (2 bad input, 4 unjudged)
REPLAY_VERDICTS = {0: "ok", 1: "mismatch"}
DEFAULT_RUN = "runs/faultproxy"


def cmd_action(args: argparse.Namespace) -> int:
    inputs = read_inputs(os.environ)
    scratch = Path(tempfile.mkdtemp(prefix="faultproxy-", dir=os.environ.get("RUNNER_TEMP") or None))
    summary = scratch / "summary.md"
    code, verdict, report = {"replay": _replay, "run": _run, "gate": _gate}[inputs["command"]](inputs, scratch)
    parts = [part.read_text(encoding="utf-8") for part in sorted(scratch.glob("*.md")) if part != summary]
    summary.write_text(bounded("\n".join(parts)) or f"faultproxy {inputs['command']}: exit {code}, no summary written\n",
                       encoding="utf-8")
    _append(os.environ.get("GITHUB_STEP_SUMMARY"), summary.read_text(encoding="utf-8"))
    _append(os.environ.get("GITHUB_OUTPUT"), f"verdict={verdict}\nreport={report}\n")
    print(f"faultproxy action: {inputs['command']}: verdict {verdict}, exit {code}, report {report}")
    return code


def read_inputs(environ: Mapping[str, str]) -> dict[str, str]:
    """The action's inputs from INPUT_<NAME> (upper case, '-' as '_', as runners name them), checked."""
    names = ("command", "store", "agent", "scenario", "tasks", "k", "baseline", "until-decided", "run")
    inputs = {name: environ.get(f"INPUT_{name.upper().replace('-', '_')}", "").strip() for name in names}
    if inputs["command"] not in COMMANDS:
        raise UsageError(f"action input command: expected one of {', '.join(COMMANDS)}, got {inputs['command']!r}")
    if inputs["until-decided"] not in ("", "true", "false"):
        raise UsageError(f"action input until-decided: expected true or false, got {inputs['until-decided']!r}")
    needed = {"run": ("scenario", "agent"), "gate": ("baseline",), "replay": ()}[inputs["command"]]
    needed += ("baseline",) if inputs["until-decided"] == "true" else ()
    missing = [name for name in needed if not inputs[name]]
    if missing:
        raise UsageError(f"action input(s) {', '.join(missing)}: needed by command {inputs['command']}")
    inputs["run"] = inputs["run"] or DEFAULT_RUN
    return inputs


def _replay(inputs: Mapping[str, str], scratch: Path) -> tuple[int, str, str]:
    results = scratch / "replay.json"
    agent = ["--", *shlex.split(inputs["agent"])] if inputs["agent"] else []
    code = _faultproxy("replay", inputs["store"] or "replay_store", "--json", str(results),
                       "--markdown", str(scratch / "1-replay.md"), *agent)
    return code, REPLAY_VERDICTS.get(code, "ERROR"), str(results)


def _run(inputs: Mapping[str, str], scratch: Path) -> tuple[int, str, str]:
    run = inputs["run"]
    options = ["--scenario", inputs["scenario"], "--out", run]
    options += ["--tasks", inputs["tasks"]] if inputs["tasks"] else []
    decided = inputs["until-decided"] == "true"
    if decided:  # the gate chooses how many trials it needs: k caps them
        options += ["--until-decided", "--baseline", inputs["baseline"]]
        options += ["--max-k", inputs["k"]] if inputs["k"] else []
    else:
        options += ["--k", inputs["k"] or "1"]
    code = _faultproxy("run", *options, "--", *shlex.split(inputs["agent"]))
    if decided and _is_run(run):
        _faultproxy("gate", run, "--baseline", inputs["baseline"], "--markdown", str(scratch / "1-gate.md"))
    _report(run, scratch)
    verdict = GATE_VERDICTS.get(code, "ERROR") if decided else ("ok" if code == 0 else "ERROR")
    return code, verdict, str(Path(run) / "report.json")


def _gate(inputs: Mapping[str, str], scratch: Path) -> tuple[int, str, str]:
    run = inputs["run"]
    code = _faultproxy("gate", run, "--baseline", inputs["baseline"], "--markdown", str(scratch / "1-gate.md"))
    _report(run, scratch)
    return code, GATE_VERDICTS.get(code, "ERROR"), str(Path(run) / "report.json")


def _report(run: str, scratch: Path) -> None:
    """The run's report for the summary, when there is a run: a command refused before it began
    wrote none, and its one line says why (a report or gate of nothing would add two more)."""
    if _is_run(run):
        _faultproxy("report", run, "--quiet", "--markdown", str(scratch / "2-report.md"))


def _is_run(run: str) -> bool:
    return (Path(run) / PLAN_FILE).is_file()


def _faultproxy(*arguments: str) -> int:
    """One faultproxy command, in this process (its output in the step's log); its exit status."""
    print(f"$ faultproxy {shlex.join(arguments)}", flush=True)
    return entry.main(list(arguments))


def _append(target: str | None, text: str) -> None:
    """Append to a file the runner reads after the step (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY); absent outside a runner."""
    if target:
        with open(target, "a", encoding="utf-8") as file:
            file.write(text)
