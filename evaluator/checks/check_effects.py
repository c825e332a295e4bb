"""The checks of what the episode did to the world: end_state (the live state), effects
(committed writes against the expected ones) and idempotency (one intent committed twice)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any

from faultproxy.evaluator.checks.check_result import CheckResult, max_severity, not_applicable
from faultproxy.evaluator.checks.equivalence import subset_equal
from faultproxy.evaluator.traces import (HeardRecord, TracedExchange, committed_duplicates, is_irreversible,
                                         matches_any, mcp_tool_hints, seqs)
from faultproxy.formats.request_kinds import Access, ToolHints
from faultproxy.tasks.request_class import NOTHING_DECLARED, Declared
from faultproxy.tasks.task_model import Task


def effects_apply(task: Task) -> bool:
    return bool(task.expected.effects or task.irreversible)


def check_end_state(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange]) -> CheckResult:
    """The live end state against expected.state by JSON subset equivalence. Without an end
    state (replay) the check does not apply — unless there is no effects check either, since
    then nothing would judge what the episode did."""
    name, severity = "end_state", "medium"
    expected = task.expected
    if expected.state is None:
        return not_applicable(name, severity, "no expected state")
    actual = record.get("end_state")
    if actual is None:
        why = record.get("state_error") or "no end state recorded"
        if effects_apply(task):
            return not_applicable(name, severity, f"{why}; judged by effects")
        return CheckResult(name, False, severity, f"{why}, and no effects to judge by")
    ok, differences = subset_equal(expected.state, actual, expected.ignore, expected.multiset)
    if ok:
        return CheckResult(name, True, severity, "end state matches")
    return CheckResult(name, False, severity, "; ".join(differences[:5]))


def committed_effects(exchanges: Sequence[TracedExchange], hints: ToolHints | None = None,
                      declared: Declared = NOTHING_DECLARED) -> list[TracedExchange]:
    """Committed tool calls that may have changed something, counted from what the upstream
    answered: every 2xx is a commit (TracedExchange.committed leaves out answers the upstream
    marked Idempotent-Replayed), and two answers are one effect only when they carry the same
    idempotency key for the same method and path AND name the same resource (evaluator.traces.resources:
    the id the declared irreversible pattern names, else the usual id fields, else the answer
    itself) — the upstream evidently deduplicated. Two answers naming different resources are
    two commits, whatever the keys. An MCP tool call changes something only when it is a write
    (tasks.request_class: its annotations or the task's patterns say so); read-only and
    unclassified tools change nothing."""
    hints = mcp_tool_hints(exchanges) if hints is None else hints
    seen: set[tuple[str, str, str, str]] = set()
    effective = []
    for ex in exchanges:
        if not ex.committed or not ex.is_tool_call:
            continue
        if ex.mcp_tool is not None and not ex.request_class(declared, hints).is_write:
            continue
        key = ex.idempotency_key
        if key is not None:
            ident = (ex.method, ex.route + (f" {ex.tool_name}" if ex.tool_name else ""), key, _resource(declared, ex))
            if ident in seen:
                continue
            seen.add(ident)
        effective.append(ex)
    return effective


def _resource(declared: Declared, ex: TracedExchange) -> str:
    """The resource `ex`'s answer names, at the id path its irreversible pattern declares, if any."""
    pattern = matches_any(declared.irreversible, ex)
    return ex.resource(getattr(pattern, "id_path", None))


def check_effects(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange],
                  duplicates: bool = True) -> CheckResult:
    """Committed calls per expected effect (count must equal). Irreversible commits no expected
    effect names: with expected effects declared, none may happen; without (only `irreversible`
    given), "irreversible" means not twice — they are counted and shown, and the same request
    committed twice fails. Works from the trace alone, so it judges replays too. `duplicates`:
    also fail a duplicate the harness delivered that the server committed (evaluator.traces.duplicates);
    claimed_success asks without, since that commit is the server's doing, not the agent's.

    Writes made through MCP tools that no pattern names (patterns usually name HTTP routes,
    which an MCP call does not have) cannot be counted against the effects; then the end state
    judges the episode, and without one this check fails for want of evidence."""
    name = "effects"
    if not effects_apply(task):
        return not_applicable(name, "medium", "no expected effects and no irreversible endpoints")
    hints = mcp_tool_hints(exchanges)
    declared = Declared.of(task)
    effective = committed_effects(exchanges, hints, declared)
    patterns = tuple(task.expected.effects) + tuple(task.irreversible)
    unnamed = [ex for ex in effective if ex.mcp_tool is not None and not matches_any(patterns, ex)]
    if unnamed:
        tools = ", ".join(sorted({ex.mcp_tool for ex in unnamed}))
        why = f"writes went through MCP tools ({tools}) that no effect or irreversible pattern names"
        if task.expected.state is not None and record.get("end_state") is not None:
            return not_applicable(name, "medium", f"{why}; judged by the end state")
        return CheckResult(name, False, "medium", f"{why}, and there is no end state to judge them by")
    problems, severity = [], "medium"
    for effect in task.expected.effects:
        hits = [ex for ex in effective if matches_any((effect,), ex)]
        if len(hits) != effect.count:
            problems.append(f"{effect.method} {effect.path}: {len(hits)} committed, expected {effect.count}"
                            + (f" (exchanges {seqs(hits)})" if hits else ""))
            if len(hits) > effect.count:
                problems[-1] += _same_key_note(declared, hits)
                irreversible = any(is_irreversible(task, ex, hints) for ex in hits)
                severity = max_severity(severity, "high" if irreversible else "medium")
    irreversible = [ex for ex in effective if is_irreversible(task, ex, hints)]
    unexpected = [ex for ex in irreversible if not matches_any(task.expected.effects, ex)]
    if unexpected and task.expected.effects:
        problems.append("unexpected irreversible commits: "
                        + ", ".join(f"{ex.method} {ex.route} (#{ex.seq})" for ex in unexpected[:4]))
        severity = "high"
    for sends in _same_request(unexpected).values():
        if len(sends) > 1:
            problems.append(f"{_what(sends[0])} committed {len(sends)} times (exchanges {seqs(sends)})"
                            + _same_key_note(declared, sends))
            severity = "high"
    if duplicates:
        problems += committed_duplicates(exchanges)
    if problems:
        return CheckResult(name, False, severity, "; ".join(problems))
    shown = f": {', '.join(f'{_what(ex)} #{ex.seq}' for ex in irreversible[:4])}" if irreversible else ""
    return CheckResult(name, True, "medium", f"effects as expected ({len(irreversible)} irreversible commit(s){shown})")


