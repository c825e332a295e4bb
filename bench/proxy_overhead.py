#!/usr/bin/env python3
"""How much does faultproxy cost on top of plain mitmproxy?

Seven configurations in forward mode, all on 127.0.0.1 with ephemeral ports, each in its own
process (`--only` picks some beside the first two):

  direct            load generator -> upstream (aiohttp, POST /items/N, ~200-byte JSON answer)
  mitmdump          load generator -> plain mitmdump (forward proxy) -> upstream
  faultproxy 0%     load generator -> faultproxy (10 rules, none fires) -> upstream
  faultproxy 30%    load generator -> faultproxy (same 10 rules, 30% answered 503) -> upstream
  addon in mitmdump load generator -> mitmdump -s proxy/mitmdump_addon.py (faultproxy 0%'s rules) -> upstream
  monitor, all      load generator -> faultproxy monitor (no faults, an episode per connection, every
                    one recorded and judged) -> upstream
  monitor, 10%      the same, 10% of the connections sampled (the rest pass through unrecorded)

And the same in reverse mode (`--modes` picks), as `--reverse` agents, `--upstream` and a
monitor in front of production use the proxy: plain `mitmdump --mode reverse:UPSTREAM` (a
process of its own), and the faultproxy and monitor processes above, started with
`--upstream up=UPSTREAM`, reached at their reverse port with the episode in the path
(`/bench/up/items/N`). The addon in mitmdump runs in forward mode only.

faultproxy runs as users run it (`faultproxy proxy --scenario ... --trace-dir ...`), with
episode credentials in the proxy URL (or the path) and its JSON-lines trace on. `faultproxy proxy` loads only
the mitmproxy addons it uses; the last configuration runs the same fault injector inside stock
mitmdump, with all of mitmdump's addons, so the table also shows what the injector itself costs. Each configuration is
measured twice per round: saturated with `--connections` keep-alive connections (throughput,
proxy CPU per request) and with one connection, one request at a time (the latency a request
pays; at saturation p50 is just connections / throughput). Rounds run every configuration once
in a rotated order, so that a slow spell on a noisy machine hits all of them; ratios against
mitmdump in the same mode are paired per round and the median is reported.

The load generator is wrk when it is on PATH (a Lua script sends absolute-form requests to the
forward proxies), otherwise a separate Python process with aiohttp; every table says which.

    .venv/bin/python bench/proxy_overhead.py            # 3 rounds x 5 s per configuration and load
    .venv/bin/python bench/proxy_overhead.py --quick    # smoke check: 1 round x 1 s
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import platform
import queue
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EPISODE, TOKEN = "bench", "x"
REQUEST_BODY = b'{"name": "widget", "qty": 3, "tags": ["bench", "overhead"], "note": "small JSON POST"}'
FAULT_SHARE = 0.3
# Targets (issue 35), in each mode against plain mitmdump in that mode: req/s at 10 connections and
# requests per proxy CPU-second; with 30% of requests faulted, requests per CPU-second only.
TARGET_THROUGHPUT_RATIO = 1.3
TARGET_CPU_RATIO = 1.3
TARGET_FAULTED_CPU_RATIO = 1.1
CONFIG_KEYS = ("fp0", "fp30", "addon", "mon100", "mon10")
FORWARD, REVERSE = "forward", "reverse"
BASELINE = {FORWARD: "mitmdump", REVERSE: "mitmdump-rev"}  # what each mode's configurations are paired with
REVERSE_EPISODE, UPSTREAM_NAME = "bench", "up"  # reverse-mode requests go to /bench/up/items/N
TARGET_P50_DELTA_MS = 0.0  # p50 at one connection no more than mitmdump's
BUSY_CORES = 0.25  # other processes using more than this: verdicts are only indicative

# Ten rules, as a realistic scenario has. Only the last one can select the benchmark's
# POST /items/N requests, and fires with probability `lambda` (0 or 0.3); `items_reset` matches
# method and path too but needs a header the load never sends. Every request is checked against
# all ten, the worst case for matching.
SCENARIO = """\
name: bench_overhead
description: >-
  Ten rules for the proxy overhead benchmark. Only items_503 can fire on POST /items/N, with
  probability lambda; the others select paths, methods, hosts, headers or bodies the load
  never sends.
