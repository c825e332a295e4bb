"""What OpenTelemetry export costs the proxy: req/s and p50 through faultproxy's embedded proxy
with export off, and with export on at a far higher episode rate than any run produces.

`faultproxy run --otlp` builds and sends spans in the runner's process, the one the embedded
proxy runs in, so that is where a cost would show: the proxy serves a load generator (a process
of its own, `proxy_overhead.py _load`) while a thread exports a 7-span episode every
1/--episodes-per-s seconds through runner.otel_export to a local OTLP/HTTP receiver (another
process: proxy_overhead.py's upstream, which also takes /v1/traces). Rounds alternate off and on; the report gives medians and the on/off ratios against
the proxy targets (≥ 0.9× req/s, p50 at most 0.3 ms above).

    .venv/bin/python bench/otel_overhead.py [--rounds 3] [--seconds 5] [--episodes-per-s 50]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from faultproxy.proxy.server import ProxyServer  # noqa: E402
from faultproxy.runner.otel_export import OtelExport  # noqa: E402

HERE = Path(__file__).resolve().parent


def episode(now: float) -> tuple[dict, list[dict]]:
    """A judged episode like the demo's: three model calls, three tool calls, one fault, a failed verdict."""
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
    record = {"key": "e", "task_id": "t", "trial": 0, "started": now, "duration_s": 0.1,
              "verdict": {"status": "fail", "failed": [{"name": "idempotency", "severity": "high", "detail": "x"}]}}
    return record, lines


def exporting(export: OtelExport, per_s: float, stop: threading.Event) -> None:
    while not stop.wait(1 / per_s):
        export.export_episode(*episode(time.time()))


def cpu_per_episode(endpoint: str, episodes: int = 200) -> float:
    """This thread's CPU milliseconds to build and queue one episode's spans (the SDK's sending
    thread not included: it runs beside, and its cost shows in the on/off rounds)."""
    export = OtelExport(endpoint)
    started = time.thread_time()
    for _ in range(episodes):
        export.export_episode(*episode(time.time()))
    cost = (time.thread_time() - started) / episodes * 1000
    export.close()
    return cost


def start(argv: list[str]) -> tuple[subprocess.Popen, int]:
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    for line in process.stdout:
        if line.startswith("PORT "):
            return process, int(line.split()[1])
    raise RuntimeError(f"{argv} did not start")


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
    parser.add_argument("--episodes-per-s", type=float, default=50)
    args = parser.parse_args()
    upstream, upstream_port = start([sys.executable, str(HERE / "proxy_overhead.py"), "_upstream"])
    receiver, receiver_port = start([sys.executable, str(HERE / "proxy_overhead.py"), "_upstream"])  # its /v1/traces
    results: dict[str, list[dict]] = {"off": [], "on": []}
    spans = dropped = 0
    try:
        with tempfile.TemporaryDirectory() as folder:
            proxy = ProxyServer(None, trace_dir=Path(folder) / "flows").start()
            try:
                proxy.begin_episode("bench", None, {})
                target, via = f"http://127.0.0.1:{upstream_port}", proxy.proxy_url("bench")
                load(target, via, 1, args.connections)  # warm-up
                for _ in range(args.rounds):
                    results["off"].append(load(target, via, args.seconds, args.connections))
                    export, stop = OtelExport(f"http://127.0.0.1:{receiver_port}/v1/traces"), threading.Event()
                    thread = threading.Thread(target=exporting, args=(export, args.episodes_per_s, stop))
                    thread.start()
                    results["on"].append(load(target, via, args.seconds, args.connections))
                    stop.set()
                    thread.join()
                    summary = export.close()
                    spans, dropped = spans + summary.spans, dropped + summary.dropped
            finally:
                proxy.stop()
        cost = cpu_per_episode(f"http://127.0.0.1:{receiver_port}/v1/traces")
    finally:
        for process in (upstream, receiver):
            process.terminate()
            process.wait(10)
    rps = {mode: statistics.median(r["rps"] for r in runs) for mode, runs in results.items()}
    p50 = {mode: statistics.median(r["p50_ms"] for r in runs) for mode, runs in results.items()}
    print(f"export off: {rps['off']:.0f} req/s, p50 {p50['off']:.2f} ms")
    print(f"export on ({args.episodes_per_s:g} episodes/s, {spans} spans, {dropped} dropped): "
          f"{rps['on']:.0f} req/s, p50 {p50['on']:.2f} ms")
    print(f"building and queueing one episode's 7 spans: {cost:.2f} ms of CPU")
    ratio, added = rps["on"] / rps["off"], p50["on"] - p50["off"]
    print(f"on/off: {ratio:.2f}× req/s (target ≥ 0.9×), p50 {added:+.2f} ms (target ≤ +0.3 ms)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
