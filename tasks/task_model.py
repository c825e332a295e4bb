"""The tasks model: what each task asks, how its outcome is judged, and what it needs.

`Task.to_json()` / `Task.from_json()` carry a task into a run directory's plan.json and back, so
the evaluator never needs the original file. `Task.env` and `Task.severity` are effective values:
the file-level `env` and `severity` with the task's own entries on top. tasks/tasks_file.py reads and
validates the tasks file into this model.

Objects compare by value; mappings are plain dicts (so tasks pickle for remote executors): treat
them as read-only.
"""

from __future__ import annotations

import copy
import fnmatch
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from faultproxy.formats.yaml_input import suggest
from faultproxy.tasks.task_user import User
from faultproxy.tasks.side_channel import SideChannel

SEVERITIES = ("low", "medium", "high")
SEVERITY_RANK = MappingProxyType({severity: rank for rank, severity in enumerate(SEVERITIES)})
OUTPUT_KINDS = ("regex", "json", "checker")
# The evaluator's checks, by the names a tasks file's `severity:` gives them (evaluator.checks runs them;
# crash and budget are also the findings of an agent that crashed or overran a budget: evaluator.checks.check_run_end).
CHECK_NAMES = ("outcome", "end_state", "effects", "idempotency", "policy", "tool_calls", "retry", "escalation",
               "claimed_success", "injection_followed", "confirmation", "secrets", "budget", "crash")  # secrets, budget: live traffic's (evaluator.judging.online)
DEFAULT_SHAPE = "unclassified"
METHOD = re.compile(r"[A-Za-z]+|\*")  # an HTTP method, or * for any
MCP_PREFIX = "mcp:"  # "mcp:refund_order": a tools/call of that MCP tool, over stdio or HTTP


def mcp_tool_path(tool: str) -> str:
    """The glob that names an MCP tool's calls: the evaluator matches tool patterns against
    <endpoint>/tools/<name>, whichever transport carried the call."""
    return f"*/tools/{tool}"


def _glob_matches(pattern: str, host: str, path: str) -> bool:
    """fnmatch (case-sensitive, `*` crosses `/`) against the path, with and without its query; a
    pattern that starts with neither `/` nor `*` is also tried against host+path."""
    candidates = [path]
    if "?" in path:
        candidates.append(path.split("?", 1)[0])
    if not pattern.startswith(("/", "*")):
        host = host.lower()
        candidates += [host + candidate for candidate in list(candidates)]
    return any(fnmatch.fnmatchcase(candidate, pattern) for candidate in candidates)


def _method_matches(pattern: str, method: str) -> bool:
    return pattern == "*" or pattern == method.upper()


@dataclass(frozen=True)
class EndpointPattern:
    """"METHOD GLOB": method an HTTP method in upper case or `*` (any); see _glob_matches for GLOB.
    An irreversible pattern may say where its answers name the resource they committed: `id_path`,
    a dotted path into the answer's JSON (`cancellation_id`, `data.refund.id`)."""

    method: str
    path: str
    id_path: str | None = None

    @classmethod
    def parse(cls, text: str) -> EndpointPattern:
        """From "METHOD GLOB" or "mcp:TOOL" (a glob on the tool's name); ValueError says what is wrong."""
        if text.startswith(MCP_PREFIX):
            tool = text[len(MCP_PREFIX):].strip()
            if not tool or " " in tool:
                raise ValueError(f"bad MCP tool pattern {text!r}; expected mcp:TOOL, e.g. \"mcp:refund_order\"")
            return cls("*", mcp_tool_path(tool))
        parts = text.split()
        if len(parts) != 2:
            raise ValueError(f"bad endpoint pattern {text!r}; expected \"METHOD GLOB\", e.g. \"POST */refund\"")
        method, glob = parts
        if not METHOD.fullmatch(method):
            raise ValueError(f"bad method {method!r} in {text!r}; expected an HTTP method (a word) or *")
        return cls(method.upper(), glob)

    def matches(self, method: str, host: str, path: str) -> bool:
        return _method_matches(self.method, method) and _glob_matches(self.path, host, path)

    def to_json(self) -> str | dict[str, str]:
        """The pattern as written: "METHOD GLOB", or {pattern, id} when it names a resource id."""
        return str(self) if self.id_path is None else {"pattern": str(self), "id": self.id_path}

    @classmethod
    def from_json(cls, data: str | Mapping[str, str]) -> EndpointPattern:
        if isinstance(data, str):
            return cls.parse(data)
        return replace(cls.parse(data["pattern"]), id_path=data.get("id"))

    def __str__(self) -> str:
        tool_glob = mcp_tool_path("")
        if self.method == "*" and self.path.startswith(tool_glob):
            return MCP_PREFIX + self.path[len(tool_glob):]
        return f"{self.method} {self.path}"


