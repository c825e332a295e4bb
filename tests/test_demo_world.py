"""The demo world: deterministic, solvable by the careful agent, and showing the naive agent's bug.

Agents run as subprocesses (they are scripts) against servers started here on ephemeral loopback
ports; each episode has its own shop tenant so episodes run side by side.
"""

from __future__ import annotations

import asyncio
import fnmatch
import json
import os
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from examples.agent_common import SYSTEM, Reply, tool_message
from examples.planner import Final, decide, intent_of
from examples.shop import SPECS, Shop, ShopError
from examples.world import World, running_world

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
TASK_FILE = yaml.safe_load((EXAMPLES / "tasks.yaml").read_text())
TASKS = {t["id"]: t for t in TASK_FILE["tasks"]}
CONCURRENCY = (os.cpu_count() or 2) + 1  # agents are CPU-bound (mostly importing openai): more only thrashes
AGENT_TIMEOUT_S = 60


def _if_you_can(p: str) -> str:
    return p[:-1] + ", if you can" + p[-1] if p[-1] in ".?!" else p + ", if you can."


def _i_need_to(p: str) -> str:
    return "I need to " + p[0].lower() + p[1:]


# Stand-ins for the runner's honest variants; trial i uses REWORDINGS[i].
REWORDINGS = [
    lambda p: p,
    str.lower,
    _i_need_to,
    lambda p: p + " Please be thorough.",
    _if_you_can,
    lambda p: p.lower() + " Please be thorough.",
    lambda p: _if_you_can(_i_need_to(p)),
    lambda p: _i_need_to(p).lower() + " Please be thorough.",
]


# ---------------------------------------------------------------- running one episode


@dataclass
class Episode:
    task: dict
    tenant: str
    returncode: int
    output: dict | None
    state: dict
    effects: list[dict]
    stderr: str


def expand(text: str, values: dict[str, str]) -> str:
    return re.sub(r"\$\{(\w+)\}", lambda m: values[m.group(1)], text)


def clean_env() -> dict[str, str]:
    """This process's environment without proxies or faultproxy settings: the tests talk to loopback directly."""
    return {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("FAULTPROXY_")}


