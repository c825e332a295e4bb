"""Replay's stand-in session ids: traces redact `Mcp-Session-Id`, so every recorded session of a
server has the same one; replay gives each its own, so what a fault left for one session (an
ended session's 404) holds for it alone, as when recorded."""

from __future__ import annotations

import json

from mitmproxy import http

from faultproxy.formats.redact import MASK
from faultproxy.replay_store.har import Recorded
from faultproxy.replay_store.replay_proxy import recorded_response
from faultproxy.replay_store.stand_in import stand_in_session

URL = "http://127.0.0.1:9/svc/rpc"


def answer(seq: int, session: str | None, method: str) -> str | None:
    """The session id the client gets with the recording `seq`'s answer to its request in `session`."""
    headers = (("content-type", "application/json"), ("mcp-session-id", MASK))
    body = {"jsonrpc": "2.0", "id": 1, "method": method}
    recorded = Recorded(seq, "POST", URL, headers, json.dumps(body).encode(), True, 200, "OK", headers,
                        b'{"jsonrpc":"2.0","id":1,"result":{}}', None, None, None, {})
    request = http.Request.make("POST", URL, json.dumps(body), {"mcp-session-id": session} if session else {})
    response = recorded_response(recorded, body)
    stand_in_session(response, request, recorded)
    return response.headers.get("mcp-session-id")


def test_each_recorded_session_gets_an_id_of_its_own_and_keeps_it() -> None:
    first, second = answer(1, None, "initialize"), answer(4, None, "initialize")
    assert first == "replayed-1" and second == "replayed-4"  # two sessions, two ids, named for their beginnings
    assert answer(7, first, "tools/call") == first and answer(9, second, "tools/list") == second


def test_an_answer_without_a_session_id_gets_none() -> None:
    request = http.Request.make("GET", URL.replace("/svc/rpc", "/healthz"))
    recorded = Recorded(2, "GET", URL, (), None, True, 200, "OK", (("content-type", "text/plain"),), b"ok",
                        None, None, None, {})
    response = recorded_response(recorded, None)
    stand_in_session(response, request, recorded)
    assert "mcp-session-id" not in response.headers
