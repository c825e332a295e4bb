"""The tasks file: its format and its validation. This module owns the format.

A tasks file is YAML (`.yaml`, `.yml`: a mapping with `tasks` and optional `env`, `severity`,
`prices`, `side_channels`) or JSON Lines (`.jsonl`: one task object per line, blank lines
allowed). Every problem raises one TaskError whose str is "FILE:LINE: FIELD: message"; in a JSON Lines file the line is
the task's line and fields are named from the task (`expected.output.regex`), in YAML from the top
(`tasks[2].expected.output.regex`). An explicit null in an optional field means "not given".
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import InputError
from faultproxy.formats.paths import name_problem, path_component
from faultproxy.formats.yaml_input import (
    YamlReader,
    describe_value,
    is_number,
    join_field,
    line_of,
    suggest,
)
from faultproxy.tasks.conversation import Reply, User, UserModel
from faultproxy.tasks.model import (
    CHECK_NAMES,
    DEFAULT_SHAPE,
    METHOD,
    OUTPUT_KINDS,
    SEVERITIES,
    Budgets,
    Effect,
    EndpointPattern,
    Expected,
    OutputSpec,
    Task,
    TaskSet,
    content_digest,
    mcp_tool_path,
)
from faultproxy.tasks.side_channel import SideChannel
from faultproxy.tasks.templates import VARIABLE_NAME, TemplateError, template_variables
from yaml.nodes import MappingNode, Node, ScalarNode

TOP_FIELDS = ("env", "tasks", "severity", "prices", "side_channels")
TASK_FIELDS = ("id", "prompt", "shape", "states", "reset_url", "state_url", "expected", "irreversible",
               "forbidden", "read_only", "secrets", "secret_hosts", "max_tool_calls", "max_retries", "budgets",
               "severity", "env", "side_channels", "user", "confirm_before")
USER_FIELDS = ("replies", "max_turns", "reply_timeout_s", "yes", "no", "rephrase", "model", "persona",
               "base_url_env", "api_key_env")
USER_MODEL_FIELDS = ("model", "persona", "base_url_env", "api_key_env")
REPLY_FIELDS = ("say", "when", "end", "after", "silent", "probability")
EXPECTED_FIELDS = ("state", "ignore", "multiset", "effects", "output", "escalate")
EFFECT_FIELDS = ("method", "path", "mcp", "count")
IRREVERSIBLE_FIELDS = ("pattern", "id")
BUDGET_FIELDS = ("wall_s", "requests", "tokens", "cost", "prices")
MAX_WALL_S = 86_400.0  # a day per episode, as --budget-s
PRICE_FIELDS = ("input_per_mtok", "output_per_mtok")
# A policy file (faultproxy monitor): the task fields that judge traffic without an expected end
# state, under the same names and patterns as in a tasks file, plus the file-level prices.
POLICY_FIELDS = ("id", "shape", "irreversible", "forbidden", "read_only", "secrets", "secret_hosts", "max_tool_calls",
                 "max_retries", "budgets", "severity", "prices", "side_channels")
POLICY_ID = "live"
POLICY_PROMPT = "live traffic"

_ID = re.compile(r"[A-Za-z0-9_.-]+")
_WORD = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_CALLABLE = re.compile(rf"{_DOTTED}:{_DOTTED}")
_ID_PATH = re.compile(r"[^.\s]+(?:\.[^.\s]+)*")  # JSON keys joined by dots


class TaskError(InputError):
    """A bad tasks file."""


def load_tasks(path: str | Path) -> TaskSet:
    """Load and validate a tasks file (.yaml, .yml or .jsonl); TaskError on any problem."""
    path = Path(path)
    shown = str(path)
    suffix = path.suffix.lower()
    if suffix not in (".yaml", ".yml", ".jsonl"):
        raise TaskError(shown, None, None, f"unsupported tasks file type '{suffix or path.name}'; "
                                           "use .yaml or .yml (a mapping with 'tasks') or .jsonl (one task per line)")
    text = _read_text(path)
    r = YamlReader(shown, TaskError)
    if suffix == ".jsonl":
        tasks = _read_jsonl(r, text)
        env: dict[str, str] = {}
        severity: dict[str, str] = {}
        prices: dict[str, dict[str, float]] = {}
        side_channels: tuple[SideChannel, ...] = ()
    else:
        root = r.compose(text, empty="the file is empty; expected a mapping with a 'tasks' list")
        if not isinstance(root, MappingNode):
            raise r.error(root, None, "a tasks file must be a mapping with a 'tasks' list (and optional env, "
                                      f"severity, prices); got {r.describe(root)}")
        top = r.mapping(root, None, TOP_FIELDS, required=("tasks",))
        env = _read_env(r, top["env"], "env") if _given(r, top, "env") else {}
        severity = _read_severity(r, top["severity"], "severity") if _given(r, top, "severity") else {}
        prices = _read_prices(r, top["prices"]) if _given(r, top, "prices") else {}
        side_channels = _read_side_channels(r, top, None)
        items = r.sequence(top["tasks"], "tasks", "tasks")
        seen: dict[str, int] = {}
        tasks = tuple(_read_task(r, item, f"tasks[{i}]", seen, prices) for i, item in enumerate(items))
    tasks = tuple(_with_defaults(task, env, severity, side_channels) for task in tasks)
    digest = content_digest(tasks, env, severity, prices)
    return TaskSet(tasks, env, severity, prices, str(path.resolve()), digest)


def load_policy(path: str | Path | None) -> TaskSet:
    """A monitor's policy file (YAML: POLICY_FIELDS, each as in a tasks file's task) as a TaskSet
    of one online task (Task.online); None: the empty policy. TaskError on any problem."""
    if path is None:
        task = Task(POLICY_ID, POLICY_PROMPT, "live", online=True)
        return TaskSet((task,), {}, {}, {}, "<no policy>", content_digest((task,), {}, {}, {}))
    path = Path(path)
    r = YamlReader(str(path), TaskError)
    root = r.compose(_read_text(path), empty="the file is empty; expected a mapping of policy fields")
    if not isinstance(root, MappingNode):
        raise r.error(root, None, f"a policy file is a mapping of {', '.join(POLICY_FIELDS)}; got {r.describe(root)}")
    present = r.mapping(root, None, POLICY_FIELDS)
    prices = _read_prices(r, present["prices"]) if _given(r, present, "prices") else {}
    task_fields = {key: node for key, node in present.items() if key != "prices"}
    defaults = {"id": POLICY_ID, "prompt": POLICY_PROMPT, "shape": "live"}
    mark = root.start_mark  # the fields a policy does not give are read as if written at its top
    node = MappingNode("tag:yaml.org,2002:map", [
        *((ScalarNode("tag:yaml.org,2002:str", key, mark, mark), ScalarNode("tag:yaml.org,2002:str", value, mark, mark))
          for key, value in defaults.items() if key not in task_fields),
        *((ScalarNode("tag:yaml.org,2002:str", key, k.start_mark, k.end_mark), value)
          for k, value in root.value if (key := k.value) in task_fields),
    ], root.start_mark, root.end_mark)
    task = replace(_read_task(r, node, None, {}, prices), online=True)
    return TaskSet((task,), {}, dict(task.severity), prices, str(path.resolve()),
                   content_digest((task,), {}, dict(task.severity), prices))


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8-sig")
    except (OSError, UnicodeDecodeError) as exc:
        raise TaskError(str(path), None, None, f"cannot read the file: {exc}") from exc


def task_set_from_json(entries: Sequence[Task | Mapping[str, Any]], path: str = "<tasks>") -> TaskSet:
    """A TaskSet from tasks given in code: Task objects, or dicts as a tasks file writes them (or as
    Task.to_json() does). Dicts are validated like the lines of a JSON Lines file, entry i (from 1)
    standing for line i: TaskError("<tasks>:2: prompt: missing required field 'prompt'")."""
    r = YamlReader(path, TaskError)
    seen: dict[str, int] = {}
    tasks = []
    for number, entry in enumerate(entries, start=1):
        if isinstance(entry, Task):
            path_component(entry.id, path, "id", number)
            if entry.id in seen:
                raise TaskError(path, number, "id", f"duplicate task id '{entry.id}' (first on line {seen[entry.id]})")
            seen[entry.id] = number
            tasks.append(entry)
            continue
        if not isinstance(entry, Mapping):
            raise TaskError(path, number, None, f"each task must be a dict or a Task, got {type(entry).__name__}")
        try:
            text = json.dumps(_file_form(entry), allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise TaskError(path, number, None, f"the task is not plain JSON data: {exc}") from exc
        tasks.append(_read_task(r, r.compose_json(text, number), None, seen))
    if not tasks:
        raise TaskError(path, None, None, "no tasks given")
    result = tuple(tasks)
    return TaskSet(result, {}, {}, {}, path, content_digest(result, {}, {}, {}))


def single_task(prompt: str, task_id: str = "task") -> TaskSet:
    """A TaskSet of one task with this prompt and nothing expected (a run without a tasks file)."""
    return task_set_from_json([{"id": task_id, "prompt": prompt}], path="<command line>")


def _file_form(entry: Mapping[str, Any]) -> dict[str, Any]:
    """Task.to_json()'s extras in tasks-file form: no `line`, output {"kind": k, "value": v} as {k: v}."""
    entry = {key: value for key, value in entry.items() if key != "line"}
    expected = entry.get("expected")
    if isinstance(expected, Mapping):
        output = expected.get("output")
        if isinstance(output, Mapping) and set(output) == {"kind", "value"} and output["kind"] in OUTPUT_KINDS:
            entry["expected"] = {**expected, "output": {output["kind"]: output["value"]}}
    return entry


