"""The cause of one failing episode: why it failed, in parts that equal causes share.

    cause, fault_at = explain(parse_trace(lines), failed_checks, "fail", episode_key)
    cause.line                               # one line a person can act on

A failing episode (status fail, or incomplete) gets a cause computed from its verdict and its
trace (evaluator.traces.parse_trace), with five parts:

- outcome: "fail", or "incomplete: <why>" (infra_error, reset_failed, ...: the harness could not
  judge, and the cause's line then speaks of the harness, never of the agent);
- checks: the names of the checks that failed, sorted;
- fault: (rule, type) of the last fault delivered to the agent before the first failing
  effect, or none. The first failing effect is the earliest of: a write sent again after an
  earlier send of the same request (idempotency, effects; a write as tasks.request_class says:
  an MCP tool call only by its annotations or the task's patterns, never by its POST), a request
  sent again after it failed (retry); for any other check it is the end of the episode;
- where: that fault's endpoint class (method and path template, ids as {id}, the episode's key
  as {episode}, an MCP tool as `tools/call:<name>`); with no fault, the first failing effect's;
- response: how the agent answered that fault, read from what it sent next: "retried before
  Retry-After", "retried without idempotency key", "retried with a new idempotency key",
  "retried N times, then gave up"; when it did not send the request again, the words the
  fault's kind has for going on with what the fault gave it (FaultKind.went_on: "accepted
  drifted field", "read stale state and wrote", ...), else "went on without retrying", "gave up"
  or "went on"; or "failed with no fault delivered".

Two causes are the same when all five parts are equal (evaluator.aggregate.causes clusters them). The
second half of a cause's line is advice: the fault kind's own for its answers, else by response.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from faultproxy.evaluator.checks import RETRY_AFTER_TOLERANCE_S
from faultproxy.evaluator.traces import mcp_tool_hints
from faultproxy.formats.episode_causes import harness_explanation, is_agent_cause
from faultproxy.scenarios import FAULT_KINDS
from faultproxy.tasks.request_class import NOTHING_DECLARED, Declared

_RETRY_CHECKS = frozenset({"retry"})
_DUPLICATE_CHECKS = frozenset({"idempotency", "effects"})
NOT_JUDGED = "not judged"  # the response part of a cause the harness could not judge: no agent behaviour is read
# What to do about each kind of answer a fault's kind has no words of its own for: the second half of a cause's line.
ADVICE = {
    "retried before Retry-After": "wait as long as Retry-After says before retrying",
    "retried without idempotency key": "send an Idempotency-Key on writes and reuse it when retrying",
    "retried with a new idempotency key": "reuse the first Idempotency-Key when retrying a write",
    "gave up": "retry transient failures (with backoff) before giving up",
    "went on without retrying": "retry the failed call, or report that the task is unfinished",
    "failed with no fault delivered": "read the representative's trace: the agent fails without any fault",
}
# The same answers after a fault on an irreversible write (the task says so, or the upstream may
# have applied it): a plain retry is the double write the fault warns about.
IRREVERSIBLE_ADVICE = {
    "gave up": "retry the write with an Idempotency-Key (the same one each time), or read the state before "
               "retrying: a plain retry can apply it twice",
    "went on without retrying": "read the state, then retry the write with an Idempotency-Key, or report that "
                                "the task is unfinished",
}


@dataclass(frozen=True)
class Cause:
    """Why one episode failed (see the module docstring); equal parts, equal causes."""

    outcome: str
    checks: tuple[str, ...]
    fault_rule: str | None
    fault_type: str | None
    where: str | None
    response: str
    irreversible: bool = False  # the fault hit a write that must not be applied twice

    @property
    def id(self) -> str:
        """A short stable name for the cause (the same in every run that has it)."""
        parts = [self.outcome, self.checks, self.fault_rule, self.fault_type, self.where, self.response]
        text = json.dumps(parts + ["irreversible"] if self.irreversible else parts)  # ids of other causes unchanged
        return hashlib.blake2b(text.encode(), digest_size=5).hexdigest()

    @property
    def slug(self) -> str:
        """The cause in a few words, safe as a folder name: checks, fault and response."""
        parts = ["-".join(self.checks) or self.outcome.replace("incomplete: ", ""),
                 self.fault_type or "no-fault", self.response.split(" (")[0]]
        text = "--".join(parts).lower()
        return "".join(c if c.isalnum() or c in "-_" else "-" for c in text).strip("-")[:80] + f"--{self.id}"

    @property
    def line(self) -> str:
        """One line a person can act on: about the agent, or, when the harness could not judge, the harness."""
        harness = harness_cause(self.outcome)
        if harness is not None:
            what, todo = harness_explanation(harness)
            where = f" (at {self.where})" if self.where else ""
            return f"{self.outcome}: the harness could not judge these episodes: {what}{where} → {todo}"
        failed = ", ".join(self.checks) or "no check"
        what = f"{failed} failed" if self.outcome == "fail" else f"{self.outcome} ({failed} failed)"
        if self.fault_type:
            cause = f"after {self.fault_type} ({self.fault_rule}) on {self.where}, the agent {self.response}"
        else:
            cause = f"the agent {self.response}" + (f" at {self.where}" if self.where else "")
        return f"{what}: {cause}" + (f" → {advice}" if (advice := self._advice()) else "")

    def _advice(self) -> str | None:
        """What to do: the fault kind's advice for this answer (a session it ended must begin
        again, whatever the call), then after an irreversible write its own, then the advice for
        the answer whatever the fault."""
        kind = FAULT_KINDS.get(self.fault_type or "")
        own = {**kind.advice, **{a.response: a.advice for a in (kind.went_on, kind.went_on_writing) if a}} \
            if kind else {}
        tables = (own, IRREVERSIBLE_ADVICE if self.irreversible else {}, ADVICE)
        response = self.response.split(" (")[0]
        return next((t[key] for key in (response, _family(self.response)) for t in tables if key in t), None)

    def to_json(self) -> dict[str, Any]:
        """The cause's parts, its id and its line."""
        return {"id": self.id, "slug": self.slug, "line": self.line, "outcome": self.outcome,
                "checks": list(self.checks),
                "fault": {"rule": self.fault_rule, "type": self.fault_type} if self.fault_type else None,
                "where": self.where, "response": self.response, "irreversible": self.irreversible}


