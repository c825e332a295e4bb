"""Episodes per minute on a Dask cluster of 1, 2 and 4 workers (`--executor dask`).

The agent is bench/waiting_agent.py: a few model calls, each answered after a fixed latency
(200 ms by default), so an episode mostly waits and throughput should grow almost linearly with
the number of workers. Each worker is a real `dask worker` process on 127.0.0.1 (`--nthreads`
episodes at once, behind its own proxy), started beside a `dask scheduler` process for each
cluster size and stopped after it.

Each cluster first runs a warm-up (one episode per worker thread) that starts every worker's
proxy; the timed run then reuses them, so the table shows steady-state throughput. The cold
column is the warm-up's time: connecting, checking the workers, starting their proxies. A local
run at the same concurrency as one worker is the reference row.

    .venv/bin/python bench/dask_throughput.py [--episodes 32] [--nthreads 2] [--latency-ms 200]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runner_throughput import AGENT, start_model  # noqa: E402
from faultproxy.formats.rundir import read_run  # noqa: E402
from faultproxy.runner import ProcessCluster  # noqa: E402
from faultproxy import RunOptions, run  # noqa: E402
from faultproxy.tasks.tasks_file import task_set_from_json  # noqa: E402
from faultproxy.scenarios import load_scenario  # noqa: E402


def options(out: Path, episodes: int, env: dict[str, str], **kw) -> RunOptions:
    # The model's address travels in the tasks' env: workers do not see this process's environment.
    tasks = task_set_from_json([{"id": f"task{i}", "prompt": "wait for the model", "env": env}
                                for i in range(episodes)])
    return RunOptions(scenario=load_scenario("rate_limit", {"lambda": 0.0}), tasks=tasks, command=AGENT,
                      out=out, k=1, show_progress=False, **kw)


def timed(opts: RunOptions) -> float:
    started = time.perf_counter()
    result = run(opts)
    assert result.complete and not result.errors, result
    return time.perf_counter() - started


def agent_seconds(out: Path) -> float:
    """The mean lifetime of an episode's agent: it grows when the machine, not the executor, is the limit."""
    return statistics.mean(r["duration_s"] for r in read_run(out).episodes)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=32)
    parser.add_argument("--nthreads", type=int, default=2, help="episodes at once per worker")
    parser.add_argument("--workers", default="1,2,4")
    parser.add_argument("--latency-ms", type=float, default=200)
    parser.add_argument("--calls", type=int, default=8, help="model calls per episode")
    args = parser.parse_args()
    model_url, stop = start_model(args.latency_ms / 1000)
    env = {"BENCH_MODEL_URL": model_url, "BENCH_CALLS": str(args.calls)}
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        scratch = Path(scratch)
        os.environ.setdefault("FAULTPROXY_HOME", str(scratch / "home"))
        local = timed(options(scratch / "local", args.episodes, env, parallel=args.nthreads))
        agent_s = agent_seconds(scratch / "local")
        for workers in [int(n) for n in args.workers.split(",")]:
            with ProcessCluster(workers=workers, nthreads=args.nthreads, directory=scratch / f"cluster{workers}") as cluster:
                dask = {"executor": "dask", "scheduler": cluster.address}
                cold = timed(options(scratch / f"warm{workers}", workers * args.nthreads, env, **dask))
                seconds = timed(options(scratch / f"w{workers}", args.episodes, env, **dask))
            rows.append((workers, cold, seconds, agent_seconds(scratch / f"w{workers}")))
    stop.set()

    table = Table(title=f"faultproxy run --executor dask: {args.episodes} episodes, {args.calls} model calls of "
                        f"{args.latency_ms:g} ms each, {args.nthreads} threads per worker")
    for column in ("executor", "workers", "episodes at once", "cold start s", "wall s", "episodes/min",
                   "speed-up vs 1 worker", "per worker vs 1", "agent s/episode", "slots busy"):
        table.add_column(column, justify="right")
    base = args.episodes / rows[0][2] * 60
    table.add_row("local", "-", str(args.nthreads), "-", f"{local:.1f}", f"{args.episodes / local * 60:.0f}",
                  "-", "-", f"{agent_s:.2f}", f"{args.episodes * agent_s / (local * args.nthreads):.0%}")
    for workers, cold, seconds, agent in rows:
        per_minute = args.episodes / seconds * 60
        slots = workers * args.nthreads
        table.add_row("dask", str(workers), str(slots), f"{cold:.1f}", f"{seconds:.1f}",
                      f"{per_minute:.0f}", f"{per_minute / base:.2f}x", f"{per_minute / base / workers:.0%}",
                      f"{agent:.2f}", f"{args.episodes * agent / (seconds * slots):.0%}")
    console = Console(width=130)
    console.print(table)
    workers, _, _, agent = rows[-1]
    console.print(f"At {workers} workers the agents lived {agent / rows[0][3]:.2f}× as long as at 1 (the machine's "
                  f"cores are shared by every agent, worker and proxy); per agent-second the speed-up is "
                  f"{args.episodes / rows[-1][2] * 60 / base * agent / rows[0][3]:.2f}x.")
    console.print(f"{os.cpu_count()} cores, Python {platform.python_version()}, {platform.machine()}. "
                  "slots busy: the share of the run's episode slots an agent occupied (100% = no scheduling gaps). "
                  "The local row includes its proxy's start-up; dask rows do not (see cold start).")


if __name__ == "__main__":
    main()
