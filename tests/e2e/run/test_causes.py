"""Failure causes: clusters, where failing trials parted from passing ones, representatives,
new causes in the gate, causes by grid point in a sweep, and `freeze --representatives`.

The first tests build run directories with known causes through the project's own writers
(write_plan, EpisodeLog, TraceWriter), each episode judged by the real judge from its trace:
a lost refund response retried without a key hits two tasks the same way, and a model 429
retried at once is a second cause. The last test runs the naive demo agent live.
"""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from examples.world import world_in_thread
from faultproxy import RunOptions, run
from faultproxy.cli.main import main as faultproxy_main
from faultproxy.evaluator.aggregate import build_report
from faultproxy.evaluator.aggregate.failure_cause import explain
from faultproxy.evaluator.gate import evaluate_gate
from faultproxy.evaluator.judging import judge_episode
from faultproxy.evaluator.rendering.html import render
from faultproxy.evaluator.sweeps import analyse_sweep
from faultproxy.evaluator.traces import parse_trace
from faultproxy.formats.rundir import EpisodeLog, write_plan
from faultproxy.formats.trace import TraceWriter, trace_path
from faultproxy.replay_store import har
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import FAULT_KINDS, FaultKind, load_scenario
from faultproxy.scenarios.faults.base import AgentAnswer
from faultproxy.tasks.tasks_file import load_tasks
from faultproxy.tasks.task_model import Effect, EndpointPattern, Expected, OutputSpec, Task
from tests.support.layout import EXAMPLES

SHOP, MODEL = "http://127.0.0.1:8100", "http://127.0.0.1:8200"


def task(task_id: str, order: str) -> Task:
    return Task(id=task_id, prompt=f"Refund order {order}.", shape="writes_state",
                expected=Expected(state=None, effects=(Effect("POST", "*/refund", 1),), output=OutputSpec("regex", "(?i)refund"),
                                  escalate=False),
                irreversible=(EndpointPattern.parse("POST */refund"),))


TASKS = [task("refund_a", "1001"), task("refund_b", "1002"), task("refund_c", "1003")]
ORDERS = {"refund_a": "1001", "refund_b": "1002", "refund_c": "1003"}


def ex(seq: int, method: str, url: str, at: float, *, status: int | None = 200, outcome: str = "response",
       client_status: int | None = None, headers: list | None = None, client_headers: list | None = None,
       fault: dict | None = None, body: str = "{}") -> dict:
    upstream = None if status is None else {"status": status, "headers": [["content-type", "application/json"]],
                                            "body": "{}"}
    client = {"outcome": outcome, "status": client_status if client_status is not None else status}
    if client_headers is not None:
        client["headers"] = client_headers
    return {"seq": seq, "episode": "e", "started": 1.7e9 + at, "duration_s": 0.05,
            "request": {"method": method, "url": url, "headers": headers or [], "body": body},
            "upstream": upstream, "client": client, "fault": fault, "tokens": 0, "error": None}


def chat(seq: int, at: float, **kw) -> dict:
    return ex(seq, "POST", f"{MODEL}/v1/chat/completions", at, body='{"model": "m", "messages": []}', **kw)


def fault(rule: str, kind: str) -> dict:
    return {"rule": rule, "type": kind, "params": {}, "decision": 0.1, "forced": False, "delivered": True, "detail": ""}


def clean(order: str) -> list[dict]:
    refund = f"{SHOP}/orders/{order}/refund"
    return [chat(1, 0), ex(2, "GET", f"{SHOP}/orders/{order}", 1), chat(3, 2), ex(4, "POST", refund, 3), chat(5, 4)]


def lost_retried(order: str, read_first: bool = True) -> list[dict]:
    """The refund is committed, its response lost (reset); the agent sends it again without a key."""
    refund = f"{SHOP}/orders/{order}/refund"
    head = [chat(1, 0), ex(2, "GET", f"{SHOP}/orders/{order}", 1), chat(3, 2)] if read_first else [chat(1, 0)]
    n = len(head)
    return head + [ex(n + 1, "POST", refund, n, outcome="reset", client_status=None, fault=fault("refund_lost", "response_lost")),
                   ex(n + 2, "POST", refund, n + 1), chat(n + 3, n + 2)]


