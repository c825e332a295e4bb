"""What a benchmark run says about the machine: its hardware and software, how busy others kept
it, and the median (min–max) cells of its tables."""

from __future__ import annotations

import os
import platform
import resource
import statistics
import subprocess
import time
from pathlib import Path

from child_processes import tool

BUSY_CORES = 0.25  # other processes using more than this: verdicts are only indicative


def machine() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    try:
        mitmproxy_version = version("mitmproxy")
    except PackageNotFoundError:
        mitmproxy_version = subprocess.run([tool("mitmdump"), "--version"], capture_output=True, text=True).stdout.split("\n")[0]
    cpu_model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu_model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {
        "cores": f"{os.cpu_count()} logical ({usable} usable){' — ' + cpu_model if cpu_model else ''}",
        "os": f"{platform.system()} {platform.release()} {platform.machine()}",
        "python": f"{platform.python_implementation()} {platform.python_version()}",
        "mitmproxy": mitmproxy_version,
    }


class MachineLoad:
    """How busy the machine was during the benchmark, apart from the benchmark itself (Linux)."""

    def __init__(self) -> None:
        self.load_average = os.getloadavg() if hasattr(os, "getloadavg") else None
        self.started = time.monotonic()
        self.stat = self._stat()
        self.own = self._own()

    @staticmethod
    def _stat() -> tuple[float, float] | None:
        """(busy, steal) CPU seconds of the whole machine since boot, from /proc/stat."""
        try:
            fields = [int(x) for x in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
        except (OSError, ValueError):
            return None
        tick = os.sysconf("SC_CLK_TCK")
        user, nice, system, _idle, _iowait, irq, softirq, steal = (fields + [0] * 8)[:8]
        return (user + nice + system + irq + softirq) / tick, steal / tick

    @staticmethod
    def _own() -> float:
        """CPU seconds of this process and its reaped children (every process the benchmark starts)."""
        me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
        return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime

    def others(self) -> float | None:
        """Cores kept busy by other processes (and the hypervisor) on average since the start.
        Call after every child has been stopped and reaped."""
        end = self._stat()
        if not (self.stat and end):
            return None
        wall = time.monotonic() - self.started
        return max(0.0, (end[0] - self.stat[0]) - (self._own() - self.own)) / wall + (end[1] - self.stat[1]) / wall

    def describe(self) -> dict[str, str]:
        """Call after every child has been stopped and reaped."""
        info = {}
        if self.load_average:
            now = os.getloadavg()
            info["load average"] = (f"{', '.join(f'{x:.2f}' for x in self.load_average)} at start, "
                                    f"{', '.join(f'{x:.2f}' for x in now)} at end")
        end = self._stat()
        if self.stat and end:
            wall = time.monotonic() - self.started
            others = max(0.0, (end[0] - self.stat[0]) - (self._own() - self.own)) / wall
            steal = (end[1] - self.stat[1]) / wall
            info["other load"] = (f"other processes kept {others:.2f} of {os.cpu_count()} cores busy on average, "
                                  f"hypervisor steal {steal:.2f} cores"
                                  + (" — a busy machine" if others + steal > BUSY_CORES else ""))
        return info


def median(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def spread(values: list[float], fmt: str, unit: str = "") -> str:
    mid = format(median(values), fmt) + unit
    if len(values) < 2:
        return mid
    return f"{mid} [dim]({format(min(values), fmt)}–{format(max(values), fmt)})[/dim]"

