"""Why an episode did not simply finish: the causes an episode line carries, and whose they are.

Two kinds, kept apart so that an exit status and a gate verdict can be trusted:

- the agent's (AGENT_FINDINGS): it crashed or overran a budget. That is the agent failing at
  its job: the episode is judged, status `fail`, with a `crash` or `budget` finding beside the
  checks of what it did (end state, effects, ...).
- the harness's (every other cause): it could not know how the agent did (an infrastructure
  error on the task's path, a world that would not reset, a lost worker, an agent that could
  not be started, a replay that left its recording, a planned episode never run). The episode
  is `incomplete` with the cause: never pass, never the agent's fault.

A cause this module does not list (a newer runner's, a hand-edited log) is the harness's: what
is unknown is never blamed on the agent. A new harness cause needs only a line in
HARNESS_CAUSES to be explained in its own words.
"""

from __future__ import annotations

CRASH = "crash"
BUDGET_REPLY = "budget_reply"  # a conversation's agent silent past its user's reply_timeout_s
BUDGET_CAUSES = ("budget_wall", "budget_requests", "budget_tokens", BUDGET_REPLY)
# The agent's causes and the finding (a check name a tasks file may give a severity) each becomes.
AGENT_FINDINGS = {CRASH: "crash", **{cause: "budget" for cause in BUDGET_CAUSES}}
AGENT_FINDING_SEVERITY = "medium"  # unless the tasks file's `severity` says otherwise

INFRA_ERROR = "infra_error"  # the judge's, from the trace
RESET_FAILED = "reset_failed"
AGENT_NOT_STARTED = "agent_not_started"
WORKER_LOST = "worker_lost"
HARNESS_ERROR = "harness_error"
DIVERGED = "diverged"
NOT_RUN = "NotRun"  # a planned episode not in the log (never written to it)
USER_FAILED = "user_failed"  # the model playing a conversation's user did not answer
NO_TRAFFIC = "no_traffic"  # the judge's: the agent exited 0, its task expects traffic, its trace is empty
SERVER_NOT_STARTED = "server_not_started"  # the judge's: a stdio MCP server could not start (evaluator.judging.server_start)
BYPASS = "bypass"  # the judge's: the work shows as done, but a host the task depends on saw no request
# Why an agent's traffic misses the proxy, most often, and where the fix is.
NO_TRAFFIC_ADVICE = ("the agent's HTTP client likely ignores HTTP(S)_PROXY (Node's fetch before Node 24 does) or "
                     "reaches its upstreams another way; docs/agents.md says what to add")

# cause -> (what the harness could not do, what to do about it)
HARNESS_CAUSES = {
    INFRA_ERROR: ("the proxy could not reach an upstream on the task's path (an error no fault made)",
                  "the episode's cause_detail names the first error and the fix for its reason (--upstream-ca "
                  "for TLS verification, the host's reachability otherwise)"),
    RESET_FAILED: ("the world could not be reset before the agent started, so it was not launched",
                   "check the task's reset_url service"),
    AGENT_NOT_STARTED: ("the agent command could not be started", "check the agent command and its environment"),
    WORKER_LOST: ("the worker running the episode was lost", "check the executor's workers (memory, restarts)"),
    HARNESS_ERROR: ("the harness failed while running the episode", "read the episode's log_tail"),
    DIVERGED: ("the agent asked replay for something its recording does not hold",
               "re-freeze the entry if the agent changed on purpose"),
    NOT_RUN: ("the planned episode was never run", "resume the run"),
    NO_TRAFFIC: ("no request of the agent reached the proxy, though its task expects traffic", NO_TRAFFIC_ADVICE),
    USER_FAILED: ("the model playing the task's user did not answer, so the conversation could not go on",
                  "check the user model's API (its base_url_env and api_key_env) in the episode's cause_detail"),
    SERVER_NOT_STARTED: ("an MCP server the agent starts through faultproxy mcp could not start, or exited before "
                         "answering", "the episode's cause_detail names the command and what it said; run it by hand"),
    BYPASS: ("the work shows as done, but a host the task depends on received no request through the proxy",
             "route the agent's client for that host through HTTP(S)_PROXY (docs/agents.md says how)"),
}
_UNKNOWN = ("the harness could not judge the episode", "read the episode's cause_detail and log_tail")


def is_agent_cause(cause: str | None) -> bool:
    """Is this cause the agent failing at its job (judged fail) rather than the harness not knowing?"""
    return cause in AGENT_FINDINGS


def harness_explanation(cause: str | None) -> tuple[str, str]:
    """(what the harness could not do, what to do) for a harness cause; general words for one not listed."""
    return HARNESS_CAUSES.get(cause or "", _UNKNOWN)
