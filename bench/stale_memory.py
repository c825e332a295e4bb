#!/usr/bin/env python3
"""Does the proxy's memory stay flat under a stale_state rule, however long it runs?

`faultproxy proxy` (where episodes never end) runs a scenario whose stale_state rule matches
every read; a load generator sends GET /items/N with a new N each time (so every read is a new
one to remember) over `--connections` keep-alive connections, one episode per connection, to a
small aiohttp upstream. Every `--every` requests it samples the proxy process's RSS
(/proc/PID/status, VmRSS) and prints a table: RSS and its change since the sample at
`--baseline` requests. Before the per-episode LRU (proxy.episodes.EpisodeLimits) it grew by
about 1.2 MB per 10,000 requests without end. Everything listens on 127.0.0.1.

    .venv/bin/python bench/stale_memory.py                       # 100,000 requests, 20 connections
    .venv/bin/python bench/stale_memory.py --requests 20000      # a shorter look
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

import aiohttp
from aiohttp import web

SCENARIO = """\
name: stale-bench
description: every read is remembered; a fifth of them are served stale when they can be
rules:
  - name: stale-items
    match: {method: GET, path: "/items/*"}
    fault: {type: stale_state}
    when: {probability: 0.2}
"""


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"no VmRSS for process {pid}")


def start_upstream() -> int:
    """A small JSON upstream in a thread of this process; returns its port."""
    ready: list[int] = []
    started = threading.Event()

    async def item(request: web.Request) -> web.Response:
        return web.json_response({"id": request.match_info["id"], "status": "open", "amount": 1250})

    async def serve() -> None:
        app = web.Application()
        app.router.add_get("/items/{id}", item)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        ready.append(site._server.sockets[0].getsockname()[1])
        started.set()
        await asyncio.Event().wait()

    threading.Thread(target=asyncio.run, args=(serve(),), daemon=True).start()
    started.wait(30)
    return ready[0]


def start_proxy(work: Path) -> tuple[subprocess.Popen, int]:
    (work / "stale.yaml").write_text(SCENARIO)
    process = subprocess.Popen(
        [sys.executable, "-m", "faultproxy", "proxy", "--scenario", str(work / "stale.yaml"), "--port", "0",
         "--trace-dir", str(work / "flows")], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    for line in process.stdout:
        if "forward proxy:" in line:  # "... HTTPS_PROXY=http://EPISODE:x@127.0.0.1:PORT  (trust ...)"
            return process, int(line.split("@", 1)[1].split()[0].rsplit(":", 1)[1])
    raise RuntimeError("the proxy did not start")


async def load(proxy_port: int, upstream_port: int, pid: int, args: argparse.Namespace) -> list[tuple[int, float]]:
    numbers = itertools.count()
    done = 0
    samples: list[tuple[int, float]] = [(0, rss_mb(pid))]

    async def connection(episode: int) -> None:
        nonlocal done
        proxy = f"http://ep{episode}:x@127.0.0.1:{proxy_port}"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=1)) as session:
            while (n := next(numbers)) < args.requests:
                async with session.get(f"http://127.0.0.1:{upstream_port}/items/{n}", proxy=proxy) as response:
                    await response.read()
                done += 1
                if done % args.every == 0:
                    samples.append((done, rss_mb(pid)))
                    print(f"  {done:,} requests, RSS {samples[-1][1]:.1f} MB", file=sys.stderr)

    await asyncio.gather(*(connection(i) for i in range(args.connections)))
    return samples


def report(samples: list[tuple[int, float]], baseline_at: int, seconds: float,
           what: str = "`faultproxy proxy` under a stale_state rule matching every read") -> bool:
    baseline = next(rss for done, rss in samples if done >= baseline_at)
    print(f"\nRSS of {what} ({seconds:.0f} s)\n")
    print(f"| requests | RSS (MB) | change since {baseline_at:,} |")
    print("|---:|---:|---:|")
    for done, rss in samples:
        change = f"{(rss - baseline) / baseline * 100:+.1f} %" if done >= baseline_at else "—"
        print(f"| {done:,} | {rss:.1f} | {change} |")
    after = [rss for done, rss in samples if done >= baseline_at]
    spread = (max(after) - min(after)) / baseline * 100
    met = spread < 10
    print(f"\nspread after {baseline_at:,} requests: {spread:.1f} % of RSS (target < 10 %): {'met' if met else 'NOT met'}")
    return met


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=100_000)
    parser.add_argument("--connections", type=int, default=20)
    parser.add_argument("--every", type=int, default=10_000, help="sample RSS every N requests")
    parser.add_argument("--baseline", type=int, default=10_000, help="compare with the sample at N requests")
    return soak(parser.parse_args(argv), start_proxy, load,
                "`faultproxy proxy` under a stale_state rule matching every read")


def soak(args: argparse.Namespace, start: Callable[[Path], tuple[subprocess.Popen, int]], load_with: Callable,
         what: str) -> int:
    """Start the upstream and the process under test (`start`), load it (`load_with`), report; 0 if flat."""
    with tempfile.TemporaryDirectory(prefix="memory-soak-") as folder:
        upstream_port = start_upstream()
        process, proxy_port = start(Path(folder))
        try:
            started = time.monotonic()
            samples = asyncio.run(load_with(proxy_port, upstream_port, process.pid, args))
            return 0 if report(samples, args.baseline, time.monotonic() - started, what) else 1
        finally:
            process.terminate()
            process.wait(60)


if __name__ == "__main__":
    sys.exit(main())