@dataclass(frozen=True)
class Effect:
    """A committed call the end state should show `count` times (0: must not happen)."""

    method: str
    path: str
    count: int = 1

    def matches(self, method: str, host: str, path: str) -> bool:
        return _method_matches(self.method, method) and _glob_matches(self.path, host, path)


@dataclass(frozen=True)
class OutputSpec:
    """How the final answer is checked. kind "regex": value is the pattern (re.search); "json":
    value is a subset the answer's JSON must contain; "checker": value is "module:function"."""

    kind: str
    value: Any

    def __hash__(self) -> int:
        return hash((self.kind, json.dumps(self.value, sort_keys=True)))


def load_checker(target: str) -> Callable[..., Any]:
    """The function a "checker" output spec names ("module:function"), imported; ImportError or
    AttributeError (with a message that says which) when it cannot be found."""
    module_name, _, function_name = target.partition(":")
    function = getattr(importlib.import_module(module_name), function_name, None)
    if not callable(function):
        raise AttributeError(f"module {module_name!r} has no function {function_name!r}")
    return function


@dataclass(frozen=True)
class Expected:
    """What a successful episode leaves behind. `state` (any JSON, None if not checked) is a subset
    of the end state; `ignore` and `multiset` are dotted paths (`*` for any key or index)."""

    state: Any = None
    ignore: tuple[str, ...] = ()
    multiset: tuple[str, ...] = ()
    effects: tuple[Effect, ...] = ()
    output: OutputSpec | None = None
    escalate: bool | None = None

    def __hash__(self) -> int:
        return hash((self.ignore, self.multiset, self.effects, self.output, self.escalate))

    def to_json(self) -> dict[str, Any]:
        return {
            "state": copy.deepcopy(self.state),
            "ignore": list(self.ignore),
            "multiset": list(self.multiset),
            "effects": [{"method": e.method, "path": e.path, "count": e.count} for e in self.effects],
            "output": None if self.output is None else {"kind": self.output.kind,
                                                        "value": copy.deepcopy(self.output.value)},
            "escalate": self.escalate,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Expected:
        output = data.get("output")
        return cls(
            state=copy.deepcopy(data.get("state")),
            ignore=tuple(data.get("ignore") or ()),
            multiset=tuple(data.get("multiset") or ()),
            effects=tuple(Effect(e["method"], e["path"], int(e.get("count", 1))) for e in data.get("effects") or ()),
            output=None if output is None else OutputSpec(output["kind"], copy.deepcopy(output["value"])),
            escalate=data.get("escalate"),
        )


@dataclass(frozen=True)
class Budgets:
    """Limits on one episode; None is no limit. `cost` is in the currency of `prices` (the file's
    prices per model, per million tokens, which the loader attaches to a task with a cost budget)."""

    wall_s: float | None = None
    requests: int | None = None
    tokens: int | None = None
    cost: float | None = None
    prices: Mapping[str, Mapping[str, float]] = field(default_factory=dict)

    def __hash__(self) -> int:  # prices is a dict; the limits alone tell budgets apart well enough
        return hash((self.wall_s, self.requests, self.tokens, self.cost))

    def to_json(self) -> dict[str, Any]:
        cost = {"cost": self.cost, "prices": {m: dict(p) for m, p in self.prices.items()}} if self.cost is not None else {}
        return {"wall_s": self.wall_s, "requests": self.requests, "tokens": self.tokens, **cost}  # no cost: as before

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Budgets:
        wall_s, cost = data.get("wall_s"), data.get("cost")
        return cls(None if wall_s is None else float(wall_s), data.get("requests"), data.get("tokens"),
                   None if cost is None else float(cost), dict(data.get("prices") or {}))


@dataclass(frozen=True)
class Task:
    """One task of a tasks file; see the module docstring for env and severity."""

    id: str
    prompt: str
    shape: str = DEFAULT_SHAPE
    states: tuple[str, ...] = ()
    reset_url: str | None = None
    state_url: str | None = None
    expected: Expected = field(default_factory=Expected)
    irreversible: tuple[EndpointPattern, ...] = ()
    forbidden: tuple[EndpointPattern, ...] = ()
    read_only: tuple[EndpointPattern, ...] = ()  # requests that only read, whatever their method or annotations
    secrets: tuple[str, ...] = ()
    secret_hosts: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    max_tool_calls: int | None = None
    max_retries: int | None = None
    budgets: Budgets = field(default_factory=Budgets)
    severity: Mapping[str, str] = field(default_factory=dict)
    env: Mapping[str, str] = field(default_factory=dict)
    line: int = 0
    online: bool = False  # live traffic under a policy (tasks.tasks_file.load_policy): judged by evaluator.judging.online
    side_channels: tuple[SideChannel, ...] = ()  # requests the task does not depend on (tasks.side_channel)
    user: User | None = None  # a conversation's user (tasks.task_user); None: one prompt, no conversation
    confirm_before: tuple[EndpointPattern, ...] = ()  # irreversible steps the user must agree to first

    def __hash__(self) -> int:  # consistent with ==, which compares every field
        return hash((self.id, self.prompt, self.line))

    @property
    def expects_traffic(self) -> bool:
        """Does success need the agent to reach something through the proxy: an expected effect,
        or an expected end state? (An episode of such a task with an empty trace judged nothing.)"""
        return self.expected.state is not None or any(effect.count > 0 for effect in self.expected.effects)

    def to_json(self) -> dict[str, Any]:
        """A plain JSON-able dict; Task.from_json(task.to_json()) == task."""
        return {
            "id": self.id,
            "prompt": self.prompt,
            "shape": self.shape,
            "states": list(self.states),
            "reset_url": self.reset_url,
            "state_url": self.state_url,
            "expected": self.expected.to_json(),
            "irreversible": [p.to_json() for p in self.irreversible],
            "forbidden": [str(p) for p in self.forbidden],
            "secrets": list(self.secrets),
            "secret_hosts": {name: list(hosts) for name, hosts in self.secret_hosts.items()},
            "max_tool_calls": self.max_tool_calls,
            "max_retries": self.max_retries,
            "budgets": self.budgets.to_json(),
            "severity": dict(self.severity),
            "env": dict(self.env),
            "line": self.line,
            **({"online": True} if self.online else {}),  # absent otherwise: tasks' digests stay as they were
            **({"read_only": [str(p) for p in self.read_only]} if self.read_only else {}),  # likewise
            **({"side_channels": [str(s) for s in self.side_channels]} if self.side_channels else {}),  # likewise
            **({"user": self.user.to_json()} if self.user else {}),  # likewise
            **({"confirm_before": [str(p) for p in self.confirm_before]} if self.confirm_before else {}),
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Task:
        """Rebuild a task written by to_json (absent optional keys take their defaults)."""
        missing = [key for key in ("id", "prompt") if key not in data]
        if missing:
            raise ValueError(f"a task needs {' and '.join(missing)}; got keys {', '.join(sorted(data)) or 'none'}")
        return cls(
            id=data["id"],
            prompt=data["prompt"],
            shape=data.get("shape") or DEFAULT_SHAPE,
            states=tuple(data.get("states") or ()),
            reset_url=data.get("reset_url"),
            state_url=data.get("state_url"),
            expected=Expected.from_json(data.get("expected") or {}),
            irreversible=tuple(EndpointPattern.from_json(p) for p in data.get("irreversible") or ()),
            forbidden=tuple(EndpointPattern.parse(p) for p in data.get("forbidden") or ()),
            read_only=tuple(EndpointPattern.parse(p) for p in data.get("read_only") or ()),
            secrets=tuple(data.get("secrets") or ()),
            secret_hosts={name: tuple(hosts) for name, hosts in (data.get("secret_hosts") or {}).items()},
            max_tool_calls=data.get("max_tool_calls"),
            max_retries=data.get("max_retries"),
            budgets=Budgets.from_json(data.get("budgets") or {}),
            severity=dict(data.get("severity") or {}),
            env=dict(data.get("env") or {}),
            line=int(data.get("line", 0)),
            online=data.get("online") is True,
            side_channels=tuple(SideChannel.parse(text) for text in data.get("side_channels") or ()),
            user=User.from_json(data["user"]) if data.get("user") else None,
            confirm_before=tuple(EndpointPattern.parse(p) for p in data.get("confirm_before") or ()),
        )


@dataclass(frozen=True)
class TaskSet:
    """A validated tasks file. `env` and `severity` are the file-level defaults (already folded
    into each task); `prices` are per model, in currency per million tokens; `path` is absolute;
    `digest` is the sha256 of the canonical JSON of the content (not of its formatting, location
    or line numbers)."""

    tasks: tuple[Task, ...]
    env: Mapping[str, str]
    severity: Mapping[str, str]
    prices: Mapping[str, Mapping[str, float]]
    path: str
    digest: str

    def __hash__(self) -> int:
        return hash(self.digest)

    def __iter__(self) -> Iterator[Task]:
        return iter(self.tasks)

    def __len__(self) -> int:
        return len(self.tasks)

    @property
    def ids(self) -> tuple[str, ...]:
        """The task ids, in file order."""
        return tuple(task.id for task in self.tasks)

    def by_id(self, task_id: str) -> Task:
        """The task with this id; KeyError naming the file and the closest id otherwise."""
        for task in self.tasks:
            if task.id == task_id:
                return task
        raise KeyError(f"no task '{task_id}' in {self.path}{suggest(task_id, self.ids)}")

    def only(self, task_ids: Iterable[str]) -> TaskSet:
        """The named tasks alone, in file order; a name that is not a task raises ValueError."""
        wanted = set(task_ids)
        for task_id in wanted:
            try:
                self.by_id(task_id)
            except KeyError as error:
                raise ValueError(error.args[0]) from None
        tasks = tuple(task for task in self.tasks if task.id in wanted)
        return replace(self, tasks=tasks, digest=content_digest(tasks, self.env, self.severity, self.prices))


def content_digest(tasks: tuple[Task, ...], env: Mapping[str, str], severity: Mapping[str, str],
                   prices: Mapping[str, Mapping[str, float]]) -> str:
    tasks_json = []
    for task in tasks:
        data = task.to_json()
        del data["line"]
        tasks_json.append(data)
    content = {"env": env, "severity": severity, "prices": prices, "tasks": tasks_json}
    canonical = json.dumps(content, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(canonical.encode()).hexdigest()


__all__ = [
    "Budgets", "Effect", "EndpointPattern", "Expected", "OutputSpec", "SEVERITIES", "SEVERITY_RANK", "Task", "TaskSet",
    "content_digest",
]