async def run_episode(world: World, tmp: Path, agent: str, task: dict, *, tenant: str, seed: int, variant: int = 0,
                      state: str = "default", model: str = "demo-large", flags: tuple[str, ...] = ()) -> Episode:
    values = {"SHOP_ROOT": world.shop_url, "FAULTPROXY_EPISODE": tenant}
    prompt = REWORDINGS[variant](task["prompt"])
    async with httpx.AsyncClient() as http:
        (await http.post(expand(task["reset_url"], values), json={"state": state})).raise_for_status()
        task_path, out_path = tmp / f"{tenant}.task.json", tmp / f"{tenant}.out.json"
        task_path.write_text(json.dumps({"task": task, "variant": variant, "prompt": prompt}))
        env = clean_env() | world.env() | {k: expand(v, values) for k, v in TASK_FILE["env"].items()} | {
            "FAULTPROXY_TASK": str(task_path), "FAULTPROXY_OUTPUT": str(out_path),
            "FAULTPROXY_SEED": str(seed), "FAULTPROXY_MODEL": model}
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(EXAMPLES / f"{agent}_agent.py"), *flags, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        try:
            _, stderr = await asyncio.wait_for(proc.communicate(), AGENT_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            raise
        world_state = (await http.get(expand(task["state_url"], values))).json()
        effects = (await http.get(world.tenant_url(tenant) + "/_log")).json()["effects"]
    output = json.loads(out_path.read_text()) if out_path.exists() else None
    return Episode(task, tenant, proc.returncode, output, world_state, effects, stderr.decode())


async def run_all(jobs: list) -> list[Episode]:
    """Run episode coroutines, CONCURRENCY at a time."""
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(job) -> Episode:
        async with gate:
            return await job

    return await asyncio.gather(*(one(j) for j in jobs))


# ---------------------------------------------------------------- judging (a local stand-in for the evaluator)


def subset_problems(expected: Any, actual: Any, ignore: list[str], path: str = "") -> list[str]:
    if any(fnmatch.fnmatchcase(path, pattern) for pattern in ignore):
        return []
    if isinstance(expected, dict):
        if not isinstance(actual, dict):
            return [f"{path or '.'}: expected an object, got {actual!r}"]
        return [p for k, v in expected.items()
                for p in (subset_problems(v, actual[k], ignore, f"{path}.{k}".lstrip("."))
                          if k in actual else [f"{path}.{k}".lstrip(".") + ": missing"])]
    if isinstance(expected, list):
        if not isinstance(actual, list) or len(actual) != len(expected):
            return [f"{path}: expected {len(expected)} items, got {actual!r}"]
        return [p for i, (e, a) in enumerate(zip(expected, actual)) for p in subset_problems(e, a, ignore, f"{path}.{i}")]
    return [] if expected == actual else [f"{path}: expected {expected!r}, got {actual!r}"]


def effect_count(effects: list[dict], method: str, path: str) -> int:
    return sum(e["method"] == method and fnmatch.fnmatchcase(e["path"], path) for e in effects)


def problems(ep: Episode) -> list[str]:
    exp = ep.task["expected"]
    found = [] if ep.returncode == 0 else [f"exit status {ep.returncode}: {ep.stderr[-500:]}"]
    found += subset_problems(exp["state"], ep.state, exp.get("ignore", []))
    for e in exp.get("effects", []):
        if (n := effect_count(ep.effects, e["method"], e["path"])) != e["count"]:
            found.append(f"{e['method']} {e['path']}: {n} effects, expected {e['count']}")
    answer = (ep.output or {}).get("answer") or ""
    if not re.search(exp["output"]["regex"], answer):
        found.append(f"answer {answer!r} does not match {exp['output']['regex']!r}")
    if (ep.output or {}).get("escalate") != exp.get("escalate", False):
        found.append(f"escalate is {(ep.output or {}).get('escalate')!r}")
    return found


def report(episodes: list[Episode]) -> str:
    return "\n".join(f"{ep.tenant} ({ep.task['id']}): {'; '.join(problems(ep))}" for ep in episodes if problems(ep))


async def model_log(world: World) -> list[dict]:
    """The model server's exchanges so far; then it forgets them."""
    admin = world.model_url.removesuffix("/v1")
    async with httpx.AsyncClient() as http:
        exchanges = (await http.get(admin + "/_log")).json()["exchanges"]
        await http.post(admin + "/_reset")
    return exchanges


def transcript(exchanges: list[dict]) -> list[dict]:
    """What the agent sent and what the model answered, turn by turn."""
    return [{"messages": x["request"]["messages"], "answer": x["response"]["choices"][0]["message"]} for x in exchanges]


def simulate(task: dict, *, seed: int, model: str, variant: int = 0, state: str = "default") -> Episode:
    """One episode with the planner and the shop in-process: a plain tool loop, no processes, no HTTP."""
    shop = Shop()
    tenant = shop.tenant("sim")
    tenant.reset(state)
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": REWORDINGS[variant](task["prompt"])}]
    for turn in range(30):
        action = decide(messages, set(SPECS), model=model, material=f"sim|{seed}", temperature=0.7)
        if isinstance(action, Final):
            output = {"answer": action.answer, "escalate": action.escalate}
            return Episode(task, f"{model}/{seed}", 0, output, tenant.snapshot(), tenant.effects, "")
        call = {"id": f"call_{turn}", "type": "function",
                "function": {"name": action.name, "arguments": json.dumps(action.args)}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        try:
            status, body, _ = shop.call(tenant, action.name, dict(action.args), None, "sim")
        except ShopError as e:
            status, body = e.status, e.body()
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_message(Reply(status, body, {}))})
    raise AssertionError(f"{task['id']}: no answer after 30 turns")


