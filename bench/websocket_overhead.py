#!/usr/bin/env python3
"""Per-message latency faultproxy adds to a WebSocket session, against plain mitmdump.

Three configurations on 127.0.0.1, ephemeral ports, each proxy its own process:

  direct       client -> echo server (aiohttp)
  mitmdump     client -> plain mitmdump (forward proxy, CONNECT) -> echo server
  faultproxy   client -> faultproxy proxy (a message rule that matches no message, every message
               in the trace, as users run it) -> echo server

The client (the `websockets` library, in a process of its own) sends a ~200-byte JSON text
message and waits for its echo, one at a time, on one session per run: the round trip a message
pays, through the proxy both ways. Rounds run the configurations in a rotated order; differences
against mitmdump are paired per round and the median is reported. Target: p50 at most +0.3 ms
over mitmdump.

    .venv/bin/python bench/websocket_overhead.py           # 3 rounds x 3000 messages per configuration
    .venv/bin/python bench/websocket_overhead.py --quick   # smoke check: 1 round x 300 messages
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from child_processes import Child, free_port, tool, wait_listening
from machine_load import MachineLoad, machine, median, spread
from rich.console import Console
from rich.table import Table

EPISODE, TOKEN = "bench", "x"
MESSAGE = json.dumps({"type": "response.output_text.delta", "response_id": "resp_bench", "item_id": "item_bench",
                      "output_index": 0, "content_index": 0, "delta": "a few words of an answer, " * 4})
TARGET_P50_DELTA_MS = 0.3
WARMUP = 50
SCENARIO = """\
name: bench_websocket
description: One message rule that selects every session and matches no message (its body predicate).
rules:
  - name: never
    match: {path: "/echo", websocket: {from: server, body: {type: no.such.event}}}
    fault: {type: ws_drop}
