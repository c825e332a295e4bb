"""truncated: the answer stops as at the output-token limit. The text keeps `fraction` of its
characters; the last tool call (the one in progress) has its arguments cut, mid-JSON where the
API carries them as a string and to the first keys where it carries an object, or is dropped."""

from __future__ import annotations

import json

from faultproxy.formats.model_apis import ModelApi
from faultproxy.proxy.faults.model_answer import ModelAnswerFault
from faultproxy.proxy.shapes import Answer, Stop
from faultproxy.scenarios.faults import truncated
from faultproxy.scenarios.faults.malformed_tool_call import string_arguments


class TruncatedFault(ModelAnswerFault):
    kind = truncated.KIND

    def edit(self, answer: Answer, api: ModelApi, streamed: bool) -> str | None:
        fraction = self.params["fraction"]
        kept = int(len(answer.text) * fraction)
        changes = [f"text cut to {kept} of {len(answer.text)} characters"]
        answer.text = answer.text[:kept]
        if answer.tool_calls:
            last = answer.tool_calls[-1]
            if self.params["tool_calls"] == "drop":
                answer.tool_calls.pop()
                changes.append(f"tool call {last.name!r} dropped")
            else:
                last.arguments = _cut_arguments(last.arguments, fraction, string_arguments(api, streamed))
                changes.append(f"tool call {last.name!r} arguments cut to {last.arguments!r}")
        answer.stop = Stop.LENGTH
        return "; ".join(changes)


def _cut_arguments(arguments: str, fraction: float, as_text: bool) -> str:
    """Arguments as a model cut off mid-call leaves them: a prefix of the JSON text, or (an API
    that carries an object) the object with only its first keys."""
    if as_text:
        return arguments[:int(len(arguments) * fraction)]
    try:
        value = json.loads(arguments)
    except ValueError:
        return arguments
    if not isinstance(value, dict):
        return arguments
    keys = list(value)[:int(len(value) * fraction)]
    return json.dumps({key: value[key] for key in keys})