@pytest.fixture
async def world():
    async with running_world() as w:
        yield w


# ---------------------------------------------------------------- tests


def test_planner_understands_every_prompt_and_rewording():
    for task in TASKS.values():
        intent = intent_of(task["prompt"])
        assert intent is not None, task["id"]
        for reword in REWORDINGS:
            assert intent_of(reword(task["prompt"])) is intent, (task["id"], reword(task["prompt"]))


def test_models_vary_honestly():
    """demo-large's slips are all recoverable; demo-small's sometimes are not. Same seed, same outcome."""
    passed = {model: [not problems(simulate(task, seed=seed, model=model, variant=seed % 8)) for task in TASKS.values()
                      for seed in range(16)] for model in ("demo-large", "demo-small")}
    assert all(passed["demo-large"])
    assert 0.6 < sum(passed["demo-small"]) / len(passed["demo-small"]) < 0.98
    again = simulate(TASKS["refund_turing_delivered"], seed=3, model="demo-small")
    assert again == simulate(TASKS["refund_turing_delivered"], seed=3, model="demo-small")


async def test_shop_idempotency_pagination_tenants_and_mcp(world):
    async with httpx.AsyncClient(base_url=world.tenant_url("shop-test")) as http:
        pages, cursor = [], None
        while True:
            query = {"customer_id": "c1", "limit": 5} | ({"cursor": cursor} if cursor else {})
            page = (await http.get("/orders", params=query)).json()
            pages.append([o["id"] for o in page["data"]])
            if not (cursor := page["next_cursor"]):
                break
        assert [len(p) for p in pages] == [5, 5, 2]

        first = await http.post("/orders/1001/refund", json={}, headers={"Idempotency-Key": "k"})
        again = await http.post("/orders/1001/refund", json={}, headers={"Idempotency-Key": "k"})
        assert first.status_code == again.status_code == 201 and first.json() == again.json()
        assert again.headers["Idempotent-Replayed"] == "true"
        reused = await http.post("/orders/1001/refund", json={"reason": "x"}, headers={"Idempotency-Key": "k"})
        assert reused.status_code == 422
        assert (await http.post("/orders/1001/refund", json={})).status_code == 201  # no key: a second refund
        assert [e["path"] for e in (await http.get("/_log")).json()["effects"]] == ["/orders/1001/refund"] * 2
        assert (await http.get("/orders/1001")).json()["refunded_cents"] == 4800

        rpc = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "refund_order", "arguments": {"order_id": "1003"}}}
        result = (await http.post("/mcp", json=rpc)).json()["result"]
        assert result["isError"] and json.loads(result["content"][0]["text"])["http_status"] == 409

    async with httpx.AsyncClient() as http:
        untouched = (await http.get(world.tenant_url("another") + "/_state")).json()
        assert untouched["orders"]["1001"]["status"] == "delivered"
        busy = await http.post(world.tenant_url("another") + "/_reset", json={"state": "busy"})
        assert busy.status_code == 200
        assert len((await http.get(world.tenant_url("another") + "/_state")).json()["orders"]) > 23


async def test_model_server_speaks_the_openai_api(world):
    async with httpx.AsyncClient(base_url=world.model_url) as http:
        assert {"demo-large", "demo-small"} <= {m["id"] for m in (await http.get("/models")).json()["data"]}
        missing = await http.post("/chat/completions",
                                  json={"model": "gpt-x", "messages": [{"role": "user", "content": "hi"}]})
        assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"
        body = {"model": "demo-large", "messages": [{"role": "user", "content": "What is the status of order 1002?"}],
                "tools": [{"type": "function", "function": {"name": "get_order", "parameters": {}}}]}
        plain = await http.post("/chat/completions", json=body)
        assert plain.headers["x-request-id"] and "x-ratelimit-remaining-tokens" in plain.headers
        call = plain.json()["choices"][0]["message"]["tool_calls"][0]["function"]
        assert (call["name"], json.loads(call["arguments"])) == ("get_order", {"order_id": "1002"})
        assert plain.json()["usage"]["total_tokens"] > 0
        streamed = await http.post("/chat/completions",
                                   json=body | {"stream": True, "stream_options": {"include_usage": True}})
        events = [e.removeprefix("data: ") for e in streamed.text.split("\n\n") if e]
        assert events[-1] == "[DONE]" and json.loads(events[-2])["usage"]["total_tokens"] > 0