def _with_defaults(task: Task, env: Mapping[str, str], severity: Mapping[str, str],
                   side_channels: tuple[SideChannel, ...]) -> Task:
    extra = tuple(channel for channel in side_channels if channel not in task.side_channels)
    return replace(task, env={**env, **task.env}, severity={**severity, **task.severity},
                   side_channels=task.side_channels + extra)


def _read_jsonl(r: YamlReader, text: str) -> tuple[Task, ...]:
    r.check_size(text)
    seen: dict[str, int] = {}
    tasks = []
    for number, line in enumerate(text.split("\n"), start=1):  # not splitlines: JSON strings may hold U+2028
        if not line.strip():
            continue
        node = r.compose_json(line, number)
        if not isinstance(node, MappingNode):
            raise r.error(node, None, f"each line must be a JSON object (one task), got {r.describe(node)}")
        tasks.append(_read_task(r, node, None, seen))
    if not tasks:
        raise TaskError(r.path, 1, None, "the file has no tasks; expected one JSON object per line")
    return tuple(tasks)


def _given(r: YamlReader, present: Mapping[str, Node], key: str) -> bool:
    """Present and not null: an explicit null in an optional field means "not given"."""
    return key in present and not r.is_null(present[key])


def _read_task(r: YamlReader, node: Node, field: str | None, seen: dict[str, int],
               prices: Mapping[str, Mapping[str, float]] | None = None) -> Task:
    """One task; `prices` are the file's, which a cost budget is judged with."""
    if not isinstance(node, MappingNode):
        raise r.error(node, field, f"each task must be a mapping with id and prompt, got {r.describe(node)}")
    present = r.mapping(node, field, TASK_FIELDS, required=("id", "prompt"))

    def sub(key: str) -> str:
        return join_field(field, key)

    def given(key: str) -> bool:
        return _given(r, present, key)

    task_id = _read_id(r, present["id"], sub("id"), seen)
    prompt = r.string(present["prompt"], sub("prompt"), nonempty=True)
    shape = DEFAULT_SHAPE
    if given("shape"):
        shape = r.string(present["shape"], sub("shape"))
        if not _WORD.fullmatch(shape):
            raise r.error(present["shape"], sub("shape"),
                          f"a shape is one word (letters, digits, _ and -, e.g. writes_state), got {shape!r}")
    states = _read_names(r, present["states"], sub("states"), "states", None) if given("states") else ()
    urls = {key: _read_url(r, present[key], sub(key)) if given(key) else None
            for key in ("reset_url", "state_url")}
    expected = _read_expected(r, present["expected"], sub("expected")) if given("expected") else Expected()
    irreversible = _read_endpoints(r, present, "irreversible", field, with_id=True)
    forbidden = _read_endpoints(r, present, "forbidden", field)
    read_only = _read_endpoints(r, present, "read_only", field)
    secrets = _read_names(r, present["secrets"], sub("secrets"), "secret names", VARIABLE_NAME) if given("secrets") else ()
    secret_hosts = _read_secret_hosts(r, present["secret_hosts"], sub("secret_hosts"), secrets) \
        if given("secret_hosts") else {}
    max_tool_calls = r.integer(present["max_tool_calls"], sub("max_tool_calls"), minimum=1) \
        if given("max_tool_calls") else None
    max_retries = r.integer(present["max_retries"], sub("max_retries"), minimum=0) if given("max_retries") else None
    budgets = _read_budgets(r, present["budgets"], sub("budgets"), prices or {}) if given("budgets") else Budgets()
    severity = _read_severity(r, present["severity"], sub("severity")) if given("severity") else {}
    env = _read_env(r, present["env"], sub("env")) if given("env") else {}
    user = _read_user(r, present["user"], sub("user")) if given("user") else None
    confirm_before = _read_endpoints(r, present, "confirm_before", field)
    if confirm_before and user is None:
        raise r.error(present["confirm_before"], sub("confirm_before"),
                      "confirm_before needs someone to ask: give the task a `user:` block")
    return Task(task_id, prompt, shape, states, urls["reset_url"], urls["state_url"], expected, irreversible,
                forbidden, read_only, secrets, secret_hosts, max_tool_calls, max_retries, budgets, severity, env,
                line_of(node), side_channels=_read_side_channels(r, present, field), user=user,
                confirm_before=confirm_before)


