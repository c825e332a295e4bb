"""stale_state: a read answered with what the same request got earlier in the episode.

It is the kind that remembers reads: the proxy keeps the first answer to each read its rules
match (the most recent reads of an episode: proxy.episodes bounds how many), and a delivered
stale read is answered from that memory without forwarding.

With `after_write`, a read is served stale only once a write touched its resource since the
answer was kept. A write touches its own path on its own server (host and port), and whatever
`write_resources` names there: path templates filled from the write's JSON body, so
`POST /refunds {"order_id": 7}` with `write_resources: ["/orders/{order_id}"]` touches /orders/7.
A read is linked to a write on the same server when one path is the other or lies below it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from faultproxy.formats.yaml_input import YamlReader
from faultproxy.scenarios.faults.base import AgentAnswer, FaultKind, ParamSpec
from faultproxy.scenarios.scenario_model import MISSING, value_at
from yaml.nodes import Node, ScalarNode

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class ResourceTemplate:
    """A path naming what a write touches, with `{dotted.path}` placeholders into its JSON body."""

    template: str
    fields: tuple[tuple[str, ...], ...]

    def fill(self, body: Any) -> str | None:
        """The path for this body; None when a placeholder's value is missing or not a string or number."""
        values = []
        for path in self.fields:
            value = value_at(body, path)
            if value is MISSING or isinstance(value, bool) or not isinstance(value, (str, int, float)):
                return None
            values.append(str(value))
        parts = iter(values)
        return _PLACEHOLDER.sub(lambda _: next(parts), self.template)


def read_templates(r: YamlReader, node: Node, field: str) -> tuple[ResourceTemplate, ...]:
    """`write_resources`: a list of path templates, each checked here with its line. A lone
    string is refused rather than read as one: the field is a list, and saying so is clearer
    than guessing."""
    if isinstance(node, ScalarNode):
        raise r.error(node, field, f"expected a list of path templates, e.g. [\"{node.value or '/orders/{id}'}\"], "
                                   f"got the string '{node.value}'")
    return tuple(_read_template(r, item, f"{field}[{i}]")
                 for i, item in enumerate(r.sequence(node, field, "path templates")))


def _read_template(r: YamlReader, node: Node, field: str) -> ResourceTemplate:
    text = r.string(node, field)
    if not text.startswith("/"):
        raise r.error(node, field, f"a path template starts with '/', got '{text}'")
    if "{" in _PLACEHOLDER.sub("", text) or "}" in _PLACEHOLDER.sub("", text):
        raise r.error(node, field, f"unbalanced braces in '{text}'")
    fields = tuple(tuple(name.split(".")) for name in _PLACEHOLDER.findall(text))
    if not all(all(segment for segment in path) for path in fields):
        raise r.error(node, field, f"a placeholder in '{text}' names no body field (write {{order_id}} or {{order.id}})")
    return ResourceTemplate(text, fields)


KIND = FaultKind(
    name="stale_state",
    description=("a read answered with what the same request got earlier in the episode (the episode's 256 most "
                 "recently used reads are kept); a JSON-RPC call its rule matches (an MCP tool, over HTTP or "
                 "stdio) counts as a read, answered with its own id"),
    params={
        "after_write": ParamSpec("boolean", False, "serve a read stale only once a write to its server touched "
                                 "its path (one path lying below the other) since its answer was kept"),
        "write_resources": ParamSpec("templates", (), "a list of paths a write touches on its server besides its "
                                     "own, filled from its JSON body: [\"/orders/{order_id}\"] links POST /refunds "
                                     "{\"order_id\": 7} to GET /orders/7 (a lone string is refused)",
                                     read=read_templates),
    },
    forwards=False,
    remembers_reads=True,
    went_on=AgentAnswer("answered from stale state", "re-read before answering when state may have changed"),
    went_on_writing=AgentAnswer("read stale state and wrote", "re-read the resource right before writing to it"),
    over_stdio=("the answer the same call (same tool and arguments) got earlier in the episode, with this call's "
                "id"),
)
