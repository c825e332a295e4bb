"""malformed_tool_call: the answer's first tool call broken — arguments that do not parse
(where the API carries them as a string), a required argument removed, a value of another JSON
type, or a tool name that does not exist. An answer without a tool call is left as it was."""

from __future__ import annotations

import json
from typing import Any

from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.faults.model_answer import ModelAnswerFault
from faultproxy.proxy.shapes import Answer, NotExpressible, ToolCall
from faultproxy.scenarios.faults import malformed_tool_call
from faultproxy.scenarios.faults.malformed_tool_call import string_arguments


class MalformedToolCallFault(ModelAnswerFault):
    kind = malformed_tool_call.KIND

    def edit(self, answer: Answer, api: ModelApi, streamed: bool) -> str | None:
        if not answer.tool_calls:
            return None
        call, mode = answer.tool_calls[0], self.params["mode"]
        if mode == "unknown_tool":
            old, call.name = call.name, self.params["name"] or f"{call.name}_v2"
            return f"tool {old!r} renamed {call.name!r}"
        if mode == "invalid_json":
            if not string_arguments(api, streamed):
                raise NotExpressible("invalid_json: this API carries tool-call arguments as a JSON object")
            call.arguments = _unparseable(call.arguments)
            return f"tool call {call.name!r} arguments made invalid JSON: {call.arguments!r}"
        return _edit_argument(call, mode, self.params["argument"])

    def nothing_to_change(self) -> str:
        return "the answer has no tool call (or not the argument named)"


def _unparseable(arguments: str) -> str:
    """The arguments as a model that lost its place writes them: a trailing comma before the
    closing brace, which no JSON parser accepts and every reader sees as almost right."""
    text = arguments.rstrip()
    return text[:-1] + ",}" if text.endswith("}") else text + ",}"


def _edit_argument(call: ToolCall, mode: str, argument: str | None) -> str | None:
    try:
        value = json.loads(call.arguments or "{}")
    except ValueError:
        return None
    if not isinstance(value, dict) or not value or (argument is not None and argument not in value):
        return None
    name = argument if argument is not None else next(iter(value))
    if mode == "missing_argument":
        del value[name]
        change = f"argument {name!r} removed"
    else:
        old = value[name]
        value[name] = _retyped(old)
        change = f"argument {name!r} changed from {json.dumps(old)} to {json.dumps(value[name])}"
    call.arguments = json.dumps(value)
    return f"tool call {call.name!r}: {change}"


def _retyped(value: Any) -> Any:
    """The same value as another JSON type, as models confuse them: a number for a numeric
    string (and a string for a number), a list around any other string, a string for the rest."""
    if isinstance(value, str):
        try:
            return int(value) if value.strip().lstrip("-").isdigit() else [value]
        except ValueError:
            return [value]
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    return json.dumps(value)
