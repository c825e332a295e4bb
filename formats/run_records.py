"""The records of a run's log, `episodes.jsonl`: their types, their versions, and the one upgrade
that brings a record written by an older faultproxy to the current shape.

Everything that reads episode lines or verdicts names their fields through these types (so a
type checker can follow them); formats.rundir writes and reads the lines, formats.verdict_layout
lays a verdict out in its line and reads it back fast. A line's fields changed over time: each
change bumps a version that the writer stamps (RECORD_VERSION on the line, VERDICT_VERSION on
its verdict), and a reader passes what it read through upgrade_record (or upgrade_verdict, for a
verdict read on its own), never through defaults of its own.

The header line: {"type": "header", "faultproxy_version", "scenario_digest", "tasks_digest",
  "k", "grid", "command", "created"} (+ "chat" with --chat, "monitor" in a monitor's log).

An episode line (EpisodeRecord): {"type": "episode", "v": RECORD_VERSION, "key", "task_id",
  "trial", "variant", "seed", "prompt", "state", "shape", "grid_label", "params", "model",
  "completed": bool,            # false: incomplete, and `cause` says why
  "cause": null | "crash" | "budget_wall" | "budget_requests" | "budget_tokens" | "budget_reply" | "harness_error"
           | "reset_failed" (the agent was not launched) | "infra_error" (the judge's, from the trace)
           | "no_traffic" (the judge's: the agent finished, its task expects traffic, the trace is empty)
           | "diverged" (replay) | "worker_lost" (dask),
  "cause_detail": str (only on lines the runner wrote without an agent result: what went wrong),        # NotRun is never logged: it is what a planned, unlogged key is
  "exit_code": int | null, "started": unix s, "duration_s",
  "output": the JSON the agent wrote to FAULTPROXY_OUTPUT, or null; "output_error": str | null,
  "end_state": JSON fetched from the task's state URL after the episode, or null;
  "state_error": str | null,
  "stats": {"exchanges", "tokens", "faults", and "turns" in a conversation (the user's and the agent's)},
  "trace": "flows/<file>.jsonl", "log_tail": str,
  "rewrites": {field: value} the proxy set in its model API requests (plan's templates, resolved),
  "task_hosts": ["host:port", ...] the hosts the task depends on (its reset_url, state_url and the
                URLs of its env): work shown done that one of them never saw is a bypass (evaluator.judging.bypass),
  "side_channels": ["[METHOD ]HOST[/PATH]", ...] (only when given) the run's --side-channel patterns:
                   a failed request they name leaves the verdict standing (evaluator.judging.side_channels),
  "faults_possible": bool (could some rule fire at the episode's grid point; false for a function
                     agent, whose returned outcome is its own): with it, an empty trace is no_traffic,
  "monitor": {"id" (the session), "rule", "ended": "idle" | "stopped" | "recovered"} (a monitor's lines),
  "replay_of": the store entry's folder (a replay's record, which no log holds),
  "verdict": Verdict}     # always the line's last key: see formats.verdict_layout

A verdict (Verdict, evaluator.judging.judge writes it):
  {"v": VERDICT_VERSION, "status": "pass" | "fail" | "incomplete", "cause": null | the record's cause
   (crash and budget_* with status fail; the harness's with incomplete),
   "episode": {"key", "task_id", "trial", "grid_label", "duration_s"},
   "confidence": the confidence the agent reported (a number in [0, 1]) or null,
   "violations": [severity of each failed check, e.g. "high"],
   "failed": [{"name", "severity", "detail"} of each failed check],
   "faults": [{"seq", "rule", "type", "delivered"}],
   "endpoints": ["GET /orders/{id}", ...],       # endpoint classes in call order; the episode's
                                                 # key in a path reads {episode}
   "tokens", "requests", "turns" (a conversation's, the user's and the agent's; absent without one),
   "usage": {model: {"input", "output"}},
   "escalated": bool, "model_calls", "tool_calls",
   "latency_s": {"total", "p50", "p95", "max"} of exchange durations, or null,
   "cause_detail": what the cause was (the host and reason of an infrastructure error with its
                   fix, the failed reset's status), when there is a cause,
   "side_channel_errors": [{"seq", "request", "error", "fix"}] infrastructure errors of known
                   side channels (evaluator.judging.side_channels): recorded, the verdict stands,
   "unclassified_tools": [MCP tools called that no annotation and no pattern says read or write
                   (tasks.request_class): not counted as writes, shown so the user can say],
   "stale_tool_calls": calls of an MCP tool its server no longer had (evaluator.traces.stale_tools),
   "checks": [{"name", "passed": true | false | null, "severity", "detail"}]}   # always last

The versions and what upgrading from each does:
- episode line, no "v" (1): written before the line carried its version. A run logged before
  `--rewrite` has no "rewrites", only the plan's `rewrite_model` (the episode's model, asked
  everywhere): its rewrites are {"model": its model} then, else none.
- verdict 1 (or no "v"): its fields grew without a version: before 2026-12-01 it had no
  `failed` (read from its checks), later ones no `cause_detail`, `side_channel_errors`,
  `unclassified_tools` or `stale_tool_calls`; a hand-written one may lack any field a report
  reads. They are filled from the checks and the record, or as nothing found.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, NotRequired, TypedDict, cast

RECORD_VERSION = 2
VERDICT_VERSION = 2
# The record fields a verdict repeats under "episode", so that a report needs nothing else.
EPISODE_FIELDS = ("key", "task_id", "trial", "grid_label", "duration_s")

Status = Literal["pass", "fail", "incomplete"]


class CheckRecord(TypedDict):
    """One check's result in a verdict (evaluator.checks.check_result.CheckResult, its severity resolved)."""

    name: str
    passed: bool | None  # None: the check did not apply
    severity: str
    detail: str