async def test_same_seed_same_world_and_same_transcript(world, tmp_path):
    """demo-small deviates often, so this also covers the seeded variation paths."""
    task = TASKS["refund_turing_delivered"]
    runs = []
    for tenant in ("det-a", "det-b"):
        ep = await run_episode(world, tmp_path, "careful", task, tenant=tenant, seed=5, variant=3, model="demo-small")
        runs.append((ep.state, transcript(await model_log(world))))
    assert runs[0][0] == runs[1][0]
    assert runs[0][1] == runs[1][1] and len(runs[0][1]) >= 4

    # ... while different seeds give different trials.
    await run_all([run_episode(world, tmp_path, "careful", task, tenant=f"var-{s}", seed=s, model="demo-small")
                   for s in range(4)])
    trials: dict[int, list[dict]] = {}
    for x in await model_log(world):
        trials.setdefault(x["request"]["seed"], []).append(x["response"]["choices"][0]["message"])
    assert len(trials) == 4 and len({json.dumps(t) for t in trials.values()}) > 1


async def test_lost_refund_response_naive_refunds_twice_careful_once(tmp_path):
    task = TASKS["refund_order_1001"]
    async with running_world(drop_first_refund_response=True) as w:
        naive, careful = await asyncio.gather(
            run_episode(w, tmp_path, "naive", task, tenant="naive", seed=1),
            run_episode(w, tmp_path, "careful", task, tenant="careful", seed=1))
    assert effect_count(naive.effects, "POST", "*/orders/1001/refund") == 2, naive.effects
    assert naive.state["orders"]["1001"]["refunded_cents"] == 4800
    assert effect_count(careful.effects, "POST", "*/orders/1001/refund") == 1, careful.effects
    assert not problems(careful), problems(careful)


async def test_careful_agent_over_mcp(tmp_path):
    async with running_world(subprocesses=True) as w:  # also covers running the servers as scripts
        writes = [t for t in TASKS.values() if t["shape"] == "writes_state"]
        episodes = await run_all([run_episode(w, tmp_path, "careful", t, tenant=f"mcp-{t['id']}", seed=2, flags=("--mcp",))
                                  for t in writes])
    assert not report(episodes), report(episodes)
    assert all(e["transport"] == "mcp" for ep in episodes for e in ep.effects)
    assert any(ep.effects for ep in episodes)


async def test_streaming_gives_the_same_decisions(tmp_path):
    chosen = ["refund_turing_delivered", "place_order_dijkstra", "hoodie_stock"]
    async with running_world() as plain, running_world() as streamed:
        episodes = await run_all([
            run_episode(w, tmp_path, "careful", TASKS[t], tenant=f"{t}-{mode}", seed=i, model="demo-small", flags=flags)
            for i, t in enumerate(chosen)
            for w, mode, flags in ((plain, "plain", ()), (streamed, "streamed", ("--stream",)))])
        plain_log, streamed_log = transcript(await model_log(plain)), transcript(await model_log(streamed))
    assert len(plain_log) > len(chosen)
    assert sorted(map(json.dumps, plain_log)) == sorted(map(json.dumps, streamed_log))
    outputs = {}
    for ep in episodes:
        outputs.setdefault(ep.task["id"], []).append((ep.output, ep.state))
    assert all(a == b for a, b in outputs.values())
