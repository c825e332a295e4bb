"""Processes a benchmark starts, and their CPU time (Linux /proc): shared by the proxy benchmarks."""

from __future__ import annotations

import os
import queue
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


class Child:
    """A process this script started: its stdout lines go to a queue, stderr to a log file."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None,
                 cpus: set[int] | None = None) -> None:
        self.name = name
        self.log = log_dir / f"{name.replace(' ', '_')}.stderr.log"
        self._lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log.open("wb"),
            env=env, text=True, cwd=log_dir,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def wait_for_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self._lines.empty()):
                raise RuntimeError(f"{self.name}: no line starting {prefix!r}; see {self.log}:\n{self.tail()}")
            try:
                line = self._lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if line.strip().startswith(prefix):
                return line.strip()

    def cpu_seconds(self) -> float | None:
        return cpu_seconds(self.proc.pid)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, all threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, child: Child, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{child.name} is not listening on {port} after {timeout} s:\n{child.tail()}")


def tool(name: str) -> str:
    """A command of the project's virtualenv (beside this interpreter, or .venv), else PATH."""
    for folder in (Path(sys.executable).parent, REPO / ".venv" / "bin"):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"proxy_overhead: {name} not found (run with the project's .venv/bin/python)")
    return found

