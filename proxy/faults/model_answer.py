"""What the model-answer faults (truncated, malformed_tool_call, refusal, empty_response) share:
read the upstream's answer in its API's shape, let the fault edit it, write it back in the same
shape. JSON bodies are re-encoded with the response's Content-Encoding (Content-Length follows);
event streams are buffered whole and written anew, ending as the provider ends them.

A fault that finds nothing to act on (no model answer, an error status, a stream cut before its
end, no tool call to break) or a change the API cannot carry leaves the answer as it was and is
recorded as not delivered, with the reason.
"""

from __future__ import annotations

from abc import ABC, abstractmethod

from faultproxy.formats.model_apis import ModelApi, detect_api
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import Fault, is_streamed_events
from faultproxy.proxy.shapes import Answer, NotExpressible, read_answer, write_answer
from mitmproxy import http


class ModelAnswerFault(Fault, ABC):
    """A fault that edits the model's answer; a subclass implements `edit`."""

    def buffers_events(self) -> bool:
        return True

    @abstractmethod
    def edit(self, answer: Answer, api: ModelApi, streamed: bool) -> str | None:
        """Change the answer in place; return what was changed, or None when there is nothing to
        change (then the fault is not delivered, and `nothing_to_change` says why)."""

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None or not 200 <= flow.response.status_code < 300:
            ex.detail = "not delivered: the upstream's answer is not a successful model answer"
            return
        api = detect_api(flow.request.host, flow.request.path, flow.request.headers)
        if api is None:
            ex.detail = "not delivered: not a model API request"
            return
        streamed = is_streamed_events(flow)
        answer = read_answer(api, flow.response.get_content(strict=False) or b"", streamed)
        form = "stream" if streamed else "JSON"
        if answer is None:
            ex.detail = f"not delivered: no finished {api.value} answer in the {form} body"
            return
        before = answer.stop
        try:
            change = self.edit(answer, api, streamed)
            body = None if change is None else write_answer(api, answer, streamed)
        except NotExpressible as problem:
            ex.detail = f"not delivered: {api.value} {form}: {problem}"
            return
        if body is None:
            ex.detail = f"not delivered: {api.value} {form}: {self.nothing_to_change()}"
            return
        # `content` re-encodes with the response's Content-Encoding and sets Content-Length.
        flow.response.headers.pop("transfer-encoding", None)
        flow.response.content = body
        ex.facts = {"api": api.value, "streamed": streamed, "stop": {"from": before.value, "to": answer.stop.value},
                    "changed": change}
        ex.deliver(f"{api.value} {form}: {change}")

    def nothing_to_change(self) -> str:
        """Why an answer `edit` left alone was left alone, for the trace."""
        return "nothing to change"
