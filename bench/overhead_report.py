"""The tables `proxy_overhead.py` prints: each configuration's runs against plain mitmdump's in the
same round and mode, and the verdicts against issue 35's targets."""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from machine_load import BUSY_CORES, MachineLoad, machine, median, spread
from overhead_configs import (BASELINE, FAULT_SHARE, FORWARD, REVERSE, TARGET_CPU_RATIO, TARGET_FAULTED_CPU_RATIO,
                              TARGET_P50_DELTA_MS, TARGET_THROUGHPUT_RATIO, Bench, Config, Run)

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

