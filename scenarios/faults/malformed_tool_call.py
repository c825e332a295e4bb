"""malformed_tool_call: the model's first tool call is broken; forwarded.

invalid_json (arguments that do not parse: only where the API carries them as a string, so Chat,
Responses and streamed Anthropic), missing_argument, wrong_type, unknown_tool.
"""

from __future__ import annotations

from typing import Any

from faultproxy.formats.model_apis import ModelApi
from faultproxy.scenarios.faults.base import FaultKind, ParamProblem, ParamSpec
from faultproxy.scenarios.faults.model_answer import describe, reachable

MODES = ("invalid_json", "missing_argument", "wrong_type", "unknown_tool")


def string_arguments(api: ModelApi, streamed: bool) -> bool:
    """Does this API carry a tool call's arguments as a string (so they can fail to parse)?
    Anthropic does only in a stream (input_json_delta); Gemini never (args is an object)."""
    if api is ModelApi.ANTHROPIC_MESSAGES:
        return streamed
    return api is not ModelApi.GEMINI


def _params_fit_mode(params: dict[str, Any], given: frozenset[str]) -> dict[str, Any]:
    if "argument" in given and params["mode"] not in ("missing_argument", "wrong_type"):
        raise ParamProblem("argument", f"argument applies to modes missing_argument and wrong_type, "
                                       f"not {params['mode']}")
    if "name" in given and params["mode"] != "unknown_tool":
        raise ParamProblem("name", f"name applies to mode unknown_tool, not {params['mode']}")
    return params


def _expressible(params: dict[str, Any], match: Any) -> None:
    if params["mode"] != "invalid_json":
        return
    pairs = reachable(match)
    if pairs and not any(string_arguments(api, streamed) for api, streamed in pairs):
        raise ParamProblem("mode", f"invalid_json cannot be expressed in the answers this rule matches "
                                   f"({describe(pairs)}): they carry tool-call arguments as a JSON object; "
                                   "match streamed Anthropic, Chat or Responses, or pick another mode")


KIND = FaultKind(
    name="malformed_tool_call",
    description=("the answer's first tool call broken: arguments that do not parse (Chat, Responses, streamed "
                 "Anthropic: `faultproxy check` refuses a rule that can only reach non-streamed Anthropic or "
                 "Gemini), a required argument removed, a value of another JSON type, a tool that does not exist"),
    params={
        "mode": ParamSpec("string", "invalid_json", "how the first tool call is broken", choices=MODES),
        "argument": ParamSpec("string", None, "the argument removed or retyped (default: the first)",
                              nullable=True),
        "name": ParamSpec("string", None, "unknown_tool: the tool name used (default: a plausible one)",
                          nullable=True),
    },
    forwards=True,
    cross_check=_params_fit_mode,
    match_check=_expressible,
)
