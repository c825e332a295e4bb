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
import json
import shutil
import sys
import tempfile
from pathlib import Path

from machine_load import MachineLoad, machine
from overhead_configs import CONFIG_KEYS, FORWARD, REVERSE, Bench, Run
from overhead_report import LATENCY, LOAD, report
from overhead_traffic import python_load, serve_upstream


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