def _read_user(r: YamlReader, node: Node, field: str) -> User:
    """A task's `user:` block (tasks.conversation): scripted replies, limits, yes/no patterns."""
    present = r.mapping(node, field, USER_FIELDS)
    defaults = User()
    replies: list[Reply] = []
    if _given(r, present, "replies"):
        items = r.sequence(present["replies"], f"{field}.replies", "replies", allow_empty=True)
        for i, item in enumerate(items):
            if replies and replies[-1].answers_anything:
                raise r.error(item, f"{field}.replies[{i}]", f"{field}.replies[{i - 1}] has no `when`, `after` or "
                                                             "`probability`, so it answers everything: the fallback "
                                                             "reply must be the last")
            replies.append(_read_reply(r, item, f"{field}.replies[{i}]"))
    max_turns = r.integer(present["max_turns"], f"{field}.max_turns", minimum=1) \
        if _given(r, present, "max_turns") else defaults.max_turns
    timeout = float(_positive(r, present["reply_timeout_s"], f"{field}.reply_timeout_s", False)) \
        if _given(r, present, "reply_timeout_s") else defaults.reply_timeout_s
    if timeout > MAX_WALL_S:
        raise r.error(present["reply_timeout_s"], f"{field}.reply_timeout_s",
                      f"must be at most {MAX_WALL_S:,g} seconds (a day), got {timeout:g}")
    yes, no = (_read_regex(r, present[key], f"{field}.{key}") if _given(r, present, key) else getattr(defaults, key)
               for key in ("yes", "no"))
    rephrase = r.boolean(present["rephrase"], f"{field}.rephrase") if _given(r, present, "rephrase") else False
    return User(tuple(replies), max_turns, timeout, yes, no, _read_user_model(r, node, present, field), rephrase)


