"""One task of a tasks file (or a policy file's one task) read from its YAML or JSON node: its
id, prompt and shape, the patterns it declares (irreversible, forbidden, read_only,
confirm_before, side channels), its secrets, severities and environment; the blocks with more
inside (`user:`, `expected:`, `budgets:`) have modules of their own. tasks.tasks_file reads the
file around it; every problem is one TaskError naming the line and field.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import replace

from faultproxy.formats.paths import name_problem
from faultproxy.formats.yaml_input import YamlReader, describe_value, is_number, join_field, line_of, suggest
from faultproxy.tasks.budget_block import read_budgets
from faultproxy.tasks.expected_block import read_expected
from faultproxy.tasks.side_channel import SideChannel
from faultproxy.tasks.task_model import CHECK_NAMES, DEFAULT_SHAPE, SEVERITIES, Budgets, EndpointPattern, Expected, Task
from faultproxy.tasks.templates import VARIABLE_NAME, TemplateError, template_variables
from faultproxy.tasks.user_block import read_user
from yaml.nodes import MappingNode, Node, ScalarNode

TASK_FIELDS = ("id", "prompt", "shape", "states", "reset_url", "state_url", "expected", "irreversible",
               "forbidden", "read_only", "secrets", "secret_hosts", "max_tool_calls", "max_retries", "budgets",
               "severity", "env", "side_channels", "user", "confirm_before")
IRREVERSIBLE_FIELDS = ("pattern", "id")

_ID = re.compile(r"[A-Za-z0-9_.-]+")
_SHAPE = re.compile(r"[A-Za-z][A-Za-z0-9_-]*")
_ID_PATH = re.compile(r"[^.\s]+(?:\.[^.\s]+)*")  # JSON keys joined by dots


def read_task(r: YamlReader, node: Node, field: str | None, seen: dict[str, int],
               prices: Mapping[str, Mapping[str, float]] | None = None) -> Task:
    """One task; `prices` are the file's, which a cost budget is judged with."""
    if not isinstance(node, MappingNode):
        raise r.error(node, field, f"each task must be a mapping with id and prompt, got {r.describe(node)}")
    present = r.mapping(node, field, TASK_FIELDS, required=("id", "prompt"))

    def sub(key: str) -> str:
        return join_field(field, key)

    def given(key: str) -> bool:
        return r.given(present, key)

    task_id = _read_id(r, present["id"], sub("id"), seen)
    prompt = r.string(present["prompt"], sub("prompt"), nonempty=True)
    shape = DEFAULT_SHAPE
    if given("shape"):
        shape = r.string(present["shape"], sub("shape"))
        if not _SHAPE.fullmatch(shape):
            raise r.error(present["shape"], sub("shape"),
                          f"a shape is one word (letters, digits, _ and -, e.g. writes_state), got {shape!r}")
    states = _read_names(r, present["states"], sub("states"), "states", None) if given("states") else ()
    urls = {key: _read_url(r, present[key], sub(key)) if given(key) else None
            for key in ("reset_url", "state_url")}
    expected = read_expected(r, present["expected"], sub("expected")) if given("expected") else Expected()
    irreversible = _read_endpoints(r, present, "irreversible", field, with_id=True)
    forbidden = _read_endpoints(r, present, "forbidden", field)
    read_only = _read_endpoints(r, present, "read_only", field)
    secrets = _read_names(r, present["secrets"], sub("secrets"), "secret names", VARIABLE_NAME) if given("secrets") else ()
    secret_hosts = _read_secret_hosts(r, present["secret_hosts"], sub("secret_hosts"), secrets) \
        if given("secret_hosts") else {}
    max_tool_calls = r.integer(present["max_tool_calls"], sub("max_tool_calls"), minimum=1) \
        if given("max_tool_calls") else None
    max_retries = r.integer(present["max_retries"], sub("max_retries"), minimum=0) if given("max_retries") else None
    budgets = read_budgets(r, present["budgets"], sub("budgets"), prices or {}) if given("budgets") else Budgets()
    severity = read_severity(r, present["severity"], sub("severity")) if given("severity") else {}
    env = read_env(r, present["env"], sub("env")) if given("env") else {}
    user = read_user(r, present["user"], sub("user")) if given("user") else None
    confirm_before = _read_endpoints(r, present, "confirm_before", field)
    if confirm_before and user is None:
        raise r.error(present["confirm_before"], sub("confirm_before"),
                      "confirm_before needs someone to ask: give the task a `user:` block")
    return Task(task_id, prompt, shape, states, urls["reset_url"], urls["state_url"], expected, irreversible,
                forbidden, read_only, secrets, secret_hosts, max_tool_calls, max_retries, budgets, severity, env,
                line_of(node), side_channels=read_side_channels(r, present, field), user=user,
                confirm_before=confirm_before)


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
    if not r.given(present, key):
        return ()
    list_field = join_field(field, key)
    patterns = []
    for i, item in enumerate(r.sequence(present[key], list_field, '"METHOD GLOB" patterns', allow_empty=True)):
        item_field = f"{list_field}[{i}]"
        id_path = None
        if with_id and isinstance(item, MappingNode):
            parts = r.mapping(item, item_field, IRREVERSIBLE_FIELDS, required=("pattern",))
            if r.given(parts, "id"):
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


def read_side_channels(r: YamlReader, present: Mapping[str, Node], field: str | None) -> tuple[SideChannel, ...]:
    if not r.given(present, "side_channels"):
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


def read_severity(r: YamlReader, node: Node, field: str) -> dict[str, str]:
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


def read_env(r: YamlReader, node: Node, field: str) -> dict[str, str]:
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
