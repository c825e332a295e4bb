"""`--chat http://127.0.0.1:{port}/PATH` and `--chat openai:http://127.0.0.1:{port}/v1`: the agent
is an HTTP service. Each episode starts it with `PORT` set (beside the proxy variables, so its
own traffic is attributed as any agent's), waits until the port answers, and talks to it
directly (never through the proxy):

- plain: POST {"session": EPISODE, "message": TEXT} to the URL; the agent's turn is the JSON
  answer's `reply` (or `message`): a string, or an object {"content", ...} read as a stdio JSON
  turn is (runner.chat.agent_turn);
- openai: POST {"model", "messages": the conversation so far} to URL/chat/completions; the
  agent's turn is choices[0].message.content.

A service that answers with an error status, or not at all, has nothing more to say: the
conversation ends there. So does a silent user turn (`silent: true`): nothing is sent, and a
service speaks only when asked, so waiting `reply_timeout_s` for it would only idle (over stdio
the agent may still speak unprompted). The service is stopped at the episode's end (its process group), as
every agent is.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from faultproxy.formats.errors import UsageError

OPENAI_PREFIX = "openai:"
PORT_PLACEHOLDER = "{port}"
_CONNECT_POLL_S = 0.05
_HOSTS = ("127.0.0.1", "localhost", "[::1]")


def check_service_url(mode: str) -> None:
    """UsageError unless `mode` is [openai:]http://LOOPBACK:{port}/PATH."""
    url = mode.removeprefix(OPENAI_PREFIX)
    if not url.startswith(tuple(f"http://{host}:{PORT_PLACEHOLDER}" for host in _HOSTS)):
        raise UsageError(f"--chat {mode!r}: an agent service's URL is http://127.0.0.1:{PORT_PLACEHOLDER}/PATH "
                         f"(optionally after {OPENAI_PREFIX}); the runner picks the port and gives it to the "
                         "service as PORT")


class ServiceChannel:
    """A runner.chat.Channel to an agent service: `say` sends the turn, `hear` awaits the answer."""

    def __init__(self, process: asyncio.subprocess.Process, mode: str, port: int, session: str,
                 model: str | None) -> None:
        self.process, self.port, self.session, self.model = process, port, session, model
        self.openai = mode.startswith(OPENAI_PREFIX)
        url = mode.removeprefix(OPENAI_PREFIX).replace(PORT_PLACEHOLDER, str(port))
        self.url = url.rstrip("/") + "/chat/completions" if self.openai else url
        self.messages: list[dict[str, str]] = []  # the conversation so far, for a Chat Completions service
        self.pending: asyncio.Task[str | None] | None = None

    async def say(self, text: str) -> None:
        if self.openai:
            self.messages.append({"role": "user", "content": text})
        self.pending = asyncio.create_task(self._send(text))

    async def hear(self) -> str | None:
        pending, self.pending = self.pending, None
        return None if pending is None else await pending  # None: the user was silent, so nothing was asked

    async def leave(self) -> None:
        """A service keeps no line open: nothing to close."""

    async def _send(self, text: str) -> str | None:
        if not await self._listening():
            return None
        body: dict[str, Any] = ({"model": self.model or "agent", "messages": list(self.messages)} if self.openai
                                else {"session": self.session, "message": text})
        try:
            async with httpx.AsyncClient(trust_env=False, timeout=None) as client:  # never through the proxy
                response = await client.post(self.url, json=body)
            response.raise_for_status()
            turn = _turn_of(response.json(), self.openai)
        except (httpx.HTTPError, ValueError, LookupError, TypeError, AttributeError):
            return None
        if self.openai and turn is not None:
            self.messages.append({"role": "assistant", "content": turn})
        return turn

    async def _listening(self) -> bool:
        """Wait until the service's port takes a connection; False if the service exits first."""
        while self.process.returncode is None:
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
            except OSError:
                await asyncio.sleep(_CONNECT_POLL_S)
                continue
            writer.close()
            return True
        return False


def _turn_of(document: Any, openai: bool) -> str | None:
    """The agent's turn in a service's answer, as a line runner.chat.agent_turn reads (an object
    reply {"content", ...} as its JSON)."""
    if openai:
        content = document["choices"][0]["message"]["content"]
        return content if isinstance(content, str) else None
    reply = document.get("reply", document.get("message"))
    if isinstance(reply, dict) and isinstance(reply.get("content"), str):
        return json.dumps(reply)
    return reply if isinstance(reply, str) else None