def _read_user_model(r: YamlReader, node: Node, present: Mapping[str, Node], field: str) -> UserModel | None:
    """A model-played user's fields: model and base_url_env (variable names), persona; None if not given."""
    given = [key for key in USER_MODEL_FIELDS if _given(r, present, key)]
    if not given:
        return None
    if "model" not in given or "base_url_env" not in given:
        missing = "model" if "model" not in given else "base_url_env"
        raise r.error(node, f"{field}.{missing}", f"a model-played user needs {missing} (with model, persona, "
                                                  "base_url_env: the variable holding an OpenAI-compatible base URL)")
    if _given(r, present, "replies"):
        raise r.error(present["replies"], f"{field}.replies", "a user is scripted (replies) or played by a model "
                                                              "(model), not both")
    names = {}
    for key in ("base_url_env", "api_key_env"):
        if key in given:
            names[key] = r.string(present[key], f"{field}.{key}", nonempty=True)
            if not VARIABLE_NAME.fullmatch(names[key]):
                raise r.error(present[key], f"{field}.{key}", f"invalid environment variable name {names[key]!r}")
    persona = r.string(present["persona"], f"{field}.persona", nonempty=True) if "persona" in given else ""
    return UserModel(r.string(present["model"], f"{field}.model", nonempty=True), persona, names["base_url_env"],
                     names.get("api_key_env"))


