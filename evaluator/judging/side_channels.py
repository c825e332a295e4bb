"""Infrastructure errors on the task's path, and side channels.

    on_path, side = split_infra_errors(task, record, exchanges)

An error the proxy met reaching an upstream (no fault's doing: refused, DNS, TLS, a reset) says
the harness could not know how the agent did. Frameworks also send traffic that has nothing to
do with the task; offline or behind locked egress it fails, and discarding the verdict for it
would hide real results. But the harness cannot tell such traffic from a tool API whose URL
lives only in the agent's own config, so it does not guess: a failed request is a *side
channel* (recorded in the verdict's `side_channel_errors` and the report, the verdict stands)
only when a known pattern names it (tasks.side_channel's `[METHOD ]HOST[:PORT][/PATH]`):

- BUILT_IN below: framework telemetry and price lists, each with the variable that turns it off;
- the task's `side_channels:` (a tasks file, at the top or per task, or a monitor's policy);
- the record's `side_channels` (`--side-channel` on run and monitor).

Every other error is on the task's path (the episode is incomplete, infra_error), and so is
every error of an episode in which no request got an answer from its upstream: nothing the
agent did was seen working. Each error carries the fix for its actual reason: `--upstream-ca`
for TLS verification only, `--no-proxy HOST` for a side channel that cannot be reached.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from urllib.parse import urlsplit

from faultproxy.evaluator.traces import TracedExchange
from faultproxy.formats.run_records import EpisodeRecord, SideChannelError
from faultproxy.tasks.side_channel import SideChannel, parse_side_channels
from faultproxy.tasks.task_model import Task

_DEFAULT_PORTS = {"http": 80, "https": 443}
# Known side channels of real stacks (docs/agents.md#side-channels says how to turn each off).
BUILT_IN = parse_side_channels((
    "POST api.openai.com/v1/traces/ingest",  # OpenAI Agents SDK traces; OPENAI_AGENTS_DISABLE_TRACING=1
    "GET raw.githubusercontent.com/BerriAI/litellm/*",  # litellm's model cost map; LITELLM_LOCAL_MODEL_COST_MAP=True
))
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


def known_side_channels(task: Task, record: EpisodeRecord) -> tuple[SideChannel, ...]:
    """The built-in side channels, the task's and the run's (`--side-channel`, in the record)."""
    try:
        declared = parse_side_channels(record.get("side_channels") or ())
    except ValueError:  # a hand-edited log: what cannot be read names nothing
        declared = ()
    return (*BUILT_IN, *getattr(task, "side_channels", ()), *declared)


def is_side_channel(ex: TracedExchange, channels: Sequence[SideChannel]) -> bool:
    """Does one of `channels` name this request?"""
    key = host_key(ex.url)
    port = int(key.rsplit(":", 1)[1]) if key else None
    return any(channel.matches(ex.method, ex.host, port, ex.route) for channel in channels)


def split_infra_errors(task: Task, record: EpisodeRecord,
                       exchanges: Sequence[TracedExchange]) -> tuple[list[TracedExchange], list[TracedExchange]]:
    """(infrastructure errors on the task's path, side-channel errors), each in trace order."""
    failed = [ex for ex in exchanges if ex.infra_error]
    requests = [ex for ex in exchanges if ex.is_request]
    if not failed or all(ex.infra_error for ex in requests):
        return failed, []  # none, or nothing got through: not one request seen working
    channels = known_side_channels(task, record)
    on_path, side = [], []
    for ex in failed:
        (side if is_side_channel(ex, channels) else on_path).append(ex)
    return on_path, side


def fix_for(ex: TracedExchange, side_channel: bool) -> str:
    """What to do about one infrastructure error, for the reason it actually had."""
    reason, host = ex.infra_error or "", ex.netloc
    declare = "" if side_channel else f" (or --side-channel {ex.host}{ex.route} if the task does not need it)"
    if _TLS.search(reason):
        return f"--upstream-ca FILE if {host}'s certificate comes from a private CA or is self-signed{declare}"
    if side_channel:
        return f"--no-proxy {host} (a request the task does not need: let it go around the proxy)"
    if _UNREACHABLE.search(reason):
        return f"check that {host} is up and its name resolves from here{declare}"
    return f"check {host} and the network between it and this machine{declare}"


def infra_detail(ex: TracedExchange, side_channel: bool = False) -> str:
    """`METHOD host: reason → fix`, the one line a verdict and a report give an infrastructure error."""
    return f"{ex.method} {ex.netloc}: {ex.infra_error} → {fix_for(ex, side_channel)}"


def side_channel_record(ex: TracedExchange) -> SideChannelError:
    """What a verdict keeps of a side-channel error."""
    return {"seq": ex.seq, "request": f"{ex.method} {ex.netloc}{ex.route}", "error": ex.infra_error,
            "fix": fix_for(ex, True)}