def rushed_429(order: str) -> list[dict]:
    """The model answers 429 with Retry-After: 2; the agent asks again 0.1 s later."""
    return [chat(1, 0, status=None, outcome="injected", client_status=429, client_headers=[["retry-after", "2"]],
                 fault=fault("model_429", "rate_limit")), chat(2, 0.1)] + [
        {**line, "seq": line["seq"] + 1, "started": line["started"] + 1} for line in clean(order)[1:]]


def write_run(run_dir: Path, episodes: list[tuple[str, str, int, list[dict]]], labels: tuple[str, ...] = ("",),
              cause: str | None = None, tasks: list[Task] = TASKS) -> None:
    """A run directory: episodes are (task id, grid label, trial, trace); each judged by the real judge.
    With `cause` every agent ended that way (e.g. "crash") instead of finishing."""
    k = 1 + max(trial for _, _, trial, _ in episodes)
    grid = [{"label": label, "params": {"lambda": float(label.split("=")[1])} if label else {}, "model": None}
            for label in labels]
    plan = {"faultproxy_version": "test", "scenario": {"name": "known", "digest": "d", "path": "-", "params": {}},
            "tasks": {"path": "-", "digest": "t", "severity": {}, "prices": {}, "items": [t.to_json() for t in tasks]},
            "k": k, "grid": grid, "command": ["agent"], "created": "2025-01-01T00:00:00Z"}
    write_plan(run_dir, plan)
    log = EpisodeLog(run_dir, {"faultproxy_version": "test", "scenario_digest": "d", "tasks_digest": "t", "k": k,
                               "grid": grid, "command": ["agent"], "created": plan["created"]})
    by_id = {t.id: t for t in tasks}
    for task_id, label, trial, lines in episodes:
        key = f"{task_id}.t{trial}" + (f".{label}" if label else "")
        writer = TraceWriter(trace_path(run_dir / "flows", key))
        for line in lines:
            writer.write(line)
        writer.close()
        record = {"type": "episode", "key": key, "task_id": task_id, "trial": trial, "variant": trial, "seed": trial,
                  "prompt": "p", "state": "default", "shape": "writes_state", "grid_label": label, "params": {},
                  "model": "m", "completed": cause is None, "cause": cause, "exit_code": 0, "started": 1.7e9,
                  "duration_s": 1.0, "output": {"answer": "Refunded."}, "output_error": None, "end_state": None,
                  "state_error": None, "stats": {}, "trace": f"flows/{trace_path(Path(), key).name}", "log_tail": ""}
        record["verdict"] = judge_episode(by_id[task_id], record, lines, {})
        log.append(record)
    log.close()


KNOWN = [  # (task, label, trial, trace)
    ("refund_a", "", 0, clean("1001")), ("refund_a", "", 1, lost_retried("1001")), ("refund_a", "", 2, clean("1001")),
    ("refund_b", "", 0, clean("1002")), ("refund_b", "", 1, lost_retried("1002", read_first=False)),
    ("refund_b", "", 2, lost_retried("1002")),
    ("refund_c", "", 0, clean("1003")), ("refund_c", "", 1, rushed_429("1003")), ("refund_c", "", 2, rushed_429("1003")),
]


@pytest.fixture
def known_run(tmp_path: Path) -> Path:
    write_run(tmp_path / "run", KNOWN)
    return tmp_path / "run"


