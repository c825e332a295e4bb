"""Configuration that never matched: a user's typo must not make the harness silently blind.

    alerts = unmatched_alerts(plan, seen)     # seen: evaluator.aggregate.traffic.seen_traffic(run_dir, ...)

- The scenario rules that could fire (plan.json's `rules_possible`) and whose match blocks selected
  no request of the run, in one line: `rule `lose-cancel` matched nothing; requests seen: POST
  host/bookings/{id}/cancel ×3` (a bundled scenario covers every model API: most runs meet a few).
- A tasks-file or policy pattern (`irreversible`, `forbidden`, `read_only`, `expected.effects`)
  that named no request or MCP tool of the run, when something seen is close to it (a typo:
  `mcp:issue-credit` beside the tool `issue_credit`), or when it is an effect the task expects to
  happen: named, with the nearest names seen. A `forbidden` pattern or a `count: 0` effect that
  matches nothing and resembles nothing is what a good run looks like, and is not named.
- A monitor's `--episode-by header:NAME` that no episode of the first EPISODES_READ was named by:
  the header and the headers that do vary (formats.session_headers; the monitor warns live too).
Traffic is read from at most TRACES_READ traces (evaluator.aggregate.traffic); the line says so when the
run had more.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from faultproxy.evaluator.aggregate.traffic import TRACES_READ, SeenTraffic
from faultproxy.formats.rundir import LOG_FILE, MONITOR_KEY, Plan, log_lines, trace_file
from faultproxy.formats.session_headers import missing_header_warning, varying_headers
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.task_model import MCP_PREFIX, Task, mcp_tool_path

NEAR_CUTOFF = 0.75  # difflib's ratio: issue-credit ~ issue_credit, refund ~ refunds; orders !~ payments
NEAR_SHOWN = 3
EPISODES_READ = 50  # a monitor's first episodes, read to see whether its session header ever applied


def watched_patterns(tasks: Iterable[Mapping[str, Any]]) -> dict[str, tuple[Any, bool]]:
    """The patterns of the plan's tasks (Task.to_json items), by their text: (pattern, whether a
    good run is expected to match it: an effect with a count above 0)."""
    patterns: dict[str, tuple[Any, bool]] = {}
    for item in tasks:
        task = Task.from_json(item)
        for pattern in (*task.irreversible, *task.forbidden, *task.read_only):
            patterns.setdefault(str(pattern), (pattern, False))
        for effect in task.expected.effects:
            text = effect_text(effect)
            expected = effect.count > 0 or patterns.get(text, (None, False))[1]
            patterns[text] = (effect, expected)
    return patterns


def effect_text(effect: Any) -> str:
    """An effect as a tasks file names it: `mcp:TOOL` or `METHOD PATH`."""
    tools = mcp_tool_path("")
    if effect.path.startswith(tools):
        return MCP_PREFIX + effect.path[len(tools):]
    return f"{effect.method} {effect.path}"


def unmatched_alerts(rules: Iterable[str], patterns: Mapping[str, tuple[Any, bool]], seen: SeenTraffic) -> list[str]:
    """One line per rule and per pattern that matched nothing (see the module docstring)."""
    where = f" in the {TRACES_READ} traces read" if seen.capped else ""
    requests = seen.most_common() or "none"
    unmatched = [f"`{name}`" for name in rules if not seen.rules[name]]
    alerts = [f"{'rule' if len(unmatched) == 1 else 'rules'} {', '.join(unmatched)} matched nothing{where}; "
              f"requests seen: {requests}"] if unmatched else []
    for text, (_, expected) in patterns.items():
        if seen.patterns[text]:
            continue
        near = nearest(text, seen.names)
        if near or expected:
            alerts.append(f"pattern `{text}` (tasks file or policy) matched no request or tool{where}; "
                          f"nearest seen: {', '.join(near) or requests}")
    return alerts


def nearest(text: str, names: Iterable[str]) -> list[str]:
    """The seen names closest to a pattern: MCP tools to `mcp:` patterns, HTTP requests (by the
    last word of their path, same method) to the others."""
    names = sorted(set(names))
    if text.startswith(MCP_PREFIX):
        tools = [name for name in names if name.startswith(MCP_PREFIX)]
        return difflib.get_close_matches(text, tools, NEAR_SHOWN, NEAR_CUTOFF)
    method, _, glob = text.partition(" ")
    word = _last_word(glob)
    by_word: dict[str, list[str]] = {}
    for name in names:
        seen_method, _, where = name.partition(" ")
        if not name.startswith(MCP_PREFIX) and method in ("*", seen_method):
            by_word.setdefault(_last_word(where), []).append(name)
    close = difflib.get_close_matches(word, list(by_word), NEAR_SHOWN, NEAR_CUTOFF) if word else []
    return [name for match in close for name in by_word[match]][:NEAR_SHOWN]


def _last_word(path: str) -> str:
    """The last path segment that is a word, not a wildcard or an id placeholder."""
    for part in reversed(path.split("?", 1)[0].split("/")):
        word = part.strip("*")
        if word and not word.startswith("{"):
            return word
    return ""


def episode_by_alerts(run_dir: Path, plan: Plan) -> list[str]:
    """A monitor's session-header rules that named none of its first EPISODES_READ episodes."""
    settings = plan.document.get(MONITOR_KEY)
    rules = [rule for rule in (settings or {}).get("episode_by") or () if str(rule).startswith("header:")]
    records = _first_episodes(Path(run_dir)) if rules else []
    if not records or any((record.get(MONITOR_KEY) or {}).get("rule") in rules for record in records):
        return []
    requests = []
    for record in records:
        path = trace_file(Path(run_dir), record)
        if path is not None:
            requests += [[tuple(pair) for pair in (line.get("request") or {}).get("headers") or ()]
                         for line in read_trace(path)]
    order = [*settings["episode_by"], *(["client"] if "client" not in settings["episode_by"] else [])]
    return [missing_header_warning(rule, len(requests), varying_headers(requests),
                                   [r for r in order[order.index(rule) + 1:] if not str(r).startswith("header:")])
            for rule in rules]


def _first_episodes(run_dir: Path) -> list[dict[str, Any]]:
    records = []
    for line in log_lines(run_dir / LOG_FILE):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("type") != "header":
            records.append(record)
        if len(records) >= EPISODES_READ:
            break
    return records
