"""`--chat stdio`: the agent hears each user turn as one line on its stdin and answers with lines
on its stdout (runner.chat.agent_turn reads each: a JSON {"role", "content"} or text). Its
stdin closes after the user's last turn, so a line-reading loop ends there; blank lines are not
turns. Its stderr is the episode's log."""

from __future__ import annotations

import asyncio


class StdioChannel:
    """A runner.chat.Channel over the agent process's stdin and stdout."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process

    async def say(self, text: str) -> None:
        stdin = self.process.stdin
        try:
            stdin.write((" ".join(text.splitlines()) + "\n").encode("utf-8"))  # one turn, one line
            await stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the agent has gone: hear() says so

    async def hear(self) -> str | None:
        while line := await self.process.stdout.readline():
            text = line.decode("utf-8", "replace").strip()
            if text:
                return text
        return None

    async def leave(self) -> None:
        stdin = self.process.stdin
        if not stdin.is_closing():
            stdin.close()

