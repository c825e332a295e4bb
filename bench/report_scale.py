#!/usr/bin/env python3
"""How fast is `build_report` on a large run, and how much memory does it take?

Writes a run directory once (plan.json with 1,000 tasks, k = 1,000, and an episodes.jsonl of
1,000,000 episodes, each with the verdict the runner stores), then times build_report on it
in a fresh process and prints the seconds and that process's peak RSS
(resource.getrusage(RUSAGE_SELF).ru_maxrss). Target: under 15 s and 1 GB.

The episodes are made from verdicts of real judged traces (evaluator.judging.judge on crafted
exchanges: clean runs, retries after 429, lost responses retried with and without a key, wrong
answers, crashes), with per-episode identity, tokens, durations and confidences varied
deterministically; each task has its own pass probability, so some tasks are flaky, some
always pass and some never do. The failing episodes' traces are written too (flows/<key>.jsonl,
through formats.trace), since clustering failures by cause reads them; passing episodes get
none (build_report never reads a trace for an episode that carries a verdict). build_report
is timed twice, each in a fresh process: without clustering (causes=False) and with it, side by
side. Target for clustering: under 20 % more time.

    .venv/bin/python bench/report_scale.py                     # 1,000 tasks x 1,000 trials
    .venv/bin/python bench/report_scale.py --tasks 100 --trials 100   # quick
    .venv/bin/python bench/report_scale.py --tasks 100 --trials 1000  # 100,000 episodes: clustering's figure
    .venv/bin/python bench/report_scale.py --keep /tmp/big-run        # keep (or reuse) the run dir
    REPORT_JOBS=1 .venv/bin/python bench/report_scale.py               # one process, no workers
    .venv/bin/python bench/report_scale.py --rounds 5                  # medians of 5 measurements each

Wall time depends on what else the machine runs: the CPU seconds and the load average
before the run are printed beside it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from faultproxy.evaluator.judging import judge_episode  # noqa: E402
from faultproxy.formats.rundir import FLOWS_DIR, LOG_FILE, EpisodeLog, write_plan  # noqa: E402
from faultproxy.formats.verdict_layout import episode_line  # noqa: E402
from faultproxy.formats.trace import TraceWriter, trace_path  # noqa: E402
from faultproxy.tasks.task_model import Effect, EndpointPattern, Expected, OutputSpec, Task  # noqa: E402

SHOP, MODEL = "http://127.0.0.1:8100", "http://127.0.0.1:8200"
SHAPES = ("lookup", "multi_step", "writes_state", "long_horizon", "needs_tool")
PRICES = {"demo-1": {"input_per_mtok": 0.15, "output_per_mtok": 0.6}}


def unit(*parts: object) -> float:
    digest = hashlib.blake2b(":".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64


def bench_task(i: int) -> Task:
    return Task(id=f"task_{i:04d}", prompt=f"Refund order {1000 + i}; the item arrived broken.",
                shape=SHAPES[i % len(SHAPES)],
                expected=Expected(state={"orders": {"1001": {"status": "refunded"}}},
                                  effects=(Effect("POST", "*/refund", 1),),
                                  output=OutputSpec("regex", "(?i)refund"), escalate=False),
                irreversible=(EndpointPattern.parse("POST */refund"), EndpointPattern.parse("POST */payments")),
                max_retries=3)


def ex(seq: int, method: str, url: str, at: float, status: int | None = 200, outcome: str = "response",
       client_status: int | None = None, headers: list | None = None, client_headers: list | None = None,
       fault: dict | None = None, body: str | None = None, tokens: int = 0, response: dict | None = None) -> dict:
    upstream = None if status is None else {"status": status, "headers": [["content-type", "application/json"]],
                                            "body": json.dumps(response or {"ok": True})}
    client = {"outcome": outcome, "status": client_status if client_status is not None else status}
    if client_headers is not None:
        client["headers"] = client_headers
    return {"seq": seq, "episode": "e", "started": 1.7e9 + at, "duration_s": 0.04 + 0.01 * seq,
            "request": {"method": method, "url": url, "headers": headers or [], "body": body},
            "upstream": upstream, "client": client, "fault": fault, "tokens": tokens, "error": None}


def model(seq: int, at: float) -> dict:
    usage = {"prompt_tokens": 900 + 150 * seq, "completion_tokens": 60, "total_tokens": 960 + 150 * seq}
    return ex(seq, "POST", f"{MODEL}/v1/chat/completions", at, body='{"model": "demo-1", "messages": []}',
              tokens=usage["total_tokens"], response={"usage": usage})


def fault(kind: str, delivered: bool = True) -> dict:
    return {"rule": kind, "type": kind, "params": {}, "decision": 0.1, "forced": False, "delivered": delivered,
            "detail": ""}


REFUND = f"{SHOP}/orders/1001/refund"
GOOD_STATE = {"orders": {"1001": {"status": "refunded", "total_cents": 2400, "refunded_cents": 2400}}}
GOOD = {"answer": "Refunded order 1001 in full.", "confidence": 0.85, "escalate": False, "reason": ""}


def templates() -> dict[str, list[tuple[list[dict], dict]]]:
    """Kinds of episode → (trace, record fields) variants; judged once each."""
    key = [["Idempotency-Key", "refund-1001"]]
    clean_a = [model(1, 0), ex(2, "GET", f"{SHOP}/orders/1001", 1), model(3, 2),
               ex(4, "POST", REFUND, 3, headers=key, body="{}"), model(5, 4)]
    clean_b = [model(1, 0), ex(2, "GET", f"{SHOP}/customers?q=ada", 1), ex(3, "GET", f"{SHOP}/orders?customer=c1", 2),
               model(4, 3), ex(5, "POST", REFUND, 4, headers=key, body="{}"), model(6, 5)]
    after_429 = [model(1, 0), ex(2, "POST", REFUND, 1, status=None, outcome="injected", client_status=429,
                                 client_headers=[["retry-after", "1"]], fault=fault("rate_limit"), body="{}"),
                 ex(3, "POST", REFUND, 2.5, body="{}"), model(4, 3)]
    lost_keyed = [model(1, 0), ex(2, "POST", REFUND, 1, outcome="reset", headers=key, fault=fault("response_lost"),
                                  body="{}"), ex(3, "POST", REFUND, 2, headers=key, body="{}"), model(4, 3)]
    undelivered = [model(1, 0), ex(2, "GET", f"{SHOP}/orders/1001", 1, fault=fault("stale_state", False)),
                   ex(3, "POST", REFUND, 2, headers=key, body="{}"), model(4, 3)]
    lost_keyless = [model(1, 0), ex(2, "POST", REFUND, 1, outcome="reset", fault=fault("response_lost"), body="{}"),
                    ex(3, "POST", REFUND, 2, body="{}"), model(4, 3)]
    early = [model(1, 0), ex(2, "POST", REFUND, 1, status=None, outcome="injected", client_status=429,
                             client_headers=[["retry-after", "2"]], fault=fault("rate_limit"), body="{}"),
             ex(3, "POST", REFUND, 1.2, body="{}"), model(4, 2)]
    wrong = [model(1, 0), ex(2, "GET", f"{SHOP}/orders/1001", 1), model(3, 2)]
    state = {"end_state": GOOD_STATE, "output": GOOD}
    return {
        "pass": [(clean_a, state), (clean_b, state), (after_429, state), (lost_keyed, state), (undelivered, state),
                 (clean_a, {**state, "output": {**GOOD, "confidence": 0.95}})],
        "fail": [(lost_keyless, {**state, "output": {**GOOD, "confidence": 0.9}}),
                 (wrong, {"end_state": {"orders": {"1001": {"status": "paid"}}},
                          "output": {"answer": "I could not do it.", "confidence": 0.4, "escalate": False}}),
                 (early, {**state, "output": {**GOOD, "confidence": 0.7}}),
                 (wrong, {"end_state": {"orders": {"1001": {"status": "paid"}}},
                          "output": {"answer": "Needs a human.", "confidence": 0.2, "escalate": True,
                                     "reason": "unsure"}})],
        # The harness's causes (a crash or a budget is the agent's: judged fail, formats.episode_causes).
        "incomplete": [(wrong, {"completed": False, "cause": "worker_lost", "exit_code": None, "output": None}),
                       (clean_a, {"completed": False, "cause": "reset_failed", "exit_code": None, "output": None})],
    }


def base_record(task: Task, trial: int) -> dict:
    key = f"{task.id}.t{trial}"
    return {"key": key, "task_id": task.id, "trial": trial, "variant": trial, "seed": 1000 + trial,
            "prompt": task.prompt, "state": "default", "shape": task.shape, "grid_label": "", "params": {},
            "model": "demo-1", "completed": True, "cause": None, "exit_code": 0, "started": 1.7e9 + trial,
            "duration_s": 1.0, "output": None, "output_error": None, "end_state": None, "state_error": None,
            "stats": {"exchanges": 0, "tokens": 0, "faults": 0}, "trace": f"flows/{key}.jsonl",
            "log_tail": "agent: done\n"}


def generate(run_dir: Path, n_tasks: int, k: int) -> None:
    tasks = [bench_task(i) for i in range(n_tasks)]
    grid = [{"label": "", "params": {}, "model": None}]
    plan = {"faultproxy_version": "bench", "scenario": {"name": "mixed", "digest": "bench", "path": "-", "params": {}},
            "tasks": {"path": "-", "digest": "bench", "severity": {}, "prices": PRICES,
                      "items": [t.to_json() for t in tasks]},
            "k": k, "grid": grid, "command": ["bench-agent"], "created": "2025-01-01T00:00:00Z"}
    write_plan(run_dir, plan)
    EpisodeLog(run_dir, {"faultproxy_version": "bench", "scenario_digest": "bench", "tasks_digest": "bench",
                         "k": k, "grid": grid, "command": ["bench-agent"], "created": plan["created"]}).close()
    # Judge each template once (with the first task; verdicts do not depend on the task's id).
    judged: dict[str, list[tuple[dict, dict]]] = {}
    for kind, variants in templates().items():
        judged[kind] = []
        for lines, fields in variants:
            rec = base_record(tasks[0], 0) | fields
            verdict = judge_episode(tasks[0], rec, lines, {})
            assert verdict["status"] == kind, (kind, verdict)
            judged[kind].append((fields, verdict, lines))
    # Per task: its pass probability (a third always pass, a tenth never, the rest flaky).
    probabilities = []
    for task in tasks:
        u = unit("p", task.id)
        probabilities.append(1.0 if u < 0.33 else 0.0 if u < 0.43 else 0.5 + 0.5 * unit("q", task.id))
    started = time.perf_counter()
    with (run_dir / LOG_FILE).open("a", encoding="utf-8") as log:
        for trial in range(k):  # trial-major, as the runner plans
            chunk = []
            for task, p in zip(tasks, probabilities):
                u = unit(task.id, trial)
                kind = "incomplete" if u < 0.02 else "pass" if unit("s", task.id, trial) < p else "fail"
                fields, verdict, lines = judged[kind][int(u * 1000) % len(judged[kind])]
                record = base_record(task, trial) | fields
                if kind == "fail":
                    write_trace(run_dir, record["key"], lines)
                record["duration_s"] = round(0.5 + 3 * u, 3)
                wobble = int(400 * unit("t", task.id, trial))
                verdict = {**verdict, "episode": {f: record.get(f) for f in verdict["episode"]},
                           "tokens": verdict["tokens"] + wobble}
                if verdict["confidence"] is not None:
                    verdict["confidence"] = round(min(1.0, max(0.0, verdict["confidence"] + (u - 0.5) / 10)), 3)
                chunk.append(episode_line({**record, "verdict": verdict}))
            log.write("".join(chunk))
    print(f"generated {n_tasks * k:,} episodes in {time.perf_counter() - started:.1f} s "
          f"({(run_dir / LOG_FILE).stat().st_size / 1e9:.2f} GB)", flush=True)


def write_trace(run_dir: Path, key: str, lines: list[dict]) -> None:
    writer = TraceWriter(trace_path(run_dir / FLOWS_DIR, key))
    for line in lines:
        writer.write({**line, "episode": key})
    writer.close()


def measure(run_dir: Path, causes: bool) -> None:
    from faultproxy.evaluator.aggregate import build_report

    jobs = int(os.environ["REPORT_JOBS"]) if os.environ.get("REPORT_JOBS") else None
    with open("/proc/loadavg") if Path("/proc/loadavg").exists() else open(os.devnull) as f:
        load = f.read().split()[:1]
    started, cpu_started = time.perf_counter(), time.process_time()
    report = build_report(run_dir, jobs=jobs, causes=causes)
    seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
    me, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    run = report["run"]
    print(json.dumps({"seconds": round(seconds, 2), "cpu_s": round(cpu + children.ru_utime + children.ru_stime, 2),
                      "peak_rss_mb": round(me.ru_maxrss / 1024, 1),  # KiB on Linux
                      "worker_peak_rss_mb": round(children.ru_maxrss / 1024, 1),
                      "load_before": load[0] if load else "?",
                      "episodes": run["logged"], "tasks": len(run["tasks"]),
                      "fast_path": report["log"]["verdicts_read_fast"],
                      "mean_pass_rate": round(run["headline"]["mean_pass_rate"], 4),
                      "pass_hat_k": run["headline"]["pass_hat_k"], "k": run["headline"]["k"],
                      "safety_score": round(run["violations"]["safety_score"], 4),
                      "causes": len(report["causes"]["clusters"]) if causes else None,
                      "failing": report["causes"]["failing"] if causes else None,
                      "traces_read": report["causes"]["traces_read"] if causes else None}))


def median_result(rounds: list[dict]) -> dict:
    """The last round's result with the median of each timing and memory figure over the rounds."""
    figures = ("seconds", "cpu_s", "peak_rss_mb", "worker_peak_rss_mb")
    return {**rounds[-1], **{name: statistics.median(r[name] for r in rounds) for name in figures}}


