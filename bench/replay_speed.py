"""Replay speed: the same episodes live (the demo world, with model latency) and replayed hermetically.

For each agent, the chosen demo tasks run live under the response_lost scenario, one episode at
a time, once per model latency in `--latency-ms` (the scripted model answers each request after
that long; the shop answers at once). 200 ms is faster than hosted model APIs answer a
tool-calling request; 1000 ms is nearer what a short completion from one takes. The episodes of
the first latency are frozen, the world is stopped, and each entry is replayed with the same
agent, one at a time. Every mode runs `--rounds` times (3) and each episode's best run counts,
as these 2-core machines are shared and noisy. The table compares, per episode:

- wall: the agent process's lifetime (what `duration_s` logs), live vs replay, and the ratio;
- replay waits: the time the replay proxy spent on the episode's exchanges (the recording's
  lookup; live, the same sum is the upstream's latency);
- beyond start-up: replay wall minus the agent's own fixed cost (interpreter and imports, the
  same in both modes, measured separately), which bounds the speed-up of short episodes.

Three agents, each the tool loop of examples/naive_agent.py: `light`, a process using the standard
library only (urllib; ~60 ms to start); `naive`, examples/naive_agent.py itself, a process whose
`import openai` alone takes ~0.8 s on these machines; and `sdk-function`, the loop on the openai
SDK and httpx as a Python function agent (`run_function` live, `replay_function` in replay), in
this process, so no start-up per episode: what is left is model latency live and the recording
in replay. Totals count every episode plus each mode's harness
around them (the runner: world reset, end state, judging; replay: the judging).

    .venv/bin/python bench/replay_speed.py [--latency-ms 200,1000] [--agents light,naive,sdk-function] [--tasks ID,...] [--rounds 3]
"""

from __future__ import annotations

import functools
import json
import os
import sys

LIGHT_FLAG = "--light-agent"


def tool_loop(prompt: str, chat, send, model_base: str, shop: str, seed: str | None) -> dict:
    """The naive agent's loop (examples/naive_agent.py): ask the model, call the tools it names,
    retry a failed call at once. `chat(url, request) -> message`; `send(method, url, body) -> (status, text)`."""
    import re
    from urllib.parse import quote, urlencode

    config = json.loads(open(os.environ["BENCH_AGENT_CONFIG"]).read())
    specs = config["specs"]
    messages = [{"role": "system", "content": config["system"]}, {"role": "user", "content": prompt}]
    for _ in range(40):
        request = {"model": os.environ.get("FAULTPROXY_MODEL", "demo-large"), "messages": messages,
                   "tools": config["tools"], "temperature": 0.7}
        if seed:
            request["seed"] = int(seed)
        message = chat(model_base + "/chat/completions", request)
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
            return answer if isinstance(answer, dict) else {"answer": answer}
        for call in calls:
            name, args = call["function"]["name"], json.loads(call["function"]["arguments"])
            spec = specs[name]
            path = re.sub(r"\{(\w+)\}", lambda m: quote(str(args.pop(m.group(1), "")), safe=""), spec["path"])
            if spec["method"] in ("POST", "PATCH"):
                status, text = send(spec["method"], shop + path, args)
            else:
                status, text = send(spec["method"], shop + path + ("?" + urlencode(args) if args else ""), None)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_content(status, text)})
    return {"answer": "ran out of turns"}


def tool_content(status: int, text: str) -> str:
    if 200 <= status < 300:
        return text
    try:
        body = json.loads(text)
    except ValueError:
        body = text
    return json.dumps({"http_status": status, "error": body.get("error", body) if isinstance(body, dict) else body})


def light_agent(startup_only: bool = False) -> None:
    """The loop over the standard library only (urllib, HTTP_PROXY from the environment): ~60 ms to start."""
    import http.client
    import urllib.error
    import urllib.request

    if startup_only:
        return
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

    prompt = json.loads(open(os.environ["FAULTPROXY_TASK"]).read())["prompt"]
    answer = tool_loop(prompt, lambda url, request: json.loads(send("POST", url, request)[1])["choices"][0]["message"],
                       send, os.environ["OPENAI_BASE_URL"].rstrip("/"), os.environ["SHOP_URL"].rstrip("/"),
                       os.environ.get("FAULTPROXY_SEED"))
    open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps(answer))


@functools.cache
def trust(ca_bundle: str):
    """One SSL context per CA bundle: loading ~150 roots costs tens of ms, too much per episode."""
    import ssl

    return ssl.create_default_context(cafile=ca_bundle)


