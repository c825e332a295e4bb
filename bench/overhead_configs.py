"""The configurations `proxy_overhead.py` measures: the processes behind each, and one timed run
of a load generator against one of them."""

from __future__ import annotations

import argparse
import base64
import json
import os
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from child_processes import REPO, Child, free_port, tool, wait_listening
from overhead_traffic import REQUEST_BODY, WRK_SCRIPT

SCRIPT = Path(__file__).resolve().parent / "proxy_overhead.py"  # its `_upstream` and `_load` roles
EPISODE, TOKEN = "bench", "x"
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

        upstream = self._spawn("upstream", [sys.executable, str(SCRIPT), "_upstream"], cpus=self.load_cpus)
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
            argv = [sys.executable, str(SCRIPT), "_load", "--target", self.target(config),
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

