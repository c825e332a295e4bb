"""Replay of a frozen WebSocket session: a loopback server in the replay proxy plays the upstream.

The replay injector points a recorded upgrade at this server (as the pacing relay takes a
flow), so mitmproxy's WebSocket layer runs between the client and it exactly as it ran between
the client and the real upstream: the injector records every message and re-applies the
scenario's message rules with the recorded episode's keyed hashes, so a recorded ws_drop drops
the same message again, a ws_close ends the session at the same point with the same code, a
ws_inject sends its message again and a ws_delay holds its message again.

The server plays the session as the upstream lived it (`upstream_script`): the messages the
upstream sent, and between them the messages it received. It sends what the upstream sent up to
the next message it received, waits for the client's, compares it with the recorded one (text:
the canonical JSON of evaluator.traces.identity after redaction, as HTTP bodies are matched; binary: by
sha256), and goes on. A message the recording does not hold ends the session with close code
DIVERGED_CLOSE and a reason naming the message and what differed; the episode is reported
diverged, as an unrecorded HTTP request is.

What the recording cannot give back is not invented: a server's binary message (recorded as its
sha256 only) or a text cut by the trace body limit ends the session the same way, naming it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp
from aiohttp import web
from faultproxy.evaluator.traces import canonical_body
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import encode_ws_message
from mitmproxy import http

TOKEN_HEADER = "x-faultproxy-ws-replay"
DIVERGED_CLOSE = 4000  # the private range: the client can tell it from any code an API sends
_REASON_BYTES = 123  # a close frame's reason is at most 123 bytes


def upstream_script(session: Mapping[str, Any]) -> list[tuple[str, Mapping[str, Any]]]:
    """The recorded session as the upstream lived it, in order: ("send", message) for each message
    it sent (not the proxy's injections or the copies it sent again behind them), ("expect",
    message) for each it received (the client's that were not dropped or held back, and what the
    proxy sent it), with the text the proxy passed on when a fault rewrote it (`sent`)."""
    script = []
    for message in session.get("messages") or ():
        if message["from"] == "server" and not (message.get("injected") or message.get("resent")):
            script.append(("send", message))
        elif message["from"] == "client" and not (message.get("dropped") or message.get("held")):
            script.append(("expect", {**message, "text": message["sent"]} if "sent" in message else message))
    return script


def unreplayable(message: Mapping[str, Any]) -> str | None:
    """Why a recorded server message cannot be sent again, or None."""
    if message["type"] == "binary":
        return "it is binary, recorded as its sha256 only"
    if message.get("text_truncated"):
        return "its text was cut by the trace body limit"
    return None


def _summary(message: Mapping[str, Any]) -> str:
    """A message in a few words: a JSON event's type, else the start of its text, else its hash."""
    if message["type"] == "binary":
        return f"binary sha256 {message['sha256'][:12]}"
    text = message.get("text") or ""
    try:
        event = json.loads(text)
    except ValueError:
        event = None
    if isinstance(event, dict) and isinstance(event.get("type"), str):
        return f"type {event['type']}"
    return repr(text[:30])


def _difference(expected: Mapping[str, Any], got: Mapping[str, Any]) -> str:
    """What differs between the recorded message and the one the client sent, in a few words."""
    said, says = _summary(expected), _summary(got)
    if said != says:
        return f"expected {said}, got {says}"
    try:
        was, now = json.loads(expected["text"]), json.loads(got["text"])
    except (KeyError, ValueError):
        return f"expected another {said}"
    if not (isinstance(was, dict) and isinstance(now, dict)):
        return f"expected another {said}"
    fields = sorted(k for k in was.keys() | now.keys() if was.get(k) != now.get(k))
    return f"{said} differs in {', '.join(fields)}"


@dataclass
class Session:
    """One upgrade to replay: its recorded session, and where a divergence is reported."""

    recording: Mapping[str, Any]
    redactor: Redactor
    limit: int | None
    diverged: Callable[[str], None]  # called with why, once, when the client leaves the recording

    def as_recorded(self, content: bytes, is_text: bool) -> dict[str, Any]:
        """A live message as the trace holds it (redacted, audio hashed), to compare like with like."""
        return encode_ws_message(content, is_text, self.redactor, self.limit)

    def same(self, recorded: Mapping[str, Any], content: bytes, is_text: bool) -> bool:
        live = self.as_recorded(content, is_text)
        if live["type"] != recorded["type"]:
            return False
        if live["type"] == "binary" or recorded.get("text_truncated") or live.get("text_truncated"):
            return live.get("sha256") == recorded.get("sha256")
        return (canonical_body(live["text"].encode(), redactor=self.redactor)
                == canonical_body(recorded["text"].encode(), redactor=self.redactor))


