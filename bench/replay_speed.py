"""Replay speed: the same episodes live (the demo world, with model latency) and replayed hermetically.

For each agent, the chosen demo tasks run live under the response_lost scenario with the
scripted model answering each request after `--latency-ms` (200 ms by default; the shop answers
at once), one episode at a time. Every episode is frozen, the world is stopped, and each entry
is replayed with the same agent, one at a time. Both modes run `--rounds` times (3) and the best
round counts, as these 2-core machines are shared and noisy. The table compares, per episode:

- wall: the agent process's lifetime (what `duration_s` logs), live vs replay, and the ratio;
- waits: the time the proxy spent on the episode's exchanges (sum of their durations: the
  upstream's latency live, the recording's lookup in replay);
- start-up: the agent's own fixed cost (interpreter and imports; the same in both modes),
  measured separately: it bounds the speed-up of short episodes.

Two agents: `light`, this file's own stdlib tool loop (urllib; ~50 ms to start), the same loop as
examples/naive_agent.py, and `naive`, examples/naive_agent.py itself (the openai SDK, whose import
costs about a second on these machines). Totals count every episode plus each mode's harness
around them (the runner: world reset, end state, judging; replay: the judging).

    .venv/bin/python bench/replay_speed.py [--latency-ms 200] [--agents light,naive] [--tasks ID,...] [--rounds 3]
"""

from __future__ import annotations

import json
import os
import sys

LIGHT_FLAG = "--light-agent"


def light_agent(startup_only: bool = False) -> None:
    """The naive agent's loop with the standard library only, so that start-up costs ~50 ms."""
    import http.client
    import re
    import urllib.error
    import urllib.request
    from urllib.parse import quote, urlencode

    if startup_only:
        return
    config = json.loads(open(os.environ["BENCH_AGENT_CONFIG"]).read())
    prompt = json.loads(open(os.environ["FAULTPROXY_TASK"]).read())["prompt"]
    shop, model_url = os.environ["SHOP_URL"].rstrip("/"), os.environ["OPENAI_BASE_URL"].rstrip("/")
    seed = os.environ.get("FAULTPROXY_SEED")
    opener = urllib.request.build_opener()  # HTTP_PROXY with the episode's credentials

    def send(method: str, url: str, body: object = None, attempts: int = 3) -> tuple[int, str]:
        data = json.dumps(body).encode() if body is not None else None
        for attempt in range(attempts):
            request = urllib.request.Request(url, data=data, method=method,
                                             headers={"content-type": "application/json",
                                                      "authorization": "Bearer " + os.environ.get("OPENAI_API_KEY", "x")})
            try:
                with opener.open(request, timeout=30) as response:
                    return response.status, response.read().decode()
            except urllib.error.HTTPError as error:
                status, text = error.code, error.read().decode()
                if status < 500 and status != 429 or attempt == attempts - 1:
                    return status, text
            except (urllib.error.URLError, http.client.HTTPException, OSError):
                if attempt == attempts - 1:
                    raise
        raise AssertionError("unreachable")

    tools = config["tools"]
    specs = config["specs"]
    messages = [{"role": "system", "content": config["system"]}, {"role": "user", "content": prompt}]
    for _ in range(40):
        request = {"model": os.environ.get("FAULTPROXY_MODEL", "demo-large"), "messages": messages, "tools": tools,
                   "temperature": 0.7}
        if seed:
            request["seed"] = int(seed)
        status, text = send("POST", model_url + "/chat/completions", request)
        message = json.loads(text)["choices"][0]["message"]
        calls = message.get("tool_calls") or []
        assistant = {"role": "assistant", "content": message.get("content")}
        if calls:
            assistant["tool_calls"] = [{"id": c["id"], "type": "function", "function": c["function"]} for c in calls]
        messages.append(assistant)
        if not calls:
            try:
                answer = json.loads(message.get("content") or "")
            except ValueError:
                answer = {"answer": message.get("content")}
            open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps(answer if isinstance(answer, dict) else
                                                                        {"answer": answer}))
            return
        for call in calls:
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            spec = specs[name]
            path = re.sub(r"\{(\w+)\}", lambda m: quote(str(args.pop(m.group(1), "")), safe=""), spec["path"])
            if spec["method"] in ("POST", "PATCH"):
                status, text = send(spec["method"], shop + path, args)
            else:
                status, text = send(spec["method"], shop + path + ("?" + urlencode(args) if args else ""))
            if 200 <= status < 300:
                content = text
            else:
                try:
                    body = json.loads(text)
                except ValueError:
                    body = text
                content = json.dumps({"http_status": status, "error": body.get("error", body)
                                      if isinstance(body, dict) else body})
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": content})