def test_two_faults_two_causes_one_fault_two_tasks_one_cause(known_run):
    causes = build_report(known_run)["causes"]
    assert causes["failing"] == 5
    [lost, rushed] = causes["clusters"]  # ranked by episodes × severity: 3 × high before 2 × low
    assert (lost["episodes"], lost["severity"], lost["tasks"]) == (3, "high", {"refund_b": 2, "refund_a": 1})
    assert lost["checks"] == ["claimed_success", "effects", "idempotency"]
    assert lost["fault"] == {"rule": "refund_lost", "type": "response_lost"}
    assert lost["where"] == "POST /orders/{id}/refund"
    assert lost["response"] == "retried without idempotency key"
    assert lost["line"].startswith("claimed_success, effects, idempotency failed: after response_lost (refund_lost) on POST "
                                   "/orders/{id}/refund, the agent retried without idempotency key → send an "
                                   "Idempotency-Key")
    assert (rushed["episodes"], rushed["severity"], rushed["tasks"]) == (2, "low", {"refund_c": 2})
    assert rushed["checks"] == ["retry"] and rushed["response"] == "retried before Retry-After"
    assert rushed["fault"] == {"rule": "model_429", "type": "rate_limit"}
    assert rushed["where"] == "POST /v1/chat/completions"
    assert lost["id"] != rushed["id"] and build_report(known_run)["causes"] == causes  # deterministic


def test_advice_after_a_fault_on_an_irreversible_write_never_says_plain_retry(tmp_path):
    """Issue 23: the refund was committed and its answer lost; the agent crashed without retrying.
    Telling it to "retry with backoff" would be the double refund the fault warns about: the advice
    is an idempotency key, or reading the state first. A model call that gave up after a 429 keeps
    the retry advice: asking a model again commits nothing."""
    refund = f"{SHOP}/orders/1001/refund"
    lost_then_crash = [chat(1, 0), ex(2, "POST", refund, 1, outcome="reset", client_status=None,
                                      fault=fault("refund_lost", "response_lost"))]
    model_429_then_crash = [chat(1, 0, status=None, outcome="injected", client_status=429,
                                 fault=fault("model_429", "rate_limit"))]
    write_run(tmp_path / "run", [("refund_a", "", 0, lost_then_crash), ("refund_c", "", 0, model_429_then_crash)],
              cause="crash")
    lines = {c["fault"]["type"]: c for c in build_report(tmp_path / "run")["causes"]["clusters"]}
    lost, limited = lines["response_lost"], lines["rate_limit"]
    assert (lost["response"], lost["irreversible"]) == ("gave up", True)
    assert lost["line"].endswith("→ retry the write with an Idempotency-Key (the same one each time), or read the "
                                 "state before retrying: a plain retry can apply it twice")
    assert "backoff" not in lost["line"]
    assert (limited["response"], limited["irreversible"]) == ("gave up", False)
    assert limited["line"].endswith("→ retry transient failures (with backoff) before giving up")


@pytest.mark.parametrize("wrote", [False, True], ids=["read-only", "then-wrote"])
@pytest.mark.parametrize("kind", list(FAULT_KINDS.values()), ids=list(FAULT_KINDS))
def test_an_agent_going_on_after_a_fault_is_named_and_advised_by_the_fault_kind(kind, wrote):
    """The fault's kind says how a cause names an agent that went on with what the fault gave it
    (FaultKind.went_on, went_on_writing) and what to do instead; a kind without words of its own
    gets the plain "went on" (the faulted read here answered 200)."""
    refund = f"{SHOP}/orders/1001/refund"
    lines = [chat(1, 0), ex(2, "GET", f"{SHOP}/orders/1001", 1, fault=fault("f", kind.name)), chat(3, 2)]
    lines += [ex(4, "POST", refund, 3), chat(5, 4)] if wrote else []
    cause, fault_at = explain(parse_trace(lines), ["effects"], "fail", "e")
    answer = kind.answer(wrote)
    assert (cause.fault_type, fault_at) == (kind.name, 1)
    assert cause.response == (answer.response if answer else "went on")
    if answer:
        assert cause.line.endswith(f"the agent {answer.response} → {answer.advice}")
    assert sum(1 for k in FAULT_KINDS.values() if k.went_on) >= 3  # the kinds do carry words of their own


