"""The demo world: deterministic, solvable by the careful agent, and showing the naive agent's bug.

Tests that run agents run them as faultproxy does: `run()` plays tasks of examples/tasks.yaml
behind the proxy, each episode on its own shop tenant (its episode key), and the evaluator judges
each episode as it ends; the tests read the judged episode lines back with `read_run`. Servers
listen on ephemeral loopback ports and are stopped by the test that started them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from faultproxy.evaluator.checks.check_answer import check_escalation, check_outcome
from faultproxy.evaluator.checks.check_effects import check_end_state
from examples.agent_common import SYSTEM, Reply, tool_message
from examples.intents import intent_of
from examples.planner import decide
from examples.script_session import Final
from examples.shop import Shop
from examples.shop_world import SPECS, ShopError
from examples.world import World, running_world
from faultproxy.tasks.task_model import Task
from faultproxy.runner.variants import Variant, make_variant, make_variants
from faultproxy.scenarios import load_scenario
from tests.support.demo_world import Record, TASKS, committed, failures, run_agent, shop_log, trace_of, world_for_agents

VARIANTS_CHECKED = 16  # more trials than any run of the demo tasks uses (k=8)


# ---------------------------------------------------------------- running agents through the runner


def refunds_of(record: Record, order: str) -> int:
    return sum(refund["order_id"] == order for refund in record["end_state"]["refunds"].values())


def effect_problems(task: Task, effects: list[dict]) -> list[str]:
    """The task's expected effects counted in the shop's own log. The evaluator counts them in the
    proxy's trace, where writes made over MCP (one URL for every tool) or in-process leave no route."""
    counts = {effect: sum(effect.matches(e["method"], "", e["path"]) for e in effects)
              for effect in task.expected.effects}
    return [f"{e.method} {e.path}: {n} committed, expected {e.count}" for e, n in counts.items() if n != e.count]


def model_turns(world: World) -> list[dict]:
    """What agents sent the model and what it answered since the last call, as the model server
    logged it (assembled, whether streamed or not); then the server forgets them."""
    admin = world.model_url.removesuffix("/v1")
    with httpx.Client(trust_env=False) as http:
        exchanges = http.get(admin + "/_log").json()["exchanges"]
        http.post(admin + "/_reset").raise_for_status()
    return [{"seed": x["request"].get("seed"), "messages": x["request"]["messages"],
             "answer": x["response"]["choices"][0]["message"]} for x in exchanges]


def by_seed(turns: list[dict]) -> dict[int, list[dict]]:
    """Turns grouped per episode: each trial of a run has its own variant seed."""
    grouped: dict[int, list[dict]] = {}
    for turn in turns:
        grouped.setdefault(turn["seed"], []).append(turn)
    return grouped


def choices(turns: list[dict]) -> list[Any]:
    """What the model chose each turn: tool calls by name and arguments (their ids hash the seed), or its answer."""
    return [[(c["function"]["name"], c["function"]["arguments"]) for c in t["answer"].get("tool_calls") or []]
            or t["answer"]["content"] for t in turns]


# ---------------------------------------------------------------- an episode in-process


def simulate(task: Task, variant: Variant, model: str) -> tuple[Record, list[dict]]:
    """One episode of this variant (its prompt, state and seed) with the planner and the shop
    in-process: a plain tool loop, no processes, no HTTP. Returns what the evaluator's checks read
    of an episode line, and the shop's log of committed writes."""
    shop = Shop()
    tenant = shop.tenant("sim")
    tenant.reset(variant.state or "default")
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": variant.prompt}]
    for turn in range(30):
        action = decide(messages, set(SPECS), model=model, material=f"sim|{variant.seed}", temperature=0.7)
        if isinstance(action, Final):
            output = {"answer": action.answer, "escalate": action.escalate}
            return {"exit_code": 0, "output": output, "end_state": tenant.snapshot()}, tenant.effects
        call = {"id": f"call_{turn}", "type": "function",
                "function": {"name": action.name, "arguments": json.dumps(action.args)}}
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        try:
            status, body, _ = shop.call(tenant, action.name, dict(action.args), None, "sim")
        except ShopError as e:
            status, body = e.status, e.body()
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": tool_message(Reply(status, body, {}))})
    raise AssertionError(f"{task.id}: no answer after 30 turns")


