"""`faultproxy monitor` in a process of its own, and what a test reads from the episodes it logs."""

from __future__ import annotations

import json
import re
import signal
import subprocess
from pathlib import Path

from tests.support.processes import FAULTPROXY, logged_episodes, wait_until

SESSION = "X-Session-Id"


class MonitorProcess:
    """`faultproxy monitor` in a process of its own, started and stopped by the test."""

    def __init__(self, out: Path, *args: str, policy: Path | None = None, stderr: Path | None = None) -> None:
        """`stderr`: a file for the monitor's log lines, to read while it runs (a pipe otherwise)."""
        command = [*FAULTPROXY, "monitor", "--out", str(out), "--port", "0", "--quiet",
                   *(["--policy", str(policy)] if policy else []), *args]
        self.out = out
        self.log = stderr.open("w") if stderr else None
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True, stderr=self.log or subprocess.PIPE)
        for line in self.process.stdout:
            found = re.search(r"forward proxy: HTTPS_PROXY=http://EPISODE:[^@]+@(127\.0\.0\.1:\d+)", line)
            if found:
                self.address = found.group(1)
                return
        raise AssertionError(f"the monitor did not start: {stderr.read_text() if stderr else self.process.stderr.read()}")

    def proxy(self, episode: str | None = None) -> str:
        return f"http://{episode}:x@{self.address}" if episode else f"http://{self.address}"

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.process.send_signal(sig)
        code = self.process.wait(timeout=60)
        self.process.stdout.close()
        for stream in (self.process.stderr, self.log):
            if stream:
                stream.close()
        return code

    def wait_logged(self, count: int) -> list[dict]:
        assert wait_until(lambda: logged_episodes(self.out) >= count, 30, self.process), "episodes not logged"
        return episodes(self.out)


def episodes(out: Path) -> list[dict]:
    lines = [json.loads(line) for line in (out / "episodes.jsonl").read_text().splitlines()]
    assert lines[0]["type"] == "header" and lines[0]["monitor"]["policy"]  # the header names the policy
    return lines[1:]

