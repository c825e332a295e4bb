"""The MCP server process the shim starts: its stdin, its stdout lines, its stderr, its exit."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import signal
import sys
from collections.abc import AsyncIterator, Sequence

LINE_LIMIT = 1 << 30  # one JSON-RPC message per line; a tool result of hundreds of MB is still one line
STDERR_TAIL = 20


class ServerStartError(Exception):
    """The server command could not be started (not found, not executable)."""


class ServerGone(Exception):
    """The server process has exited; nothing more can be sent to it."""


class ChildServer:
    """One server process. Its stderr goes on to ours as it comes (the MCP client logs a server's
    stderr), its last lines kept to say why it exited."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.process: asyncio.subprocess.Process | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.killed_by: str | None = None
        self._stderr_task: asyncio.Task | None = None

    async def start(self) -> None:
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.command, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
            )
        except (OSError, ValueError) as error:
            reason = getattr(error, "strerror", None) or str(error)
            raise ServerStartError(f"cannot start {self.command[0]!r}: {reason}") from None
        self._stderr_task = asyncio.create_task(self._pass_stderr())

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None and self.killed_by is None

    async def send(self, line: bytes) -> None:
        """Write one message (a line without its newline) to the server's stdin."""
        if not self.alive or self.process.stdin.is_closing():
            raise ServerGone(self.exit_reason())
        try:
            self.process.stdin.write(line + b"\n")
            await self.process.stdin.drain()
        except (BrokenPipeError, ConnectionResetError):
            raise ServerGone(self.exit_reason()) from None

    async def lines(self) -> AsyncIterator[bytes]:
        """The server's stdout, line by line without newlines, until it closes."""
        stdout = self.process.stdout
        while True:
            try:
                line = await stdout.readuntil(b"\n")
            except asyncio.IncompleteReadError as partial:
                if partial.partial.strip():
                    yield partial.partial
                return
            yield line.rstrip(b"\r\n")

    async def kill(self, why: str) -> None:
        """Kill the server at once (SIGKILL: a crash, not a shutdown) and reap it."""
        self.killed_by = why
        if self.process and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
            await self.process.wait()

    async def close(self, grace_s: float = 2.0) -> None:
        """End the server as MCP's stdio shutdown does: close its stdin, wait, then terminate."""
        if self.process is None:
            return
        if self.process.returncode is None:
            with contextlib.suppress(OSError):
                self.process.stdin.close()
            try:
                await asyncio.wait_for(self.process.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.terminate()
                await self.process.wait()
        if self._stderr_task:
            await self._stderr_task

    def exit_reason(self) -> str:
        """One line: how the server ended, with the last thing it wrote on stderr."""
        if self.killed_by:
            return f"MCP server killed ({self.killed_by})"
        code = self.process.returncode if self.process else None
        said = f"; stderr: {self.stderr_tail[-1]}" if self.stderr_tail else ""
        return f"MCP server exited with status {code}{said}"

    async def _pass_stderr(self) -> None:
        stderr = self.process.stderr
        out = sys.stderr.buffer
        while chunk := await stderr.readline():
            out.write(chunk)
            out.flush()
            text = chunk.decode("utf-8", "replace").strip()
            if text:
                self.stderr_tail.append(text[:300])
