#!/usr/bin/env python3
"""What `faultproxy mcp` adds to each tools/call of a stdio MCP server.

The official SDK's stdio client calls a read-only tool of a server on the official SDK
(tests/support/agents/counter_mcp_server.py) one call at a time, in four configurations, each its own
session with its own processes:

  direct        the client starts the server itself
  relay         `faultproxy mcp -- server`: no episode, no scenario: a line-for-line relay
  recorded      `faultproxy mcp --trace-dir D -- server`: every message through the embedded proxy
                and into the trace, no rule
  scenario 0%   `faultproxy mcp --scenario S -- server`: 10 rules matching tools/call, none fires
                (lambda=0), trace on, the proxy inside the shim's process
  in a run      the same scenario in a `faultproxy proxy` process of its own, the shim given the
                episode (FAULTPROXY_EPISODE, HTTP_PROXY) as `faultproxy run` gives its agents: what
                an episode's stdio calls pay

Each configuration runs `--rounds` times in rotated order (a slow spell on a noisy machine hits
all of them); each run warms up, then times `--calls` calls. The table gives p50 and p99 per call
and what each adds over direct (median over rounds of the per-round difference), and judges each
against the target: p50 added < 1 ms.

    .venv/bin/python bench/mcp_shim.py              # 3 rounds x 1,000 calls per configuration (~4 min)
    .venv/bin/python bench/mcp_shim.py --quick      # 1 round x 200 calls
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parent.parent
SERVER = REPO / "tests" / "support" / "agents" / "counter_mcp_server.py"
TARGET_P50_ADDED_MS = 1.0
RULES = "".join(f"""
  - name: never_{i}
    match: {{body: {{method: tools/call, params.name: read_counter}}}}
    when: {{probability: lambda}}
    fault: {{type: jsonrpc_error}}
""" for i in range(10))


def scenario_file(folder: Path) -> Path:
    scenario = folder / "zero.yaml"
    scenario.write_text(f"name: zero\ndescription: ten rules, none fires\nseed: 1\nparams: {{lambda: 0}}\nrules:{RULES}")
    return scenario


def configurations(folder: Path, proxy_port: int) -> dict[str, tuple[list[str], dict[str, str] | None]]:
    """Each configuration's server command and the variables added to the SDK's default environment."""
    server = [sys.executable, str(SERVER), str(folder / "counter")]
    shim = [sys.executable, "-m", "faultproxy", "mcp"]
    scenario = scenario_file(folder)
    episode = {"FAULTPROXY_EPISODE": "bench", "HTTP_PROXY": f"http://bench:x@127.0.0.1:{proxy_port}"}
    return {
        "direct": (server, None),
        "relay": ([*shim, "--", *server], None),
        "recorded": ([*shim, "--trace-dir", str(folder / "flows-recorded"), "--", *server], None),
        "scenario 0%": ([*shim, "--scenario", str(scenario), "--trace-dir", str(folder / "flows-scenario"), "--",
                         *server], None),
        "in a run": ([*shim, "--", *server], episode),
    }


def start_proxy(folder: Path, scenario: Path | None = None) -> tuple[subprocess.Popen, int]:
    """`faultproxy proxy` with `scenario` (default: the zero scenario) on a free loopback port,
    once it listens."""
    scenario = scenario or scenario_file(folder)
    return start_listening(lambda port: [sys.executable, "-m", "faultproxy", "proxy", "--scenario", str(scenario),
                                         "--port", str(port), "--trace-dir", str(folder / f"flows-{scenario.stem}")])


def start_listening(command, what: str = "faultproxy proxy") -> tuple[subprocess.Popen, int]:
    """`command(port)` started on a free loopback port, once it listens there."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(command(port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return process, port
        if process.poll() is not None:
            break
        time.sleep(0.1)
    process.kill()
    raise SystemExit(f"{what} did not start on port {port}")


