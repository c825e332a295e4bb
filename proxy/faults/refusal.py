"""refusal: the model declines, with no tool call: words of refusal where the API carries them
(Chat `message.refusal`, a Responses `refusal` part), the refusal stop reason (Anthropic
`refusal`, Gemini `SAFETY`), or the provider's content filter in mode content_filter."""

from __future__ import annotations

from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.faults.model_answer import ModelAnswerFault
from faultproxy.proxy.shapes import Answer, Stop
from faultproxy.scenarios.faults import refusal

# APIs whose refusal is a stop reason alone: the words have no field to go in.
_WORDLESS = (ModelApi.ANTHROPIC_MESSAGES, ModelApi.GEMINI)


class RefusalFault(ModelAnswerFault):
    kind = refusal.KIND

    def edit(self, answer: Answer, api: ModelApi, streamed: bool) -> str | None:
        dropped = len(answer.tool_calls)
        answer.text, answer.tool_calls = "", []
        filtered = self.params["mode"] == "content_filter"
        answer.refusal = None if filtered or api in _WORDLESS else self.params["text"]
        answer.stop = Stop.CONTENT_FILTER if filtered else Stop.REFUSAL
        said = f"refusal {answer.refusal!r}" if answer.refusal else f"stop {answer.stop.value}"
        return f"{said}; text and {dropped} tool call(s) removed"
