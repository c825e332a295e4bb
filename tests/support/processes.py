"""Watching processes and files from tests: poll for an event, never sleep for a guessed time."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

FAULTPROXY = [sys.executable, "-m", "faultproxy"]  # the command line, as a user runs it


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent to reap it counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return False
    else:
        return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    found = subprocess.run(["ps", "-o", "stat=", "-p", str(pid)], capture_output=True, text=True).stdout.strip()
    return bool(found) and not found.startswith("Z")


def wait_until(condition: Callable[[], bool], seconds: float, process: subprocess.Popen | None = None) -> bool:
    """Poll `condition` for up to `seconds`; fail at once if `process` exits meanwhile."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        if process is not None and process.poll() is not None:
            stderr = process.stderr.read() if process.stderr else ""
            raise AssertionError(f"the process exited ({process.returncode}) first: {stderr}")
        time.sleep(0.05)
    return condition()


def logged_episodes(out: Path) -> int:
    """Episode lines in a run directory's log so far (its header not counted)."""
    log = out / "episodes.jsonl"
    return max(len(log.read_bytes().splitlines()) - 1, 0) if log.exists() else 0