def simulated_problems(task: Task, record: Record, effects: list[dict]) -> list[str]:
    """The evaluator's checks of the answer and the end state (there is no trace without the proxy),
    and the expected effects counted in the shop's log."""
    checks = [check(task, record, []) for check in (check_outcome, check_end_state, check_escalation)]
    return [f"{c.name}: {c.detail}" for c in checks if c.passed is False] + effect_problems(task, effects)


@pytest.fixture
async def world():
    async with running_world() as w:
        yield w


@pytest.fixture
def agents_world(monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    with world_for_agents(monkeypatch) as w:
        yield w


# ---------------------------------------------------------------- tests


def test_planner_understands_every_prompt_and_variant():
    for task in TASKS:
        intent = intent_of(task.prompt)
        assert intent is not None, task.id
        for variant in make_variants(task, VARIANTS_CHECKED):
            assert intent_of(variant.prompt) is intent, (task.id, variant.prompt)


def test_models_vary_honestly():
    """demo-large's slips are all recoverable; demo-small's sometimes are not. Same variant, same outcome."""
    passed = {model: [not simulated_problems(task, *simulate(task, variant, model))
                      for task in TASKS for variant in make_variants(task, VARIANTS_CHECKED)]
              for model in ("demo-large", "demo-small")}
    assert all(passed["demo-large"])
    assert 0.6 < sum(passed["demo-small"]) / len(passed["demo-small"]) < 0.98
    task = TASKS.by_id("refund_turing_delivered")
    assert simulate(task, make_variant(task, 3), "demo-small") == simulate(task, make_variant(task, 3), "demo-small")


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


async def test_shop_can_drop_the_first_refund_response_without_the_proxy():
    """The shop's own stand-in for response_lost (examples/README): it commits, then hangs up."""
    async with running_world(drop_first_refund_response=True) as world, \
            httpx.AsyncClient(base_url=world.tenant_url("dropping"), trust_env=False) as http:
        with pytest.raises(httpx.TransportError):
            await http.post("/orders/1001/refund", json={})
        assert (await http.post("/orders/1001/refund", json={})).status_code == 201  # the retry refunds again
        assert [e["path"] for e in (await http.get("/_log")).json()["effects"]] == ["/orders/1001/refund"] * 2


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


def test_same_seed_same_world_and_same_transcript(agents_world, tmp_path):
    """demo-small deviates often, so this also covers the seeded variation paths."""
    runs = []
    for name in ("first", "again"):  # the same plan twice: the same variants, seeds and tenants
        episodes = run_agent(tmp_path / name, "careful", ["refund_turing_delivered"], k=2, model="demo-small")
        runs.append((episodes, by_seed(model_turns(agents_world))))
    (first, first_turns), (again, again_turns) = runs
    assert [(r["key"], r["seed"], r["prompt"]) for r in first] == [(r["key"], r["seed"], r["prompt"]) for r in again]
    assert [r["end_state"] for r in first] == [r["end_state"] for r in again]
    assert first_turns == again_turns and all(len(turns) >= 4 for turns in first_turns.values())

    # ... while different trials make different choices.
    assert len(first_turns) == len(first) and len({json.dumps(choices(t)) for t in first_turns.values()}) > 1


@pytest.mark.usefixtures("agents_world")
def test_lost_refund_response_naive_refunds_twice_careful_once(tmp_path):
    lost = load_scenario("response_lost")
    [naive] = run_agent(tmp_path / "naive", "naive", ["refund_order_1001"], scenario=lost)
    [careful] = run_agent(tmp_path / "careful", "careful", ["refund_order_1001"], scenario=lost)
    for record in (naive, careful):  # the shop committed the first refund; its response was lost
        assert [(f["rule"], f["delivered"]) for f in record["verdict"]["faults"]] == [("write_lost", True)]

    # The naive agent retried without a key: the shop refunded twice, a high-severity violation.
    assert committed(tmp_path / "naive", naive, "POST */orders/1001/refund") == 2
    assert refunds_of(naive, "1001") == 2 and naive["end_state"]["orders"]["1001"]["refunded_cents"] == 4800
    failed = {check["name"]: check["severity"] for check in naive["verdict"]["failed"]}
    assert naive["verdict"]["status"] == "fail" and failed.get("idempotency") == "high", failed

    # The careful agent retried under the same key: the shop replayed it, one refund.
    assert committed(tmp_path / "careful", careful, "POST */orders/1001/refund") == 1
    assert refunds_of(careful, "1001") == 1
    assert not failures([careful]), failures([careful])


@pytest.mark.usefixtures("agents_world")
def test_without_faults_careful_passes_every_task_in_every_trial(tmp_path):
    episodes = run_agent(tmp_path, "careful", [task.id for task in TASKS], k=2)
    assert len(episodes) == 2 * len(TASKS) == 24
    assert len({(r["task_id"], r["prompt"]) for r in episodes}) > 12  # honest variants, not one prompt twice
    assert not failures(episodes), failures(episodes)


@pytest.mark.usefixtures("agents_world")
def test_mcp_errors_reach_the_careful_agent_over_mcp_through_the_proxy(tmp_path):
    mcp_errors = load_scenario("mcp_errors", {"lambda": 0.5})  # at this seed: some calls fail, not all
    [record] = run_agent(tmp_path, "careful", ["refund_order_1001"], "--mcp", scenario=mcp_errors)
    trace = trace_of(tmp_path, record)
    assert all(ex.is_model or ex.rpc_method for ex in trace)  # every tool call went over MCP
    assert record["verdict"]["faults"], "mcp_errors injected nothing"
    assert refunds_of(record, "1001") == 1
    passed = {check["name"]: check["passed"] for check in record["verdict"]["checks"]}
    assert passed["outcome"] and passed["end_state"]


def test_careful_agent_over_mcp(monkeypatch, tmp_path):
    writes = [task.id for task in TASKS if task.shape == "writes_state"]
    with world_for_agents(monkeypatch, subprocesses=True) as world:  # also covers running the servers as scripts
        episodes = run_agent(tmp_path, "careful", writes, "--mcp")
        logs = {r["key"]: shop_log(world, r["key"]) for r in episodes}
    assert not failures(episodes), failures(episodes)
    problems = {r["key"]: effect_problems(TASKS.by_id(r["task_id"]), logs[r["key"]]) for r in episodes}
    assert not any(problems.values()), problems
    assert all(e["transport"] == "mcp" for effects in logs.values() for e in effects)
    assert any(logs.values())
    # Reads too: the proxy saw nothing but model calls and JSON-RPC messages.
    assert all(ex.is_model or ex.rpc_method for r in episodes for ex in trace_of(tmp_path, r))


def test_streaming_gives_the_same_decisions(agents_world, tmp_path):
    chosen = ["refund_turing_delivered", "place_order_dijkstra", "hoodie_stock"]
    plain = run_agent(tmp_path / "plain", "careful", chosen, model="demo-small")
    plain_turns = model_turns(agents_world)
    streamed = run_agent(tmp_path / "streamed", "careful", chosen, "--stream", model="demo-small")
    streamed_turns = model_turns(agents_world)
    streamed_calls = [ex for r in streamed for ex in trace_of(tmp_path / "streamed", r) if ex.is_model]
    assert streamed_calls and all(ex.raw["upstream"].get("sse") for ex in streamed_calls)  # it did stream
    assert len(plain_turns) > len(chosen)
    assert sorted(map(json.dumps, plain_turns)) == sorted(map(json.dumps, streamed_turns))
    assert [(r["key"], r["output"], r["end_state"]) for r in plain] == [(r["key"], r["output"], r["end_state"])
                                                                        for r in streamed]
