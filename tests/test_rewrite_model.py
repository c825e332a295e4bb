"""`--rewrite-model`: the proxy asks the episode's model, whatever model the agent names.

The test upstream answers with the `model` it was asked for, so what the SDKs read back is
what reached the upstream.
"""

from __future__ import annotations

import json
import sys

import anthropic
import httpx
import openai

from faultproxy.formats.rundir import read_run
from faultproxy.cli.main import main as faultproxy_main
from faultproxy.runner.plan import GridPoint
from faultproxy import RunOptions, run
from faultproxy.tasks.loader import task_set_from_json
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay import ReplayOptions
from faultproxy.runner.replay import Replayer
from faultproxy.scenarios import load_scenario
from tests.conftest import scenario
from tests.upstream import ServerThread, Upstream

NOTHING = scenario("""
    - name: never
      match: {path: "/nowhere"}
      fault: {type: reset}
""")

AGENT = r'''
"""Names one model, always; says which model answered."""
import json, os
import openai

client = openai.OpenAI(base_url=os.environ["UPSTREAM_URL"] + "/v1", api_key="k", max_retries=0)
completion = client.chat.completions.create(model="hard-coded", messages=[{"role": "user", "content": "hi"}])
open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps({"answer": completion.model}))
'''


def test_model_calls_ask_the_episodes_model_and_nothing_else_changes(make_proxy, upstream, tmp_path):
    state, server = upstream
    proxy = make_proxy(NOTHING)
    proxy.begin_episode("swept", model="model-b")
    with httpx.Client(proxy=proxy.proxy_url("swept"), verify=str(proxy.ca_bundle)) as http:
        chat = openai.OpenAI(base_url=server.url + "/v1", api_key="k", http_client=http)
        claude = anthropic.Anthropic(base_url=server.url, api_key="k",
                                     http_client=anthropic.DefaultHttpxClient(proxy=proxy.proxy_url("swept")))
        asked = chat.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "hi"}]).model
        streamed = [c.model for c in chat.chat.completions.create(
            model="model-a", messages=[{"role": "user", "content": "hi"}], stream=True)]
        message = claude.messages.create(model="claude-x", max_tokens=8, messages=[{"role": "user", "content": "hi"}])
        refund = http.post(f"{server.url}/items/1/refund", json={"model": "not-a-model-call"})
    assert asked == message.model == "model-b" and set(streamed) == {"model-b"}
    assert refund.status_code == 200
    proxy.end_episode("swept")
    bodies = [json.loads(line["request"]["body"]) for line in read_trace(trace_path(tmp_path / "flows", "swept"))]
    assert [body["model"] for body in bodies] == ["model-b", "model-b", "model-b", "not-a-model-call"]

    with httpx.Client(proxy=proxy.proxy_url("untouched"), verify=str(proxy.ca_bundle)) as http:
        chat = openai.OpenAI(base_url=server.url + "/v1", api_key="k", http_client=http)
        assert chat.chat.completions.create(model="model-a", messages=[{"role": "user", "content": "hi"}]).model == "model-a"


def test_a_run_across_models_rewrites_each_episode_and_replay_does_the_same(tmp_path, monkeypatch):
    agent = tmp_path / "agent.py"
    agent.write_text(AGENT)
    (tmp_path / "scenario.yaml").write_text(NOTHING)
    task = {"id": "which_model", "prompt": "Which model?", "env": {"UPSTREAM_URL": "${TEST_UPSTREAM}"},
            "expected": {"output": {"regex": "^model-"}}}
    with ServerThread(Upstream().app()) as server:
        monkeypatch.setenv("TEST_UPSTREAM", server.url)
        run(RunOptions(scenario=load_scenario(tmp_path / "scenario.yaml"), tasks=task_set_from_json([task]), k=1,
                       grid=[GridPoint(model="model-a"), GridPoint(model="model-b")], rewrite_model=True,
                       command=[sys.executable, str(agent)], out=tmp_path / "run", show_progress=False))
        freeze(tmp_path / "run", tmp_path / "store")
    run_dir = read_run(tmp_path / "run")
    assert run_dir.plan["rewrite_model"] is True
    assert sorted((r["model"], r["output"]["answer"]) for r in run_dir.episodes) == [
        ("model-a", "model-a"), ("model-b", "model-b")]

    entries = har.read_entries(tmp_path / "store")
    assert sorted(e.rewritten_model for e in entries) == ["model-a", "model-b"]
    with Replayer(ReplayOptions(out=tmp_path / "out"), entries) as replayer:
        results = replayer.replay_all(entries)
    assert all(r.meets_expectation and not r.diverged for r in results), [r.explain() for r in results]
    assert sorted(r.record["output"]["answer"] for r in results) == ["model-a", "model-b"]
    assert {s["how"] for r in results for s in r.served} == {"exact"}  # the replayed request was rewritten too


def test_rewrite_model_without_a_model_is_exit_2(capsys):
    assert faultproxy_main(["run", "--scenario", "rate_limit", "--rewrite-model", "--", "python", "agent.py"]) == 2
    assert "--rewrite-model needs a model" in capsys.readouterr().err
