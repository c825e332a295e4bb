"""A rule's `match:` block read from YAML, each error naming its line and field.

Its own module, apart from the loader, because a fault's parameter may be a match block too
(prompt_injection's `target`: the request that obeying the planted instruction would send), and
the fault kinds sit below the loader. `plain_match` rebuilds a match block from the plain value
a trace line keeps, through the same reader.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml
from faultproxy.formats.errors import InputError
from faultproxy.formats.model_apis import ModelApi
from faultproxy.formats.request_kinds import Kind
from faultproxy.formats.yaml_input import YamlReader, suggest
from faultproxy.scenarios.scenario_model import BodyPredicate, MatchSpec, MessageMatch, TextPattern
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

_METHOD = re.compile(r"[A-Za-z]+")
MATCH_FIELDS = ("host", "path", "method", "headers", "body", "api", "stream", "websocket", "kind")
SENDERS = ("client", "server")
ANY_MODEL_API = "model"  # `api: model`: a call of any model API formats.model_apis knows
MCP_PREFIX = "mcp:"  # "mcp:refund_order": a tools/call of that MCP tool, over HTTP or stdio


def _read_pattern(r: YamlReader, node: Node, field: str) -> TextPattern:
    source = r.string(node, field)
    try:
        return TextPattern.compile(source)
    except re.error as exc:
        raise r.error(node, field, f"invalid regex '{source[3:]}': {exc}") from exc


def read_match(r: YamlReader, node: Node, field: str) -> MatchSpec:
    present = r.mapping(node, field, MATCH_FIELDS)
    host = _read_pattern(r, present["host"], f"{field}.host") if "host" in present else None
    path = _read_pattern(r, present["path"], f"{field}.path") if "path" in present else None
    methods: frozenset[str] = frozenset()
    if "method" in present:
        methods = _read_methods(r, present["method"], f"{field}.method")
    headers = {}
    if "headers" in present:
        for name, value_node in r.fields(present["headers"], f"{field}.headers").items():
            headers[name.lower()] = _read_pattern(r, value_node, f"{field}.headers.{name}")
    body = _read_body(r, present["body"], f"{field}.body") if "body" in present else ()
    apis = _read_apis(r, present["api"], f"{field}.api") if "api" in present else None
    stream = _read_stream(r, present, field)
    websocket = _read_websocket(r, present["websocket"], f"{field}.websocket") if "websocket" in present else None
    kinds = _read_kinds(r, present["kind"], f"{field}.kind") if "kind" in present else None
    return MatchSpec(host, path, methods, headers, body, apis, stream, websocket, kinds)


def _read_kinds(r: YamlReader, node: Node, field: str) -> frozenset[Kind]:
    """`kind: write`, or a list of kinds: what the request is (formats.request_kinds)."""
    if isinstance(node, SequenceNode):
        items = [(item, f"{field}[{i}]") for i, item in enumerate(r.sequence(node, field, "request kinds"))]
    else:
        items = [(node, field)]
    kinds = set()
    for item, item_field in items:
        name = r.string(item, item_field)
        if name not in tuple(Kind):
            raise r.error(item, item_field, f"unknown request kind '{name}'; expected one of {', '.join(Kind)}"
                          + suggest(name, tuple(Kind)))
        kinds.add(Kind(name))
    return frozenset(kinds)


def _read_body(r: YamlReader, node: Node, field: str) -> tuple[BodyPredicate, ...]:
    return tuple(_read_body_predicate(r, key, value_node, f"{field}.{key}")
                 for key, value_node in r.fields(node, field).items())


def _read_websocket(r: YamlReader, node: Node, field: str) -> MessageMatch:
    """`websocket: {from: server, body: {...}}`; `websocket: {}` matches every message."""
    present = r.mapping(node, field, ("from", "body"))
    sender = r.choice(present["from"], f"{field}.from", r.string(present["from"], f"{field}.from"),
                      SENDERS) if "from" in present else None
    body = _read_body(r, present["body"], f"{field}.body") if "body" in present else ()
    return MessageMatch(sender, body)


def _read_apis(r: YamlReader, node: Node, field: str) -> frozenset[ModelApi]:
    """`api: model` (every model API), one API's name, or a list of names."""
    if isinstance(node, SequenceNode):
        items = [(item, f"{field}[{i}]") for i, item in enumerate(r.sequence(node, field, "model APIs"))]
    else:
        items = [(node, field)]
    names = (ANY_MODEL_API, *ModelApi)
    apis: set[ModelApi] = set()
    for item, item_field in items:
        name = r.string(item, item_field)
        if name not in names:
            raise r.error(item, item_field, f"unknown model API '{name}'; expected one of {', '.join(names)}"
                          + suggest(name, names))
        apis |= set(ModelApi) if name == ANY_MODEL_API else {ModelApi(name)}
    return frozenset(apis)