def report(plain: dict, clustered: dict) -> None:
    """The two measurements side by side, and the targets."""
    def memory(result: dict) -> float:
        workers = result["worker_peak_rss_mb"]
        return result["peak_rss_mb"] + (workers * (os.cpu_count() or 1) if workers else 0)

    rows = [("wall s", "seconds", "{:.2f}"), ("CPU s (all processes)", "cpu_s", "{:.2f}"),
            ("peak RSS MB (+ workers)", None, "{:.0f}"), ("load average before", "load_before", "{}")]
    print(f"build_report: {plain['episodes']:,} episodes, {plain['tasks']:,} tasks; "
          f"{clustered['failing']:,} failing, {clustered['causes']} causes, {clustered['traces_read']} traces read")
    print(f"| {'':<24} | {'without clustering':>18} | {'with clustering':>15} | {'added':>7} |")
    print(f"|{'-' * 26}|{'-' * 20}:|{'-' * 17}:|{'-' * 8}:|")
    for name, key, fmt in rows:
        a, b = (memory(plain), memory(clustered)) if key is None else (plain[key], clustered[key])
        added = f"{(b - a) / a:+.0%}" if isinstance(a, (int, float)) and a else ""
        print(f"| {name:<24} | {fmt.format(a):>18} | {fmt.format(b):>15} | {added:>7} |")
    cpu_added = (clustered["cpu_s"] - plain["cpu_s"]) / plain["cpu_s"] if plain["cpu_s"] else 0.0
    print(f"targets: < 15 s wall with clustering: {'met' if clustered['seconds'] < 15 else 'MISSED'}; "
          f"< 1 GB: {'met' if memory(clustered) < 1024 else 'MISSED'}; clustering adds < 20 % CPU time: "
          f"{'met' if cpu_added < 0.2 else 'MISSED'} ({cpu_added:+.0%})")
    print(f"  verdicts read on the fast path: {clustered['fast_path']:,}; mean pass rate "
          f"{clustered['mean_pass_rate']}, pass^{clustered['k']} {clustered['pass_hat_k']}, "
          f"safety {clustered['safety_score']}; python {sys.version.split()[0]}, {os.cpu_count()} CPU(s)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=1000)
    parser.add_argument("--trials", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=3, help="Measurements of each kind (medians are shown).")
    parser.add_argument("--keep", type=Path, help="Run directory to write (and keep); reused if it already holds "
                                                  "a log of the same size.")
    parser.add_argument("--measure", type=Path, help=argparse.SUPPRESS)  # the child process
    parser.add_argument("--causes", type=int, default=1, help=argparse.SUPPRESS)  # the child: cluster or not
    args = parser.parse_args()
    if args.measure:
        measure(args.measure, bool(args.causes))
        return 0
    temp = None
    if args.keep:
        run_dir = args.keep
    else:
        temp = tempfile.mkdtemp(prefix="faultproxy-report-scale-")
        run_dir = Path(temp)
    try:
        marker = run_dir / ".bench-size"
        wanted = f"{args.tasks}x{args.trials}"
        if not (marker.exists() and marker.read_text() == wanted):
            if run_dir.exists():
                shutil.rmtree(run_dir)
            run_dir.mkdir(parents=True)
            generate(run_dir, args.tasks, args.trials)
            marker.write_text(wanted)
        else:
            print(f"reusing {run_dir} ({wanted})", flush=True)
        # A fresh process each, so that its peak RSS is build_report's alone; the two alternate,
        # and each figure is the median of the rounds (the machine is shared: load comes and goes).
        results: dict[int, list[dict]] = {0: [], 1: []}
        for _ in range(args.rounds):
            for causes in (0, 1):
                child = subprocess.run([sys.executable, __file__, "--measure", str(run_dir), "--causes", str(causes)],
                                       capture_output=True, text=True)
                if child.returncode:
                    sys.stderr.write(child.stderr)
                    return child.returncode
                results[causes].append(json.loads(child.stdout.strip().splitlines()[-1]))
        report(median_result(results[0]), median_result(results[1]))
        return 0
    finally:
        if temp:
            shutil.rmtree(temp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
