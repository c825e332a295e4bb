"""Episodes per minute at --parallel 1, 4 and 8, and the harness's own overhead per episode.

The agent makes a few model calls, each answered after a fixed latency (200 ms by default), so
an episode mostly waits: parallelism should scale it almost linearly. Overhead is the runner's
time per episode minus the agent process's own lifetime, measured at --parallel 1 after
subtracting proxy start-up (timed by resuming an already complete run).

    .venv/bin/python bench/runner_throughput.py [--episodes 24] [--latency-ms 200]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

from aiohttp import web
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultproxy.formats.rundir import read_run  # noqa: E402
from faultproxy import RunOptions, run  # noqa: E402
from faultproxy.tasks.tasks_file import task_set_from_json  # noqa: E402
from faultproxy.scenarios import load_scenario  # noqa: E402

AGENT = [sys.executable, str(Path(__file__).with_name("waiting_agent.py"))]


def start_model(latency_s: float) -> tuple[str, threading.Event]:
    ready, stop, address = threading.Event(), threading.Event(), {}

    async def chat(request: web.Request) -> web.Response:
        await asyncio.sleep(latency_s)
        return web.json_response({"choices": [], "usage": {"total_tokens": 10}})

    async def serve() -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        address["url"] = f"http://127.0.0.1:{site._server.sockets[0].getsockname()[1]}"
        ready.set()
        while not stop.is_set():
            await asyncio.sleep(0.05)
        await runner.cleanup()

    threading.Thread(target=asyncio.run, args=(serve(),), daemon=True).start()
    ready.wait(10)
    return address["url"], stop


def timed_run(out: Path, episodes: int, parallel: int) -> float:
    tasks = task_set_from_json([{"id": f"task{i}", "prompt": "wait for the model"} for i in range(episodes)])
    options = RunOptions(scenario=load_scenario("rate_limit", {"lambda": 0.0}), tasks=tasks, command=AGENT,
                         out=out, k=1, parallel=parallel, show_progress=False)
    started = time.perf_counter()
    run(options)
    return time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=24)
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--calls", type=int, default=8, help="model calls per episode")
    args = parser.parse_args()
    model_url, stop = start_model(args.latency_ms / 1000)
    os.environ |= {"BENCH_MODEL_URL": model_url, "BENCH_CALLS": str(args.calls)}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        os.environ.setdefault("FAULTPROXY_HOME", str(Path(scratch) / "home"))
        for parallel in (1, 4, 8):
            out = Path(scratch) / f"p{parallel}"
            seconds = timed_run(out, args.episodes, parallel)
            startup = timed_run(out, args.episodes, parallel)  # resume of a complete run: start-up only
            agent_s = statistics.mean(r["duration_s"] for r in read_run(out).episodes)
            rows.append((parallel, seconds, startup, agent_s))
    stop.set()
    base = args.episodes / (rows[0][1] - rows[0][2]) * 60
    table = Table(title=f"faultproxy run: {args.episodes} episodes, {args.calls} model calls of {args.latency_ms:g} ms each")
    for column in ("--parallel", "wall s", "episodes/min", "speed-up vs 1", "agent s/episode", "harness ms/episode"):
        table.add_column(column, justify="right")
    for parallel, seconds, startup, agent_s in rows:
        per_minute = args.episodes / (seconds - startup) * 60
        overhead = ((seconds - startup) / args.episodes - agent_s) * 1000 if parallel == 1 else None
        table.add_row(str(parallel), f"{seconds:.1f}", f"{per_minute:.0f}", f"{per_minute / base:.1f}x",
                      f"{agent_s:.3f}", f"{overhead:.0f}" if overhead is not None else "-")
    console = Console(width=110)
    console.print(table)
    console.print(f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}; "
                  "harness overhead is measured at --parallel 1 only (episodes overlap above it).")


if __name__ == "__main__":
    main()
