"""partial_response: cut the upstream's answer at a byte count, a fraction or an SSE event,
ending cleanly, with a broken read, or with the error event the stream's model API sends when it
fails midway (proxy.responses.StreamFailure)."""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlsplit

from faultproxy.formats.model_apis import detect_api
from faultproxy.proxy.exchange import FlowExchange
from faultproxy.proxy.faults.base import SUPPLIED_KEY, Fault
from faultproxy.proxy.responses import StreamFailure
from faultproxy.scenarios.faults import partial_response
from mitmproxy import http


class PartialResponseFault(Fault):
    kind = partial_response.KIND

    def event_shaper(self, ex: FlowExchange) -> Callable[[bytes], bytes | None] | None:
        keep = self.params.get("events")
        if keep is None:
            return None  # byte-based cuts of an event stream happen on the finished body
        kept = 0
        failure = _failure(ex) if self.params["end"] == "error" else None

        def shape(event: bytes) -> bytes | None:
            nonlocal kept
            if kept < keep:
                kept += 1
                if failure:
                    failure.saw(event)
                return event
            if failure is None:
                ex.deliver(f"kept {keep} events")
                return None
            if ex.delivered:  # the error event went out in place of the first event past the cut
                return None
            ex.deliver(f"kept {keep} events, then the API's error event")
            return failure.event()

        return shape

    def buffers_events(self) -> bool:
        return self.params.get("events") is None

    async def response(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        if ex.upstream is None:
            return
        if flow.response.stream:
            self._end_stream(flow, ex)
        else:
            self._cut_body(flow, ex)

    def _end_stream(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        """The shaper already dropped the events past the cut; end the stream as asked."""
        if not ex.delivered:
            return
        if self.params["end"] != "reset":
            ex.outcome = "cut"  # an error event is a cut the API announces
            return
        if flow.metadata.get(SUPPLIED_KEY):
            # A supplied body (replay) is sent whole after this hook: send the kept events,
            # then break the read, as killing a live stream midway does.
            _promise_more(flow.response, len(flow.response.raw_content or b"") + 1)
        else:
            flow.kill()
        ex.outcome = "reset"

    def _cut_body(self, flow: http.HTTPFlow, ex: FlowExchange) -> None:
        reset = self.params["end"] == "reset"
        raw = flow.response.raw_content or b""
        limit = self.params["bytes"]
        if limit is None:
            fraction = self.params["fraction"]
            limit = int(len(raw) * fraction) if fraction is not None else len(raw)
        if limit >= len(raw):
            return
        ex.deliver(f"body cut at {limit} of {len(raw)} bytes")
        ex.outcome = "reset" if reset else "cut"
        flow.response.raw_content = raw[:limit]
        flow.response.headers.pop("transfer-encoding", None)
        if reset:
            _promise_more(flow.response, len(raw))
        else:
            flow.response.headers["content-length"] = str(limit)


def _promise_more(response: http.Response, length: int) -> None:
    """Announce `length` bytes, send what the body holds, close: the client sees a broken read."""
    response.headers["content-length"] = str(length)
    response.headers["connection"] = "close"


def _failure(ex: FlowExchange) -> StreamFailure:
    parts = urlsplit(ex.url)
    path = parts.path + (f"?{parts.query}" if parts.query else "")
    return StreamFailure(detect_api(parts.hostname or "", path, dict(ex.request_headers)))
