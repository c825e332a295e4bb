"""What reached the proxy in a run, for the headline that must say why no fault did.

    seen = seen_traffic(run_dir)   # read only when the faults of a whole run went unexercised
    seen.requests                  # Counter: "POST api.example.com/v1/responses" -> 9
    seen.matched                   # requests some rule's match block selected (the trace's `matched`)

Three different problems look alike from the numbers ("faults not exercised"), and each has its
own fix: no traffic reached the proxy (the agent's client ignores the proxy settings), traffic
reached it but no rule's match block selected any of it (the scenario does not describe this
agent's APIs: the requests seen say what to match), or rules matched but no fault was delivered
(probabilities, `when`). Traces are read only in that case, and at most TRACES_READ of them.
"""

from __future__ import annotations

import heapq
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from faultproxy.evaluator.traces import matches_any, parse_trace
from faultproxy.formats.rundir import FLOWS_DIR
from faultproxy.formats.trace import read_trace, rejected_path
from faultproxy.tasks.task_model import MCP_PREFIX

TRACES_READ = 200
SHOWN = 5  # the most frequent requests a headline names


@dataclass
class SeenTraffic:
    """Requests in the traces read, by "METHOD host/path" (ids in the path as {id}); the rules
    whose match blocks selected them; the `patterns` asked about and how many requests each named;
    the `names` of what was seen ("METHOD host/path", "mcp:TOOL"); whether traces were left unread."""

    requests: Counter[str] = field(default_factory=Counter)
    matched: int = 0
    rules: Counter[str] = field(default_factory=Counter)
    patterns: Counter[str] = field(default_factory=Counter)
    names: set[str] = field(default_factory=set)
    capped: bool = False

    @property
    def total(self) -> int:
        return sum(self.requests.values())

    def most_common(self, shown: int = SHOWN) -> str:
        """`POST host/v1/responses ×9, GET host/orders/{id} ×2` and how many more."""
        top = self.requests.most_common(shown)
        text = ", ".join(f"{request} ×{count}" for request, count in top)
        rest = len(self.requests) - len(top)
        return text + (f" and {rest} more" if rest > 0 else "")


def seen_traffic(run_dir: Path, traces: int = TRACES_READ, patterns: Mapping[str, Any] | None = None) -> SeenTraffic:
    """The requests of up to `traces` episode traces of the run (in name order), and how many of
    them each of `patterns` (text -> a tasks-file pattern) named."""
    seen = SeenTraffic()
    folder = Path(run_dir) / FLOWS_DIR
    names = first_trace_names(folder, traces + 1)  # one more: were any left unread?
    seen.capped = len(names) > traces
    for path in (folder / name for name in names[:traces]):
        for ex in parse_trace(read_trace(path)):
            if ex.session_kind is not None:  # a live session's turn or call: its upgrade is the request
                continue
            method, _, route = ex.endpoint(ex.raw.get("episode")).partition(" ")
            name = f"{method} {urlsplit(ex.url).netloc}{route}"
            seen.requests[name] += 1
            seen.names.add(f"{MCP_PREFIX}{ex.mcp_tool}" if ex.mcp_tool else name)
            seen.matched += bool(ex.raw.get("matched"))
            seen.rules.update(ex.raw.get("matched") or ())
            for text, pattern in (patterns or {}).items():
                seen.patterns[text] += matches_any((pattern,), ex) is not None
    return seen


def first_trace_names(folder: Path, count: int) -> list[str]:
    """The first `count` episode trace file names in the folder, in name order. A large run has
    hundreds of thousands: their names are listed as strings and only the first kept (no Path
    each, no full sort)."""
    rejected = rejected_path(folder).name  # the proxy's requests that no episode owned
    try:
        with os.scandir(folder) as entries:
            names = [entry.name for entry in entries if entry.name.endswith(".jsonl") and entry.name != rejected]
    except (FileNotFoundError, NotADirectoryError):
        return []
    return heapq.nsmallest(count, names)


def unexercised_reason(seen: SeenTraffic) -> str:
    """Why a run's faults reached no agent, told from the traffic its traces show."""
    if not seen.total:
        return "no traffic reached the proxy"
    if not seen.matched:
        return (f"traffic reached the proxy, but no rule matched: {seen.most_common()} "
                "(match these in the scenario's rules)")
    return (f"rules matched {seen.matched} of {seen.total} request(s), but no fault was delivered "
            "(see the rules' probability and `when`)")