async def time_calls(command: list[str], env: dict[str, str] | None, calls: int, warmup: int) -> list[float]:
    """Seconds per call, one at a time, after `warmup` untimed calls."""
    parameters = StdioServerParameters(command=command[0], args=command[1:], env=env)
    async with stdio_client(parameters) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(warmup):
            await session.call_tool("read_counter", {})
        times = []
        for _ in range(calls):
            started = time.perf_counter()
            await session.call_tool("read_counter", {})
            times.append(time.perf_counter() - started)
        return times


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def arguments(description: str) -> argparse.Namespace:
    """The options every MCP latency bench takes (calls, warm-up, rounds, --quick, --json, --check)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--calls", type=int, default=1000)
    parser.add_argument("--warmup", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true", help="1 round x 200 calls")
    parser.add_argument("--json", type=Path, help="also write every round's numbers here")
    parser.add_argument("--check", action="store_true", help="exit 1 when `in a run` misses the target")
    args = parser.parse_args()
    if args.quick:
        args.calls, args.rounds, args.warmup = 200, 1, 20
    return args


def conclude(rounds: list[dict[str, dict[str, float]]], args: argparse.Namespace, baseline: str | None = None) -> int:
    """Write --json; the exit status --check asks for (1: `in a run` misses the target: p50 added
    under TARGET_P50_ADDED_MS, and no more than `baseline` adds, paired per round, when given)."""
    if args.json:
        args.json.write_text(json.dumps({"calls": args.calls, "rounds": rounds}, indent=1))
    return 1 if args.check and not meets(rounds, "in a run", baseline) else 0


def paired(rounds: list[dict[str, dict[str, float]]], name: str, other: str, key: str = "p50") -> float:
    """Median over rounds of `name`'s figure minus `other`'s in the same round."""
    return statistics.median(r[name][key] - r[other][key] for r in rounds)


def meets(rounds: list[dict[str, dict[str, float]]], name: str, baseline: str | None) -> bool:
    met = paired(rounds, name, "direct") < TARGET_P50_ADDED_MS
    return met and (baseline is None or paired(rounds, name, baseline) <= 0)


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        proxy, port = start_proxy(Path(tmp))
        try:
            rounds, names = measure(configurations(Path(tmp), port), args)
        finally:
            proxy.terminate()
            proxy.wait()
    report(names, rounds, args)
    return conclude(rounds, args)


def measure(configs: dict[str, tuple], args: argparse.Namespace,
            timer=None) -> tuple[list[dict[str, dict[str, float]]], list[str]]:
    """p50 and p99 in ms per configuration and round, rounds in rotated order; `timer(*config,
    calls, warmup)` times one configuration's calls (default: a stdio session's)."""
    timer = timer or time_calls
    names = list(configs)
    rounds: list[dict[str, dict[str, float]]] = []
    for r in range(args.rounds):
        order = names[r % len(names):] + names[:r % len(names)]
        result = {}
        for name in order:
            print(f"round {r + 1}: {name} ...", file=sys.stderr, flush=True)
            times = asyncio.run(timer(*configs[name], args.calls, args.warmup))
            result[name] = {"p50": percentile(times, 0.5) * 1000, "p99": percentile(times, 0.99) * 1000}
        rounds.append(result)
    return rounds, names


def report(names: list[str], rounds: list[dict[str, dict[str, float]]], args: argparse.Namespace,
           what: str = "tools/call",
           footnote: str = "a run's stdio calls pay what `in a run` shows", baseline: str | None = None) -> None:
    """The table; `baseline` (a configuration's name, e.g. plain mitmdump) is a reference row: the
    others get a column of p50 against it, paired per round, and must not add more than it does."""
    def median(name: str, key: str) -> float:
        return statistics.median(r[name][key] for r in rounds)

    versus = [f"p50 vs {baseline}"] if baseline else []
    print(f"\n{args.calls:,} {what} per run, one at a time, {args.rounds} round(s); "
          f"{os.cpu_count()} cores, Python {platform.python_version()}, load average {os.getloadavg()[0]:.2f}\n")
    print("| " + " | ".join(["configuration", "p50 ms", "p99 ms", "p50 added", "p99 added", *versus, "target"]) + " |")
    print("|---|" + "---:|" * (4 + len(versus)) + "---|")
    for name in names:
        cells = [name, f"{median(name, 'p50'):.2f}", f"{median(name, 'p99'):.2f}"]
        if name == "direct":
            cells += [""] * (3 + len(versus))
        else:
            cells += [f"{paired(rounds, name, 'direct'):+.2f}", f"{paired(rounds, name, 'direct', 'p99'):+.2f}"]
            if baseline:
                cells.append("" if name == baseline else f"{paired(rounds, name, baseline):+.2f}")
            cells.append("reference" if name == baseline else "met" if meets(rounds, name, baseline) else "missed")
        print("| " + " | ".join(cells) + " |")
    also = f", and no more than {baseline} adds (paired per round)" if baseline else ""
    print(f"\ntarget: p50 added < {TARGET_P50_ADDED_MS:g} ms{also}; {footnote}")


if __name__ == "__main__":
    sys.exit(main())
