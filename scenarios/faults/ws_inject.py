"""ws_inject: an extra WebSocket message, to the client or the server, before or after the
matching one: a literal `message` (any JSON), or a `preset` shaped for the API of the session
(OpenAI Realtime `error` events, Gemini Live's error and `goAway`; proxy.faults.ws_inject)."""

from __future__ import annotations

from typing import Any

from faultproxy.formats.yaml_input import YamlReader
from faultproxy.scenarios.faults.base import FaultKind, ParamProblem, ParamSpec
from yaml.nodes import Node

PRESETS = ("rate_limit", "server_error", "session_expired", "go_away")


def _read_message(r: YamlReader, node: Node, field: str) -> Any:
    return r.plain(node, field)


def _one_source(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    if ("message" in given) == ("preset" in given):
        raise ParamProblem("preset" if "preset" in given else "message",
                           "give exactly one of message (literal JSON) or preset")
    return params


KIND = FaultKind(
    name="ws_inject",
    description=("an extra WebSocket message before or after the matching one: literal JSON, or a preset in the "
                 "session's API's shape (OpenAI Realtime `error` events; Gemini Live's error and `goAway`)"),
    params={
        "to": ParamSpec("string", "client", "who receives the extra message", choices=("client", "server")),
        "position": ParamSpec("string", "after", "before or after the matching message",
                              choices=("before", "after")),
        "message": ParamSpec("json", None, "the message, as JSON (sent as text)", nullable=True,
                             read=_read_message),
        "preset": ParamSpec("string", None, "a message shaped for the session's API", choices=PRESETS,
                            nullable=True),
    },
    forwards=True,
    cross_check=_one_source,
    on_messages=True,
)
