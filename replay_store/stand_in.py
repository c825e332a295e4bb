"""Replay's stand-in for a stdio MCP server: what the recorded server sent the client, and when;
and for the session ids of an MCP server over Streamable HTTP.

No server runs in replay; the client's messages are answered from the recording. A server also
talks first: its requests (elicitation/create, sampling/createMessage, roots/list) and
notifications (progress, logging) are in the recording too, direction "server to client". The
stand-in sends each to the client after the last client message that reached that server before
it in the recording (a recording whose request was forwarded, same server), and before the
answer to that message: so an elicitation a tool call caused comes while the call is open, as
it did. Messages a server sent before any client message reached it come after the first one.
They are sent once, when that client message is first served (not again for a repeated read).

The client's answer to a replayed server request is compared with the recorded one as
normalised JSON (parsed, redacted as the recording was, keys in any order). The request goes
out with its recorded id, so the answer's id is the recorded one unless the client got it
wrong; any difference is a divergence.

Traces redact `Mcp-Session-Id`, so every recorded session of a server has the same id. Replay
gives each its own (`stand_in_session`): the answer to a request with no session (an
`initialize`) carries an id named for its recording, and an answer in a session carries that
session's id. So what a fault left for one session (proxy.faults.lingering) holds for it alone
in replay too, as it did when recorded.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable
from typing import Any
from urllib.parse import urlsplit

from faultproxy.formats.redact import Redactor
from faultproxy.formats.request_kinds import MCP_SESSION_HEADER
from faultproxy.proxy.stdio.passage import CLIENT_TO_SERVER, SERVER_TO_CLIENT
from faultproxy.proxy.stdio.route import STDIO_SUFFIX
from faultproxy.replay_store.har import Recorded
from mitmproxy import http


def server_messages_after(recordings: Iterable[Recorded]) -> dict[int, list[Recorded]]:
    """seq of a client message -> the server's messages that followed it, in recorded order."""
    following: dict[int, list[Recorded]] = defaultdict(list)
    last: dict[str, int] = {}  # server (host) -> seq of the last client message that reached it
    early: dict[str, list[Recorded]] = defaultdict(list)  # sent before any client message reached it
    for recorded in sorted(recordings, key=lambda r: r.seq):
        host = urlsplit(recorded.url).hostname or ""
        if not host.endswith(STDIO_SUFFIX):
            continue  # stdio only: over HTTP a server's messages come on the streams replay serves
        if recorded.direction == SERVER_TO_CLIENT:
            (following[last[host]] if host in last else early[host]).append(recorded)
        elif recorded.direction == CLIENT_TO_SERVER and recorded.forwarded:
            last[host] = recorded.seq
            following[recorded.seq].extend(early.pop(host, ()))
    return {seq: messages for seq, messages in following.items() if messages}


def stand_in_session(response: http.Response, request: http.Request, recorded: Recorded) -> None:
    """The recorded answer's session id, when it has one, as the session's own: the request's, or
    for a new session one named for the recording that began it."""
    if MCP_SESSION_HEADER in response.headers:
        response.headers[MCP_SESSION_HEADER] = request.headers.get(MCP_SESSION_HEADER) or f"replayed-{recorded.seq}"


def answer_difference(recorded: Recorded, answer: bytes, redactor: Redactor) -> str | None:
    """None when the client's answer is the recorded one (normalised JSON); else how it differs."""
    was, now = _normalised(recorded.response_body, redactor), _normalised(answer, redactor)
    if was == now:
        return None
    asked = _normalised(recorded.request_body, redactor)
    method = asked.get("method") if isinstance(asked, dict) else None
    return f"the client answered the server's {method or 'request'} {_short(now)}, recorded {_short(was)}"


def _normalised(body: bytes | None, redactor: Redactor) -> Any:
    try:
        return redactor.document(json.loads(body or b""))
    except ValueError:
        return (body or b"").decode("utf-8", "replace")


def _short(document: Any, limit: int = 200) -> str:
    text = json.dumps(document, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return text if len(text) <= limit else text[:limit] + "..."
