"""Tokens read the same way everywhere: a model upstream that reports 20 input and 12 output
tokens in each API's own usage fields, JSON and streamed, called by the providers' own SDKs
through the proxy. The proxy's live count, the verdict's tokens and usage, report.json's
tokens and cost, and the exported GenAI spans all say 32, and a 10-token budget fails each.
A live session (OpenAI Realtime on the openai SDK, Gemini Live on `websockets`) of two turns
says 64: each turn's usage, counted by the proxy as it arrives."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types
from websockets.asyncio.client import connect

from faultproxy.cli.main import main
from faultproxy.formats.rundir import read_run
from faultproxy.otel import names as N
from faultproxy.runner.inprocess import Episode, run_function
from faultproxy.otel import OtelExport
from faultproxy.tasks.tasks_file import load_tasks
from tests.support import model_upstream
from tests.support.otlp_receiver import receiving
from tests.support.upstream import ServerThread

INPUT, OUTPUT = 20, model_upstream.OUTPUT_TOKENS
MODEL = "held-out-model"
PRICES = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
CASES = [f"{api}-{form}" for api in ("openai_chat", "openai_responses", "anthropic_messages", "gemini")
         for form in ("json", "stream")] + ["openai_realtime-session", "gemini_live-session"]
SESSION_TURNS = 2


def turns(case: str) -> int:
    return SESSION_TURNS if case.endswith("-session") else 1


def ask(episode: Episode, base_url: str) -> bool:
    """One model call, in the API and form the task's id names, read to its end as users do."""
    api, form = episode.task_id.rsplit("-", 1)
    stream = form == "stream"
    if form == "session":
        return asyncio.run(asyncio.wait_for(talk(api, episode, base_url), 60))
    if api == "gemini":
        options = genai_types.HttpOptions(base_url=base_url + "/", api_version="v1beta",
                                          client_args={"proxy": episode.proxy_url})
        gemini = genai.Client(api_key="gemini-test-key", http_options=options)  # kept: it closes when collected
        if stream:
            return bool("".join(c.text or "" for c in gemini.models.generate_content_stream(model=MODEL, contents="hi")))
        return bool(gemini.models.generate_content(model=MODEL, contents="hi").text)
    if api == "anthropic_messages":
        client = anthropic.Anthropic(base_url=base_url, api_key="ak-test", max_retries=0,
                                     http_client=anthropic.DefaultHttpxClient(proxy=episode.proxy_url))
        answer = client.messages.create(model=MODEL, max_tokens=64, stream=stream,
                                        messages=[{"role": "user", "content": "hi"}])
        return bool(list(answer)) if stream else bool(answer.content)
    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", max_retries=0,
                           http_client=openai.DefaultHttpxClient(proxy=episode.proxy_url))
    if api == "openai_responses":
        answer = client.responses.create(model=MODEL, input="hi", stream=stream)
        return bool(list(answer)) if stream else bool(answer.output_text)
    answer = client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "hi"}], stream=stream,
                                            **({"stream_options": {"include_usage": True}} if stream else {}))
    return bool(list(answer)) if stream else bool(answer.choices)


async def talk(api: str, episode: Episode, base_url: str) -> bool:
    """SESSION_TURNS turns of a live session, each read to its end."""
    if api == "openai_realtime":
        client = openai.AsyncOpenAI(base_url=base_url + "/v1", api_key="sk-test")
        async with client.realtime.connect(model=MODEL, websocket_connection_options={
                "proxy": episode.proxy_url, "open_timeout": 20}) as connection:
            for _ in range(SESSION_TURNS):
                await connection.response.create()
                async for event in connection:
                    if event.type == "response.done":
                        break
        return True
    url = base_url.replace("http://", "ws://") + f"/ws/{model_upstream.GEMINI_LIVE}"
    async with connect(url, proxy=episode.proxy_url, open_timeout=20) as ws:
        await ws.send(json.dumps({"setup": {"model": f"models/{MODEL}"}}))
        await ws.recv()
        for _ in range(SESSION_TURNS):
            await ws.send(json.dumps({"clientContent": {"turns": [{"role": "user", "parts": [{"text": "hi"}]}],
                                                        "turnComplete": True}}))
            while not json.loads(await ws.recv()).get("serverContent", {}).get("turnComplete"):
                pass
    return True


