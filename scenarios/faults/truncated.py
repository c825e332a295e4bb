"""truncated: the model's answer stops as if it hit the output-token limit; forwarded.

Chat `finish_reason: length`, Responses `status: incomplete` (max_output_tokens), Anthropic
`stop_reason: max_tokens`, Gemini `finishReason: MAX_TOKENS`; streams end with their proper
final events.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

KIND = FaultKind(
    name="truncated",
    description=("the model's answer stops as at the output-token limit: text cut, the tool call in progress cut "
                 "mid-JSON (an object API: its first keys) or dropped; Chat `finish_reason: length`, Responses "
                 "`status: incomplete` (`max_output_tokens`, streamed: `response.incomplete`), Anthropic "
                 "`stop_reason: max_tokens`, Gemini `MAX_TOKENS`; streams end properly"),
    params={
        "fraction": ParamSpec("number", 0.5, "the share of the answer's text (and of a tool call's arguments) kept",
                              minimum=0, maximum=1),
        "tool_calls": ParamSpec("string", "cut", "the tool call in progress: its arguments cut mid-JSON, or dropped",
                                choices=("cut", "drop")),
    },
    forwards=True,
)
