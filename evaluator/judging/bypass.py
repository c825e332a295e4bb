"""A tool client that goes around the proxy: the harness's blindness, not the agent's failure.

    hosts = bypassed_hosts(task, record, exchanges, results)

An agent whose model client uses the proxy while its tools client ignores it (httpx with
`trust_env=False`, a client with its own transport) does its work where the proxy cannot see:
the trace shows no commit, so the effect and claim checks fail, though the world says the work
was done. The episode is incomplete with cause `bypass`, naming the host and the fix
(docs/agents.md), when all of these hold:

- it would fail;
- an effect the task expects (count above 0) has no commit at all in the trace;
- the end state says the work was done (`end_state` passed), or, for a task with no expected
  state to say otherwise, the answer does (`outcome` passed);
- a host the task depends on (the episode's `task_hosts`: the hosts of its reset_url, state_url
  and the URLs of its env) received no request through the proxy.

A world whose tool server reaches the backend itself (a stdio MCP server calling the shop's API)
shows its commits as tool calls in the trace: the second condition keeps it judged.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from faultproxy.evaluator.judging.side_channels import host_key
from faultproxy.evaluator.traces import TracedExchange, matches_any
from faultproxy.formats.run_records import EpisodeRecord
from faultproxy.tasks.task_model import Task

BYPASS_FIX = ("its client likely ignores HTTP(S)_PROXY (httpx's trust_env=False, a transport of its own, "
              "Node's fetch before Node 24): route it through the proxy (docs/agents.md#when-a-tool-client-"
              "bypasses-the-proxy)")


def task_hosts(urls: Iterable[str]) -> list[str]:
    """The host keys of the URLs among `urls` (others ignored), sorted, once each: an episode's `task_hosts`."""
    return sorted({key for url in urls if (key := host_key(url))})


def bypassed_hosts(task: Task, record: EpisodeRecord, exchanges: Sequence[TracedExchange],
                   results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The task's hosts that saw no request, when the episode would fail though its end state or
    answer says the work was done; [] otherwise."""
    passed = {result["name"]: result["passed"] for result in results}
    if not exchanges or all(ok is not False for ok in passed.values()):
        return []
    if not _unseen_effect(task, [ex for ex in exchanges if ex.committed and ex.is_tool_call]):
        return []
    says_done = passed.get("end_state") is True or (task.expected.state is None and passed.get("outcome") is True)
    if not says_done:
        return []
    seen = {host_key(ex.url) for ex in exchanges}
    return [host for host in record.get("task_hosts") or () if host not in seen]


def _unseen_effect(task: Task, commits: Sequence[TracedExchange]) -> bool:
    """Does an effect the task expects have no commit at all in the trace?"""
    return any(effect.count > 0 and not any(matches_any((effect,), ex) is not None for ex in commits)
               for effect in task.expected.effects)


def bypass_detail(hosts: Sequence[str], results: Sequence[Mapping[str, Any]]) -> str:
    """What the harness could not see, and what to do about it."""
    said = [what for what, name in (("end state", "end_state"), ("answer", "outcome"))
            if any(r["name"] == name and r["passed"] is True for r in results)]
    return (f"no request reached {', '.join(hosts)} through the proxy, though the {' and '.join(said)} "
            f"{'say' if len(said) > 1 else 'says'} the work was done: {BYPASS_FIX}")
