"""Infrastructure errors on the task's path, and side channels.

    on_path, side = split_infra_errors(task, record, exchanges)

An error the proxy met reaching an upstream (no fault's doing: refused, DNS, TLS, a reset) says
the harness could not know how the agent did — but only when the request was one the task
depends on. Frameworks send traffic that has nothing to do with the task (the OpenAI Agents
SDK exports its traces to api.openai.com, litellm fetches a price list at import); offline or
behind locked egress those fail, and discarding the verdict for them hid real results. A request
is on the task's path when any of these holds:

- its host (host:port) is one the runner recorded for the episode (`task_hosts`: the hosts of
  the agent's base-URL variables, of `--upstream`, and of the task's URLs: reset_url, state_url
  and URL values of its env);
- a rule's match block selected it (the trace's `matched`), or another request to its host;
- it is a model API call (formats.model_apis), or a call the task names (its expected effects,
  irreversible and forbidden endpoints).

An error elsewhere is a side-channel error: kept in the verdict (`side_channel_errors`) and the
report, and the verdict stands. Each error carries the fix for its actual reason: `--upstream-ca`
for TLS verification only, `--no-proxy HOST` for a side channel that cannot be reached.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.traced import TracedExchange, matches_any

_DEFAULT_PORTS = {"http": 80, "https": 443}
_TLS = re.compile(r"certificate|ssl|tls", re.I)
_UNREACHABLE = re.compile(r"refused|name or service|getaddrinfo|name resolution|nodename|no address|"
                          r"errno -?(2|3|5|111)\b|connect call failed|unreachable", re.I)


def host_key(url: str) -> str | None:
    """"host:port" of a URL, the port made explicit (80, 443); None for what is not an http(s) URL."""
    try:
        parts = urlsplit(url)
        port = parts.port or _DEFAULT_PORTS.get(parts.scheme)
    except ValueError:
        return None
    if parts.scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    return f"{parts.hostname.lower()}:{port}"


def task_hosts(urls: Iterable[str]) -> list[str]:
    """The host keys of the URLs among `urls` (others ignored), sorted, once each: an episode's `task_hosts`."""
    return sorted({key for url in urls if (key := host_key(url))})


def _task_patterns(task: Any) -> list[Any]:
    expected = getattr(task, "expected", None)
    return [*(getattr(expected, "effects", ()) or ()), *task.irreversible, *task.forbidden]


def split_infra_errors(task: Any, record: Mapping[str, Any],
                       exchanges: Sequence[TracedExchange]) -> tuple[list[TracedExchange], list[TracedExchange]]:
    """(infrastructure errors on the task's path, side-channel errors), each in trace order.
    A record without `task_hosts` (written before it was kept) has every error on the path."""
    failed = [ex for ex in exchanges if ex.infra_error]
    if not failed or "task_hosts" not in record:
        return failed, []
    hosts = set(record.get("task_hosts") or ())
    hosts |= {host_key(ex.url) for ex in exchanges if ex.raw.get("matched") or ex.is_model}
    patterns = _task_patterns(task)
    on_path, side = [], []
    for ex in failed:
        depends = (host_key(ex.url) in hosts or ex.is_model or bool(ex.raw.get("matched"))
                   or matches_any(patterns, ex) is not None)
        (on_path if depends else side).append(ex)
    return on_path, side


def fix_for(ex: TracedExchange, side_channel: bool) -> str:
    """What to do about one infrastructure error, for the reason it actually had."""
    reason, host = ex.infra_error or "", ex.netloc
    if _TLS.search(reason):
        return f"--upstream-ca FILE if {host}'s certificate comes from a private CA or is self-signed"
    if side_channel:
        return f"--no-proxy {host} (a request the task does not need: let it go around the proxy)"
    if _UNREACHABLE.search(reason):
        return f"check that {host} is up and its name resolves from here"
    return f"check {host} and the network between it and this machine"


def infra_detail(ex: TracedExchange, side_channel: bool = False) -> str:
    """`METHOD host: reason → fix`, the one line a verdict and a report give an infrastructure error."""
    return f"{ex.method} {ex.netloc}: {ex.infra_error} → {fix_for(ex, side_channel)}"


def side_channel_record(ex: TracedExchange) -> dict[str, Any]:
    """What a verdict keeps of a side-channel error."""
    return {"seq": ex.seq, "request": f"{ex.method} {ex.netloc}{ex.route}", "error": ex.infra_error,
            "fix": fix_for(ex, True)}