@pytest.fixture(scope="module")
def counted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict]:
    """One run of the eight cases: {task id: its episode record, report entry and model spans}."""
    folder = tmp_path_factory.mktemp("tokens")
    tasks = folder / "tasks.yaml"
    tasks.write_text(json.dumps({
        "prices": {MODEL: PRICES},
        "tasks": [{"id": case, "prompt": "say hi", "budgets": {"tokens": 10, "cost": 1.0}} for case in CASES]}))
    receiver, collector = receiving()
    with collector, ServerThread(model_upstream.app(input_tokens=INPUT)) as upstream:
        export = OtelExport(f"{collector.url}/v1/traces")
        run_function(lambda episode: ask(episode, upstream.url), load_tasks(tasks), k=1, scenario="observe",
                     out=folder / "run", export=export)
        assert export.close().dropped == 0
    assert main(["report", str(folder / "run")]) == 0  # writes report.json, as a user would
    report = json.loads((folder / "run" / "report.json").read_text())
    entries = {t["task_id"]: t for t in report["run"]["tasks"]}
    spans: dict[str, list] = {}
    for trace in receiver.traces().values():
        task = next(s.attributes[N.TASK] for s in trace if N.TASK in s.attributes)
        spans[task] = [s for s in trace if N.USAGE_INPUT in s.attributes]
    return {record["task_id"]: {"record": record, "report": entries[record["task_id"]], "spans": spans[record["task_id"]]}
            for record in read_run(folder / "run").episodes}


@pytest.mark.parametrize("case", CASES)
def test_every_layer_counts_the_same_tokens_and_the_budget_fails(counted, case):
    record, entry, spans = counted[case]["record"], counted[case]["report"], counted[case]["spans"]
    verdict, n = record["verdict"], turns(case)
    assert record["stats"]["tokens"] == n * (INPUT + OUTPUT)  # the proxy's live count, what a live budget stops on
    assert verdict["tokens"] == n * (INPUT + OUTPUT)
    assert verdict["usage"] == {MODEL: {"input": n * INPUT, "output": n * OUTPUT}}
    assert entry["resources"]["tokens_mean"] == n * (INPUT + OUTPUT)
    assert entry["resources"]["cost_mean"] == pytest.approx(n * (INPUT * 3.0 + OUTPUT * 15.0) / 1e6)
    assert [(s.attributes[N.USAGE_INPUT], s.attributes[N.USAGE_OUTPUT]) for s in spans] == [(INPUT, OUTPUT)] * n
    assert verdict["status"] == "fail"
    (budget,) = [c for c in verdict["failed"] if c["name"] == "budget"]
    assert budget["detail"] == f"tokens {n * (INPUT + OUTPUT)} over 10"


ENDLESS_REALTIME_AGENT = '''
import asyncio, os
from openai import AsyncOpenAI

async def main():  # turn after turn on one Realtime session, until something stops it
    client = AsyncOpenAI(base_url=os.environ["MODEL_URL"] + "/v1", api_key="sk-test")
    async with client.realtime.connect(model="held-out-model",
                                       websocket_connection_options={"open_timeout": 20}) as connection:
        while True:
            await connection.response.create()
            async for event in connection:
                if event.type == "response.done":
                    break

asyncio.run(main())
'''


def test_the_live_token_budget_stops_an_agent_mid_session(tmp_path):
    """The live budget sees a session's turns as they end: an agent spending over it on one
    Realtime session (the openai SDK, proxied by the environment the runner gives it) is stopped
    there, and the live count, the verdict and report.json say the same tokens."""
    (tmp_path / "agent.py").write_text(ENDLESS_REALTIME_AGENT)
    budget = 3 * (INPUT + OUTPUT)
    with ServerThread(model_upstream.app(input_tokens=INPUT)) as upstream:
        (tmp_path / "tasks.yaml").write_text(json.dumps({"tasks": [{
            "id": "talks-on", "prompt": "talk", "env": {"MODEL_URL": upstream.url},
            "budgets": {"tokens": budget, "wall_s": 60}}]}))
        assert main(["run", "--scenario", "observe", "--tasks", str(tmp_path / "tasks.yaml"), "--k", "1",
                     "--out", str(tmp_path / "run"), "--", sys.executable, str(tmp_path / "agent.py")]) == 0
    [record] = read_run(tmp_path / "run").episodes
    verdict = record["verdict"]
    assert record["cause"] == "budget_tokens", record["log_tail"][-800:]
    spent = record["stats"]["tokens"]
    assert spent > budget and spent % (INPUT + OUTPUT) == 0  # whole turns, counted as each ended
    assert verdict["tokens"] == spent
    (stopped,) = [c for c in verdict["failed"] if c["name"] == "budget"]
    assert stopped["detail"] == f"the agent overran its token budget and was stopped after {spent} tokens"
    assert sum(u["input"] + u["output"] for u in verdict["usage"].values()) == spent
    assert main(["report", str(tmp_path / "run")]) == 0
    [entry] = json.loads((tmp_path / "run" / "report.json").read_text())["run"]["tasks"]
    assert entry["resources"]["tokens_mean"] == spent
