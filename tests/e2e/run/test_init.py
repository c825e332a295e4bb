"""`faultproxy init`: from an observe run's traces to a tasks file, scenarios and a README.

Two worlds, each observed once with a function agent (the official openai SDK and httpx through
the proxy), then each written scenario run once with the same agent:
- the demo shop (examples/): per-episode tenants in the path (/t/<episode>/orders/1001);
- a help desk unlike it: other paths and field names (/desk/api/v2/tickets/T-4471 answering
  ticket_ref, priority_level), a write that names its resource in its body ({"ticket_ref": ...}),
  and an MCP server (JSON-RPC over HTTP) with a read-only, a destructive and an unannotated tool.
The scenarios pass `faultproxy check`, and each delivers its faults on the world's own endpoints.
"""

from __future__ import annotations

import fnmatch
import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import openai
import pytest
import yaml
from aiohttp import web

from examples.world import world_in_thread
from faultproxy import Episode, run_function
from faultproxy.cli.entry import main as cli
from faultproxy.evaluator.proposals.starter import generalise
from faultproxy.formats.rundir import read_run
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support import model_upstream
from tests.support.layout import EXAMPLES
from tests.support.upstream import ServerThread

SCENARIOS = {"writes_lost", "reads_stale", "reads_drift", "model_faults", "rate_limit", "mcp"}


def ask_model(episode: Episode, client: httpx.Client, content: str) -> None:
    """One chat completion through the proxy with the official SDK; a failed one is the agent's to bear."""
    model = openai.OpenAI(base_url=os.environ["OPENAI_BASE_URL"], api_key="test", http_client=client, max_retries=0)
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object", "properties": {}}}}
    try:
        model.chat.completions.create(model="demo-large", messages=[{"role": "user", "content": content}],
                                      tools=[tool])
    except openai.APIError:
        pass


def through_proxy(episode: Episode) -> httpx.Client:
    return httpx.Client(proxy=episode.proxy_url, verify=str(episode.ca_bundle), timeout=10)


def observe_and_init(agent: Callable[[Episode], dict], tasks, folder: Path, capsys) -> Path:
    run_function(agent, tasks, k=1, scenario="observe", out=folder / "observe")
    assert cli(["init", str(folder / "observe"), "--to", str(folder / "kit")]) == 0
    assert "wrote" in capsys.readouterr().out
    return folder / "kit"


def delivered(run_dir: Path) -> list[str]:
    """The rules whose faults reached the agent, in every episode of the run."""
    return [fault["rule"] for record in read_run(run_dir).episodes for fault in record["verdict"]["faults"]
            if fault["delivered"]]


def check_and_run_each(kit: Path, agent: Callable[[Episode], dict], tasks, out: Path, capsys) -> dict[str, list[str]]:
    """`faultproxy check` on every scenario written, then one run of each at lambda 1: the rules delivered."""
    files = sorted((kit / "scenarios").glob("*.yaml"))
    assert cli(["check", *map(str, files)]) == 0, capsys.readouterr().err
    assert capsys.readouterr().out.count(": ok (") == len(files)
    return {path.stem: delivered(run_function(agent, tasks, k=1, scenario=load_scenario(str(path), {"lambda": 1.0}),
                                              out=out / path.stem).run_dir) for path in files}


# --- the demo shop -----------------------------------------------------------------------------------


def shop_agent(episode: Episode) -> dict:
    """Look the order up; for a refund task refund it (with a key) and read it again to confirm."""
    order = episode.task_id.rsplit("_", 1)[1]
    shop = episode.env["SHOP_URL"]
    with through_proxy(episode) as client:
        ask_model(episode, client, episode.prompt)
        try:
            client.get(f"{shop}/orders/{order}")
            if episode.task_id.startswith("refund"):
                client.post(f"{shop}/orders/{order}/refund", json={}, headers={"idempotency-key": f"r-{episode.key}"})
                client.get(f"{shop}/orders/{order}")
        except httpx.TransportError:
            return {"answer": "the shop did not answer", "escalate": True}
        ask_model(episode, client, "done")
    return {"answer": f"Order {order} handled."}


@pytest.fixture
def shop(monkeypatch) -> Iterator[None]:
    with world_in_thread() as world:
        for name, value in world.env().items():
            if name != "SHOP_URL":  # the tasks file gives each episode its own tenant
                monkeypatch.setenv(name, value)
        yield


