"""What OpenTelemetry export costs the proxy: req/s and p50 through faultproxy's embedded proxy
with export off, with export on at 5 and at 50 episodes/s, and through plain mitmdump, side by
side in one table.

`faultproxy run --otlp` hands each logged episode to the export in the runner's process, the one
the embedded proxy runs in; the spans are built and sent by an exporter process of its own
(otel/sender.py). So the runner's share is pickling a record and a queue put, and that is
where a cost to the agent's traffic would show. The proxy serves a load generator (a process of
its own, `proxy_overhead.py _load`, 10 connections) while a thread hands over an episode (three
model calls, three tool calls, a fault, a failed verdict: 7 spans, its trace a file as in a run)
every 1/rate seconds through OtelExport.export_logged to a local OTLP/HTTP receiver (another
process: proxy_overhead.py's upstream, which also takes /v1/traces). Each round runs every
configuration once, in a rotated order; ratios are paired per round, medians reported, against
the proxy's target (export on within noise of export off: ≥ 0.95× req/s).

    .venv/bin/python bench/otel_overhead.py              # 3 rounds x 5 s per configuration
    .venv/bin/python bench/otel_overhead.py --quick      # smoke check: 1 round x 2 s
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultproxy.proxy.server import ProxyServer  # noqa: E402
from faultproxy.otel import ExportSummary, OtelExport  # noqa: E402

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from child_processes import free_port, tool  # noqa: E402

RATES = (5.0, 50.0)
TARGET_RATIO = 0.95


def episode_trace(now: float) -> list[dict]:
    """A judged episode's trace like the demo's: three model calls, three tool calls, one fault."""
    chat = {"model": "demo-large", "messages": [{"role": "user", "content": "Refund order 1001" * 20}]}
    answer = {"id": "c1", "model": "demo-large", "choices": [{"message": {"role": "assistant", "content": "ok"},
                                                              "finish_reason": "stop"}],
              "usage": {"prompt_tokens": 1200, "completion_tokens": 20}}
    lines = []
    for seq in range(1, 7):
        model = seq % 2 == 1
        url = "http://127.0.0.1:9/v1/chat/completions" if model else f"http://127.0.0.1:9/t/e/orders/{seq}"
        lines.append({"seq": seq, "started": now + seq * 0.01, "duration_s": 0.005, "forwarded": True,
                      "request": {"method": "POST", "url": url, "headers": [["content-type", "application/json"]],
                                  "body": json.dumps(chat if model else {"reason": "broken"})},
                      "upstream": {"status": 200, "headers": [], "body": json.dumps(answer if model else {"id": seq})},
                      "client": {"outcome": "response", "status": 200},
                      "fault": {"rule": "lost", "type": "response_lost", "params": {"mode": "reset"},
                                "delivered": True} if seq == 4 else None})
    return lines


def episode_record(now: float, n: int) -> dict:
    return {"key": f"e{n}", "task_id": "t", "trial": n, "started": now, "duration_s": 0.1, "trace": "flows/e.jsonl",
            "verdict": {"status": "fail", "failed": [{"name": "idempotency", "severity": "high", "detail": "x"}]}}


class Exporting:
    """A thread handing an episode to the export every 1/rate seconds, as a run's loop does
    after logging one; it keeps this thread's CPU time for it."""

    def __init__(self, run_dir: Path, endpoint: str, rate: float) -> None:
        self.run_dir, self.rate = run_dir, rate
        self.export = OtelExport(endpoint)
        self.stop = threading.Event()
        self.cpu_s, self.handed = 0.0, 0
        self.exporter_started_s: float | None = None
        self.exporter_cpu_s: float | None = None
        self.thread = threading.Thread(target=self._run)

    def __enter__(self) -> Exporting:
        # The exporter process starts once per run: let it be up before the load, so the rounds
        # measure the steady state and not its imports.
        self.export.export_logged(self.run_dir, episode_record(time.time(), -1))
        if not self.export.ready.wait(60):
            raise RuntimeError("the exporter process did not start")
        self.exporter_started_s = process_cpu_s(self.export.sender_pid)  # its imports, not counted
        self.thread.start()
        return self

    def _run(self) -> None:
        while not self.stop.wait(1 / self.rate):
            started = time.thread_time()
            self.export.export_logged(self.run_dir, episode_record(time.time(), self.handed))
            self.cpu_s += time.thread_time() - started
            self.handed += 1

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join()

    def close(self) -> ExportSummary:
        now = process_cpu_s(self.export.sender_pid)
        if now is not None and self.exporter_started_s is not None:
            self.exporter_cpu_s = now - self.exporter_started_s
        return self.export.close()


