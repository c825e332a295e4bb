"""A WebSocket session as the injector sees it: the rules that may fire on its messages, and
every message both ways with its time offset, for the upgrade's trace line (formats.trace)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from faultproxy.formats.model_answers import LiveUsage
from faultproxy.formats.model_apis import LiveApi, live_api_of, live_api_of_session
from faultproxy.formats.redact import Redactor
from faultproxy.formats.trace import encode_ws_message
from faultproxy.scenarios import Rule
from faultproxy.scenarios.selection import NO_BODY, parse_json_body
from mitmproxy import ctx, http
from mitmproxy.utils import asyncio_utils
from mitmproxy.websocket import WebSocketMessage
from wsproto.frame_protocol import FrameProtocol


@dataclass
class MessageFault:
    """A rule that fired on one message; `delivered` once the proxy saw its effect happen."""

    rule: Rule
    episode: str
    index: int  # this message is the index-th (1-based) of the episode that the rule matched
    decision: float
    delivered: bool = False
    detail: str = ""

    def deliver(self, detail: str) -> None:
        self.delivered, self.detail = True, detail

    def to_record(self, plain) -> dict[str, Any]:
        return {"rule": self.rule.name, "type": self.rule.fault.type, "params": plain(self.rule.fault.params),
                "decision": self.decision, "delivered": self.delivered, "detail": self.detail}


@dataclass
class WsSession:
    """`rules`: the scenario's message rules whose match selects this session's upgrade request;
    `usage`: the tokens of a live model session (None for any other WebSocket session)."""

    rules: tuple[Rule, ...]
    api: LiveApi
    usage: LiveUsage | None = None
    started: float = field(default_factory=time.monotonic)
    messages: list[dict[str, Any]] = field(default_factory=list)
    faults: list[tuple[dict[str, Any], MessageFault]] = field(default_factory=list)
    close: dict[str, Any] | None = None
    closing: MessageFault | None = None  # a ws_close the proxy began: confirmed when the session ends
    expected: list[tuple[bytes, MessageFault | None]] = field(default_factory=list)  # injections on their way
    current: dict[str, Any] = field(default_factory=dict)  # the trace entry of the message in hand

    def offset(self) -> float:
        return round(time.monotonic() - self.started, 6)

    def record(self, message: WebSocketMessage, redactor: Redactor, limit: int | None) -> dict[str, Any]:
        entry = {"from": "client" if message.from_client else "server", "t": self.offset(),
                 **encode_ws_message(message.content, message.is_text, redactor, limit)}
        self.messages.append(entry)
        self.current = entry  # mitmproxy runs one message hook of a session at a time
        return entry

    def injected_arrived(self, message: WebSocketMessage, entry: dict[str, Any]) -> None:
        """An injected message reached the proxy's send path: the fault that asked for it is
        delivered; a message held back to let an injection go first is marked as such."""
        for i, (content, fault) in enumerate(self.expected):
            if content == message.content:
                del self.expected[i]
                if fault is None:
                    entry["resent"] = True  # the original, sent after what ws_inject put before it
                else:
                    entry["injected"] = True
                    fault.deliver(f"injected to the {entry['from'] == 'client' and 'server' or 'client'}")
                return
        entry["injected"] = True

    def resend(self, flow: http.HTTPFlow, message: WebSocketMessage) -> None:
        """Hold the message in hand back and send it again behind the injections queued so far
        (the trace marks that copy `resent`): what keeps a session's order around injections."""
        message.drop()
        self.current["held"] = True
        self.expected.append((message.content, None))
        inject(flow, not message.from_client, message.content, message.is_text)

    def tokens(self, message: WebSocketMessage) -> int:
        """The tokens an upstream message adds to the session's count (a model's turn's usage),
        counted before any fault acts on it: the upstream spent them even if the client never hears."""
        if self.usage is None or message.from_client or message.injected:
            return 0
        return self.usage.server_message(message_json(message))

    def fired(self, entry: dict[str, Any], fault: MessageFault) -> None:
        self.faults.append((entry, fault))

    def to_record(self, plain) -> dict[str, Any]:
        for entry, fault in self.faults:
            entry["fault"] = fault.to_record(plain)
        return {"messages": self.messages, "close": self.close}


def open_session(rules: tuple[Rule, ...], path: str) -> WsSession:
    """The session an upgrade to `path` opens: its tokens counted if the path names a live model API."""
    model_api = live_api_of_session(path)
    return WsSession(rules, live_api_of(path), LiveUsage(model_api) if model_api is not None else None)


def message_json(message: WebSocketMessage) -> Any:
    return parse_json_body(message.content) if message.is_text else NO_BODY


def after_this_hook(action: Callable[[], None]) -> None:
    """Run `action` once the hook running now has finished and mitmproxy has sent the message in
    hand on (a task started from the hook would run first: the hook's task still has steps to go)."""
    hook = asyncio.current_task()

    async def later() -> None:
        if hook is not None:
            await asyncio.wait([hook])
        action()

    asyncio_utils.create_task(later(), name="faultproxy websocket fault", keep_ref=True)


def inject(flow: http.HTTPFlow, to_client: bool, content: bytes, is_text: bool = True) -> None:
    """Queue a message into the session (it goes before the message in hand, unless called from
    after_this_hook)."""
    ctx.master.commands.call("inject.websocket", flow, to_client, content, is_text)


def end_session(flow: http.HTTPFlow, code: int | None, reason: str = "") -> bool:
    """End the session's connections from the proxy, once the message in hand has been sent: with
    close frames carrying `code` and `reason` to both sides, or (code None) by dropping them.
    False if the connection is already gone."""
    handler = ctx.master.addons.get("proxyserver").connections.get(flow.client_conn.id)
    if handler is None:
        return False

    def close() -> None:
        for conn, is_client in ((flow.client_conn, False), (flow.server_conn, True)):
            io = handler.transports.get(conn)
            if io is None or io.writer is None or io.writer.is_closing():
                continue
            if code is None:
                io.writer.transport.abort()
            else:
                io.writer.write(FrameProtocol(client=is_client, extensions=[]).close(code, reason))
                io.writer.close()

    after_this_hook(close)
    return True