if __name__ == "__main__" and sys.argv[1:2] == [LIGHT_FLAG]:
    light_agent(startup_only=sys.argv[2:3] == ["--startup"])
    sys.exit(0)


# --- the benchmark (heavy imports from here on) ----------------------------------------------------

import argparse  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from dataclasses import replace  # noqa: E402
from pathlib import Path  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

DEFAULT_TASKS = "refund_order_1001,latest_order_grace,count_orders_ada,refund_turing_delivered"


def agent_command(name: str) -> list[str]:
    if name == "light":
        return [sys.executable, str(Path(__file__).resolve()), LIGHT_FLAG]
    return [sys.executable, str(ROOT / "examples" / f"{name}_agent.py")]


def startup_s(name: str, rounds: int = 5) -> float:
    """The agent's fixed cost, the same live and in replay: interpreter start and imports."""
    command = agent_command(name) + (["--startup"] if name == "light" else ["--help"])
    times = []
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # warm the caches
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return min(times)


def waits(trace: Path) -> tuple[float, int]:
    from proxy.trace import read_trace

    lines = list(read_trace(trace))
    model_calls = sum(1 for line in lines if line["request"]["url"].split("?")[0].endswith("/chat/completions"))
    return sum(line["duration_s"] for line in lines), model_calls


