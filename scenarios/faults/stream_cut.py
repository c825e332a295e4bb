"""stream_cut: an MCP server's event stream (the one answering a POST, or the standalone GET
stream) ends after `events` events, without the answer; forwarded.

The server ran the call; the client sees its stream end (`end: clean`) or break (`reset`). An
official SDK client whose server gave its events ids (a server with an event store) reconnects
with `GET` and `Last-Event-ID`, and the server sends what followed: the resumed stream is an
exchange of its own, recorded and replayed like any other. Without ids the client is left with
"SSE stream ended without a response", and the call is the client's to settle without repeating
a write blind. An answer that is no event stream passes unchanged (not delivered).
"""

from __future__ import annotations

from faultproxy.scenarios.faults.base import MAX_CUT_EVENTS, FaultKind, ParamSpec

KIND = FaultKind(
    name="stream_cut",
    description=("an MCP server's event stream (a POST's answer, or the standalone GET stream) ends after "
                 "`events` events without the answer, cleanly or (`end: reset`) broken; the server ran the call "
                 "(below)"),
    params={
        "events": ParamSpec("integer", 1, "events the client gets before the stream ends",
                            minimum=0, maximum=MAX_CUT_EVENTS),
        "end": ParamSpec("string", "clean", "the stream ends cleanly, or breaks", choices=("clean", "reset")),
    },
    forwards=True,
    over_stdio="nothing: a stdio answer is one line, no event stream (recorded as not delivered, saying so)",
    over_mcp_http=("the answer stream ends after `events` events without the answer; the official SDK's client "
                   "resumes with `GET` and `Last-Event-ID` when the server's events have ids, and that resumed "
                   "stream is recorded and replayed (with the server stopped) like any exchange"),
    robust_client=("resumes, or re-asks a read; never repeats a write it cannot know the outcome of (a blind "
                   "repeat fails `idempotency`, high)"),
)
