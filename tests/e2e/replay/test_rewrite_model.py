"""`--rewrite FIELD=TEMPLATE` (and its shorthand `--rewrite-model`): the proxy sets fields of the
agent's model API requests per grid point, so an agent that never heard of faultproxy can be
swept across models and reasoning effort.

The model servers here answer with what they were asked for, and ModelServer also keeps every
body it received, so the tests see what reached the upstream, not what the agent sent.
"""

from __future__ import annotations

import json
import os
import re
import sys

import anthropic
import httpx
import openai
import pytest
from aiohttp import web

from faultproxy.cli.main import main as faultproxy_main
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import Replayer
from tests.support.fixtures import scenario
from tests.support.upstream import ServerThread

NOTHING = scenario("""
    - name: never
      match: {path: "/nowhere"}
      fault: {type: reset}
""")


class ModelServer:
    """OpenAI chat completions and responses, Anthropic messages; keeps (path, body) of each call.

    Chat completions answer "correct" or "wrong" by a rule of the task, the trial and the
    reasoning effort asked (see `chat_answer`); the other two echo the fields under test."""

    def __init__(self) -> None:
        self.received: list[tuple[str, dict]] = []

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.chat)
        app.router.add_post("/v1/responses", self.responses)
        app.router.add_post("/v1/messages", self.messages)
        return app

    async def _body(self, request: web.Request) -> dict:
        body = await request.json()
        self.received.append((request.path, body))
        return body

    async def chat(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        text = chat_answer(body["messages"][-1]["content"], body.get("reasoning_effort"))
        return web.json_response({
            "id": "chatcmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 1, "total_tokens": 6}})

    async def responses(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        text = json.dumps(body.get("reasoning"))
        return web.json_response({
            "id": "resp_1", "object": "response", "created_at": 0, "model": body["model"], "status": "completed",
            "output": [{"type": "message", "id": "msg_1", "status": "completed", "role": "assistant",
                        "content": [{"type": "output_text", "text": text, "annotations": []}]}],
            "parallel_tool_calls": False, "tool_choice": "auto", "tools": [],
            "usage": {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6,
                      "input_tokens_details": {"cached_tokens": 0}, "output_tokens_details": {"reasoning_tokens": 0}}})

    async def messages(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        return web.json_response({
            "id": "msg_1", "type": "message", "role": "assistant", "model": body["model"],
            "content": [{"type": "text", "text": json.dumps(body.get("thinking"))}], "stop_reason": "end_turn",
            "stop_sequence": None, "usage": {"input_tokens": 5, "output_tokens": 1}})


def chat_answer(prompt: str, effort: str | None) -> str:
    """Low effort always gets task a right and the others wrong; high effort gets every task right
    on its first trial only: more right on average, less reliably (the flag's situation)."""
    found = re.search(r"task (\w+) \(trial (\d+)\)", prompt)
    if not found:
        return "no task"
    task, trial = found.groups()
    right = task == "a" if effort == "low" else effort == "high" and trial == "0"
    return "correct" if right else "wrong"


def trial_variant(task: dict, index: int) -> dict:
    """The variant function the sweep runs with: the trial is in the prompt, for chat_answer."""
    return {"prompt": f"{task['prompt']} (trial {index})"}


# An agent that knows nothing of faultproxy: it hard-codes its model, sets no effort, and answers.
EFFORT_AGENT = r'''
import json, os, sys
import openai

client = openai.OpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="k", max_retries=0)
completion = client.chat.completions.create(model="hard-coded", messages=[{"role": "user", "content": sys.argv[1]}])
open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps({"answer": completion.choices[0].message.content}))
'''

EVERY_API_AGENT = r'''
import json, os
import anthropic, openai

url = os.environ["MODEL_URL"]
chat = openai.OpenAI(base_url=url + "/v1", api_key="k", max_retries=0)
asked = [{"role": "user", "content": "hi"}]
answers = {
    "chat": chat.chat.completions.create(model="gpt-x", messages=asked).model,
    "responses": chat.responses.create(model="gpt-x", input="hi", reasoning={"summary": "auto"}).output_text,
    "messages": anthropic.Anthropic(base_url=url, api_key="k", max_retries=0).messages.create(
        model="claude-x", max_tokens=256, messages=asked).content[0].text,
}
open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps({"answer": answers}))
'''


@pytest.fixture
def world(tmp_path, monkeypatch):
    """The model server, a scenario file and the agents' folder; MODEL_URL reaches the server."""
    server = ModelServer()
    (tmp_path / "scenario.yaml").write_text(NOTHING)
    with ServerThread(server.app()) as thread:
        monkeypatch.setenv("TEST_MODEL_URL", thread.url)
        yield server, tmp_path


def write_tasks(folder, ids: list[str], regex: str) -> str:
    lines = [json.dumps({"id": i, "prompt": f"Solve task {i}", "env": {"MODEL_URL": "${TEST_MODEL_URL}"},
                         "expected": {"output": {"regex": regex}}}) for i in ids]
    (folder / "tasks.jsonl").write_text("\n".join(lines) + "\n")
    return str(folder / "tasks.jsonl")


def test_an_effort_sweep_rewrites_each_episodes_requests_and_flags_mean_up_pass_k_down(world, capsys):
    server, folder = world
    (folder / "agent.py").write_text(EFFORT_AGENT)
    status = faultproxy_main([
        "sweep", "--scenario", str(folder / "scenario.yaml"), "--tasks", write_tasks(folder, ["a", "b", "c"], "^correct$"),
        "--param", "effort=low,high", "--rewrite", "reasoning_effort={effort}", "--k", "2", "--parallel", "3",
        "--variants", "tests.e2e.replay.test_rewrite_model:trial_variant", "--out", str(folder / "run"),
        "--", sys.executable, str(folder / "agent.py"), "{prompt}"])
    out = capsys.readouterr().out
    assert status == 0, out

    run_dir = read_run(folder / "run")
    assert [point["params"] for point in run_dir.plan["grid"]] == [{"effort": "low"}, {"effort": "high"}]
    assert run_dir.plan["rewrites"] == {"reasoning_effort": "{effort}"}
    for episode in run_dir.episodes:  # what reached the upstream for each episode is its own level
        effort = episode["params"]["effort"]
        assert episode["rewrites"] == {"reasoning_effort": effort}
        bodies = [json.loads(line["request"]["body"]) for line in read_trace(folder / "run" / episode["trace"])]
        assert [(body["model"], body["reasoning_effort"]) for body in bodies] == [("hard-coded", effort)]
    assert sorted(body["reasoning_effort"] for _, body in server.received) == ["high"] * 6 + ["low"] * 6

    analysis = json.loads((folder / "run" / "sweep.json").read_text())
    assert analysis["params"] == {"effort": ["low", "high"]}  # the given order, not the alphabet's
    low, high = analysis["curves"]["effort"][0]["points"]
    assert (low["level"], round(low["mean"], 3), round(low["pass_hat_k"], 3)) == ("low", 0.333, 0.333)
    assert (high["level"], high["mean"], high["pass_hat_k"]) == ("high", 0.5, 0.0)
    assert [(f["param"], f["previous_level"], f["level"]) for f in analysis["flags"]] == [("effort", "low", "high")]
    assert "flag: effort=high: mean rises 33.3% → 50.0%" in out
    assert ">high</text>" in (folder / "run" / "sweep.html").read_text()  # a categorical axis, labelled


def test_every_api_gets_its_own_fields_and_replay_rewrites_the_same(world, capsys):
    server, folder = world
    (folder / "agent.py").write_text(EVERY_API_AGENT)
    status = faultproxy_main([
        "sweep", "--scenario", str(folder / "scenario.yaml"), "--tasks", write_tasks(folder, ["apis"], "."),
        "--param", "effort=low,high", "--models", "model-b", "--rewrite-model",
        "--rewrite", "reasoning_effort={effort}", "--rewrite", "reasoning.effort={effort}",
        "--rewrite", "thinking.budget_tokens={effort:low=1024,high=16384}", "--out", str(folder / "run"), "--no-html",
        "--", sys.executable, str(folder / "agent.py")])
    assert status == 0, capsys.readouterr()

    by_effort = {"low": 1024, "high": 16384}
    answers = {e["params"]["effort"]: e["output"]["answer"] for e in read_run(folder / "run").episodes}
    assert answers == {effort: {"chat": "model-b", "responses": json.dumps({"summary": "auto", "effort": effort}),
                                "messages": json.dumps({"type": "enabled", "budget_tokens": budget})}
                       for effort, budget in by_effort.items()}
    received = [(path, {k: v for k, v in body.items() if k not in ("messages", "input")})
                for path, body in server.received]  # what the agent asked is the same everywhere
    assert sorted(received, key=lambda r: (r[0], json.dumps(r[1], sort_keys=True))) == [
        ("/v1/chat/completions", {"model": "model-b", "reasoning_effort": "high"}),
        ("/v1/chat/completions", {"model": "model-b", "reasoning_effort": "low"}),
        ("/v1/messages", {"max_tokens": 256 + 1024, "model": "model-b",
                          "thinking": {"type": "enabled", "budget_tokens": 1024}}),
        ("/v1/messages", {"max_tokens": 256 + 16384, "model": "model-b",
                          "thinking": {"type": "enabled", "budget_tokens": 16384}}),
        ("/v1/responses", {"model": "model-b", "reasoning": {"summary": "auto", "effort": "high"}}),
        ("/v1/responses", {"model": "model-b", "reasoning": {"summary": "auto", "effort": "low"}}),
    ]

    freeze(folder / "run", folder / "store")
    entries = har.read_entries(folder / "store")
    assert sorted(e.rewrites["thinking.budget_tokens"] for e in entries) == [1024, 16384]
    with Replayer(ReplayOptions(out=folder / "out"), entries) as replayer:  # no model server: hermetic
        results = replayer.replay_all(entries)
    assert all(r.meets_expectation and not r.diverged for r in results), [r.explain() for r in results]
    assert {s["how"] for r in results for s in r.served} == {"exact"}  # the replayed requests were rewritten too
    assert sorted(r.record["output"]["answer"]["messages"] for r in results) == sorted(
        json.dumps({"type": "enabled", "budget_tokens": b}) for b in by_effort.values())


def test_the_proxy_rewrites_model_calls_only_and_only_for_the_episode(make_proxy, world):
    server, tmp_path = world
    proxy = make_proxy(NOTHING)
    base = os.environ["TEST_MODEL_URL"]
    proxy.begin_episode("swept", rewrites={"model": "model-b", "thinking.budget_tokens": 0})
    with httpx.Client(proxy=proxy.proxy_url("swept"), verify=str(proxy.ca_bundle)) as http:
        chat = openai.OpenAI(base_url=base + "/v1", api_key="k", http_client=http)
        claude = anthropic.Anthropic(base_url=base, api_key="k",
                                     http_client=anthropic.DefaultHttpxClient(proxy=proxy.proxy_url("swept")))
        asked = chat.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "task a (trial 0)"}])
        thinking = claude.messages.create(model="claude-x", max_tokens=3000, messages=[{"role": "user", "content": "hi"}],
                                          thinking={"type": "enabled", "budget_tokens": 2000})
        elsewhere = http.post(f"{base}/v1/other", json={"model": "x"})  # not a model API call
    assert asked.model == thinking.model == "model-b"
    assert elsewhere.status_code == 404
    _, sent = server.received[1]  # thinking off, and the agent's own budget handed back to its answer
    assert (sent["thinking"], sent["max_tokens"]) == ({"type": "disabled"}, 1000)
    proxy.end_episode("swept")
    bodies = [json.loads(line["request"]["body"]) for line in read_trace(trace_path(tmp_path / "flows", "swept"))]
    assert [body["model"] for body in bodies] == ["model-b", "model-b", "x"]

    with httpx.Client(proxy=proxy.proxy_url("untouched"), verify=str(proxy.ca_bundle)) as http:
        chat = openai.OpenAI(base_url=base + "/v1", api_key="k", http_client=http)
        assert chat.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "task a (trial 0)"}]
                                            ).model == "model-a"