def _read_reply(r: YamlReader, node: Node, field: str) -> Reply:
    present = r.mapping(node, field, REPLY_FIELDS)

    def given(key: str) -> bool:
        return _given(r, present, key)

    silent = r.boolean(present["silent"], f"{field}.silent") if given("silent") else False
    if silent == given("say"):
        raise r.error(present.get("say", node), f"{field}.say", "a silent reply says nothing: give say or silent: true"
                      if silent else "missing required field 'say' (or silent: true, for a user who does not answer)")
    when = _read_regex(r, present["when"], f"{field}.when") if given("when") else None
    end = r.boolean(present["end"], f"{field}.end") if given("end") else False
    after = r.integer(present["after"], f"{field}.after", minimum=1) if given("after") else None
    probability = _read_probability(r, present["probability"], f"{field}.probability") if given("probability") else None
    say = "" if silent else r.string(present["say"], f"{field}.say", nonempty=True)
    return Reply(say, when, end, after, silent, probability)


def _read_probability(r: YamlReader, node: Node, field: str) -> float | str:
    """A number in [0, 1], or the name of a scenario param (e.g. lambda) that the runner resolves."""
    value = r.value(node, field) if isinstance(node, ScalarNode) else None
    if isinstance(value, str) and _WORD.fullmatch(value):
        return value
    return float(r.number(node, field, minimum=0, maximum=1))


def _read_regex(r: YamlReader, node: Node, field: str) -> str:
    text = r.string(node, field, nonempty=True)
    try:
        re.compile(text)
    except re.error as exc:
        raise r.error(node, field, f"invalid regex {text!r}: {exc}") from exc
    return text


def _read_id(r: YamlReader, node: Node, field: str, seen: dict[str, int]) -> str:
    if isinstance(node, ScalarNode) and is_number(r.value(node, field)):
        raise r.error(node, field, f"expected a string, got {r.describe(node)} (quote it: \"{node.value}\")")
    task_id = r.string(node, field)
    if not _ID.fullmatch(task_id):
        raise r.error(node, field, f"invalid task id {task_id!r}: use only letters, digits, '_', '.' and '-'")
    if problem := name_problem(task_id):  # episode keys, and so file names, start with it
        raise r.error(node, field, f"invalid task id: {problem}")
    if task_id in seen:
        raise r.error(node, field, f"duplicate task id '{task_id}' (first on line {seen[task_id]})")
    seen[task_id] = line_of(node)
    return task_id


