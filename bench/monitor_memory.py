#!/usr/bin/env python3
"""Does `faultproxy monitor`'s memory stay flat while episodes open and close?

A monitor (`--episode-by header:X-Session-Id`, `--idle-s 0.5`, `--max-episodes 500`) sits in
front of a small aiohttp upstream; `--connections` keep-alive connections send GET /items/N, each
switching to a new session id every `--per-session` requests, so episodes keep opening, going
idle, being judged and logged, and the log keeps dropping its oldest. Every `--every` requests
the monitor process's RSS is sampled; the table compares it with the sample at `--baseline`
requests (stale_memory.py's report). Everything listens on 127.0.0.1.

    .venv/bin/python bench/monitor_memory.py                       # 100,000 requests
    .venv/bin/python bench/monitor_memory.py --requests 20000 --every 2000 --baseline 2000
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import subprocess
import sys
from pathlib import Path

import aiohttp
from stale_memory import rss_mb, soak, start_upstream


def start_monitor(work: Path) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen(
        [sys.executable, "-m", "faultproxy", "monitor", "--out", str(work / "run"), "--port", "0", "--quiet",
         "--episode-by", "header:X-Session-Id", "--idle-s", "0.5", "--max-episodes", "500"],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in process.stdout:
        if "forward proxy:" in line:
            return process, int(line.split("@", 1)[1].split()[0].rsplit(":", 1)[1])
    raise RuntimeError("the monitor did not start")


async def load(proxy_port: int, upstream_port: int, pid: int, args: argparse.Namespace) -> list[tuple[int, float]]:
    numbers, sessions = itertools.count(), itertools.count()
    done = 0
    samples: list[tuple[int, float]] = [(0, rss_mb(pid))]

    async def connection() -> None:
        nonlocal done
        session_id = f"s{next(sessions)}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as client:
            while (n := next(numbers)) < args.requests:
                if n % args.per_session == 0:
                    session_id = f"s{next(sessions)}"
                async with client.get(f"http://127.0.0.1:{upstream_port}/items/{n}", headers={"X-Session-Id": session_id},
                                      proxy=f"http://127.0.0.1:{proxy_port}") as response:
                    await response.read()
                done += 1
                if done % args.every == 0:
                    samples.append((done, rss_mb(pid)))
                    print(f"  {done:,} requests, RSS {samples[-1][1]:.1f} MB", file=sys.stderr)

    await asyncio.gather(*(connection() for _ in range(args.connections)))
    return samples


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--per-session", type=int, default=20, help="requests per session (episode)")
    parser.add_argument("--every", type=int, default=10_000, help="sample RSS every N requests")
    parser.add_argument("--baseline", type=int, default=10_000, help="compare with the sample at N requests")
    args = parser.parse_args(argv)
    return soak(args, start_monitor, load, f"`faultproxy monitor`, a new episode every {args.per_session} requests "
                                           f"per connection, {args.connections} connections, log capped at 500")

if __name__ == "__main__":
    sys.exit(main())