seed: 7
params:
  lambda: 0.0
rules:
  - name: openai_429
    match: {method: POST, path: "*/chat/completions"}
    when: {probability: 0.3}
    fault: {type: rate_limit, provider: openai, retry_after: 1}
  - name: anthropic_529
    match: {method: POST, path: "*/v1/messages"}
    when: {probability: 0.3}
    fault: {type: server_error, status: 529, provider: anthropic}
  - name: stream_cut
    match: {method: POST, path: "*/chat/completions", body: {stream: true}}
    when: {probability: 0.3}
    fault: {type: partial_response, events: 2}
  - name: slow_reads
    match: {method: GET, path: "*/orders*"}
    when: {probability: 0.3}
    fault: {type: delay, ms: 1500}
  - name: payment_lost
    match: {method: POST, path: "re:.*/(refunds?|payments)(/.*)?"}
    when: {probability: 0.3, calls: [1]}
    fault: {type: response_lost, mode: reset}
  - name: item_read_drift
    match: {method: GET, path: "/items/*"}
    when: {probability: 0.3}
    fault:
      type: schema_drift
      ops:
        - {op: rename, path: status, to: state}
  - name: admin_forbidden
    match: {host: "admin.*", path: "/admin/*"}
    fault: {type: auth_failure, status: 403, provider: generic}
  - name: mcp_tool_error
    match: {method: POST, path: "*/mcp*", body: {method: tools/call}}
    when: {probability: 0.3}
    fault: {type: jsonrpc_error, mode: tool_error, message: "upstream unavailable"}
  - name: items_reset
    match: {method: POST, path: "/items/*", headers: {x-bench-chaos: "on"}}
    fault: {type: reset}
  - name: items_503
    match: {method: POST, path: "/items/*"}
    when: {probability: lambda}
    fault: {type: server_error, status: 503, provider: generic}
"""

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


# --- child process roles -----------------------------------------------------------------------


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


# --- processes ---------------------------------------------------------------------------------


class Child:
    """A process this script started: its stdout lines go to a queue, stderr to a log file."""

    def __init__(self, name: str, argv: list[str], log_dir: Path, env: dict[str, str] | None = None,
                 cpus: set[int] | None = None) -> None:
        self.name = name
        self.log = log_dir / f"{name.replace(' ', '_')}.stderr.log"
        self._lines: queue.Queue[str] = queue.Queue()
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=self.log.open("wb"),
            env=env, text=True, cwd=log_dir,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        threading.Thread(target=self._drain, daemon=True).start()

    def _drain(self) -> None:
        for line in self.proc.stdout:
            self._lines.put(line.rstrip("\n"))

    def wait_for_line(self, prefix: str, timeout: float) -> str:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or (self.proc.poll() is not None and self._lines.empty()):
                raise RuntimeError(f"{self.name}: no line starting {prefix!r}; see {self.log}:\n{self.tail()}")
            try:
                line = self._lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                continue
            if line.strip().startswith(prefix):
                return line.strip()

    def cpu_seconds(self) -> float | None:
        return cpu_seconds(self.proc.pid)

    def tail(self, lines: int = 15) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU time of a process, all threads (Linux /proc)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, child: Child, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if child.proc.poll() is not None:
            raise RuntimeError(f"{child.name} exited with {child.proc.returncode}:\n{child.tail()}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"{child.name} is not listening on {port} after {timeout} s:\n{child.tail()}")


def tool(name: str) -> str:
    """A command of the project's virtualenv (beside this interpreter, or .venv), else PATH."""
    for folder in (Path(sys.executable).parent, REPO / ".venv" / "bin"):
        if (folder / name).exists():
            return str(folder / name)
    found = shutil.which(name)
    if not found:
        raise SystemExit(f"proxy_overhead: {name} not found (run with the project's .venv/bin/python)")
    return found


# --- configurations and runs -------------------------------------------------------------------