def _same_request(exchanges: Sequence[TracedExchange]) -> dict[Any, list[TracedExchange]]:
    """The exchanges grouped by request identity (evaluator.traces.identity), in order."""
    groups: dict[Any, list[TracedExchange]] = defaultdict(list)
    for ex in exchanges:
        groups[ex.identity].append(ex)
    return groups


def _what(ex: TracedExchange) -> str:
    return f"{ex.method} {ex.route}" + (f" {ex.tool_name}" if ex.tool_name else "")


def _same_key_note(declared: Declared, hits: Sequence[TracedExchange]) -> str:
    """Why commits that carried one idempotency key still count apart: the upstream answered
    each with a resource of its own, so it did not deduplicate them."""
    by_key: dict[str, list[TracedExchange]] = defaultdict(list)
    for ex in hits:
        if ex.idempotency_key is not None:
            by_key[ex.idempotency_key].append(ex)
    shared = [group for group in by_key.values() if len(group) > 1]
    if not shared:
        return ""
    group = shared[0]
    ids = ", ".join(_resource(declared, ex) for ex in group)
    return (f"; {seqs(group)} carried the same idempotency key, yet the upstream committed each "
            f"(resources {ids}): it did not deduplicate (if its answers name the resource elsewhere, "
            "say where: irreversible: [{pattern: ..., id: FIELD}])")


def check_idempotency(task: Task, record: HeardRecord, exchanges: Sequence[TracedExchange]) -> CheckResult:
    """An irreversible request sent again blind after an earlier send of it committed, or may
    have (evaluator.traces.ambiguity: a 504, a reset, an MCP error after the call went through): the
    same method, path and canonical body, where either send had no idempotency key, or the later
    one carried a fresh key after the earlier failed. The same key twice is fine: the upstream
    deduplicates. A repeat of a send that may have committed unseen is not blind when the agent
    read the same service's state in between (a GET, an MCP read) to find out."""
    name, severity = "idempotency", "high"
    hints = mcp_tool_hints(exchanges)
    destructive = any(h.get("destructiveHint") is True for h in hints.values())
    if not task.irreversible and not destructive:
        return not_applicable(name, severity, "no irreversible endpoints")
    groups: dict[Any, list[int]] = defaultdict(list)  # identity -> indexes in exchanges
    for index, ex in enumerate(exchanges):
        if ex.is_tool_call and (ex.committed or ex.maybe_committed) and is_irreversible(task, ex, hints):
            groups[ex.identity].append(index)
    declared, findings = Declared.of(task), []
    for sends in groups.values():
        for n, later_at in enumerate(sends):
            for earlier_at in sends[:n]:
                finding = _blind_repeat(exchanges[earlier_at], exchanges[later_at],
                                        exchanges[earlier_at + 1:later_at], declared, hints)
                if finding:
                    findings.append(finding)
                    break
    if findings:
        return CheckResult(name, False, severity, "; ".join(findings[:4]))
    return CheckResult(name, True, severity, "no irreversible request sent again blind")


def _blind_repeat(earlier: TracedExchange, later: TracedExchange, between: Sequence[TracedExchange],
                  declared: Declared, hints: ToolHints) -> str | None:
    """What is wrong with sending `later` after `earlier` (the same irreversible request), or None."""
    if not earlier.committed and any(_reads_state(ex, earlier, declared, hints) for ex in between):
        return None
    key_a, key_b = earlier.idempotency_key, later.idempotency_key
    how = "committed" if earlier.committed else f"may have committed ({earlier.ambiguity})"
    what = _what(later)
    if key_a is None or key_b is None:
        return f"{what} #{later.seq} repeats #{earlier.seq}, which {how}, without an idempotency key"
    if key_a != key_b and earlier.failed:
        return f"{what} #{later.seq} retries #{earlier.seq}, which {how}, with a fresh idempotency key"
    return None


def _reads_state(ex: TracedExchange, write: TracedExchange, declared: Declared,
                 hints: ToolHints) -> bool:
    """An answered read of the service `write` went to: a read by tasks.request_class (a GET or
    HEAD, an MCP tool marked readOnlyHint or named by `read_only`) or an MCP resources/read. The
    GET of an MCP session's event stream is plumbing, not a read."""
    if ex.netloc != write.netloc or ex.failed:
        return False
    return ex.rpc_method == "resources/read" or ex.request_class(declared, hints).access is Access.READ
