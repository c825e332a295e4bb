"""Whether an MCP tool call's arguments fit a tool's input schema, as the official SDK's server
(MCPServer: pydantic) checks them and words what is wrong. The proxy answers in its place with
it when a fault changed a tool's schema (proxy.faults.lingering); the evaluator asks whether a
call the server rejected fitted the schema the client had been given (evaluator.traces.stale_tools).
"""

from __future__ import annotations

from typing import Any

# JSON Schema type -> the Python values of it, and pydantic's word and error type for it
_JSON_TYPES = {"string": ((str,), "string", "string_type"), "integer": ((int,), "integer", "int_type"),
               "number": ((int, float), "number", "float_type"), "boolean": ((bool,), "boolean", "bool_type"),
               "array": ((list,), "list", "list_type"), "object": ((dict,), "dictionary", "dict_type"),
               "null": ((type(None),), "None", "none_required")}


def call_arguments(body: Any) -> dict[str, Any]:
    """A tools/call's arguments ({} when it gives none, or no object)."""
    params = body.get("params") if isinstance(body, dict) else None
    arguments = params.get("arguments") if isinstance(params, dict) else None
    return arguments if isinstance(arguments, dict) else {}


def schema_problems(schema: dict[str, Any], arguments: dict[str, Any]) -> list[str]:
    """What an object schema's `required` and its properties' plain `type` say is wrong with the
    arguments, one `FIELD\n  message [type=..., input_value=..., input_type=...]` each, as pydantic
    words them (arguments it does not name are ignored, as the SDK's server ignores them)."""
    problems = [f"{name}\n  Field required [type=missing, input_value={arguments!r}, input_type=dict]"
                for name in schema.get("required", ()) if name not in arguments]
    properties = schema.get("properties") if isinstance(schema.get("properties"), dict) else {}
    for name, value in arguments.items():
        wanted = properties[name].get("type") if isinstance(properties.get(name), dict) else None
        if wanted not in _JSON_TYPES:
            continue  # no plain type (anyOf, a list of types, ...): not checked
        kinds, word, code = _JSON_TYPES[wanted]
        if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
            problems.append(f"{name}\n  Input should be a valid {word} "
                            f"[type={code}, input_value={value!r}, input_type={type(value).__name__}]")
    return problems