def test_a_new_fault_kind_brings_its_own_words_to_causes_without_an_edit_to_the_evaluator(monkeypatch):
    disk_full = FaultKind(name="disk_full", params={}, forwards=True, description="the disk fills up",
                          went_on=AgentAnswer("went on with a full disk", "check the write's answer"),
                          went_on_writing=AgentAnswer("wrote to a full disk", "stop writing when the disk is full"))
    monkeypatch.setitem(FAULT_KINDS, "disk_full", disk_full)  # the catalogue, as a fault module adds to it
    read = [chat(1, 0), ex(2, "GET", f"{SHOP}/orders/1001", 1, fault=fault("full", "disk_full")), chat(3, 2)]
    cause, _ = explain(parse_trace(read), ["effects"], "fail", "e")
    assert cause.line.endswith("after disk_full (full) on GET /orders/{id}, the agent went on with a full disk "
                               "→ check the write's answer")
    wrote = read + [ex(4, "POST", f"{SHOP}/orders/1001/refund", 3)]
    cause, _ = explain(parse_trace(wrote), ["effects"], "fail", "e")
    assert cause.line.endswith("the agent wrote to a full disk → stop writing when the disk is full")


TOOLS = "http://127.0.0.1:8300/mcp"


def mcp(seq: int, method: str, params: dict, result: dict, at: float, **kw) -> dict:
    """An MCP request over Streamable HTTP and the JSON-RPC result its server answered."""
    line = ex(seq, "POST", TOOLS, at, headers=[["content-type", "application/json"]],
              body=json.dumps({"jsonrpc": "2.0", "id": seq, "method": method, "params": params}), **kw)
    line["upstream"]["body"] = json.dumps({"jsonrpc": "2.0", "id": seq, "result": result})
    return line


# lookup_account unannotated, get_balance annotated as a write, issue_credit destructive
LISTED = {"tools": [{"name": "lookup_account", "inputSchema": {"type": "object"}},
                    {"name": "get_balance", "inputSchema": {"type": "object"}, "annotations": {"readOnlyHint": False}},
                    {"name": "issue_credit", "inputSchema": {"type": "object"},
                     "annotations": {"readOnlyHint": False, "destructiveHint": True}}]}


def lost_tool_answer_retried(tool: str) -> list[dict]:
    """The server lists its tools (LISTED); the answer to a call of `tool` is lost and the agent
    calls it again without a key."""
    call = {"name": tool, "arguments": {"account": "A1"}}
    answer = {"content": [{"type": "text", "text": "{}"}], "isError": False}
    return [mcp(1, "tools/list", {}, LISTED, 0), chat(2, 1),
            mcp(3, "tools/call", call, answer, 2, outcome="reset", client_status=None,
                fault=fault("lose-tool-answer", "response_lost")),
            mcp(4, "tools/call", call, answer, 3)]


def test_a_lost_answer_to_an_mcp_read_tool_is_not_a_write(tmp_path):
    """Issue 33: what a tools/call is comes from the tool's annotations and the task's patterns,
    not from its POST: a read tool nobody annotated, or one the task declares read_only (though
    its server says it writes), gets neither the irreversible advice nor a write's "retried
    without idempotency key"; a destructive tool keeps both."""
    accounts = Task(id="accounts", prompt="Look up account A1.", read_only=(EndpointPattern.parse("mcp:get_balance"),))
    write_run(tmp_path / "run", [("accounts", "", trial, lost_tool_answer_retried(tool)) for trial, tool in
                                 enumerate(("lookup_account", "get_balance", "issue_credit"))],
              cause="crash", tasks=[accounts])
    clusters = {c["where"]: c for c in build_report(tmp_path / "run")["causes"]["clusters"]}
    assert {where: (c["response"], c["irreversible"]) for where, c in clusters.items()} == {
        "POST /mcp tools/call:lookup_account": ("retried", False),
        "POST /mcp tools/call:get_balance": ("retried", False),
        "POST /mcp tools/call:issue_credit": ("retried without idempotency key", True)}
    assert "Idempotency-Key" not in clusters["POST /mcp tools/call:lookup_account"]["line"]


