"""empty_response: a well-formed answer with no text and no tool call, ended normally."""

from __future__ import annotations

from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.faults.model_answer import ModelAnswerFault
from faultproxy.proxy.shapes import Answer, Stop
from faultproxy.scenarios.faults import empty_response


class EmptyResponseFault(ModelAnswerFault):
    kind = empty_response.KIND

    def edit(self, answer: Answer, api: ModelApi, streamed: bool) -> str | None:
        change = f"{len(answer.text)} characters of text and {len(answer.tool_calls)} tool call(s) removed"
        answer.text, answer.tool_calls, answer.refusal, answer.stop = "", [], None, Stop.END
        return change