@dataclass
class Config:
    key: str
    label: str
    port: int = 0
    proxied: bool = True
    credentials: bool = False
    fault_share: float = 0.0
    child: Child | None = None
    trace_dir: Path | None = None
    script_args: list[str] = field(default_factory=list)  # mitmdump -s and its options
    mode: str = FORWARD
    prefix: str = ""  # reverse mode: the path before /items/N (the episode and upstream name)

    def proxy_url(self) -> str:
        auth = f"{EPISODE}:{TOKEN}@" if self.credentials else ""
        return f"http://{auth}127.0.0.1:{self.port}"


@dataclass
class Run:
    round: int
    requests: int
    duration_s: float
    non_2xx: int
    errors: int
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_s: float | None

    @property
    def rps(self) -> float:
        return self.requests / self.duration_s if self.duration_s else 0.0

    @property
    def cpu_us_per_request(self) -> float | None:
        return self.cpu_s / self.requests * 1e6 if self.cpu_s is not None and self.requests else None


@dataclass
class Bench:
    args: argparse.Namespace
    work: Path
    upstream_port: int = 0
    configs: list[Config] = field(default_factory=list)
    children: list[Child] = field(default_factory=list)
    load_cpus: set[int] | None = None
    proxy_cpus: set[int] | None = None
    wrk: str | None = None
    wrk_script: Path | None = None

    # life cycle

    def start(self) -> None:
        a = self.args
        self.wrk = None if a.loadgen == "python" else shutil.which("wrk")
        if a.loadgen == "wrk" and not self.wrk:
            raise SystemExit("proxy_overhead: --loadgen wrk, but wrk is not on PATH")
        if self.wrk:
            self.wrk_script = self.work / "post_items.lua"
            self.wrk_script.write_text(WRK_SCRIPT % {"body": REQUEST_BODY.decode()})
        if a.pin:
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) < 2:
                raise SystemExit("proxy_overhead: --pin needs at least 2 CPUs")
            self.proxy_cpus, self.load_cpus = {cpus[0]}, set(cpus[1:])

        upstream = self._spawn("upstream", [sys.executable, __file__, "_upstream"], cpus=self.load_cpus)
        self.upstream_port = int(upstream.wait_for_line("PORT", 30).split()[1])

        scenario = self.work / "bench_overhead.yaml"
        scenario.write_text(SCENARIO)
        # Each proxy gets its own faultproxy home (CA, bundle), as on separate machines.
        env = dict(os.environ, PYTHONUNBUFFERED="1")

        direct = Config("direct", "direct (no proxy)", port=self.upstream_port, proxied=False)
        mitm = Config("mitmdump", "plain mitmdump")
        self._start_mitmdump(mitm, env)
        self.configs = [direct, mitm]
        reverse = REVERSE in a.modes
        # Started with an upstream, a faultproxy process serves both modes: its reverse-mode
        # configurations share the process (and trace folder) of the forward ones.
        upstream_args = ["--upstream", f"{UPSTREAM_NAME}=http://127.0.0.1:{self.upstream_port}"] if reverse else []
        for key, label, share in (("fp0", "faultproxy, 0% faulted", 0.0),
                                  ("fp30", f"faultproxy, {FAULT_SHARE:.0%} faulted", FAULT_SHARE)):
            if key not in self.args.only:
                continue
            config = Config(key, label, credentials=True, fault_share=share, trace_dir=self.work / f"traces-{key}")
            config.child = self._spawn(f"faultproxy-{key}", [
                tool("faultproxy"), "proxy", "--scenario", str(scenario), "--port", "0",
                "--param", f"lambda={share}", "--trace-dir", str(config.trace_dir), *upstream_args,
            ], env=env | {"FAULTPROXY_HOME": str(self.work / f"faultproxy-home-{key}")}, cpus=self.proxy_cpus)
            self.configs.append(config)
        for key, label, sample in (("mon100", "faultproxy monitor, all sampled", 1.0),
                                   ("mon10", "faultproxy monitor, 10% sampled", 0.1)):
            if key not in self.args.only:
                continue
            out = self.work / f"monitor-{key}"
            config = Config(key, label, credentials=True, trace_dir=out / "flows")
            config.child = self._spawn(f"faultproxy-{key}", [
                tool("faultproxy"), "monitor", "--out", str(out), "--port", "0", "--quiet", "--episode-by", "client",
                "--idle-s", "2", "--sample", str(sample), *upstream_args,
            ], env=env | {"FAULTPROXY_HOME": str(self.work / f"faultproxy-home-{key}")}, cpus=self.proxy_cpus)
            self.configs.append(config)
        faultproxies = self.configs[2:]
        for config in faultproxies:
            line = config.child.wait_for_line("forward proxy:", 60)
            config.port = int(line.split("@127.0.0.1:")[1].split()[0])
        if reverse:
            self.configs += self._reverse_configs(faultproxies, env)
        if FORWARD not in a.modes:
            self.configs = [c for c in self.configs if c.mode == REVERSE or c.key == "direct"]
            direct.mode = REVERSE  # then its p50 difference is to reverse mitmdump's
        if "addon" in self.args.only and FORWARD in a.modes:
            addon = Config("addon", "addon in mitmdump, 0%", credentials=True, trace_dir=self.work / "traces-addon")
            self._start_mitmdump(addon, env, [
                "-s", str(REPO / "proxy" / "mitmdump_addon.py"), "--set", f"faultproxy_scenario={scenario}",
                "--set", "faultproxy_params=lambda=0", "--set", f"faultproxy_trace_dir={addon.trace_dir}",
            ])
            self.configs.append(addon)
        for config in self.configs:
            if config.key in ("mitmdump", "addon", BASELINE[REVERSE]):
                self._wait_mitmdump(config, env)
        for config in self.configs:
            self._probe(config)

    def _reverse_configs(self, faultproxies: list[Config], env: dict[str, str]) -> list[Config]:
        """Plain mitmdump in reverse mode, and each faultproxy process at its reverse port."""
        mitm = Config(BASELINE[REVERSE], "plain mitmdump", proxied=False, mode=REVERSE)
        self._start_mitmdump(mitm, env, ["--mode", f"reverse:http://127.0.0.1:{self.upstream_port}"])
        configs = [mitm]
        for forward in faultproxies:
            # "  up: base URL http://127.0.0.1:PORT/EPISODE/up"
            line = forward.child.wait_for_line(f"{UPSTREAM_NAME}: base URL", 60)
            port = int(line.split("127.0.0.1:")[1].split("/")[0])
            configs.append(Config(f"{forward.key}-rev", forward.label, port=port, proxied=False,
                                  fault_share=forward.fault_share, child=forward.child, trace_dir=forward.trace_dir,
                                  mode=REVERSE, prefix=f"/{REVERSE_EPISODE}/{UPSTREAM_NAME}"))
        return configs

    def _start_mitmdump(self, config: Config, env: dict[str, str], script_args: list[str] | None = None) -> None:
        # mitmdump -q does not say which port it got, so pick a free one first.
        config.port = free_port()
        config.script_args = script_args or []
        config.child = self._spawn(config.key, [
            tool("mitmdump"), "--listen-host", "127.0.0.1", "-p", str(config.port), "-q",
            "--set", f"confdir={self.work / f'mitmproxy-home-{config.key}'}", "--set", "connection_strategy=lazy",
            *config.script_args,
        ], env=env, cpus=self.proxy_cpus)

    def _wait_mitmdump(self, config: Config, env: dict[str, str]) -> None:
        for attempt in range(3):
            try:
                wait_listening(config.port, config.child)
                return
            except RuntimeError:
                if attempt == 2 or config.child.proc.poll() is None:
                    raise
                # most likely lost the free port to another process
                self._start_mitmdump(config, env, config.script_args)

    def stop(self) -> None:
        for child in reversed(self.children):
            child.stop()

    def _spawn(self, name: str, argv: list[str], env: dict[str, str] | None = None, cpus: set[int] | None = None) -> Child:
        child = Child(name, argv, self.work, env=env, cpus=cpus)
        self.children.append(child)
        return child

    def _probe(self, config: Config) -> None:
        """One request through the configuration, to fail early and clearly."""
        handlers = [urllib.request.ProxyHandler({"http": config.proxy_url()} if config.proxied else {})]
        opener = urllib.request.build_opener(*handlers)
        request = urllib.request.Request(
            f"{self.target(config)}/items/0", data=REQUEST_BODY,
            headers={"content-type": "application/json"}, method="POST",
        )
        try:
            with opener.open(request, timeout=10) as response:
                json.loads(response.read())
        except urllib.error.HTTPError as error:
            if error.code != 503 or not config.fault_share:
                raise RuntimeError(f"{config.label}: probe answered {error.code}") from None

    # load

    def target(self, config: Config) -> str:
        """Where requests go: the upstream (through a forward proxy, or direct), or a reverse proxy's base URL."""
        if config.mode == REVERSE:
            return f"http://127.0.0.1:{config.port}{config.prefix}"
        return f"http://127.0.0.1:{self.upstream_port}"

    def run(self, config: Config, seconds: float, round_: int, connections: int) -> Run:
        before = config.child.cpu_seconds() if config.child else None
        if self.wrk:
            argv = [self.wrk, "-t", "1", "-c", str(connections), "-d", f"{max(1, round(seconds))}s",
                    "--timeout", "10s", "-s", str(self.wrk_script), f"http://127.0.0.1:{config.port}", "--"]
            if config.proxied:
                auth = "Basic " + base64.b64encode(f"{EPISODE}:{TOKEN}".encode()).decode() if config.credentials else ""
                argv += [f"http://127.0.0.1:{self.upstream_port}", auth, f"127.0.0.1:{self.upstream_port}"]
            else:
                argv += [config.prefix, "", ""]
        else:
            argv = [sys.executable, __file__, "_load", "--target", self.target(config),
                    "--connections", str(connections), "--seconds", str(seconds),
                    "--max-requests", str(self.args.max_requests)]
            if config.proxied:
                argv += ["--proxy", config.proxy_url()]
        load = subprocess.run(
            argv, capture_output=True, text=True, timeout=seconds + 60,
            preexec_fn=(lambda: os.sched_setaffinity(0, self.load_cpus)) if self.load_cpus else None,
        )
        after = config.child.cpu_seconds() if config.child else None
        lines = [l for l in load.stdout.splitlines() if l.startswith("BENCH_RESULT ")]
        if load.returncode != 0 or not lines:
            raise RuntimeError(f"load generator failed on {config.label} ({load.returncode}):\n{load.stdout}\n{load.stderr}")
        r = json.loads(lines[-1].removeprefix("BENCH_RESULT "))
        cpu = after - before if before is not None and after is not None else None
        return Run(round_, int(r["requests"]), r["duration_s"], int(r["non_2xx"]), int(r["errors"]),
                   r["p50_ms"], r["p99_ms"], r["max_ms"], cpu)