def _read_stream(r: YamlReader, present: Mapping[str, Node], field: str) -> bool | None:
    if "stream" not in present:
        return None
    if "api" not in present:  # each API asks for a stream its own way: the path, or a body field
        raise r.error(present["stream"], f"{field}.stream",
                      "stream needs api beside it (e.g. api: model), which says how a request asks to stream")
    return r.boolean(present["stream"], f"{field}.stream")


def _read_methods(r: YamlReader, node: Node, field: str) -> frozenset[str]:
    if isinstance(node, ScalarNode):  # `method: POST`, or a list of methods
        items = [(node, field)]
    elif isinstance(node, SequenceNode):
        items = [(item, f"{field}[{i}]") for i, item in enumerate(node.value)]
    else:
        raise r.error(node, field, f"expected a list of HTTP methods, got {r.describe(node)}")
    methods = set()
    for item, item_field in items:
        method = r.string(item, item_field)
        if not _METHOD.fullmatch(method):
            raise r.error(item, item_field, f"not an HTTP method: {method!r}")
        methods.add(method.upper())
    return frozenset(methods)


def _read_body_predicate(r: YamlReader, key: str, node: Node, field: str) -> BodyPredicate:
    path = tuple(key.split("."))
    if not all(path):
        raise r.error(node, field, f"invalid body path '{key}': empty segment")
    if isinstance(node, MappingNode):
        present = r.mapping(node, field, ("exists",), required=("exists",))
        return BodyPredicate(path, {"exists": r.boolean(present["exists"], f"{field}.exists")})
    if isinstance(node, SequenceNode):
        return BodyPredicate(path, tuple(_read_expected_scalar(r, item, f"{field}[{i}]")
                                         for i, item in enumerate(r.sequence(node, field, "alternatives"))))
    return BodyPredicate(path, _read_expected_scalar(r, node, field))


def _read_expected_scalar(r: YamlReader, node: Node, field: str) -> Any:
    value = r.typed(node, field, "a string, number, boolean or null",
                    lambda v: v is None or isinstance(v, (str, int, float)))
    return _read_pattern(r, node, field) if isinstance(value, str) else value


def read_target(r: YamlReader, node: Node, field: str) -> Any:
    """A match block, or "mcp:TOOL" for a tools/call of that MCP tool; kept as the plain value
    the scenario gave (so a trace line can carry it), once it reads as a match block."""
    if isinstance(node, ScalarNode):
        text = r.string(node, field)
        tool = text[len(MCP_PREFIX):].strip() if text.startswith(MCP_PREFIX) else ""
        if not tool or " " in tool:
            raise r.error(node, field, f"expected a match block or mcp:TOOL, got {text!r}")
        return text
    read_match(r, node, field)
    return r.plain(node, field)


def plain_match(value: Any) -> MatchSpec:
    """The match block a plain value stands for: a mapping as under `match:`, or "mcp:TOOL"
    (a JSON-RPC tools/call naming that tool, whichever transport carries it)."""
    if isinstance(value, str) and value.startswith(MCP_PREFIX):
        tool = value[len(MCP_PREFIX):].strip()
        return MatchSpec(body=(BodyPredicate(("method",), TextPattern.compile("tools/call")),
                               BodyPredicate(("params", "name"), TextPattern.compile(tool))))
    reader = YamlReader("<target>", InputError)
    return read_match(reader, reader.compose(yaml.safe_dump(value), empty="an empty match block"), "target")