def sdk_function_agent(episode) -> dict:
    """The same loop as an in-process function agent (run_function / replay_function): the openai
    SDK for the model and httpx for the shop, both routed through the episode's proxy. Imported
    once for all episodes, so no start-up per episode. The model's base URL is OPENAI_BASE_URL
    (the bench sets it to the live world's, in replay too: requests must match the recording)."""
    import httpx
    import openai

    with httpx.Client(proxy=episode.proxy_url, verify=trust(str(episode.ca_bundle)), timeout=30) as http:
        model = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key=os.environ.get("OPENAI_API_KEY", "x"),
                              http_client=http, max_retries=0)

        def chat(url: str, request: dict) -> dict:
            for attempt in range(3):
                try:
                    return model.chat.completions.create(**request).choices[0].message.model_dump(exclude_none=True)
                except openai.APIError:
                    if attempt == 2:
                        raise
            raise AssertionError("unreachable")

        def send(method: str, url: str, body: object) -> tuple[int, str]:
            for attempt in range(3):
                try:
                    response = http.request(method, url, json=body)
                except httpx.TransportError:
                    if attempt == 2:
                        raise
                    continue
                if response.status_code < 500 and response.status_code != 429 or attempt == 2:
                    return response.status_code, response.text
            raise AssertionError("unreachable")

        return tool_loop(episode.prompt, chat, send, "", episode.env["SHOP_URL"].rstrip("/"), str(episode.seed))


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


FUNCTION_AGENT = "sdk-function"  # sdk_function_agent, in this process


def agent_command(name: str) -> list[str]:
    if name == "light":
        return [sys.executable, str(Path(__file__).resolve()), LIGHT_FLAG]
    return [sys.executable, str(ROOT / "examples" / f"{name}_agent.py")]


def startup_s(name: str, rounds: int = 5) -> float:
    """The agent's fixed cost, the same live and in replay: interpreter start and imports."""
    if name == FUNCTION_AGENT:
        return 0.0  # imported once, before the first episode
    command = agent_command(name) + (["--startup"] if name == "light" else ["--help"])
    times = []
    subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)  # warm the caches
    for _ in range(rounds):
        started = time.perf_counter()
        subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        times.append(time.perf_counter() - started)
    return min(times)


def waits(trace: Path) -> float:
    """Time the proxy spent on the episode's exchanges (the upstream's latency live; the lookup in replay)."""
    from faultproxy.formats.trace import read_trace

    return sum(line["duration_s"] for line in read_trace(trace))


def model_calls(trace: Path) -> int:
    from faultproxy.formats.trace import read_trace

    return sum(1 for line in read_trace(trace) if line["request"]["url"].split("?")[0].endswith("/chat/completions"))


def live_runs(name: str, tasks, latency_ms: float, rounds: int, folder: Path,
              store: Path | None) -> tuple[dict, list[float]]:
    """The episodes run live `rounds` times against the demo world; returns each episode's
    (record, trace) per round and the rounds' totals. The first round is frozen into `store`."""
    from faultproxy.formats.rundir import read_run
    from examples.world import world_in_thread
    from faultproxy import run_function
    from faultproxy import RunOptions, run
    from faultproxy.replay_store.freeze import freeze
    from faultproxy.scenarios import load_scenario

    saved = {k: os.environ.get(k) for k in ("SHOP_ROOT", "OPENAI_BASE_URL", "OPENAI_API_KEY")}
    live: dict[str, list[tuple[dict, Path]]] = {}
    totals = []
    with world_in_thread(latency_ms=latency_ms) as world:
        os.environ.update({k: v for k, v in world.env().items() if k != "SHOP_URL"})
        for n in range(rounds):
            out = folder / f"run-{name}-{latency_ms:g}-{n}"
            started = time.perf_counter()
            if name == FUNCTION_AGENT:
                run_function(sdk_function_agent, tasks, k=1, scenario=load_scenario("response_lost"), out=out)
            else:
                run(RunOptions(scenario=load_scenario("response_lost"), tasks=tasks, out=out, k=1, parallel=1,
                               command=agent_command(name), show_progress=False))
            totals.append(time.perf_counter() - started)
            for record in read_run(out).episodes:
                live.setdefault(record["key"], []).append((record, out / record["trace"]))
        if store:  # while the world's variables are set: an entry keeps those its task uses
            freeze(folder / f"run-{name}-{latency_ms:g}-0", store, env={"OPENAI_BASE_URL": None})
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    return live, totals