@pytest.mark.usefixtures("shop")
def test_init_on_the_demo_shop(tmp_path, capsys):
    tasks = load_tasks(EXAMPLES / "tasks.yaml").only(["refund_order_1001", "order_status_1002"])
    kit = observe_and_init(shop_agent, tasks, tmp_path, capsys)

    written = load_tasks(kit / "tasks.yaml")  # the tasks file loads
    assert written.ids == ("order_status_1002", "refund_order_1001")
    assert written.by_id("refund_order_1001").prompt == tasks.by_id("refund_order_1001").prompt
    text = (kit / "tasks.yaml").read_text()
    # the demo's own "POST */refund" covers the refund seen: nothing to propose there
    assert "irreversible: [POST */refund, POST */payments]" in text
    assert "#   effects: [{method: POST, path: /t/*/orders/*/refund, count: 1}]" in text
    # the demo's tasks declare `expected`: uncommenting the proposal beside it would be a duplicate key
    assert "put it in place of the `expected` above:" in text and "uncomment:" not in text
    assert (kit / "scenarios" / "reads_stale.yaml").read_text().count("path: /t/*/orders/*}") == 1
    readme = (kit / "README.md").read_text()
    assert f"faultproxy run --scenario {kit}/scenarios/writes_lost.yaml --tasks {kit}/tasks.yaml" in readme
    assert "-- python my_agent.py" in readme and "shop_agent`: run_function and replay_function run it" in readme

    runs = check_and_run_each(kit, shop_agent, tasks.only(["refund_order_1001"]), tmp_path / "runs", capsys)
    assert set(runs) == SCENARIOS - {"mcp"}
    assert "- `mcp`: no MCP tool call" in (kit / "README.md").read_text()
    for name, rules in runs.items():
        assert rules, f"{name}: no fault reached the agent"
    assert set(runs["writes_lost"]) == {"post_t_orders_refund_lost"}
    assert set(runs["reads_stale"]) == {"get_t_orders_stale"}  # the read after the refund, served stale


# --- a help desk with an MCP server -----------------------------------------------------------------

TOOLS = [
    {"name": "lookup_customer", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": True}},
    {"name": "close_ticket", "inputSchema": {"type": "object"},
     "annotations": {"readOnlyHint": False, "destructiveHint": True}},
    {"name": "add_tag", "inputSchema": {"type": "object"}},  # its server says nothing about it
]


def help_desk() -> web.Application:
    states: dict[str, str] = {}

    async def ticket(request: web.Request) -> web.Response:
        ref = request.match_info["ref"]
        return web.json_response({"ticket_ref": ref, "subject": "Printer on fire", "priority_level": 3,
                                  "state_label": states.get(ref, "open")})

    async def escalate(request: web.Request) -> web.Response:
        ref = (await request.json())["ticket_ref"]
        states[ref] = "escalated"
        return web.json_response({"escalation_ref": f"E-{len(states)}", "ticket_ref": ref}, status=201)

    async def rpc(request: web.Request) -> web.Response:
        message = await request.json()
        if "id" not in message:
            return web.Response(status=202)
        method = message["method"]
        if method == "initialize":
            result = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
                      "serverInfo": {"name": "desk", "version": "1"}}
        elif method == "tools/list":
            result = {"tools": TOOLS}
        else:
            text = json.dumps({"tool": message["params"]["name"], "ok": True})
            result = {"content": [{"type": "text", "text": text}], "isError": False}
        return web.json_response({"jsonrpc": "2.0", "id": message["id"], "result": result})

    app = web.Application()
    app[model_upstream.INPUT_TOKENS] = 10  # the model's chat handler reads its usage from here
    app.router.add_get("/desk/api/v2/tickets/{ref}", ticket)
    app.router.add_post("/desk/api/v2/escalations", escalate)
    app.router.add_post("/tools/rpc", rpc)
    app.router.add_post("/llm/v1/chat/completions", model_upstream.chat)
    return app