# --- report ------------------------------------------------------------------------------------


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


LOAD, LATENCY = "load", "latency"


def summarize(config_runs: list[Run], baseline: dict[int, Run]) -> dict[str, list[float]]:
    """The cells of a configuration's row; `baseline`: plain mitmdump's run of each round, in its mode."""
    return {
        "rps": [r.rps for r in config_runs],
        "p50": [r.p50_ms for r in config_runs],
        "p99": [r.p99_ms for r in config_runs],
        "ratio": [r.rps / baseline[r.round].rps for r in config_runs if baseline[r.round].rps],
        "d50": [r.p50_ms - baseline[r.round].p50_ms for r in config_runs],
        "d99": [r.p99_ms - baseline[r.round].p99_ms for r in config_runs],
        "cpu": [r.cpu_us_per_request for r in config_runs if r.cpu_us_per_request is not None],
        # Requests per proxy CPU-second, against mitmdump: the capacity ratio, robust to CPU stolen by others.
        "cpu_ratio": [baseline[r.round].cpu_us_per_request / r.cpu_us_per_request for r in config_runs
                      if r.cpu_us_per_request and baseline[r.round].cpu_us_per_request],
    }


def targets(config: Config) -> tuple[float, float]:
    """(req/s ratio, req/CPU-s ratio) a configuration must reach; 0 for no target."""
    if config.fault_share:  # faulted requests cost more by design (a fault is made and recorded)
        return 0.0, TARGET_FAULTED_CPU_RATIO
    return TARGET_THROUGHPUT_RATIO, TARGET_CPU_RATIO


