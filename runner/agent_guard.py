"""Agents never outlive their runner: a watchdog process per runner, and pid files for resume.

Each agent runs in a process group of its own (so its children are ended with it). Two
mechanisms make sure no group is left behind when the runner itself dies:

- While the runner lives, `guard(pgid)` tells a watchdog process (runner/watchdog.py) about
  each group over a pipe; when the runner dies, however it dies, the pipe closes and the
  watchdog kills every group still listed (within milliseconds; Linux and macOS alike).
- Each agent's group is also written to `agent.pid` in its episode folder (the pid and the
  process's start time). `end_leftover_agents(run_dir)`, called when a run (re)starts, kills
  the groups those files name whose leader is still the same process (same start time), so a
  pid the system has since given to another process is never touched. That covers the case
  where the watchdog died with the runner (e.g. `kill -9` of both, or of the whole session).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import structlog

log = structlog.get_logger("faultproxy.agents")

PID_FILE = "agent.pid"
_WATCHDOG_SCRIPT = Path(__file__).with_name("watchdog.py")


class _Watchdog:
    """This process's watchdog, started on first use (again after a fork, or if it died)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: subprocess.Popen | None = None
        self._owner = 0

    def send(self, line: str) -> None:
        with self._lock:
            for _ in range(2):  # a watchdog that died is replaced once
                process = self._running()
                try:
                    process.stdin.write(line.encode("ascii"))
                    process.stdin.flush()
                    return
                except (BrokenPipeError, OSError):
                    log.warning("watchdog_restarted", pid=process.pid)
                    self._process = None

    def _running(self) -> subprocess.Popen:
        if self._process is None or self._owner != os.getpid() or self._process.poll() is not None:
            # -I -S: no site packages, no user paths: a bare interpreter starts in milliseconds.
            self._process = subprocess.Popen(
                [sys.executable, "-I", "-S", str(_WATCHDOG_SCRIPT)], stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )
            self._owner = os.getpid()
        return self._process


_watchdog = _Watchdog()


def guard(pgid: int, pid_file: Path | None) -> None:
    """From now on, `pgid` dies with this process; `pid_file` records it for a later run."""
    _watchdog.send(f"+ {pgid}\n")
    if pid_file is not None:
        pid_file.write_text(json.dumps({"pgid": pgid, "start": process_start(pgid)}))


def release(pgid: int, pid_file: Path | None) -> None:
    """`pgid` was killed by its runner: forget it."""
    _watchdog.send(f"- {pgid}\n")
    if pid_file is not None:
        pid_file.unlink(missing_ok=True)


def end_leftover_agents(run_dir: Path) -> int:
    """Kill the agent groups an earlier run of `run_dir` left running; returns how many."""
    ended = 0
    for pid_file in sorted(run_dir.glob(f"episodes/*/{PID_FILE}")):
        try:
            recorded = json.loads(pid_file.read_text())
            pgid, start = int(recorded["pgid"]), recorded["start"]
        except (OSError, ValueError, KeyError, TypeError):
            pid_file.unlink(missing_ok=True)
            continue
        if start is not None and process_start(pgid) == start:  # the same process, not a reused pid
            try:
                os.killpg(pgid, signal.SIGKILL)
                ended += 1
                log.warning("leftover_agent_ended", pgid=pgid, episode=pid_file.parent.name)
            except OSError:
                pass
        pid_file.unlink(missing_ok=True)
    return ended


def process_start(pid: int) -> str | None:
    """When process `pid` started, as an opaque string (None: no such process). Two processes
    with the same pid never have the same start."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        if Path("/proc/self/stat").exists():
            return None  # Linux: the process is gone
    except OSError:
        return None
    else:
        # Field 22, counted after the command name, which is in parentheses and may hold spaces.
        return "linux:" + stat.rsplit(")", 1)[1].split()[19]
    try:  # macOS and other systems without /proc
        started = subprocess.run(["ps", "-o", "lstart=", "-p", str(pid)], capture_output=True, text=True,
                                 timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return f"ps:{started}" if started else None
