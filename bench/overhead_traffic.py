"""The benchmark's traffic: the upstream it reaches, the request, and the load generators (wrk's
Lua script, or the Python fallback that `proxy_overhead.py _load` runs)."""

from __future__ import annotations

import argparse
import json
import time

REQUEST_BODY = b'{"name": "widget", "qty": 3, "tags": ["bench", "overhead"], "note": "small JSON POST"}'

# wrk: origin-form requests to the upstream, or absolute-form ones to a forward proxy.
# Arguments after `--`: URL prefix ("" or "http://127.0.0.1:UPSTREAM"), Proxy-Authorization value.
WRK_SCRIPT = """\
local prefix, counter = "", 0
wrk.method = "POST"
wrk.body = [[%(body)s]]
wrk.headers["Content-Type"] = "application/json"

function init(args)
  prefix = args[1] or ""
  if args[2] and args[2] ~= "" then wrk.headers["Proxy-Authorization"] = args[2] end
  if args[3] and args[3] ~= "" then wrk.headers["Host"] = args[3] end
end

function request()
  counter = counter + 1
  return wrk.format(nil, prefix .. "/items/" .. counter)
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'BENCH_RESULT {"requests": %%.0f, "duration_s": %%.6f, "non_2xx": %%.0f, ' ..
    '"errors": %%.0f, "p50_ms": %%.4f, "p99_ms": %%.4f, "max_ms": %%.4f}\\n',
    summary.requests, summary.duration / 1e6, e.status,
    e.connect + e.read + e.write + e.timeout,
    latency:percentile(50) / 1000, latency:percentile(99) / 1000, latency.max / 1000))
end
"""

def serve_upstream() -> None:
    """The upstream: POST /items/{n} answers a ~200-byte JSON document; POST /v1/traces takes
    OTLP/HTTP exports and answers an empty success (otel_overhead.py's collector). Prints `PORT n`."""
    import asyncio

    from aiohttp import web

    async def item(request: web.Request) -> web.Response:
        n = request.match_info["n"]
        await request.read()
        document = {
            "id": n, "object": "item", "status": "open", "name": "widget", "qty": 3,
            "amount": 1250, "currency": "eur", "tags": ["bench", "overhead"],
            "updated": "2025-01-01T00:00:00Z", "note": "a small JSON answer for the proxy benchmark",
        }
        return web.Response(body=json.dumps(document).encode(), content_type="application/json")

    async def traces(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(content_type="application/x-protobuf")

    async def main() -> None:
        app = web.Application(client_max_size=64 << 20)
        app.router.add_post("/items/{n}", item)
        app.router.add_post("/v1/traces", traces)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        print(f"PORT {runner.addresses[0][1]}", flush=True)
        await asyncio.Event().wait()

    try:
        asyncio.run(main())
    except KeyboardInterrupt:  # how the benchmark stops it
        pass


def python_load(argv: list[str]) -> None:
    """The fallback load generator: N keep-alive connections for a fixed time. Prints BENCH_RESULT."""
    import asyncio

    import aiohttp

    parser = argparse.ArgumentParser(prog="proxy_overhead.py _load")
    parser.add_argument("--target", required=True)
    parser.add_argument("--proxy", default="")
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--max-requests", type=int, default=1_000_000)
    args = parser.parse_args(argv)

    latencies: list[float] = []
    counts = {"non_2xx": 0, "errors": 0, "n": 0}
    headers = {"content-type": "application/json"}

    async def worker(deadline: float) -> None:
        connector = aiohttp.TCPConnector(limit=1)
        async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=10)) as session:
            while time.perf_counter() < deadline and counts["n"] < args.max_requests:
                counts["n"] += 1
                url = f"{args.target}/items/{counts['n']}"
                start = time.perf_counter()
                try:
                    async with session.post(url, data=REQUEST_BODY, headers=headers, proxy=args.proxy or None) as response:
                        await response.read()
                        if not 200 <= response.status < 400:
                            counts["non_2xx"] += 1
                except (aiohttp.ClientError, asyncio.TimeoutError):
                    counts["errors"] += 1
                    continue
                latencies.append(time.perf_counter() - start)

    async def main() -> float:
        start = time.perf_counter()
        await asyncio.gather(*(worker(start + args.seconds) for _ in range(args.connections)))
        return time.perf_counter() - start

    duration = asyncio.run(main())
    latencies.sort()

    def percentile(p: float) -> float:
        return latencies[min(len(latencies) - 1, int(p / 100 * len(latencies)))] * 1000 if latencies else 0.0

    result = {
        "requests": len(latencies), "duration_s": duration, "non_2xx": counts["non_2xx"], "errors": counts["errors"],
        "p50_ms": percentile(50), "p99_ms": percentile(99), "max_ms": latencies[-1] * 1000 if latencies else 0.0,
    }
    print("BENCH_RESULT " + json.dumps(result), flush=True)