class FailedCheck(TypedDict):
    """A failed check, repeated ahead of `checks` for the report's fast reader."""

    name: str
    severity: str
    detail: str


class FaultSeen(TypedDict):
    """A fault the proxy injected in the episode, and whether it reached the agent."""

    seq: int
    rule: str | None
    type: str | None
    delivered: bool


class EpisodeRef(TypedDict):
    """The record fields (EPISODE_FIELDS) a verdict repeats; a report adds the trace's path."""

    key: str
    task_id: str
    trial: int
    grid_label: str
    duration_s: float
    trace: NotRequired[str]


class Latency(TypedDict):
    """Exchange durations of an episode, in seconds."""

    total: float
    p50: float
    p95: float
    max: float


class TokenUsage(TypedDict):
    """One model's tokens in an episode."""

    input: int
    output: int


class SideChannelError(TypedDict):
    """An infrastructure error of a known side channel: recorded, the verdict stands."""

    seq: int
    request: str
    error: str
    fix: str


class Verdict(TypedDict):
    """What evaluator.judging.judge makes of one episode (module docstring); `checks` is always last."""

    v: int
    status: Status
    cause: str | None
    episode: EpisodeRef
    confidence: float | None
    violations: list[str]
    failed: list[FailedCheck]
    faults: list[FaultSeen]
    endpoints: list[str]
    tokens: int
    requests: int
    turns: NotRequired[int]  # a conversation's
    usage: dict[str, TokenUsage]
    escalated: bool
    model_calls: NotRequired[int]  # these three: every judge wrote them, a hand-written verdict may not
    tool_calls: NotRequired[int]
    latency_s: NotRequired[Latency | None]
    cause_detail: str | None
    side_channel_errors: list[SideChannelError]
    unclassified_tools: list[str]
    stale_tool_calls: int
    checks: list[CheckRecord]


class LogHeader(TypedDict):
    """The log's first line: the plan it was written for (a resumed log must agree, formats.rundir)."""

    type: Literal["header"]
    faultproxy_version: str
    scenario_digest: str
    tasks_digest: str
    k: int
    grid: list[dict[str, Any]]
    command: list[str]
    created: str
    chat: NotRequired[str]
    monitor: NotRequired[dict[str, Any]]


class EpisodeStats(TypedDict):
    """What the proxy counted in an episode."""

    exchanges: int
    tokens: int
    faults: int
    turns: NotRequired[int]  # a conversation's


class MonitorEpisode(TypedDict):
    """A monitor's episode: the session it is, the rule that cut it, how it ended."""

    id: str | None
    rule: str | None
    ended: str  # "idle" | "stopped" | "recovered"


