#!/usr/bin/env python3
"""What the proxy adds to each MCP request over Streamable HTTP.

The official SDK's Streamable HTTP client calls a read tool (`order_status`) of a server on the
official SDK (tests/support/agents/asking_mcp_server.py --http, a process of its own) one
`tools/call` at a time. Each call's answer comes on an SSE stream; the SDK's client closes its
connection once it has the answer event (it never reads the end of the body), so every call opens
a new connection, direct too. Four configurations, each its own session:

  direct          the client talks to the server
  plain mitmdump  through `mitmdump -q` (forward proxy, a process of its own): what any
                  mitmproxy-based proxy adds
  in a run        through a `faultproxy proxy` process (bench/mcp_shim.py's zero scenario: 10
                  rules on tools/call, none firing; trace on), the episode in the proxy URL as
                  `faultproxy run` gives it: no rule may select a server's message, so mitmproxy
                  hands the answer streams on
  in a run, relayed  the same with one rule more, on the server's elicitation requests (it never
                  fires): the streams pass the proxy's loopback relay, as in a run whose scenario
                  faults a server's messages (docs/mcp-stdio.md)

Rounds, warm-up and the table as in bench/mcp_shim.py; target: p50 added < 1 ms, and no more
than plain mitmdump adds (paired per round). A second table gives the CPU time per request of
the proxy and of the MCP server during the timed requests (from /proc): on a busy machine
latency is mostly other processes' noise, CPU time much less so.

    .venv/bin/python bench/mcp_http.py              # 3 rounds x 1,000 calls per configuration
    .venv/bin/python bench/mcp_http.py --quick      # 1 round x 200 calls
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import statistics

import httpx2
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp_shim import REPO, arguments, conclude, measure, report, scenario_file, start_listening, start_proxy
from child_processes import cpu_seconds, tool

SERVER = REPO / "tests" / "support" / "agents" / "asking_mcp_server.py"
MITMDUMP = "plain mitmdump"
RELAYED = "in a run, relayed"
ON_SERVER_MESSAGES = """
  - name: never_asked
    match: {body: {method: elicitation/create}}
    when: {probability: lambda}
    fault: {type: elicitation_declined}
"""
CPU_US: dict[str, list[tuple[float, float]]] = {}  # configuration -> per round (proxy, server) CPU µs per request


async def time_requests(url: str, proxy: str | None, processes: tuple, name: str,
                        calls: int, warmup: int) -> list[float]:
    """Seconds per tools/call, one at a time, after `warmup` untimed ones; the CPU time that
    `processes` (the proxy or None, the server) spent on the timed ones goes to CPU_US."""
    client = httpx2.AsyncClient(proxy=proxy, timeout=30)
    async with client, streamable_http_client(url, http_client=client) as (read, write), \
            ClientSession(read, write) as session:
        await session.initialize()
        for _ in range(warmup):
            await call(session)
        times = []
        before = [cpu_seconds(p.pid) if p else 0.0 for p in processes]
        for _ in range(calls):
            started = time.perf_counter()
            await call(session)
            times.append(time.perf_counter() - started)
        spent = [(cpu_seconds(p.pid) if p else 0.0) - b for p, b in zip(processes, before, strict=True)]
        CPU_US.setdefault(name, []).append(tuple(x / calls * 1e6 for x in spent))
        return times


async def call(session: ClientSession) -> None:
    answer = await session.call_tool("order_status", {"order": "A1"})
    if answer.is_error or answer.content[0].text != "A1: shipped":
        raise SystemExit(f"order_status answered {answer}")


def report_cpu(names: list[str]) -> None:
    print("\n| configuration | proxy CPU µs per request | MCP server CPU µs per request |\n|---|---:|---:|")
    for name in names:
        proxy, server = (statistics.median(x) for x in zip(*CPU_US[name], strict=True))
        print(f"| {name} | {f'{proxy:,.0f}' if name != 'direct' else ''} | {server:,.0f} |")
    print("\nMedians over rounds of the CPU time (user + system, /proc) each process spent during the timed requests.")


def main() -> int:
    args = arguments(__doc__.splitlines()[0])
    with tempfile.TemporaryDirectory() as tmp:
        server, server_port = start_listening(
            lambda port: [sys.executable, str(SERVER), str(Path(tmp) / "refunds"), "--http", str(port)], "the MCP server")
        proxy, proxy_port = start_proxy(Path(tmp))
        relayed_scenario = Path(tmp) / "relayed.yaml"
        relayed_scenario.write_text(scenario_file(Path(tmp)).read_text() + ON_SERVER_MESSAGES)
        relayed, relayed_port = start_proxy(Path(tmp), relayed_scenario)
        mitmdump, mitmdump_port = start_listening(lambda port: [
            tool("mitmdump"), "--listen-host", "127.0.0.1", "-p", str(port), "-q",
            "--set", f"confdir={Path(tmp) / 'mitmproxy-home'}", "--set", "connection_strategy=lazy"], "mitmdump")
        url = f"http://127.0.0.1:{server_port}/mcp"
        try:
            rounds, names = measure({
                "direct": (url, None, (None, server), "direct"),
                MITMDUMP: (url, f"http://127.0.0.1:{mitmdump_port}", (mitmdump, server), MITMDUMP),
                "in a run": (url, f"http://bench:x@127.0.0.1:{proxy_port}", (proxy, server), "in a run"),
                RELAYED: (url, f"http://bench:x@127.0.0.1:{relayed_port}", (relayed, server), RELAYED),
            }, args, time_requests)
        finally:
            for process in (proxy, relayed, mitmdump, server):
                process.terminate()
                process.wait()
    report(names, rounds, args, "tools/call over Streamable HTTP",
           "a run's MCP requests over HTTP pay what `in a run` shows", baseline=MITMDUMP)
    report_cpu(names)
    return conclude(rounds, args, baseline=MITMDUMP)


if __name__ == "__main__":
    sys.exit(main())