def _read_names(r: YamlReader, node: Node, field: str, what: str, pattern: re.Pattern[str] | None) -> tuple[str, ...]:
    """A list of distinct non-empty strings (matching `pattern`, if given)."""
    names: dict[str, int] = {}
    for i, item in enumerate(r.sequence(node, field, what, allow_empty=True)):
        item_field = f"{field}[{i}]"
        name = r.string(item, item_field, nonempty=True)
        if pattern is not None and not pattern.fullmatch(name):
            raise r.error(item, item_field, f"invalid name {name!r}: use letters, digits and _, not starting with a digit")
        if name in names:
            raise r.error(item, item_field, f"'{name}' is listed twice (first as {field}[{names[name]}])")
        names[name] = i
    return tuple(names)


def _read_template(r: YamlReader, node: Node, field: str) -> str:
    text = r.string(node, field, nonempty=True)
    try:
        template_variables(text)
    except TemplateError as exc:
        raise r.error(node, field, str(exc)) from exc
    return text


def _read_url(r: YamlReader, node: Node, field: str) -> str:
    """reset_url / state_url: an http(s) URL, or a template whose first variable supplies one
    (the runner checks the expanded URL before the first episode)."""
    text = _read_template(r, node, field)
    if not text.startswith(("http://", "https://", "${")):
        raise r.error(node, field, f"must be an http(s) URL, got {text!r}")
    return text


def _read_endpoints(r: YamlReader, present: Mapping[str, Node], key: str, field: str | None,
                    with_id: bool = False) -> tuple[EndpointPattern, ...]:
    """A list of "METHOD GLOB" patterns; `with_id` (irreversible) also allows {pattern, id}, id
    the dotted path of the resource id in the answers (`cancellation_id`, `data.refund.id`)."""
    if not _given(r, present, key):
        return ()
    list_field = join_field(field, key)
    patterns = []
    for i, item in enumerate(r.sequence(present[key], list_field, '"METHOD GLOB" patterns', allow_empty=True)):
        item_field = f"{list_field}[{i}]"
        id_path = None
        if with_id and isinstance(item, MappingNode):
            parts = r.mapping(item, item_field, IRREVERSIBLE_FIELDS, required=("pattern",))
            if _given(r, parts, "id"):
                id_path = r.string(parts["id"], f"{item_field}.id", nonempty=True)
                if not _ID_PATH.fullmatch(id_path):
                    raise r.error(parts["id"], f"{item_field}.id", f"expected a dotted path to the resource id "
                                  f"in the answer (e.g. cancellation_id or data.refund.id), got {id_path!r}")
            item, item_field = parts["pattern"], f"{item_field}.pattern"
        text = r.string(item, item_field)
        try:
            patterns.append(replace(EndpointPattern.parse(text), id_path=id_path))
        except ValueError as exc:
            raise r.error(item, item_field, str(exc)) from exc
    return tuple(patterns)


def _read_side_channels(r: YamlReader, present: Mapping[str, Node], field: str | None) -> tuple[SideChannel, ...]:
    if not _given(r, present, "side_channels"):
        return ()
    list_field = join_field(field, "side_channels")
    channels = []
    for i, item in enumerate(r.sequence(present["side_channels"], list_field, "[METHOD ]HOST[/PATH] patterns",
                                        allow_empty=True)):
        try:
            channels.append(SideChannel.parse(r.string(item, f"{list_field}[{i}]", nonempty=True)))
        except ValueError as exc:
            raise r.error(item, f"{list_field}[{i}]", str(exc)) from exc
    return tuple(channels)


