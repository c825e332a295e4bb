"""The MCP server process the shim starts: its pipes, its stderr, its exit.

Its stdin and stdout are pipes the shim makes itself, so that their ends can be handed to the
episode's proxy (proxy/stdio/lane.py), which then talks to the server directly. Its stderr stays
with the shim and goes on to the shim's own as it comes (the MCP client logs a server's stderr);
the last lines are kept to say why it exited (with the command: a server that exits before
answering initialize is reported as one that did not start, evaluator.judging.server_start).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import os
import shlex
import signal
import sys
from collections.abc import Sequence

LINE_LIMIT = 1 << 30  # one JSON-RPC message per line; a tool result of hundreds of MB is still one line
STDERR_TAIL = 20
STDERR_SHOWN = 3  # the last lines of stderr an exit reason quotes


class ServerStartError(Exception):
    """The server command could not be started (not found, not executable)."""


class ServerGone(Exception):
    """The server process has exited; nothing more can be sent to it."""


class ChildServer:
    """One server process. `stdin_fd` and `stdout_fd` are the shim's ends of its pipes, until
    something takes them over."""

    def __init__(self, command: Sequence[str]) -> None:
        self.command = list(command)
        self.process: asyncio.subprocess.Process | None = None
        self.stdin_fd: int | None = None
        self.stdout_fd: int | None = None
        self.stderr_tail: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL)
        self.killed_by: str | None = None
        self._stderr_task: asyncio.Task | None = None

    async def start(self) -> None:
        stdin_r, stdin_w = os.pipe()
        stdout_r, stdout_w = os.pipe()
        try:
            self.process = await asyncio.create_subprocess_exec(
                *self.command, stdin=stdin_r, stdout=stdout_w, stderr=asyncio.subprocess.PIPE, limit=LINE_LIMIT,
            )
        except (OSError, ValueError) as error:
            for fd in (stdin_w, stdout_r):
                os.close(fd)
            reason = getattr(error, "strerror", None) or str(error)
            raise ServerStartError(f"cannot start {self.command[0]!r}: {reason}") from None
        finally:
            os.close(stdin_r)
            os.close(stdout_w)
        self.stdin_fd, self.stdout_fd = stdin_w, stdout_r
        self._stderr_task = asyncio.create_task(self._pass_stderr())

    def give_pipes(self) -> tuple[int, int]:
        """The server's stdin and stdout ends; whoever takes them closes them."""
        fds = self.stdin_fd, self.stdout_fd
        self.stdin_fd = self.stdout_fd = None
        return fds

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None and self.killed_by is None

    async def kill(self, why: str) -> None:
        """Kill the server at once (SIGKILL: a crash, not a shutdown) and reap it."""
        self.killed_by = why
        if self.process and self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGKILL if os.name == "posix" else signal.SIGTERM)
            await self.process.wait()

    async def close(self, grace_s: float = 2.0) -> None:
        """End the server as MCP's stdio shutdown does, once its stdin is closed: wait, then terminate."""
        for fd in self.give_pipes():
            if fd is not None:
                os.close(fd)
        if self.process is None:
            return
        if self.process.returncode is None:
            try:
                await asyncio.wait_for(self.process.wait(), grace_s)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.terminate()
                await self.process.wait()
        if self._stderr_task:
            await self._stderr_task

    async def wait_exit(self) -> int | None:
        """Wait for the server to exit; its status."""
        return await self.process.wait() if self.process else None

    def exit_reason(self) -> str:
        """One line: how the server ended, with the last thing it wrote on stderr."""
        if self.killed_by:
            return f"MCP server killed ({self.killed_by})"
        code = self.process.returncode if self.process else None
        said = f"; stderr: {' | '.join(list(self.stderr_tail)[-STDERR_SHOWN:])}" if self.stderr_tail else ""
        return f"MCP server `{shlex.join(self.command)}` exited with status {code}{said}"

    async def _pass_stderr(self) -> None:
        stderr = self.process.stderr
        out = sys.stderr.buffer
        while chunk := await stderr.readline():
            out.write(chunk)
            out.flush()
            text = chunk.decode("utf-8", "replace").strip()
            if text:
                self.stderr_tail.append(text[:300])
