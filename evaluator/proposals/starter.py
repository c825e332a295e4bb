"""What an observe run saw, generalised into what `faultproxy init` proposes: the user's own
endpoints (paths as globs where ids vary), which of them write, the MCP tools and what their
servers said they do, the model APIs called, and which writes touch which reads.

    seen = observe_run(run_dir)   # reads plan.json, episodes.jsonl and the traces only
    seen.total                    # 0: no traffic reached the proxy (the CLI says why, writes nothing)
    seen.endpoints, seen.tools, seen.model_apis, seen.tasks

Nothing is guessed beyond what the protocol says (formats.request_kinds): a write is a non-read
HTTP method or an MCP tool its server annotated as one; an MCP tool nobody annotated stays
unclassified. Which id-like path segments vary is read from the paths seen: a segment equal to
the episode's key, one that looks like an id (evaluator.statistics.metrics.endpoint_class), and segments
holding a digit that differ between otherwise equal paths become `*`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.evaluator.checks import json_type
from faultproxy.evaluator.statistics import endpoint_class
from faultproxy.evaluator.traces import TracedExchange, documents, mcp_tool_hints, parse_trace
from faultproxy.formats.model_apis import ModelApi, api_of_path, is_streamed
from faultproxy.formats.request_kinds import READ_METHODS, Access, ToolHints, annotated_access, is_destructive
from faultproxy.formats.rundir import read_run, trace_file
from faultproxy.formats.trace import read_trace
from faultproxy.tasks.task_model import MCP_PREFIX, Task

ANY = "*"
FIELDS_KEPT = 12  # fields of a read's answer proposed for drift, at most


@dataclass
class Endpoint:
    """An HTTP tool endpoint: method and path glob, how often it was called, what its reads returned."""

    method: str
    glob: str
    calls: int = 0
    with_query: int = 0  # calls that carried a query string
    fields: dict[str, str] = field(default_factory=dict)  # top-level answer field -> JSON type (reads)

    @property
    def writes(self) -> bool:
        return self.method not in READ_METHODS

    @property
    def key(self) -> str:
        return f"{self.method} {self.glob}"

    @property
    def match_path(self) -> str:
        """The glob a scenario's `match.path` needs (it is tried on the path with its query)."""
        return self.glob + ("[?]*" if self.calls and self.with_query == self.calls else "")


@dataclass
class Tool:
    """An MCP tool called (over HTTP or stdio): how often, and what its server's annotations say."""

    name: str
    calls: int = 0
    access: Access = Access.UNCLASSIFIED
    destructive: bool = False


@dataclass
class ModelUse:
    api: ModelApi
    calls: int = 0
    streamed: int = 0
    with_tools: int = 0


@dataclass
class TaskSeen:
    """One task of the run and what its episodes did."""

    task: Task
    episodes: int = 0
    hosts: set[str] = field(default_factory=set)
    effects: Counter[str] = field(default_factory=Counter)  # endpoint or "mcp:TOOL" -> committed writes, all episodes
    writes: set[str] = field(default_factory=set)  # endpoint keys and "mcp:TOOL" of the writes seen
    tools: set[str] = field(default_factory=set)  # MCP tools called


@dataclass(frozen=True)
class Link:
    """A write and a read of the same resource: by path (one lies below the other) or by a body
    field whose value names the read's resource (`template`, stale_state's write_resources)."""

    write: str  # endpoint key
    read: str  # endpoint key
    template: str | None = None


@dataclass
class Observed:
    run_dir: Path
    scenario: str | None
    episodes: int = 0
    total: int = 0  # exchanges seen, all episodes
    tasks: list[TaskSeen] = field(default_factory=list)
    endpoints: dict[str, Endpoint] = field(default_factory=dict)
    tools: dict[str, Tool] = field(default_factory=dict)
    model_apis: dict[ModelApi, ModelUse] = field(default_factory=dict)
    links: list[Link] = field(default_factory=list)
    command: list[str] = field(default_factory=list)  # the agent command the run ran
    base_urls: dict[str, str] = field(default_factory=dict)  # the base-URL variables the agent was given

    @property
    def reads(self) -> list[Endpoint]:
        return [e for e in self.endpoints.values() if not e.writes]

    @property
    def writes(self) -> list[Endpoint]:
        return [e for e in self.endpoints.values() if e.writes]


