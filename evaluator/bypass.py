"""A tool client that goes around the proxy: the harness's blindness, not the agent's failure.

    hosts = bypassed_hosts(task, record, exchanges, results)

An agent whose model client uses the proxy while its tools client ignores it (httpx with
`trust_env=False`, a client with its own transport) does its work where the proxy cannot see:
the trace shows no commit, so the effect and claim checks fail, though the world says the work
was done. When an episode would fail, its end state or its answer says the work was done, and a
host the task depends on (the episode's `task_hosts`: the hosts of its reset_url, state_url and
the URLs of its env) received no request, the episode is incomplete with cause `bypass`, naming
the host and the fix (docs/agents.md). The end state counts as saying so only for a task that
expects an effect: a read-only task's end state matches whether or not the agent did anything.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from faultproxy.evaluator.side_channels import host_key
from faultproxy.evaluator.traced import TracedExchange

BYPASS_FIX = ("its client likely ignores HTTP(S)_PROXY (httpx's trust_env=False, a transport of its own, "
              "Node's fetch before Node 24): route it through the proxy (docs/agents.md#when-a-tool-client-"
              "bypasses-the-proxy)")


def task_hosts(urls: Iterable[str]) -> list[str]:
    """The host keys of the URLs among `urls` (others ignored), sorted, once each: an episode's `task_hosts`."""
    return sorted({key for url in urls if (key := host_key(url))})


def bypassed_hosts(task: Any, record: Mapping[str, Any], exchanges: Sequence[TracedExchange],
                   results: Sequence[Mapping[str, Any]]) -> list[str]:
    """The task's hosts that saw no request, when the episode would fail though its end state or
    answer says the work was done; [] otherwise."""
    passed = {result["name"]: result["passed"] for result in results}
    if not exchanges or all(ok is not False for ok in passed.values()):
        return []
    state_says_done = passed.get("end_state") is True and any(e.count > 0 for e in task.expected.effects)
    if not (state_says_done or passed.get("outcome") is True):
        return []
    seen = {host_key(ex.url) for ex in exchanges}
    return [host for host in record.get("task_hosts") or () if host not in seen]


def bypass_detail(hosts: Sequence[str], results: Sequence[Mapping[str, Any]]) -> str:
    """What the harness could not see, and what to do about it."""
    said = [what for what, name in (("end state", "end_state"), ("answer", "outcome"))
            if any(r["name"] == name and r["passed"] is True for r in results)]
    return (f"no request reached {', '.join(hosts)} through the proxy, though the {' and '.join(said)} "
            f"{'say' if len(said) > 1 else 'says'} the work was done: {BYPASS_FIX}")