class EpisodeIdentity(TypedDict):
    """The fields of an episode line that the plan fixes, before anything runs."""

    key: str
    task_id: str
    trial: int
    variant: int
    seed: int
    prompt: str
    state: Any
    shape: str
    grid_label: str
    params: dict[str, float | str]
    model: str | None


class EpisodeRecord(EpisodeIdentity):
    """One finished episode, as the runner builds it and its log line holds it (module docstring)."""

    type: NotRequired[Literal["episode"]]  # stamped with "v" when the line is written
    v: NotRequired[int]
    completed: bool
    cause: str | None
    cause_detail: NotRequired[str]
    exit_code: int | None
    started: float
    duration_s: float
    output: Any
    output_error: str | None
    end_state: Any
    state_error: str | None
    stats: EpisodeStats
    trace: str
    log_tail: str
    rewrites: NotRequired[dict[str, Any]]
    task_hosts: NotRequired[list[str]]
    side_channels: NotRequired[list[str]]
    faults_possible: NotRequired[bool]
    monitor: NotRequired[MonitorEpisode]
    replay_of: NotRequired[str]  # a replay's (runner.replay_agents): the store entry it replayed
    verdict: NotRequired[Verdict]


def upgrade_record(record: Mapping[str, Any], plan: Mapping[str, Any]) -> EpisodeRecord:
    """An episode line as read (any version), in the current shape; `plan` is the run's plan.json
    document. Its verdict, if any, is upgraded too (upgrade_verdict)."""
    upgraded = dict(record)
    if _version(upgraded) < 2 and "rewrites" not in upgraded:
        upgraded["rewrites"] = {"model": upgraded["model"]} if plan.get("rewrite_model") and upgraded.get("model") else {}
    upgraded["v"] = RECORD_VERSION
    verdict = upgraded.get("verdict")
    if isinstance(verdict, Mapping) and "status" in verdict:
        upgraded["verdict"] = upgrade_verdict(verdict, upgraded)
    return cast(EpisodeRecord, upgraded)


def upgrade_verdict(verdict: Mapping[str, Any], record: Mapping[str, Any]) -> Verdict:
    """A verdict as read (any version), in the current shape; `record` is its episode's line,
    whose fields fill what an older verdict did not repeat."""
    if _version(verdict) >= VERDICT_VERSION:
        return cast(Verdict, verdict)
    checks = verdict.get("checks") or []
    failed = verdict.get("failed")
    if failed is None:
        failed = [{"name": c.get("name"), "severity": c.get("severity"), "detail": c.get("detail")}
                  for c in checks if c.get("passed") is False]
    upgraded = {
        **verdict,
        "v": VERDICT_VERSION,
        "cause": verdict.get("cause") or (None if verdict.get("status") != "incomplete" else record.get("cause")),
        "episode": verdict.get("episode") or {f: record.get(f) for f in EPISODE_FIELDS},
        "confidence": verdict["confidence"] if "confidence" in verdict else reported_confidence(record),
        "violations": verdict.get("violations") or [f["severity"] for f in failed],
        "failed": failed,
        "faults": verdict.get("faults") or [],
        "endpoints": verdict.get("endpoints") or [],
        "tokens": verdict.get("tokens") or 0,
        "requests": verdict.get("requests") or 0,
        "usage": verdict.get("usage") or {},
        "escalated": bool(verdict.get("escalated")),
        "cause_detail": verdict.get("cause_detail"),
        "side_channel_errors": verdict.get("side_channel_errors") or [],
        "unclassified_tools": verdict.get("unclassified_tools") or [],
        "stale_tool_calls": verdict.get("stale_tool_calls") or 0,
        "checks": checks,
    }
    return cast(Verdict, upgraded)


def reported_confidence(record: Mapping[str, Any]) -> float | None:
    """The confidence the agent reported in its output (a number in [0, 1]), else None."""
    output = record.get("output")
    value = output.get("confidence") if isinstance(output, Mapping) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 <= value <= 1:
        return None
    return float(value)


def _version(document: Mapping[str, Any]) -> int:
    """A record's or verdict's "v"; 1 when it has none (written before versions were kept) or a
    hand-edited one that is no number."""
    version = document.get("v")
    return version if isinstance(version, int) and not isinstance(version, bool) else 1