def observe_run(run_dir: Path) -> Observed:
    """Everything `init` proposes from, read from the run directory (a RunDirError when it is none)."""
    run = read_run(run_dir)
    seen = Observed(Path(run_dir), (run.plan.get("scenario") or {}).get("name"),
                    command=[str(part) for part in run.plan.get("command") or ()],
                    base_urls={str(k): str(v) for k, v in (run.plan.get("base_urls") or {}).items()})
    by_id = {item["id"]: TaskSeen(Task.from_json(item)) for item in (run.plan.get("tasks") or {}).get("items") or ()}
    traces: list[tuple[TaskSeen, str, list[TracedExchange], ToolHints]] = []
    for record in run.episodes:
        task = by_id.get(record.get("task_id"))
        if task is None:  # the report warns of log lines the plan does not name; nothing to propose from
            continue
        task.episodes += 1
        task.hosts.update(record.get("task_hosts") or ())
        path = trace_file(Path(run_dir), record)
        exchanges = parse_trace(read_trace(path)) if path is not None and path.is_file() else []
        hints = mcp_tool_hints(exchanges)  # from tools/list answers: plumbing, not the agent's requests
        traces.append((task, str(record.get("key") or ""), [ex for ex in exchanges if ex.is_request], hints))
    seen.episodes = len(traces)
    seen.tasks = [t for t in by_id.values() if t.episodes]
    seen.total = sum(len(exchanges) for _, _, exchanges, _ in traces)
    routes = generalise([_route_parts(ex, key) for _, key, exchanges, _ in traces for ex in exchanges
                          if _is_http_tool(ex)])
    for task, key, exchanges, hints in traces:
        for ex in exchanges:
            _take(seen, task, ex, key, routes, hints)
        _link(seen, exchanges, key, routes)
    return seen


def _is_http_tool(ex: TracedExchange) -> bool:
    return ex.is_tool_call and ex.mcp_tool is None and not ex.is_model and ex.rpc_method is None


def _route_parts(ex: TracedExchange, episode: str) -> tuple[str, ...]:
    """method, then the route's segments with the episode's key and id-like segments as `*`."""
    classed = endpoint_class(ex.method, ex.route).split(" ", 1)[1].split("/")
    raw = ex.route.split("/")
    return (ex.method, *(ANY if part == episode or shown == "{id}" else part for part, shown in zip(raw, classed)))


def generalise(routes: Iterable[tuple[str, ...]]) -> dict[tuple[str, ...], str]:
    """Each route (method, segments) -> its glob: segments holding a digit that vary between
    routes otherwise equal become `*`."""
    distinct = sorted(set(routes))
    glob_of = {route: list(route) for route in distinct}
    for i, a in enumerate(distinct):
        for b in distinct[i + 1:]:
            if len(a) != len(b) or a[0] != b[0]:
                continue
            differ = [n for n in range(1, len(a)) if a[n] != b[n]]
            if len(differ) == 1 and all(any(c.isdigit() for c in r[differ[0]]) for r in (a, b)):
                glob_of[a][differ[0]] = glob_of[b][differ[0]] = ANY
    return {route: "/".join(part if part == ANY else _literal(part) for part in parts[1:]) or "/"
            for route, parts in glob_of.items()}


def _literal(segment: str) -> str:
    """A path segment as a glob that matches it alone (fnmatch's `[`, `?` and `*` bracketed)."""
    return "".join(f"[{c}]" if c in "[?*" else c for c in segment)