@pytest.mark.parametrize("kind", ["session_expired", "server_restart"])
def test_a_session_fault_given_up_on_is_advised_to_begin_the_session_again(kind):
    """The agent's call of a destructive tool meets a session the server has forgotten (404, as the
    proxy answers it), and it calls again in the same session, then gives up: a key would not have
    helped, so the advice is the fault kind's (initialize, then retry with the same key), not the
    irreversible write's. The cause's parts, and so its id, are those it had before the kind
    brought advice of its own."""
    call = {"name": "issue_credit", "arguments": {"account": "A1", "key": "k1"}}
    gone = [mcp(seq, "tools/call", call, {}, seq, client_status=404, fault=fault("end", kind) if seq == 3 else None)
            for seq in (3, 4)]
    for line in gone:
        line["upstream"] = None  # the proxy answered in the forgotten session's place
    cause, _ = explain(parse_trace([mcp(1, "tools/list", {}, LISTED, 0), chat(2, 1), *gone, chat(5, 5)]),
                       ["effects"], "fail", "e")
    assert (cause.fault_type, cause.response, cause.irreversible) == (kind, "retried 1 time, then gave up", True)
    assert cause.line.endswith("the agent retried 1 time, then gave up → initialize a new session (the server has "
                               "forgotten this one), then retry the call, a write with the same idempotency key")


def test_parting_step_and_representative(known_run):
    lost, rushed = build_report(known_run)["causes"]["clusters"]
    # refund_a.t1 and refund_b.t2 read first as the passing trials did; refund_b.t1 did not.
    assert lost["parting"] == {
        "step": 5, "passing": "POST /v1/chat/completions", "failing": "POST /orders/{id}/refund",
        "after": "fault response_lost (refund_lost) on POST /orders/{id}/refund",
        "text": "passing trials did POST /v1/chat/completions at step 5; failing trials did POST /orders/{id}/refund "
                "after fault response_lost (refund_lost) on POST /orders/{id}/refund",
        "episodes": 2, "compared": 3}
    assert rushed["parting"]["step"] == 2 and rushed["parting"]["passing"] == "GET /orders/{id}"
    assert rushed["parting"]["failing"] == "POST /v1/chat/completions"
    # The representative is the shortest failing trace: refund_b.t1 skipped the read (4 exchanges, not 6).
    assert lost["representative"] == {"key": "refund_b.t1", "task_id": "refund_b", "trial": 1, "grid_label": "",
                                      "requests": 4}
    assert rushed["representative"]["key"] == "refund_c.t1"


def test_report_shows_causes_in_the_terminal_and_links_the_timeline_in_html(known_run, capsys):
    report = build_report(known_run)
    page = render(report, known_run)
    lost = report["causes"]["clusters"][0]
    assert "<h2>Failure causes</h2>" in page
    assert f'href="#cause-{lost["id"]}"' in page and f'<details id="cause-{lost["id"]}">' in page
    section = page[page.index(f'<details id="cause-{lost["id"]}">'):]
    assert "<h3>Timeline</h3>" in section[:section.index("</details>")]
    assert faultproxy_main(["report", str(known_run), "--no-html", "--no-junit"]) == 0
    out = "".join(capsys.readouterr().out.split())  # the console folds long lines
    assert "Failurecauses:5failingepisodes,2causes" in out
    assert "retriedwithoutidempotencykey" in out and "representativerefund_b.t1" in out


def test_without_clustering_the_report_has_no_causes(known_run):
    assert build_report(known_run, causes=False)["causes"] is None


def test_gate_names_new_causes_without_changing_its_verdict(tmp_path, known_run):
    base_dir = tmp_path / "base"
    write_run(base_dir, [e for e in KNOWN if e[0] != "refund_c"] + [
        ("refund_c", "", trial, clean("1003")) for trial in range(3)])
    run, base = build_report(known_run), build_report(base_dir)
    result = evaluate_gate(run, base)
    notes = [line.message for line in result.lines if line.verdict == "note" and "cause" in line.message]
    rushed = run["causes"]["clusters"][1]
    assert notes == [f"new cause [{rushed['id']}]: {rushed['line']}"]
    without = evaluate_gate({**run, "causes": base["causes"]}, base)
    assert without.verdict == result.verdict  # a note, never a verdict