def harness_cause(outcome: str) -> str | None:
    """The harness cause in an outcome "incomplete: <cause>"; None for "fail" or an agent's cause."""
    if not outcome.startswith("incomplete: "):
        return None
    cause = outcome.removeprefix("incomplete: ")
    return None if is_agent_cause(cause) else cause


def _family(response: str) -> str:
    return "gave up" if response.startswith("retried") and response.endswith("gave up") else response


def explain(exchanges: Sequence[Any], failed: Sequence[str], outcome: str, episode_key: str | None,
            declared: Declared = NOTHING_DECLARED) -> tuple[Cause, int | None]:
    """The cause of one failing episode from its parsed trace (evaluator.traces.parse_trace) and
    the names of its failed checks; also the index of the fault it names in the trace (None: no
    fault).
    `declared`: what the task says about its requests (irreversible, effects, read_only)."""
    checks = tuple(sorted(set(failed)))
    if harness_cause(outcome) is not None:
        where = next((ex.endpoint(episode_key) for ex in exchanges if ex.infra_error), None)
        return Cause(outcome, checks, None, None, where, NOT_JUDGED), None
    hints = mcp_tool_hints(exchanges)

    def is_write(ex: Any) -> bool:
        return ex.request_class(declared, hints).is_write

    effect = _first_failing_effect(exchanges, checks, is_write)
    fault_at = next((i for i in range(min(effect, len(exchanges)) - 1, -1, -1)
                     if (exchanges[i].fault or {}).get("delivered")), None)
    if fault_at is None:
        where = exchanges[effect].endpoint(episode_key) if effect < len(exchanges) else None
        return Cause(outcome, checks, None, None, where, "failed with no fault delivered"), None
    ex = exchanges[fault_at]
    fault = ex.fault or {}
    request = ex.request_class(declared, hints)
    once = request.is_write and (_may_have_committed(ex) or request.irreversible)
    return (Cause(outcome, checks, str(fault.get("rule") or "?"), str(fault.get("type") or "?"),
                  ex.endpoint(episode_key), _response(exchanges, fault_at, is_write), once), fault_at)


WriteTest = Callable[[Any], bool]  # is an exchange a write (tasks.request_class, in explain)


def _first_failing_effect(exchanges: Sequence[Any], checks: tuple[str, ...], is_write: WriteTest) -> int:
    """Index of the first exchange that is a failing effect of these checks; len() for the end.
    For retry: the first retry sent before its Retry-After, else the first retry of a failed send."""
    duplicates, retries = bool(_DUPLICATE_CHECKS & set(checks)), bool(_RETRY_CHECKS & set(checks))
    sent: set[tuple[str, str, str]] = set()
    last_failed: dict[tuple[str, str, str], Any] = {}
    first_retry = len(exchanges)
    for i, ex in enumerate(exchanges):
        if duplicates and is_write(ex) and ex.identity in sent:
            return i
        failed = last_failed.get(ex.identity)
        if retries and failed is not None:
            if _early(failed, ex):
                return i
            first_retry = min(first_retry, i)
        if is_write(ex):
            sent.add(ex.identity)
        if ex.failed:
            last_failed[ex.identity] = ex
        else:
            last_failed.pop(ex.identity, None)
    return first_retry if not duplicates else len(exchanges)


def _early(failed: Any, retry: Any) -> bool:
    """Was `retry` sent before the wait `failed`'s response asked for (counted as checks.check_retry does)?"""
    wait = failed.retry_after_s
    return wait is not None and retry.started - failed.started + RETRY_AFTER_TOLERANCE_S < wait


def _response(exchanges: Sequence[Any], at: int, is_write: WriteTest) -> str:
    """How the agent answered the fault at exchanges[at]."""
    ex, later = exchanges[at], exchanges[at + 1:]
    retries = [x for x in later if x.identity == ex.identity]
    if retries:
        return _retry_response(ex, retries, is_write)
    kind = FAULT_KINDS.get((ex.fault or {}).get("type"))
    answer = kind.answer(any(is_write(x) for x in later)) if kind else None
    if answer is not None:
        return answer.response
    if not ex.failed:
        return "went on"
    return "gave up" if not any(not x.is_model for x in later) else "went on without retrying"


def _retry_response(ex: Any, retries: Sequence[Any], is_write: WriteTest) -> str:
    first = retries[0]
    if _early(ex, first):
        return "retried before Retry-After"
    if is_write(ex) and _may_have_committed(ex):
        if first.idempotency_key is None:
            return "retried without idempotency key"
        if first.idempotency_key != ex.idempotency_key:
            return "retried with a new idempotency key"
    if all(x.failed for x in retries):
        return f"retried {len(retries)} time{'s' if len(retries) > 1 else ''}, then gave up"
    return "retried"


def _may_have_committed(ex: Any) -> bool:
    """The upstream may have applied this write although the client saw a failure."""
    return ex.committed or ex.maybe_committed
