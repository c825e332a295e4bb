"""The checks of what the agent said: its exit status and answer (outcome), and whether it
escalated (escalation)."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

from faultproxy.evaluator.checks.check_result import CheckResult, clip, last_words
from faultproxy.evaluator.checks.equivalence import subset_equal
from faultproxy.evaluator.traces import HeardRecord, TracedExchange
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.tasks.task_model import Task, load_checker


def check_outcome(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange]) -> CheckResult:
    """Exit status 0, and the agent's answer against expected.output (regex searched in the
    answer's text, JSON subset of the answer, or a `module:function` checker)."""
    name, severity = "outcome", "low"
    exit_code = record.get("exit_code")
    if exit_code is not None and exit_code != 0:
        return CheckResult(name, False, severity, f"the agent exited with status {exit_code}" + last_words(record))
    spec = task.expected.output
    if spec is None:
        return CheckResult(name, True, severity, "exit status 0" if exit_code == 0 else "no output expected")
    output = record.get("output")
    if not isinstance(output, dict):
        why = record.get("output_error") or "the agent wrote no output"
        return CheckResult(name, False, severity, why)
    answer = output.get("answer")
    if spec.kind == "regex":
        text = answer if isinstance(answer, str) else json.dumps(answer, ensure_ascii=False, sort_keys=True)
        if re.search(spec.value, text):
            return CheckResult(name, True, severity, f"answer matches /{spec.value}/")
        return CheckResult(name, False, severity, f"answer does not match /{spec.value}/: {clip(text)}")
    if spec.kind == "json":
        document = answer
        if isinstance(answer, str):
            try:
                document = json.loads(answer)
            except ValueError:
                return CheckResult(name, False, severity, f"answer is not JSON: {clip(answer)}")
        ok, differences = subset_equal(spec.value, document)
        return CheckResult(name, ok, severity, "answer contains the expected JSON" if ok else "; ".join(differences[:3]))
    if spec.kind == "checker":
        return _run_checker(spec.value, output, task, severity)
    return CheckResult(name, False, severity, f"unknown output kind {spec.kind!r}")


def _run_checker(target: str, output: Mapping[str, Any], task: Task, severity: str) -> CheckResult:
    try:
        function = load_checker(target)
    except (ImportError, AttributeError) as error:
        return CheckResult("outcome", False, severity, f"checker {target} could not be loaded: {error}")
    try:
        result = function(output, task.to_json())
    except Exception as error:  # a checker's bug must not take the run down; it is a failed check
        return CheckResult("outcome", False, severity, f"checker {target} raised {type(error).__name__}: {error}")
    if isinstance(result, tuple) and len(result) == 2:
        ok, detail = result
        return CheckResult("outcome", bool(ok), severity, str(detail))
    return CheckResult("outcome", bool(result), severity, f"checker {target} returned {bool(result)}")



def agent_escalated(record: EpisodeRecord) -> bool:
    output = record.get("output")
    return isinstance(output, dict) and output.get("escalate") is True


def check_escalation(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange]) -> CheckResult:
    name = "escalation"
    escalated = agent_escalated(record)
    if task.expected.escalate:
        if escalated:
            return CheckResult(name, True, "medium", "escalated as expected")
        return CheckResult(name, False, "medium", "did not escalate when it should have")
    if escalated:
        reason = (record.get("output") or {}).get("reason")
        return CheckResult(name, False, "low", "escalated when action was expected"
                           + (f": {clip(str(reason), 80)}" if reason else ""))
    return CheckResult(name, True, "low", "acted without escalating")