def _read_secret_hosts(r: YamlReader, node: Node, field: str, secrets: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    result = {}
    for name, value in r.fields(node, field).items():
        name_field = join_field(field, name)
        if name not in secrets:
            listed = f"; secrets lists {', '.join(secrets)}" if secrets else "; the task lists no secrets"
            raise r.error(value, name_field, f"'{name}' is not one of the task's secrets{listed}"
                          + suggest(name, secrets))
        hosts = []
        for i, item in enumerate(r.sequence(value, name_field, "host globs")):
            host = r.string(item, f"{name_field}[{i}]", nonempty=True)
            if any(c.isspace() for c in host):
                raise r.error(item, f"{name_field}[{i}]", f"a host glob has no spaces, got {host!r}")
            hosts.append(host)
        result[name] = tuple(hosts)
    return result


def _positive(r: YamlReader, node: Node, field: str, integer: bool) -> int | float:
    value = r.integer(node, field) if integer else r.number(node, field)
    if value <= 0:
        raise r.error(node, field, f"must be positive, got {value}")
    return value


def _read_budgets(r: YamlReader, node: Node, field: str, prices: Mapping[str, Mapping[str, float]]) -> Budgets:
    present = r.mapping(node, field, BUDGET_FIELDS)
    wall_s = float(_positive(r, present["wall_s"], f"{field}.wall_s", False)) if _given(r, present, "wall_s") else None
    if wall_s is not None and wall_s > MAX_WALL_S:
        raise r.error(present["wall_s"], f"{field}.wall_s", f"must be at most {MAX_WALL_S:,g} seconds (a day), "
                                                            f"got {wall_s:g}")
    requests = int(_positive(r, present["requests"], f"{field}.requests", True)) \
        if _given(r, present, "requests") else None
    tokens = int(_positive(r, present["tokens"], f"{field}.tokens", True)) if _given(r, present, "tokens") else None
    # The task's own prices (a task written by Task.to_json carries them); else the file's.
    own = _read_prices(r, present["prices"], f"{field}.prices") if _given(r, present, "prices") else None
    if not _given(r, present, "cost"):
        if own is not None:
            raise r.error(present["prices"], f"{field}.prices", "prices here price a cost budget: give budgets.cost "
                                                                "too, or move them to the file's top-level `prices:`")
        return Budgets(wall_s, requests, tokens)
    cost = float(_positive(r, present["cost"], f"{field}.cost", False))
    prices = own if own is not None else prices
    if not prices:
        raise r.error(present["cost"], f"{field}.cost", "a cost budget needs prices: add a top-level `prices:` with "
                                                        "input_per_mtok and output_per_mtok for each model called")
    return Budgets(wall_s, requests, tokens, cost, prices)


def _read_severity(r: YamlReader, node: Node, field: str) -> dict[str, str]:
    result = {}
    for check, value in r.fields(node, field).items():
        check_field = join_field(field, check)
        if check not in CHECK_NAMES:
            raise r.error(value, check_field, f"no check is named {check!r}{suggest(check, CHECK_NAMES)}; "
                                              f"the checks are {', '.join(CHECK_NAMES)}")
        level = r.value(value, check_field) if isinstance(value, ScalarNode) else None
        if not isinstance(level, str) or level.lower() not in SEVERITIES:
            shown = describe_value(level) if isinstance(value, ScalarNode) else r.describe(value)
            raise r.error(value, check_field, f"severity must be one of {', '.join(SEVERITIES)}, got {shown}")
        result[check] = level.lower()
    return result


def _read_env(r: YamlReader, node: Node, field: str) -> dict[str, str]:
    """Names to strings; numbers are taken as written (`PORT: 8080` is "8080"). Values are templates
    (`${VAR}` is expanded per episode, `$$` is a `$`), so their syntax is checked here."""
    result = {}
    for name, value in r.fields(node, field).items():
        name_field = join_field(field, name)
        if not VARIABLE_NAME.fullmatch(name):
            raise r.error(value, name_field, f"invalid environment variable name {name!r}: "
                                             "use letters, digits and _, not starting with a digit")
        if isinstance(value, ScalarNode) and is_number(r.value(value, name_field)):
            result[name] = value.value
        else:
            result[name] = r.typed(value, name_field, "a string (quote it)", lambda v: isinstance(v, str))
            try:  # the runner expands ${VAR} in values at episode time
                template_variables(result[name])
            except TemplateError as exc:
                raise r.error(value, name_field, str(exc)) from exc
    return result


def _read_prices(r: YamlReader, node: Node, field: str = "prices") -> dict[str, dict[str, float]]:
    result = {}
    for model, value in r.fields(node, field).items():
        model_field = join_field(field, model)
        present = r.mapping(value, model_field, PRICE_FIELDS, required=PRICE_FIELDS)
        result[model] = {key: float(r.number(present[key], f"{model_field}.{key}", minimum=0)) for key in PRICE_FIELDS}
    return result


def _read_paths(r: YamlReader, node: Node, field: str) -> tuple[str, ...]:
    paths = []
    for i, item in enumerate(r.sequence(node, field, "dotted paths", allow_empty=True)):
        text = r.string(item, f"{field}[{i}]", nonempty=True)
        if not all(text.split(".")):
            raise r.error(item, f"{field}[{i}]", f"invalid path {text!r}: empty segment")
        paths.append(text)
    return tuple(paths)


def _read_expected(r: YamlReader, node: Node, field: str) -> Expected:
    present = r.mapping(node, field, EXPECTED_FIELDS)

    def given(key: str) -> bool:
        return _given(r, present, key)

    state = r.plain(present["state"], f"{field}.state") if given("state") else None
    ignore = _read_paths(r, present["ignore"], f"{field}.ignore") if given("ignore") else ()
    multiset = _read_paths(r, present["multiset"], f"{field}.multiset") if given("multiset") else ()
    effects: tuple[Effect, ...] = ()
    if given("effects"):
        items = r.sequence(present["effects"], f"{field}.effects", "effects", allow_empty=True)
        effects = tuple(_read_effect(r, item, f"{field}.effects[{i}]") for i, item in enumerate(items))
    output = _read_output(r, present["output"], f"{field}.output") if given("output") else None
    escalate = r.boolean(present["escalate"], f"{field}.escalate") if given("escalate") else None
    return Expected(state, ignore, multiset, effects, output, escalate)


def _read_effect(r: YamlReader, node: Node, field: str) -> Effect:
    """{method, path, count}, or {mcp: TOOL, count} for calls of an MCP tool (stdio or HTTP)."""
    present = r.mapping(node, field, EFFECT_FIELDS)
    count = r.integer(present["count"], f"{field}.count", minimum=0) if _given(r, present, "count") else 1
    if "mcp" in present:
        if "method" in present or "path" in present:
            raise r.error(node, field, "give either mcp: TOOL or method and path, not both")
        return Effect("*", mcp_tool_path(r.string(present["mcp"], f"{field}.mcp", nonempty=True)), count)
    for name in ("method", "path"):
        if name not in present:
            raise r.error(node, f"{field}.{name}", f"missing required field {name!r} (or give mcp: TOOL)")
    method = r.string(present["method"], f"{field}.method")
    if not METHOD.fullmatch(method):
        raise r.error(present["method"], f"{field}.method", f"expected an HTTP method (a word) or *, got {method!r}")
    path = r.string(present["path"], f"{field}.path", nonempty=True)
    return Effect(method.upper(), path, count)


def _read_output(r: YamlReader, node: Node, field: str) -> OutputSpec:
    present = r.mapping(node, field, OUTPUT_KINDS)
    if len(present) != 1:
        kinds = ", ".join(OUTPUT_KINDS)
        if not present:
            raise r.error(node, field, f"give exactly one of {kinds}, got none")
        second = list(present)[1]
        raise r.error(present[second], f"{field}.{second}",
                      f"give exactly one of {kinds}, got {' and '.join(present)}")
    kind, value = next(iter(present.items()))
    kind_field = f"{field}.{kind}"
    if kind == "json":
        return OutputSpec(kind, r.plain(value, kind_field))
    if kind == "regex":
        return OutputSpec(kind, _read_regex(r, value, kind_field))
    text = r.string(value, kind_field, nonempty=True)
    if not _CALLABLE.fullmatch(text):
        raise r.error(value, kind_field, f"expected \"module:function\" (e.g. mychecks.refund:check), got {text!r}")
    return OutputSpec(kind, text)



__all__ = ["TaskError", "load_tasks", "single_task", "task_set_from_json"]