def process_cpu_s(pid: int | None) -> float | None:
    """A live process's CPU seconds so far (Linux /proc), or None."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start(argv: list[str]) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    for line in process.stdout:
        if line.startswith("PORT "):
            return process, int(line.split()[1])
    raise RuntimeError(f"{argv} did not start")


def start_mitmdump(work: Path) -> tuple[subprocess.Popen, int]:
    """Plain mitmdump as a forward proxy, as proxy_overhead.py runs it."""
    port = free_port()
    process = subprocess.Popen([tool("mitmdump"), "--listen-host", "127.0.0.1", "-p", str(port), "-q",
                                "--set", f"confdir={work / 'mitmproxy-home'}", "--set", "connection_strategy=lazy"],
                               stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"mitmdump exited with {process.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return process, port
        except OSError:
            time.sleep(0.1)
    raise RuntimeError("mitmdump did not listen")


def load(target: str, proxy: str, seconds: float, connections: int) -> dict:
    out = subprocess.run([sys.executable, str(HERE / "proxy_overhead.py"), "_load", "--target", target,
                          "--proxy", proxy, "--seconds", str(seconds), "--connections", str(connections)],
                         capture_output=True, text=True, check=True).stdout
    result = json.loads(next(line for line in out.splitlines() if line.startswith("BENCH_RESULT "))[13:])
    result["rps"] = result["requests"] / result["duration_s"]
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seconds", type=float, default=5)
    parser.add_argument("--connections", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="smoke check: 1 round x 2 s")
    args = parser.parse_args()
    if args.quick:
        args.rounds, args.seconds = 1, 2
    configs = ["mitmdump", "off", *(f"on {rate:g}/s" for rate in RATES)]
    results: dict[str, list[dict]] = {config: [] for config in configs}
    exported: dict[str, list[tuple[ExportSummary, Exporting]]] = {config: [] for config in configs[2:]}
    children = []
    try:
        upstream, upstream_port = start([sys.executable, str(HERE / "proxy_overhead.py"), "_upstream"])
        children.append(upstream)
        receiver, receiver_port = start([sys.executable, str(HERE / "proxy_overhead.py"), "_upstream"])
        children.append(receiver)
        with tempfile.TemporaryDirectory() as folder:
            work = Path(folder)
            (work / "run" / "flows").mkdir(parents=True)
            (work / "run" / "flows" / "e.jsonl").write_text(
                "".join(json.dumps(line) + "\n" for line in episode_trace(time.time())))
            mitmdump, mitmdump_port = start_mitmdump(work)
            children.append(mitmdump)
            proxy = ProxyServer(None, trace_dir=work / "flows").start()
            try:
                proxy.begin_episode("bench", None, {})
                target, endpoint = f"http://127.0.0.1:{upstream_port}", f"http://127.0.0.1:{receiver_port}/v1/traces"
                via = {"mitmdump": f"http://127.0.0.1:{mitmdump_port}", "off": proxy.proxy_url("bench")}
                for proxy_url in set(via.values()):
                    load(target, proxy_url, 1, args.connections)  # warm-up
                for round_ in range(args.rounds):
                    for config in configs[round_ % len(configs):] + configs[:round_ % len(configs)]:
                        if config in exported:
                            rate = RATES[configs.index(config) - 2]
                            with Exporting(work / "run", endpoint, rate) as exporting:
                                results[config].append(load(target, via["off"], args.seconds, args.connections))
                            exported[config].append((exporting.close(), exporting))
                        else:
                            results[config].append(load(target, via[config], args.seconds, args.connections))
            finally:
                proxy.stop()
    finally:
        for process in children:
            process.terminate()
            process.wait(10)
    report(configs, results, exported, args)
    return 0


def report(configs: list[str], results: dict[str, list[dict]],
           exported: dict[str, list[tuple[ExportSummary, Exporting]]], args: argparse.Namespace) -> None:
    load_avg = os.getloadavg()[0]
    print(f"{args.rounds} round(s) x {args.seconds:g} s, {args.connections} connections, "
          f"load average {load_avg:.1f} on {os.cpu_count()} cores")
    print(f"| configuration | req/s | p50 ms | vs export off | vs mitmdump | spans sent / dropped / episodes lost "
          f"| CPU per episode: runner / exporter |")
    print("|---|---|---|---|---|---|---|")
    for config in configs:
        runs = results[config]
        rps, p50 = statistics.median(r["rps"] for r in runs), statistics.median(r["p50_ms"] for r in runs)
        paired = {base: statistics.median(r["rps"] / b["rps"] for r, b in zip(runs, results[base], strict=True))
                  for base in ("off", "mitmdump")}
        sent = cpu = "—"
        if config in exported:
            summaries = [summary for summary, _ in exported[config]]
            sent = (f"{sum(s.spans for s in summaries)} / {sum(s.dropped for s in summaries)} / "
                    f"{sum(s.lost + s.unexported for s in summaries)}")
            handed = max(sum(e.handed for _, e in exported[config]), 1)
            exporter = [e.exporter_cpu_s for _, e in exported[config]]
            exporter_cpu = "—" if None in exporter else f"{sum(exporter) / handed * 1e3:.2f} ms"
            cpu = f"{sum(e.cpu_s for _, e in exported[config]) / handed * 1e3:.2f} ms / {exporter_cpu}"
        print(f"| {config} | {rps:.0f} | {p50:.2f} | {paired['off']:.2f}× | {paired['mitmdump']:.2f}× | {sent} | {cpu} |")
    worst = min(statistics.median(r["rps"] / b["rps"] for r, b in zip(results[c], results["off"], strict=True))
                for c in exported)
    verdict = "met" if worst >= TARGET_RATIO else "not met"
    print(f"export on / off, worst rate: {worst:.2f}× req/s (target ≥ {TARGET_RATIO}×): {verdict}")


if __name__ == "__main__":
    sys.exit(main())