@pytest.mark.parametrize("arguments, says", [
    (["run", "--rewrite", "temperature=0"], "temperature is not a field faultproxy rewrites; it rewrites model"),
    (["run", "--rewrite", "reasoning_effort"], "--rewrite 'reasoning_effort' is not NAME=VALUE"),
    (["run", "--rewrite", "reasoning_effort={effort"], "an unmatched { or }"),
    (["run", "--rewrite", "reasoning_effort={effort}"], "{effort} is not a swept param or the model (this run has: none)"),
    (["run", "--rewrite", "thinking.budget_tokens=lots"], "must be a whole number of tokens, 0 or more, got 'lots'"),
    (["run", "--rewrite-model"], "{model} needs a model to ask for: --model (run) or --models (sweep)"),
    (["run", "--model", "m", "--rewrite-model", "--rewrite", "model=n"], "--rewrite model is given twice"),
    (["sweep", "--param", "effort=low,high", "--rewrite", "thinking.budget_tokens={effort:low=1024}"],
     "the mapping gives no value for effort=high"),
    (["sweep", "--param", "effort=low,high", "--rewrite", "thinking.budget_tokens={effort:low}"],
     "'low' in {effort:...} is not LEVEL=VALUE"),
    (["sweep", "--param", "effort=low,0.5"], "level 'low' is not a number, and the others are"),
    (["sweep", "--param", "effort=low,low"], "--param effort: level low is given twice"),
    (["sweep", "--param", "lambda=low,high"], "--param lambda: levels must be numbers (lambda is read by the proxy"),
])
def test_a_bad_rewrite_or_level_is_one_line_and_exit_2(arguments, says, capsys):
    command, *options = arguments
    assert faultproxy_main([command, "--scenario", "rate_limit", *options, "--", "python", "agent.py"]) == 2
    err = capsys.readouterr().err
    assert says in err and len(err.strip().splitlines()) == 1, err