def _take(seen: Observed, task: TaskSeen, ex: TracedExchange, key: str, routes: Mapping[tuple[str, ...], str],
          hints: ToolHints) -> None:
    if ex.is_model:
        api = api_of_path(ex.route)
        if api is None:  # a live session's turn: its upgrade is not proposed as a model call
            return
        use = seen.model_apis.setdefault(api, ModelUse(api))
        use.calls += 1
        use.streamed += is_streamed(api, ex.path, ex.body_json)
        use.with_tools += isinstance(ex.body_json, dict) and bool(ex.body_json.get("tools"))
        return
    if ex.mcp_tool is not None:
        tool = seen.tools.setdefault(ex.mcp_tool, Tool(ex.mcp_tool))
        tool.calls += 1
        annotations = hints.get((ex.server, ex.mcp_tool))
        tool.access = annotated_access(annotations) or tool.access
        tool.destructive = tool.destructive or is_destructive(annotations)
        task.tools.add(ex.mcp_tool)
        if tool.access is Access.WRITE:
            task.writes.add(MCP_PREFIX + ex.mcp_tool)
            task.effects[MCP_PREFIX + ex.mcp_tool] += ex.committed
        return
    if not _is_http_tool(ex):
        return
    endpoint = _endpoint(seen, ex, key, routes)
    endpoint.calls += 1
    endpoint.with_query += ex.path != ex.route
    if endpoint.writes:
        task.writes.add(endpoint.key)
        task.effects[endpoint.key] += ex.committed
    else:
        for document in documents(ex.raw.get("upstream") or {})[:1]:
            if isinstance(document, dict):
                for name, value in list(document.items())[:FIELDS_KEPT]:
                    endpoint.fields.setdefault(name, json_type(value))


def _endpoint(seen: Observed, ex: TracedExchange, key: str, routes: Mapping[tuple[str, ...], str]) -> Endpoint:
    glob = routes[_route_parts(ex, key)]
    return seen.endpoints.setdefault(f"{ex.method} {glob}", Endpoint(ex.method, glob))


def _link(seen: Observed, exchanges: list[TracedExchange], key: str, routes: Mapping[tuple[str, ...], str]) -> None:
    """Each write of this episode with each resource the episode read both before and after it
    (a stale read needs an earlier answer to serve): linked by path, or by a field of the write's
    JSON body whose value is a segment of the read's path."""
    http = [ex for ex in exchanges if _is_http_tool(ex)]
    for n, write in enumerate(http):
        if write.method in READ_METHODS:
            continue
        before = {ex.route for ex in http[:n] if ex.method in READ_METHODS}
        for read in (ex for ex in http[n + 1:] if ex.method in READ_METHODS and ex.route in before):
            w, r = _endpoint(seen, write, key, routes), _endpoint(seen, read, key, routes)
            if write.route.startswith(read.route.rstrip("/") + "/") or read.route.startswith(write.route):
                _add_link(seen, Link(w.key, r.key))
                continue
            template = _template(write.body_json, read.route, r.glob)
            if template:
                _add_link(seen, Link(w.key, r.key, template))


def _template(body: Any, read_route: str, read_glob: str) -> str | None:
    """The read's path with the segment a body field's value names as {field}, when every other
    segment is constant (write_resources is filled from the body alone)."""
    if not isinstance(body, dict):
        return None
    parts, globs = read_route.split("/"), read_glob.split("/")
    for name, value in body.items():
        if isinstance(value, bool) or not isinstance(value, (str, int)) or not isinstance(name, str) \
                or not name.replace("_", "").isalnum():
            continue
        hits = [n for n, part in enumerate(parts) if part == str(value)]
        if len(hits) == 1 and all(g != ANY for n, g in enumerate(globs) if n != hits[0]):
            return "/".join(f"{{{name}}}" if n == hits[0] else part for n, part in enumerate(parts))
    return None


def _add_link(seen: Observed, link: Link) -> None:
    if link not in seen.links:
        seen.links.append(link)