def baseline_of(config: Config, runs: dict[str, dict[str, list[Run]]], level: str) -> dict[int, Run]:
    """Plain mitmdump's run of each round in the configuration's mode (direct goes with forward)."""
    return {run.round: run for run in runs[BASELINE[config.mode]][level]}


def mode_of(config: Config) -> str:
    return "—" if config.key == "direct" else config.mode


def load_generator(bench: Bench) -> str:
    if bench.wrk:
        version = subprocess.run([bench.wrk, "-v"], capture_output=True, text=True).stdout.split(" [")[0].strip()
        return f"{version}, 1 thread, Lua script (absolute-form requests to the forward proxies, origin-form to the reverse ones)"
    return "Python aiohttp client in a separate process"


def report(bench: Bench, runs: dict[str, dict[str, list[Run]]], args: argparse.Namespace, load: MachineLoad) -> bool:
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 220)
    same = "—"
    all_met = True
    others = load.others()
    busy = others is not None and others > BUSY_CORES

    def verdict_text(met: bool, target: str = "") -> str:
        text = (f"{target}: " if target else "") + ("met" if met else "missed")
        return f"[green]{text}{'?' if busy else ''}[/green]" if met else f"[red]{text}{'?' if busy else ''}[/red]"

    loadgen = load_generator(bench)
    latency_runs = any(runs[c.key][LATENCY] for c in bench.configs)
    throughput = Table(title=f"Throughput: {args.connections} connections, as fast as the proxy answers "
                             f"(load generator: {loadgen})", title_justify="left")
    for column in ("configuration", "mode", "requests", "req/s", "p50 ms", "p99 ms", "non-2xx", "errors",
                   "proxy CPU µs/req", "req/s vs mitmdump", "req/CPU-s vs mitmdump", "p50 vs mitmdump",
                   "targets"):
        throughput.add_column(column, justify="left" if column in ("configuration", "mode") else "right")
    for config in bench.configs:
        config_runs = runs[config.key][LOAD]
        m = summarize(config_runs, baseline_of(config, runs, LOAD))
        requests = sum(r.requests for r in config_runs)
        verdict = ""
        if config.key.startswith(("fp", "mon")):
            throughput_target, cpu_target = targets(config)
            met = median(m["ratio"]) >= throughput_target and median(m["cpu_ratio"]) >= cpu_target
            if not latency_runs:  # then the p50 target is judged here
                met &= median(m["d50"]) <= TARGET_P50_DELTA_MS
            all_met &= met
            verdict = verdict_text(met, f"≥ {throughput_target:g}×, ≥ {cpu_target:g}×/CPU-s" if throughput_target
                                   else f"≥ {cpu_target:g}×/CPU-s")
        baseline_row = config.key in BASELINE.values()
        throughput.add_row(
            config.label, mode_of(config), f"{requests:,}", spread(m["rps"], ",.0f"), f"{median(m['p50']):.2f}", f"{median(m['p99']):.2f}",
            f"{sum(r.non_2xx for r in config_runs) / requests:.1%}" if requests else same,
            f"{sum(r.errors for r in config_runs):,}",
            spread(m["cpu"], ",.0f") if m["cpu"] else same,
            same if baseline_row else spread(m["ratio"], ".2f", "×"),
            same if baseline_row or not m["cpu_ratio"] else spread(m["cpu_ratio"], ".2f", "×"),
            same if baseline_row else f"{median(m['d50']):+.2f} ms",
            verdict,
        )
    console.print(throughput)

    if latency_runs:
        latency = Table(title=f"Latency: {args.latency_connections} connection(s), one request at a time "
                              f"(the per-request cost; load generator: {loadgen})", title_justify="left")
        for column in ("configuration", "mode", "requests", "req/s", "p50 ms", "p99 ms", "p50 vs mitmdump",
                       "p99 vs mitmdump", "p50 ≤ mitmdump's" if not TARGET_P50_DELTA_MS else f"p50 ≤ +{TARGET_P50_DELTA_MS:g} ms"):
            latency.add_column(column, justify="left" if column in ("configuration", "mode") else "right")
        for config in bench.configs:
            config_runs = runs[config.key][LATENCY]
            m = summarize(config_runs, baseline_of(config, runs, LATENCY))
            baseline_row = config.key in BASELINE.values()
            verdict = ""
            if config.key.startswith(("fp", "mon")):
                met = median(m["d50"]) <= TARGET_P50_DELTA_MS
                all_met &= met
                verdict = verdict_text(met)
            latency.add_row(
                config.label, mode_of(config), f"{sum(r.requests for r in config_runs):,}", spread(m["rps"], ",.0f"),
                spread(m["p50"], ".3f"), spread(m["p99"], ".2f"),
                same if baseline_row else spread(m["d50"], "+.3f", " ms"),
                same if baseline_row else spread(m["d99"], "+.2f", " ms"),
                verdict,
            )
        console.print(latency)

    console.print(
        "[dim]Cells: median over rounds (min–max). Ratios and differences are paired with the mitmdump run of the "
        "same round and mode (reverse: `mitmdump --mode reverse:UPSTREAM`). non-2xx are the injected 503s (completed responses); errors are socket errors and timeouts. "
        "proxy CPU: the proxy process's user+system time per request; req/CPU-s vs mitmdump is the ratio of requests "
        "served per CPU-second, the capacity ratio when nothing else competes for the CPUs (less noisy than req/s). "
        f"At {args.connections} connections the proxies are saturated, so p50 ≈ connections ÷ throughput (Little's law) "
        "and mostly restates throughput; the 1-connection runs measure the latency a request pays.[/dim]"
    )
    console.print(
        f"Targets (faultproxy and its monitor vs plain mitmdump in the same mode): throughput ≥ {TARGET_THROUGHPUT_RATIO:g}× "
        f"and ≥ {TARGET_CPU_RATIO:g}× the requests per CPU-second (≥ {TARGET_FAULTED_CPU_RATIO:g}× per CPU-second "
        f"with {FAULT_SHARE:.0%} faulted) at {args.connections} connections, p50 at most {TARGET_P50_DELTA_MS:g} ms above "
        + ("(at 1 connection). " if args.latency_connections else f"(at {args.connections} connections). ")
        + ("[green]All met.[/green]" if all_met else "[red]Not met.[/red]")
    )
    if busy:
        console.print(
            f"[yellow]Other processes kept {others:.2f} cores busy during the run: the verdicts (marked ?) are "
            "indicative only. req/CPU-s is the steadiest figure; rerun on a quiet machine to judge.[/yellow]"
        )
    info = machine() | {
        "load generator": f"{loadgen}; {args.connections} keep-alive connections"
                          + (f", then {args.latency_connections}" if args.latency_connections else ""),
        "runs": f"{args.rounds} round(s) × {args.seconds:g} s per configuration and load, rotated order, "
                f"{args.warmup:g} s warm-up each; wall time {time.monotonic() - load.started:.0f} s",
        "pinning": (f"proxies on CPU {sorted(bench.proxy_cpus)}, upstream and load generator on {sorted(bench.load_cpus)}"
                    if bench.proxy_cpus else "none (all processes share all CPUs)"),
    }
    info |= load.describe()
    shared = [c.trace_dir for c in bench.configs if c.mode == REVERSE and c.trace_dir]  # served both modes
    for config in bench.configs:
        if config.trace_dir and not (config.mode == REVERSE and FORWARD in args.modes):  # each folder once
            files = list(config.trace_dir.glob("*.jsonl"))
            lines = sum(1 for path in files for _ in path.open("rb"))
            size = sum(path.stat().st_size for path in files)
            per_exchange = f", {size / lines:,.0f} bytes per exchange" if lines else ""
            both = " (both modes)" if config.mode == FORWARD and config.trace_dir in shared else ""
            info[f"trace, {config.label}{both}"] = f"{lines:,} exchanges, {size / 1e6:.1f} MB of JSON lines{per_exchange} (kept on)"
    for key, value in info.items():
        console.print(f"[bold]{key}:[/bold] {value}")
    return all_met


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_upstream"]:
        serve_upstream()
        return 0
    if argv[:1] == ["_load"]:
        python_load(argv[1:])
        return 0

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=5, help="Length of each measured run (default 5).")
    parser.add_argument("--connections", type=int, default=10,
                        help="Concurrent keep-alive connections for the throughput runs (default 10).")
    parser.add_argument("--latency-connections", type=int, default=1,
                        help="Connections for the latency runs (default 1; 0 skips them).")
    parser.add_argument("--rounds", type=int, default=3, help="Runs per configuration, interleaved (default 3).")
    parser.add_argument("--warmup", type=float, default=1, help="Unmeasured run per configuration first (default 1 s; 0: none).")
    parser.add_argument("--quick", action="store_true", help="Smoke check: 1 round of 1 s per run, 1 s warm-up.")
    parser.add_argument("--loadgen", choices=("auto", "wrk", "python"), default="auto",
                        help="wrk if it is on PATH (auto), or the Python aiohttp load generator.")
    parser.add_argument("--max-requests", type=int, default=1_000_000,
                        help="Cap per run for the Python load generator (wrk is bounded by --seconds).")
    parser.add_argument("--pin", action="store_true",
                        help="Pin the proxies to the first CPU, upstream and load generator to the others.")
    parser.add_argument("--only", type=lambda text: text.split(","), default=list(CONFIG_KEYS),
                        help=f"Measure only these beside direct and plain mitmdump (default all: {','.join(CONFIG_KEYS)}).")
    parser.add_argument("--modes", type=lambda text: text.split(","), default=[FORWARD, REVERSE],
                        help="Proxy modes to measure: forward, reverse or both (default forward,reverse).")
    parser.add_argument("--json", type=Path, help="Also write every run's numbers to this file.")
    parser.add_argument("--keep", action="store_true", help="Keep the temporary folder (scenario, traces, logs).")
    parser.add_argument("--check", action="store_true", help="Exit 1 if faultproxy misses a target.")
    args = parser.parse_args(argv)
    if args.quick:
        args.seconds, args.rounds, args.warmup = 1, 1, 1
    if args.seconds <= 0 or args.rounds < 1 or args.connections < 1 or args.latency_connections < 0:
        parser.error("--seconds, --rounds and --connections must be positive")
    if not args.modes or set(args.modes) - {FORWARD, REVERSE}:
        parser.error("--modes takes forward, reverse or forward,reverse")

    work = Path(tempfile.mkdtemp(prefix="faultproxy-bench-"))
    bench = Bench(args, work)
    machine_load = MachineLoad()
    runs: dict[str, dict[str, list[Run]]] = {}
    loads = [(LOAD, args.connections)] + ([(LATENCY, args.latency_connections)] if args.latency_connections else [])
    try:
        print(f"starting upstream, mitmdump and {', '.join(args.only)} in {work} ...", file=sys.stderr)
        bench.start()
        runs = {config.key: {LOAD: [], LATENCY: []} for config in bench.configs}
        if args.warmup > 0:
            for config in bench.configs:
                print(f"  warm-up {config.label}", file=sys.stderr)
                bench.run(config, args.warmup, -1, args.connections)
        for round_ in range(args.rounds):
            shift = round_ % len(bench.configs)
            for level, connections in loads:
                for config in bench.configs[shift:] + bench.configs[:shift]:
                    run = bench.run(config, args.seconds, round_, connections)
                    runs[config.key][level].append(run)
                    print(f"  round {round_ + 1}/{args.rounds}, {connections:>3} conn: {config.label:<24} "
                          f"{run.rps:9,.0f} req/s  p50 {run.p50_ms:6.2f} ms  p99 {run.p99_ms:6.2f} ms", file=sys.stderr)
    except KeyboardInterrupt:
        bench.stop()
        print(f"interrupted; files left in {work}", file=sys.stderr)
        return 130
    except BaseException:
        bench.stop()
        print(f"failed; logs left in {work}", file=sys.stderr)
        raise
    bench.stop()
    try:
        met = report(bench, runs, args, machine_load)
        if args.json:
            args.json.write_text(json.dumps({
                "machine": machine(), "args": {k: str(v) for k, v in vars(args).items()},
                "runs": {key: {level: [vars(r) for r in rs] for level, rs in levels.items()} for key, levels in runs.items()},
            }, indent=2))
    finally:
        if args.keep:
            print(f"kept {work}", file=sys.stderr)
        else:
            shutil.rmtree(work, ignore_errors=True)
    return 1 if args.check and not met else 0


if __name__ == "__main__":
    sys.exit(main())