def bench_agent(name: str, task_ids: list[str], latency_ms: float, rounds: int, folder: Path) -> list[dict]:
    from evaluator.rundir import read_run
    from examples.world import world_in_thread
    from proxy.runner.run import RunOptions, run
    from proxy.runner.tasks import load_tasks
    from replay_store import har
    from replay_store.freeze import freeze
    from replay_store.replay import Replayer, ReplayOptions
    from scenarios import load_scenario

    tasks = load_tasks(ROOT / "examples" / "tasks.yaml")
    tasks = replace(tasks, tasks=tuple(t for t in tasks.tasks if t.id in task_ids))
    store = folder / f"store-{name}"
    saved = {k: os.environ.get(k) for k in ("SHOP_ROOT", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    live: dict[str, list[tuple[dict, Path]]] = {}
    live_totals = []
    with world_in_thread(latency_ms=latency_ms) as world:
        os.environ.update({k: v for k, v in world.env().items() if k != "SHOP_URL"})
        for n in range(rounds):
            out = folder / f"run-{name}-{n}"
            started = time.perf_counter()
            run(RunOptions(scenario=load_scenario("response_lost"), tasks=tasks, out=out, k=1, parallel=1,
                           command=agent_command(name), show_progress=False))
            live_totals.append(time.perf_counter() - started)
            for record in read_run(out).episodes:
                live.setdefault(record["key"], []).append((record, out / record["trace"]))
        freeze(folder / f"run-{name}-0", store, env={"OPENAI_BASE_URL": None})
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    # The world is stopped: replay has nothing to talk to but the recording.
    entries = har.read_entries(store)
    replayed: dict[str, list] = {}
    with Replayer(ReplayOptions(), entries) as replayer:
        replay_totals = []
        for _ in range(rounds):
            started = time.perf_counter()
            for result in replayer.replay_all(entries, agent_command(name)):
                replayed.setdefault(result.entry.key, []).append(result)
            replay_totals.append(time.perf_counter() - started)
        # (the replay traces live in the replayer's temporary folder, until it closes)
        rows = []
        for key, results in replayed.items():
            record, trace = min(live[key], key=lambda pair: pair[0]["duration_s"])
            best = min(results, key=lambda r: r.record["duration_s"])
            live_waits, calls = waits(trace)
            replay_waits, _ = waits(best.trace)
            rows.append({"agent": name, "task": record["task_id"], "model_calls": calls,
                         "live_s": record["duration_s"], "replay_s": best.record["duration_s"],
                         "live_waits_s": live_waits, "replay_waits_s": replay_waits,
                         "live_verdict": record["verdict"]["status"], "replay_verdict": best.status,
                         "as_expected": all(r.meets_expectation for r in results),
                         "diverged": sum(len(r.diverged) for r in results), "blocked": sum(len(r.blocked) for r in results)})
    rows.sort(key=lambda row: row["task"])
    rows.append({"agent": name, "task": "all episodes, with harness", "live_s": min(live_totals),
                 "replay_s": min(replay_totals)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", type=float, default=200, help="model latency per response (default 200)")
    parser.add_argument("--agents", default="light,naive", help="light and/or naive (default both)")
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help="demo task ids, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode; the best of them counts (default 3)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()

    from examples.agent_common import SPECS, SYSTEM

    folder = Path(tempfile.mkdtemp(prefix="faultproxy-replay-bench-"))
    os.environ.setdefault("FAULTPROXY_HOME", str(folder / "home"))
    tools = []
    for spec in SPECS.values():
        props = {k: v for k, v in spec.get("params", {}).items() if k != "idempotency_key"}
        tools.append({"type": "function", "function": {"name": spec["name"], "description": spec["description"],
                                                       "parameters": {"type": "object", "properties": props,
                                                                      "required": spec.get("required", [])}}})
    config = folder / "agent.json"
    config.write_text(json.dumps({"tools": tools, "specs": SPECS, "system": SYSTEM}))
    os.environ["BENCH_AGENT_CONFIG"] = str(config)

    agents = [a for a in args.agents.split(",") if a]
    task_ids = [t for t in args.tasks.split(",") if t]
    startup = {name: startup_s(name) for name in agents}
    rows = []
    for name in agents:
        print(f"{name}: {len(task_ids)} episodes live, then replayed ...", file=sys.stderr, flush=True)
        rows += bench_agent(name, task_ids, args.latency_ms, max(1, args.rounds), folder)

    header = ("agent", "task", "model calls", "live s", "replay s", "speed-up", "live waits s", "replay waits s",
              "verdict live/replay")
    lines = [header]
    for row in rows:
        ratio = f"{row['live_s'] / row['replay_s']:.1f}x" if row["replay_s"] else "-"
        if "model_calls" not in row:
            lines.append((row["agent"], row["task"], "", f"{row['live_s']:.2f}", f"{row['replay_s']:.2f}", ratio,
                          "", "", ""))
            continue
        verdict = f"{row['live_verdict']}/{row['replay_verdict']}" + ("" if row["as_expected"] else " (!)")
        lines.append((row["agent"], row["task"], str(row["model_calls"]), f"{row['live_s']:.2f}",
                      f"{row['replay_s']:.2f}", ratio, f"{row['live_waits_s']:.2f}", f"{row['replay_waits_s']:.3f}",
                      verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    print(f"Replay vs live: demo world, model latency {args.latency_ms:g} ms per response, scenario response_lost, "
          f"one episode at a time, best of {args.rounds} rounds; times are the agent process's wall time")
    for i, line in enumerate(lines):
        print("  ".join(cell.rjust(w) if 2 <= n <= 7 else cell.ljust(w) for n, (cell, w) in enumerate(zip(line, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))
    print("agent start-up alone (interpreter + imports, best of 5): "
          + ", ".join(f"{name} {seconds:.2f} s" for name, seconds in startup.items()))
    diverged = sum(r.get("diverged", 0) for r in rows)
    blocked = sum(r.get("blocked", 0) for r in rows)
    print(f"replays diverged: {diverged}; upstream connections attempted in replay: {blocked}")
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({"startup_s": startup, "rows": rows}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
