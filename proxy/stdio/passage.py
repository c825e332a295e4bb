"""A stdio message's passage through the fault injector.

Each message becomes the HTTP exchange it stands for (`POST http://<server>.stdio.invalid/mcp`,
the message as its body) and goes through the injector's hooks in mitmproxy's order: match,
decide, inject, record, with the episode's own counters, keyed-hash decisions and trace. The
server's answer, when the exchange is forwarded, is the upstream's response. So one scenario
faults a tool whichever transport carries it, and replay answers stdio calls as it answers HTTP.
Messages go both ways: a server's request (elicitation/create, sampling/createMessage, roots/list)
is an exchange too, direction "server to client", whose upstream answer is the client's; a
notification from either side is one with no answer. Progress and logging notifications are
recorded up to a cap per episode (EpisodeLimits.notifications); the rest are only counted.
In replay no server runs: the replay answers the client's messages from the recording, and
names the server's recorded messages that followed one (STAND_IN_KEY), which the session sends
the client before that message's answer, each through the injector as the server's own.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

from faultproxy.formats.trace import CLIENT_TO_SERVER, SERVER_TO_CLIENT
from faultproxy.proxy.attribution import EPISODE_KEY, PASS_THROUGH_KEY
from faultproxy.proxy.auth import EpisodeGate
from faultproxy.proxy.exchange import EXCHANGE_KEY
from faultproxy.proxy.exchange_end import header_pairs
from faultproxy.proxy.injector import DIRECTION_KEY, FaultInjector
from faultproxy.proxy.stdio.route import STDIO_PATH, STDIO_SUFFIX
from faultproxy.proxy.stdio.upstream import Delivered
from mitmproxy import connection, http
from mitmproxy import flow as flow_module

CLIENT_GONE = "Client disconnected: the MCP session ended first"  # read by the injector as mitmproxy's own
# flow.metadata, in replay: the recorded server's messages (lines) that followed this client message
STAND_IN_KEY = "faultproxy_stand_in"
Naming = Callable[[], str | None]  # a monitored session's episode now; None: unsampled (proxy.monitor_sessions)
CAPPED = frozenset({"notifications/progress", "notifications/message"})  # progress, logging: may come by the thousand


class Passage:
    """The injector's hooks for one session's messages, in its episode."""

    def __init__(self, injector: FaultInjector, gate: EpisodeGate, episode: str, server: str,
                 url: tuple[str, str, int, str] | None = None, naming: Naming | None = None) -> None:
        """`server`: a stdio server's name; `url` (scheme, host, port, path): where an HTTP
        server's messages are recorded instead (MCP over Streamable HTTP, proxy/mcp_http.py);
        `naming`: under a monitor, asked for each message's episode (the session's may have ended)."""
        self.injector = injector
        self.gate = gate
        self.episode = episode
        self.naming = naming
        self.scheme, self.host, self.port, self.path = url or ("http", server + STDIO_SUFFIX, 80, STDIO_PATH)
        # One client connection per session, as mitmproxy has one per client socket; made once,
        # as each costs more than the rest of a message's passage.
        self.client = connection.Client(peername=("127.0.0.1", 0), sockname=("127.0.0.1", 0))
        self.server = connection.Server(address=None)

    def records(self, method: str | None) -> bool:
        """Is a notification of this method recorded (False: past the episode's cap for it)?"""
        state = self.injector.episodes.peek(self.episode)
        if method not in CAPPED or state is None:
            return True
        state.notifications[method] += 1
        return state.notifications[method] <= state.limits.notifications

    async def begin(self, message: bytes, direction: str,
                    stand_in: Callable[[list[bytes]], Awaitable[None]] | None = None) -> tuple[http.HTTPFlow, bool | None]:
        """The request hooks, for a message its sender sent in `direction`. With the flow (its
        request is the message as it goes on: the injector may have changed it on its way):
        whether it is forwarded and its answer reaches the sender unchanged (no rule fired,
        nothing may perturb it), forwarded to be looked at (False), or already answered or
        dropped (None). In replay, `stand_in` gets the recorded server's messages that followed
        this one, before the response hooks act on its answer."""
        flow = self._flow(message)
        flow.metadata[DIRECTION_KEY] = direction
        if self._admitted(flow):
            await self.injector.request(flow)
        if stand_in is not None and flow.metadata.get(STAND_IN_KEY):
            await stand_in(flow.metadata.pop(STAND_IN_KEY))
        if flow.error is not None:  # a fault dropped it before it was forwarded
            self.injector.error(flow)
            return flow, None
        if flow.response is not None:  # a fault, the replay or the gate answered
            await self._respond(flow)
            return flow, None
        ex = flow.metadata.get(EXCHANGE_KEY)  # none when the proxy has no scenario: nothing to do
        # What an earlier fault left (a changed tool: proxy.faults.lingering) may rewrite the answer too
        return flow, ex is None or (ex.rule is None and ex.consequence_of is None
                                    and ex.scenario.params.get("epsilon", 0.0) <= 0)

    async def complete(self, flow: http.HTTPFlow, delivered: Delivered, unheard: str | None = None) -> None:
        """The response hooks, with the answer as the upstream's response. `unheard`: why its
        sender never hears it, gone first (a stdio server restarted while its request to the client
        was open): recorded as reset, with that error."""
        status, headers, body = delivered
        flow.response = http.Response.make(status, body, [(k.encode(), v.encode()) for k, v in headers])
        await self._respond(flow, unheard)

    def abandon(self, flow: http.HTTPFlow) -> None:
        """The session ended before the server answered: an exchange whose client left."""
        flow.error = flow_module.Error(CLIENT_GONE)
        self.injector.error(flow)

    @staticmethod
    def final(flow: http.HTTPFlow) -> Delivered | None:
        """What the client gets; None: nothing."""
        response = flow.response
        if flow.error is not None or response is None:
            return None
        return response.status_code, header_pairs(response.headers), response.get_content(strict=False) or b""

    def _flow(self, message: bytes) -> http.HTTPFlow:
        flow = http.HTTPFlow(self.client, self.server, live=True)
        now = time.time()
        flow.request = http.Request(self.host, self.port, b"POST", self.scheme.encode(), b"", self.path.encode(), b"HTTP/1.1",
                                    http.Headers(content_type="application/json"), message, None, now, now)
        return flow

    def _admitted(self, flow: http.HTTPFlow) -> bool:
        """The episode is admitted again for each message, as each request over HTTP is (under a
        runner, an episode that has ended is refused: 407, flows/_rejected.jsonl). Under a monitor
        the message goes to its session's episode now, or untouched when the session is unsampled."""
        if self.naming is not None:
            episode = self.naming()
            if episode is None:
                flow.metadata[PASS_THROUGH_KEY] = True
                return True
            self.episode = episode
        reason = self.gate.refusal(self.episode, self.gate.token)
        if reason:
            self.gate.reject(flow, self.episode, reason)
            return False
        flow.metadata[EPISODE_KEY] = self.episode
        return True

    async def _respond(self, flow: http.HTTPFlow, unheard: str | None = None) -> None:
        """mitmproxy's response hooks, for an answer from the server or one a fault made."""
        await self.injector.responseheaders(flow)
        ex = flow.metadata.get(EXCHANGE_KEY)
        if unheard is not None and ex is not None:  # recorded as the upstream's, then lost
            ex.outcome, ex.error = "reset", unheard
        if flow.error is None:
            await self.injector.response(flow)