class SessionServer:
    """The loopback server that plays recorded sessions; started on the proxy's loop on first use."""

    def __init__(self) -> None:
        self.port: int | None = None
        self._runner: web.AppRunner | None = None
        self._starting = asyncio.Lock()
        self._sessions: dict[str, Session] = {}
        self._tokens = itertools.count(1)

    async def route(self, flow: http.HTTPFlow, session: Session) -> None:
        """Send this upgrade request to the server, which plays `session`."""
        async with self._starting:
            if self.port is None:
                app = web.Application()
                app.router.add_get("/{tail:.*}", self._handle)
                self._runner = web.AppRunner(app, access_log=None)
                await self._runner.setup()
                site = web.TCPSite(self._runner, "127.0.0.1", 0)
                await site.start()
                self.port = site._server.sockets[0].getsockname()[1]
        token = str(next(self._tokens))
        self._sessions[token] = session
        flow.request.headers[TOKEN_HEADER] = token
        flow.request.scheme, flow.request.host, flow.request.port = "http", "127.0.0.1", self.port

    async def close(self) -> None:
        if self._runner:
            await self._runner.cleanup()
        self._runner = self.port = None

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        session = self._sessions.pop(request.headers.get(TOKEN_HEADER, ""), None)
        if session is None:
            return web.Response(status=404, text="faultproxy replay: no such session")
        ws = web.WebSocketResponse(protocols=_protocols(request))
        await ws.prepare(request)
        await _play(request, ws, session)
        return ws


def _protocols(request: web.Request) -> tuple[str, ...]:
    """The subprotocols the client asked for: the recorded upstream agreed to one of them."""
    asked = request.headers.get("sec-websocket-protocol", "")
    return tuple(p.strip() for p in asked.split(",") if p.strip())


async def _play(request: web.Request, ws: web.WebSocketResponse, session: Session) -> None:
    received = 0
    for step, recorded in upstream_script(session.recording):
        if step == "send":
            why = unreplayable(recorded)
            if why:
                await _diverge(ws, session, f"server message {_summary(recorded)} cannot be replayed: {why}")
                return
            await ws.send_str(recorded["text"])
            continue
        payload = await _receive(ws)
        if payload is None:
            return  # the client ended the session before the recording did: not a message it sent
        received += 1
        if not session.same(recorded, *payload):
            await _diverge(ws, session, f"client message {received}: "
                                        f"{_difference(recorded, session.as_recorded(*payload))}")
            return
    await _end(request, ws, session, received)


async def _end(request: web.Request, ws: web.WebSocketResponse, session: Session, received: int) -> None:
    """The recording is played out: close as the upstream did, or wait for the client to."""
    close = session.recording.get("close") or {}
    if close.get("by") == "server":
        code = close.get("code")
        if code in (None, 1005, 1006):  # no close frame was seen: the connection just dropped
            if request.transport is not None:
                request.transport.abort()
            return
        await ws.close(code=code, message=str(close.get("reason") or "").encode()[:_REASON_BYTES])
        return
    payload = await _receive(ws)
    if payload is not None:
        await _diverge(ws, session, f"client message {received + 1}: the recording holds none "
                                    f"(it has {received}), got {_summary(session.as_recorded(*payload))}")


async def _receive(ws: web.WebSocketResponse) -> tuple[bytes, bool] | None:
    """The client's next message as (content, is_text); None once the session is closing."""
    message = await ws.receive()
    if message.type == aiohttp.WSMsgType.TEXT:
        return message.data.encode(), True
    if message.type == aiohttp.WSMsgType.BINARY:
        return message.data, False
    return None


async def _diverge(ws: web.WebSocketResponse, session: Session, why: str) -> None:
    session.diverged(why)
    reason = f"faultproxy replay diverged: {why}".encode()[:_REASON_BYTES]
    await ws.close(code=DIVERGED_CLOSE, message=reason.decode("utf-8", "ignore").encode())