def bench_agent(name: str, task_ids: list[str], latencies: list[float], rounds: int, folder: Path) -> list[dict]:
    from faultproxy.replay_store import har
    from faultproxy.replay_store.replay_proxy import ReplayOptions
    from faultproxy.runner import Replayer
    from faultproxy.tasks.tasks_file import load_tasks

    tasks = load_tasks(ROOT / "examples" / "tasks.yaml")
    tasks = replace(tasks, tasks=tuple(t for t in tasks.tasks if t.id in task_ids))
    store = folder / f"store-{name}"
    live: dict[float, dict] = {}
    live_totals: dict[float, float] = {}
    for latency in latencies:
        print(f"  live, model latency {latency:g} ms ...", file=sys.stderr, flush=True)
        live[latency], totals = live_runs(name, tasks, latency, rounds, folder,
                                          store if latency == latencies[0] else None)
        live_totals[latency] = min(totals)
    # The world is stopped: replay has nothing to talk to but the recording.
    print("  replay ...", file=sys.stderr, flush=True)
    entries = har.read_entries(store)
    replayed: dict[str, list] = {}
    if name == FUNCTION_AGENT:  # the model URL the recording was made with (the world is gone)
        os.environ["OPENAI_BASE_URL"] = entries[0].env["OPENAI_BASE_URL"]
    function = sdk_function_agent if name == FUNCTION_AGENT else None
    with Replayer(ReplayOptions(), entries) as replayer:
        replay_totals = []
        for _ in range(rounds):
            started = time.perf_counter()
            for result in replayer.replay_all(entries, None if function else agent_command(name), agent=function):
                replayed.setdefault(result.entry.key, []).append(result)
            replay_totals.append(time.perf_counter() - started)
        # (the replay traces live in the replayer's temporary folder, until it closes)
        rows = []
        for key, results in replayed.items():
            best = min(results, key=lambda r: r.record["duration_s"])
            fastest = {latency: min(live[latency][key], key=lambda pair: pair[0]["duration_s"])
                       for latency in latencies}
            record, trace = fastest[latencies[0]]
            rows.append({"agent": name, "task": record["task_id"], "model_calls": model_calls(trace),
                         "live_s": {latency: fastest[latency][0]["duration_s"] for latency in latencies},
                         "replay_s": best.record["duration_s"], "replay_waits_s": waits(best.trace),
                         "live_verdict": record["verdict"]["status"], "replay_verdict": best.status,
                         "as_expected": all(r.meets_expectation for r in results),
                         "diverged": sum(len(r.diverged) for r in results), "blocked": sum(len(r.blocked) for r in results)})
    rows.sort(key=lambda row: row["task"])
    rows.append({"agent": name, "task": "all episodes, with harness", "live_s": live_totals,
                 "replay_s": min(replay_totals)})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--latency-ms", default="200,1000",
                        help="model latencies per response to run live, comma-separated (default 200,1000)")
    parser.add_argument("--agents", default=f"light,naive,{FUNCTION_AGENT}",
                        help=f"light, naive and/or {FUNCTION_AGENT} (default all three)")
    parser.add_argument("--tasks", default=DEFAULT_TASKS, help="demo task ids, comma-separated")
    parser.add_argument("--rounds", type=int, default=3, help="runs of each mode; the best of them counts (default 3)")
    parser.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()

    from examples.agent_common import SPECS, SYSTEM
    from faultproxy.formats.logs import configure_logging

    configure_logging()  # the proxy's fault events to stderr: stdout is the table

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
    latencies = [float(x) for x in args.latency_ms.split(",") if x]
    startup = {name: startup_s(name) for name in agents}
    rows = []
    for name in agents:
        print(f"{name}: {len(task_ids)} episodes live, then replayed ...", file=sys.stderr, flush=True)
        rows += bench_agent(name, task_ids, latencies, max(1, args.rounds), folder)
    print_table(rows, latencies, startup)
    print(f"Replay vs live: demo world, scenario response_lost, one episode at a time, best of {args.rounds} "
          "rounds. Times are the agent's wall time (its process, or the function call); 'live @ N ms' has the scripted model answer each request "
          "after N ms (the shop at once); 'replay waits' is the time the replay proxy spent on the episode's "
          "exchanges; 'beyond start-up' is replay time minus the agent's own start-up.")
    print("agent start-up alone (interpreter + imports, best of 5): "
          + ", ".join(f"{name} {seconds:.2f} s" if name != FUNCTION_AGENT else f"{name} none (in process)"
                      for name, seconds in startup.items()))
    diverged = sum(r.get("diverged", 0) for r in rows)
    blocked = sum(r.get("blocked", 0) for r in rows)
    print(f"replays diverged: {diverged}; upstream connections attempted in replay: {blocked}")
    print(f"machine: {os.cpu_count()} cores, Python {platform.python_version()}, load average "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({"startup_s": startup, "rows": rows}, indent=2))
    return 0


def print_table(rows: list[dict], latencies: list[float], startup: dict[str, float]) -> None:
    header = ("agent", "task", "model calls", "replay s", "replay waits s", "beyond start-up s",
              *(f"{label} @ {latency:g} ms" for latency in latencies for label in ("live s", "speed-up")),
              "verdict live/replay")
    lines = [header]
    for row in rows:
        per_latency = [cell for latency in latencies for cell in (
            f"{row['live_s'][latency]:.2f}",
            f"{row['live_s'][latency] / row['replay_s']:.1f}x" if row["replay_s"] else "-")]
        if "model_calls" not in row:
            lines.append((row["agent"], row["task"], "", f"{row['replay_s']:.2f}", "", "", *per_latency, ""))
            continue
        verdict = f"{row['live_verdict']}/{row['replay_verdict']}" + ("" if row["as_expected"] else " (!)")
        lines.append((row["agent"], row["task"], str(row["model_calls"]), f"{row['replay_s']:.2f}",
                      f"{row['replay_waits_s']:.3f}", f"{row['replay_s'] - startup[row['agent']]:.2f}",
                      *per_latency, verdict))
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    for i, line in enumerate(lines):
        print("  ".join(cell.ljust(w) if n in (0, 1, len(header) - 1) else cell.rjust(w)
                        for n, (cell, w) in enumerate(zip(line, widths))))
        if i == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    sys.exit(main())
