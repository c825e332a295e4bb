"""A task's `expected:` block read from its node: the end state (with the paths to ignore or
compare as multisets), the effects, the final answer's check and whether the agent should
escalate.
"""

from __future__ import annotations

import re

from faultproxy.formats.yaml_input import YamlReader
from faultproxy.tasks.task_model import METHOD, OUTPUT_KINDS, Effect, Expected, OutputSpec, mcp_tool_path
from yaml.nodes import Node

EXPECTED_FIELDS = ("state", "ignore", "multiset", "effects", "output", "escalate")
EFFECT_FIELDS = ("method", "path", "mcp", "count")

_DOTTED = r"[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*"
_CALLABLE = re.compile(rf"{_DOTTED}:{_DOTTED}")


def read_expected(r: YamlReader, node: Node, field: str) -> Expected:
    present = r.mapping(node, field, EXPECTED_FIELDS)

    def given(key: str) -> bool:
        return r.given(present, key)

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
    count = r.integer(present["count"], f"{field}.count", minimum=0) if r.given(present, "count") else 1
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
        return OutputSpec(kind, r.regex(value, kind_field))
    text = r.string(value, kind_field, nonempty=True)
    if not _CALLABLE.fullmatch(text):
        raise r.error(value, kind_field, f"expected \"module:function\" (e.g. mychecks.refund:check), got {text!r}")
    return OutputSpec(kind, text)


def _read_paths(r: YamlReader, node: Node, field: str) -> tuple[str, ...]:
    paths = []
    for i, item in enumerate(r.sequence(node, field, "dotted paths", allow_empty=True)):
        text = r.string(item, f"{field}[{i}]", nonempty=True)
        if not all(text.split(".")):
            raise r.error(item, f"{field}[{i}]", f"invalid path {text!r}: empty segment")
        paths.append(text)
    return tuple(paths)