def desk_agent(episode: Episode) -> dict:
    """Read the ticket, ask the MCP tools, escalate it, read it again; MCP over plain JSON-RPC requests."""
    ref = episode.prompt.split()[2]  # "Escalate ticket T-4471 ..."
    desk, tools = episode.env["DESK_URL"], episode.env["TOOLS_URL"]
    with through_proxy(episode) as client:
        ask_model(episode, client, episode.prompt)

        def call(rpc_id: int, method: str, **params) -> None:
            try:
                client.post(tools, json={"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params})
            except httpx.TransportError:
                pass  # a tool whose answer was lost: the escalation goes ahead

        try:
            client.get(f"{desk}/tickets/{ref}")
            call(1, "initialize", protocolVersion="2025-06-18", capabilities={},
                 clientInfo={"name": "desk-agent", "version": "1"})
            client.post(tools, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            call(2, "tools/list")
            for rpc_id, tool in enumerate(("lookup_customer", "add_tag", "close_ticket"), 3):
                call(rpc_id, "tools/call", name=tool, arguments={"ticket_ref": ref})
            client.post(f"{desk}/escalations", json={"ticket_ref": ref, "reason": "customer waiting"})
            client.get(f"{desk}/tickets/{ref}")
        except httpx.TransportError:
            return {"answer": "the desk did not answer", "escalate": True}
        ask_model(episode, client, "done")
    return {"answer": f"Ticket {ref} escalated."}


def comment_above(lines: list[str], field: str) -> str:
    """The comment block right above the first line starting with `field`, joined."""
    at = next(n for n, line in enumerate(lines) if line.strip().startswith(field))
    block = []
    while lines[at - 1].strip().startswith("#"):
        at -= 1
        block.insert(0, lines[at].strip().removeprefix("#").strip())
    return " ".join(block)


DESK_TASKS = """\
env:
  DESK_URL: "${DESK_ROOT}/desk/api/v2"
  TOOLS_URL: "${DESK_ROOT}/tools/rpc"
tasks:
  - id: escalate_4471
    prompt: "Escalate ticket T-4471 to tier two."
    irreversible: ["POST *"]   # names every HTTP write, and no MCP tool
  - id: escalate_5120
    prompt: "Escalate ticket T-5120 to tier two."
"""


@pytest.fixture
def desk(monkeypatch, tmp_path) -> Iterator[Path]:
    with ServerThread(help_desk()) as server:
        monkeypatch.setenv("DESK_ROOT", server.url)
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/llm/v1")
        (tmp_path / "desk.yaml").write_text(DESK_TASKS)
        yield tmp_path / "desk.yaml"


def test_init_on_a_help_desk_with_an_mcp_server(desk, tmp_path, capsys):
    tasks = load_tasks(desk)
    kit = observe_and_init(desk_agent, tasks, tmp_path, capsys)

    written = load_tasks(kit / "tasks.yaml")
    task = written.by_id("escalate_4471")
    assert task.prompt == "Escalate ticket T-4471 to tier two."
    # its own "POST *" kept, covering the HTTP write seen; the destructive MCP tool proposed beside it
    assert [str(p) for p in task.irreversible] == ["POST *", "mcp:close_ticket"]
    assert [str(p) for p in written.by_id("escalate_5120").irreversible] == ["POST /desk/api/v2/escalations",
                                                                            "mcp:close_ticket"]
    assert [str(p) for p in task.read_only] == ["mcp:lookup_customer"]
    assert task.expected.effects == ()  # proposed in a comment only
    lines = (kit / "tasks.yaml").read_text().splitlines()
    # each proposal says it is one, naming what it proposes, in the comment above it
    assert "proposal (mcp:close_ticket): the writes seen" in comment_above(lines, "irreversible:")
    assert comment_above(lines, "read_only:").startswith("proposal (mcp:lookup_customer): MCP tools seen only reading")
    text = "\n".join(lines)
    hosts = comment_above(lines, "irreversible:")  # what the task depended on, and through which variables
    assert f"here OPENAI_BASE_URL={os.environ['OPENAI_BASE_URL']}): {os.environ['DESK_ROOT'].split('//')[1]}." in hosts
    assert "unclassified MCP tools (their server said nothing" in text and ": add_tag;" in text
    assert "#   effects: [{method: POST, path: /desk/api/v2/escalations, count: 1}, {method: '*', path: " \
           "'*/tools/close_ticket', count: 1}]" in text

    stale = yaml.safe_load((kit / "scenarios" / "reads_stale.yaml").read_text())
    [rule] = stale["rules"]  # the ids in the path vary between tasks: a glob; the write names it in its body
    assert rule["match"] == {"method": "GET", "path": "/desk/api/v2/tickets/*"}
    assert rule["fault"]["write_resources"] == ["/desk/api/v2/tickets/{ticket_ref}"]
    drift = yaml.safe_load((kit / "scenarios" / "reads_drift.yaml").read_text())
    assert drift["rules"][0]["fault"]["ops"] == [{"op": "retype", "path": "priority_level", "to": "string"},
                                                 {"op": "rename", "path": "ticket_ref", "to": "ticket_ref_v2"}]
    mcp = yaml.safe_load((kit / "scenarios" / "mcp.yaml").read_text())  # by the JSON-RPC body: HTTP and stdio
    assert mcp["rules"][0]["match"] == {"body": {"method": "tools/call", "params.name": "lookup_customer"}}

    runs = check_and_run_each(kit, desk_agent, tasks.only(["escalate_4471"]), tmp_path / "runs", capsys)
    assert set(runs) == SCENARIOS
    for name, rules in runs.items():
        assert rules, f"{name}: no fault reached the agent"
    assert set(runs["writes_lost"]) == {"post_desk_api_v2_escalations_lost", "close_ticket_lost"}
    assert set(runs["reads_stale"]) == {"get_desk_api_v2_tickets_stale"}
    assert set(runs["mcp"]) == {"lookup_customer_error", "add_tag_error", "close_ticket_error"}

    # Run again: every file is there, so nothing is written, nothing changes.
    before = {path: path.read_bytes() for path in kit.rglob("*") if path.is_file()}
    assert cli(["init", str(tmp_path / "observe"), "--to", str(kit)]) == 0
    out = capsys.readouterr().out
    assert "wrote" not in out and out.count("(it exists; init never overwrites)") == len(before)
    assert {path: path.read_bytes() for path in kit.rglob("*") if path.is_file()} == before

    # A link planted in the folder that leads out of it: refused, one line, nothing written anywhere.
    (kit / "README.md").unlink()
    (kit / "README.md").symlink_to(tmp_path / "outside.md")
    assert cli(["init", str(tmp_path / "observe"), "--to", str(kit)]) == 2
    assert "is a symbolic link leading out of the init folder" in capsys.readouterr().err
    assert not (tmp_path / "outside.md").exists()
    (tmp_path / "a-file").write_text("")
    assert cli(["init", str(tmp_path / "observe"), "--to", str(tmp_path / "a-file")]) == 2
    assert capsys.readouterr().err.startswith(f"faultproxy: {tmp_path / 'a-file' / 'scenarios'}: cannot create: ")


def test_a_run_without_traffic_gives_nothing_and_says_why(monkeypatch, tmp_path, capsys):
    monkeypatch.setenv("DESK_ROOT", "http://127.0.0.1:9")  # never reached: the agent sends nothing
    (tmp_path / "desk.yaml").write_text(DESK_TASKS)
    run_function(lambda episode: {"answer": "I did nothing."}, load_tasks(tmp_path / "desk.yaml").only(["escalate_4471"]),
                 k=1, scenario="observe", out=tmp_path / "quiet")
    assert cli(["init", str(tmp_path / "quiet"), "--to", str(tmp_path / "kit")]) == 1
    err = capsys.readouterr().err
    assert "no traffic reached the proxy in 1 episode(s) (no_traffic)" in err and "docs/agents.md" in err
    assert "nothing written" in err and not (tmp_path / "kit").exists()


def test_paths_become_globs_where_ids_vary_and_match_only_themselves_elsewhere():
    routes = [("GET", "", "api", "v2", "tickets", "T-4471"), ("GET", "", "api", "v2", "tickets", "T-5120"),
              ("GET", "", "api", "v2", "users", "me"), ("GET", "", "api", "v2", "teams", "core"),
              ("POST", "", "api", "v2", "tickets", "T-4471"), ("GET", "", "odd", "a[1]", "x?y*")]
    globs = generalise(routes)
    assert globs[routes[0]] == globs[routes[1]] == "/api/v2/tickets/*"  # the id varies: a digit in each
    assert (globs[routes[2]], globs[routes[3]]) == ("/api/v2/users/me", "/api/v2/teams/core")  # words stay
    assert globs[routes[4]] == "/api/v2/tickets/T-4471"  # seen once, for another method
    assert globs[routes[5]] == "/odd/a[[]1]/x[?]y[*]"  # fnmatch's own characters, literal
    assert fnmatch.fnmatchcase("/odd/a[1]/x?y*", globs[routes[5]]) and not fnmatch.fnmatchcase("/odd/a1/xzyq",
                                                                                                globs[routes[5]])
