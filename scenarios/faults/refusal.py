"""refusal: the model declines, with no tool call; forwarded.

Chat `message.refusal` (or `finish_reason: content_filter` in mode content_filter), Responses a
`refusal` content part (content_filter: incomplete for content_filter), Anthropic
`stop_reason: refusal`, Gemini `finishReason: SAFETY`.
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import FaultKind, ParamSpec

DEFAULT_TEXT = "I'm sorry, but I can't help with that request."

KIND = FaultKind(
    name="refusal",
    description=("the model declines, with no tool call: Chat `message.refusal` (content_filter: `finish_reason: "
                 "content_filter`), Responses a `refusal` part (content_filter: incomplete), Anthropic "
                 "`stop_reason: refusal`, Gemini `SAFETY`"),
    params={
        "mode": ParamSpec("string", "refusal", "a refusal in words, or the provider's content filter",
                          choices=("refusal", "content_filter")),
        "text": ParamSpec("string", DEFAULT_TEXT, "the refusal's words, where the API carries them"),
    },
    forwards=True,
)