"""


# --- the child processes -------------------------------------------------------------------------


def serve_echo() -> None:
    from aiohttp import WSMsgType, web

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for message in ws:
            if message.type == WSMsgType.TEXT:
                await ws.send_str(message.data)
        return ws

    async def main() -> None:
        app = web.Application()
        app.router.add_get("/echo", echo)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print("PORT", site._server.sockets[0].getsockname()[1], flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())


def client(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--url", required=True)
    parser.add_argument("--proxy")
    parser.add_argument("--messages", type=int, required=True)
    args = parser.parse_args(argv)
    from websockets.asyncio.client import connect

    async def main() -> list[float]:
        async with connect(args.url, proxy=args.proxy, open_timeout=30, compression=None) as ws:
            for _ in range(WARMUP):
                await ws.send(MESSAGE)
                await ws.recv()
            times = []
            for _ in range(args.messages):
                started = time.perf_counter()
                await ws.send(MESSAGE)
                await ws.recv()
                times.append(time.perf_counter() - started)
            return times

    times = sorted(asyncio.run(main()))

    def percentile(p: float) -> float:
        return times[min(len(times) - 1, int(len(times) * p / 100))] * 1000

    print("BENCH_RESULT " + json.dumps({"messages": len(times), "p50_ms": percentile(50), "p99_ms": percentile(99)}),
          flush=True)


# --- the benchmark --------------------------------------------------------------------------------


@dataclass
class Config:
    key: str
    label: str
    proxy: str | None = None


@dataclass
class Run:
    round: int
    messages: int
    p50_ms: float
    p99_ms: float


def start(work: Path) -> tuple[int, list[Config], list[Child]]:
    children = []
    echo = Child("echo", [sys.executable, __file__, "_echo"], work)
    children.append(echo)
    port = int(echo.wait_for_line("PORT", 30).split()[1])
    mitm_port = free_port()
    mitm = Child("mitmdump", [tool("mitmdump"), "--listen-host", "127.0.0.1", "-p", str(mitm_port), "-q",
                              "--set", f"confdir={work / 'mitmproxy-home'}"], work)
    children.append(mitm)
    scenario = work / "bench_websocket.yaml"
    scenario.write_text(SCENARIO)
    fp = Child("faultproxy", [tool("faultproxy"), "proxy", "--scenario", str(scenario), "--port", "0",
                              "--trace-dir", str(work / "traces")],
               work, env=dict(os.environ, PYTHONUNBUFFERED="1", FAULTPROXY_HOME=str(work / "faultproxy-home")))
    children.append(fp)
    fp_port = int(fp.wait_for_line("forward proxy:", 60).split("@127.0.0.1:")[1].split()[0])
    wait_listening(mitm_port, mitm)
    configs = [Config("direct", "direct (no proxy)"), Config("mitmdump", "plain mitmdump", f"http://127.0.0.1:{mitm_port}"),
               Config("faultproxy", "faultproxy proxy", f"http://{EPISODE}:{TOKEN}@127.0.0.1:{fp_port}")]
    return port, configs, children


def measure(port: int, config: Config, messages: int, round_: int) -> Run:
    argv = [sys.executable, __file__, "_client", "--url", f"ws://127.0.0.1:{port}/echo", "--messages", str(messages)]
    argv += ["--proxy", config.proxy] if config.proxy else []
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    lines = [line for line in done.stdout.splitlines() if line.startswith("BENCH_RESULT ")]
    if done.returncode or not lines:
        raise RuntimeError(f"the client failed through {config.label} ({done.returncode}):\n{done.stderr[-2000:]}")
    result = json.loads(lines[-1].removeprefix("BENCH_RESULT "))
    return Run(round_, result["messages"], result["p50_ms"], result["p99_ms"])


def report(configs: list[Config], runs: dict[str, list[Run]], args: argparse.Namespace, load: MachineLoad) -> bool:
    console = Console()
    mode = "quick" if args.quick else "full"
    table = Table(title=f"WebSocket echo round trip per message ({mode}: {args.rounds} round(s) × "
                        f"{args.messages} messages, one at a time)")
    for column in ("configuration", "messages", "p50 ms", "p99 ms", "p50 vs mitmdump", "p99 vs mitmdump",
                   f"p50 ≤ +{TARGET_P50_DELTA_MS:g} ms"):
        table.add_column(column, justify="left" if column == "configuration" else "right")
    baseline = {run.round: run for run in runs["mitmdump"]}
    met = True
    for config in configs:
        config_runs = runs[config.key]
        d50 = [r.p50_ms - baseline[r.round].p50_ms for r in config_runs]
        d99 = [r.p99_ms - baseline[r.round].p99_ms for r in config_runs]
        verdict = ""
        if config.key == "faultproxy":
            ok = median(d50) <= TARGET_P50_DELTA_MS
            met &= ok
            verdict = "[green]yes[/green]" if ok else "[red]no[/red]"
        same = "—" if config.key in ("mitmdump", "direct") else None
        table.add_row(config.label, str(sum(r.messages for r in config_runs)),
                      spread([r.p50_ms for r in config_runs], ".3f"), spread([r.p99_ms for r in config_runs], ".3f"),
                      same or spread(d50, "+.3f", " ms"), same or spread(d99, "+.3f", " ms"), verdict)
    console.print(table)
    for name, value in (machine() | load.describe()).items():
        console.print(f"[dim]{name}: {value}[/dim]")
    return met


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_echo"]:
        serve_echo()
        return 0
    if argv[:1] == ["_client"]:
        client(argv[1:])
        return 0
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=3000, help="messages per configuration and round")
    parser.add_argument("--quick", action="store_true", help="smoke check: 1 round of 300 messages")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.messages = 1, 300
    load = MachineLoad()
    with tempfile.TemporaryDirectory(prefix="fp-bench-ws-") as folder:
        work = Path(folder)
        children: list[Child] = []
        try:
            port, configs, children = start(work)
            runs: dict[str, list[Run]] = {config.key: [] for config in configs}
            for round_ in range(args.rounds):
                order = configs[round_ % len(configs):] + configs[:round_ % len(configs)]
                for config in order:
                    runs[config.key].append(measure(port, config, args.messages, round_))
        finally:
            for child in reversed(children):
                child.stop()
    met = report(configs, runs, args, load)
    return 0 if met or args.quick else 1


if __name__ == "__main__":
    sys.exit(main())