def test_sweep_shows_which_causes_appear_as_lambda_rises(tmp_path):
    episodes = [("refund_a", label, trial, trace)
                for label, traces in (("lambda=0", [clean("1001")] * 2),
                                      ("lambda=0.5", [clean("1001"), rushed_429("1001")]),
                                      ("lambda=1", [lost_retried("1001"), rushed_429("1001")]))
                for trial, trace in enumerate(traces)]
    write_run(tmp_path / "sweep", episodes, labels=("lambda=0", "lambda=0.5", "lambda=1"))
    rows = analyse_sweep(tmp_path / "sweep")["causes"]
    assert [(r["episodes"], r["first_at"]) for r in rows] == [([0, 0, 1], "lambda=1"), ([0, 1, 1], "lambda=0.5")]
    assert "retried without idempotency key" in rows[0]["line"]


# --- live: the naive demo agent, frozen by cause, replayed ------------------------------------------


def test_freeze_representatives_one_entry_per_cause_replays_as_expected(tmp_path, monkeypatch, capsys):
    tasks = load_tasks(EXAMPLES / "tasks.yaml")
    tasks = replace(tasks, tasks=tuple(t for t in tasks.tasks if t.id in ("refund_order_1001", "pay_order_1004")))
    naive = [sys.executable, str(EXAMPLES / "naive_agent.py")]
    with world_in_thread() as world:
        for name, value in world.env().items():
            if name != "SHOP_URL":
                monkeypatch.setenv(name, value)
        run(RunOptions(scenario=load_scenario("response_lost"), tasks=tasks, out=tmp_path / "run", k=2,
                       command=naive, parallel=2, show_progress=False))
        clusters = build_report(tmp_path / "run")["causes"]["clusters"]
        store = tmp_path / "store"
        assert faultproxy_main(["freeze", str(tmp_path / "run"), "--representatives", "--to", str(store),
                                "--env", "OPENAI_BASE_URL"]) == 0
        first = capsys.readouterr().out
        assert faultproxy_main(["freeze", str(tmp_path / "run"), "--representatives", "--to", str(store)]) == 0
        again = capsys.readouterr().out
    # Four failing episodes (two tasks × two trials, each a lost write retried without a key), two places.
    assert sum(c["episodes"] for c in clusters) == 4 and len(clusters) == 2
    assert {c["where"] for c in clusters} == {"POST /t/{episode}/orders/{id}/refund", "POST /t/{episode}/payments"}
    assert {c["response"] for c in clusters} == {"retried without idempotency key"}
    entries = har.find_entries(store)
    assert sorted(p.name for p in entries) == sorted(f"cause-{c['slug']}--response_lost" for c in clusters)
    labels = [json.loads((p / har.EPISODE_FILE).read_text())["cause"] for p in entries]
    assert sorted((lab["id"], lab["episodes"], list(lab["tasks"])) for lab in labels) == sorted(
        (c["id"], c["episodes"], list(c["tasks"])) for c in clusters)
    assert f"{len(clusters)} episode(s) frozen" in first
    assert f"0 episode(s) frozen into {store}/; {len(clusters)} cause(s) already in the store" in again
    # The world is stopped: each entry replays, from the recording alone, to the failure it stands for.
    read = [har.read_entry(p) for p in entries]
    options = ReplayOptions(env={"OPENAI_API_KEY": "replay-needs-no-key"}, out=tmp_path / "replayed", parallel=2)
    with Replayer(options, read) as replayer:
        results = replayer.replay_all(read, naive)
    assert [r.status for r in results] == ["fail", "fail"] and all(r.meets_expectation for r in results)
