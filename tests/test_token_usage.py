"""Tokens read the same way everywhere: a model upstream that reports 20 input and 12 output
tokens in each API's own usage fields, JSON and streamed, called by the providers' own SDKs
through the proxy. The proxy's live count, the verdict's tokens and usage, report.json's
tokens and cost, and the exported GenAI spans all say 32, and a 10-token budget fails each."""

from __future__ import annotations

import json
from pathlib import Path

import anthropic
import openai
import pytest
from google import genai
from google.genai import types as genai_types

from faultproxy.cli.main import main
from faultproxy.formats.rundir import read_run
from faultproxy.runner import otel_names as N
from faultproxy.runner.inprocess import Episode, run_function
from faultproxy.runner.otel_export import OtelExport
from faultproxy.tasks.loader import load_tasks
from tests import model_upstream
from tests.otlp_receiver import receiving
from tests.upstream import ServerThread

INPUT, OUTPUT = 20, model_upstream.OUTPUT_TOKENS
MODEL = "held-out-model"
PRICES = {"input_per_mtok": 3.0, "output_per_mtok": 15.0}
CASES = [f"{api}-{form}" for api in ("openai_chat", "openai_responses", "anthropic_messages", "gemini")
         for form in ("json", "stream")]


def ask(episode: Episode, base_url: str) -> bool:
    """One model call, in the API and form the task's id names, read to its end as users do."""
    api, form = episode.task_id.rsplit("-", 1)
    stream = form == "stream"
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
    verdict = record["verdict"]
    assert record["stats"]["tokens"] == INPUT + OUTPUT  # the proxy's live count, what a live budget stops on
    assert verdict["tokens"] == INPUT + OUTPUT
    assert verdict["usage"] == {MODEL: {"input": INPUT, "output": OUTPUT}}
    assert entry["resources"]["tokens_mean"] == INPUT + OUTPUT
    assert entry["resources"]["cost_mean"] == pytest.approx((INPUT * 3.0 + OUTPUT * 15.0) / 1e6)
    (span,) = spans
    assert (span.attributes[N.USAGE_INPUT], span.attributes[N.USAGE_OUTPUT]) == (INPUT, OUTPUT)
    assert verdict["status"] == "fail"
    (budget,) = [c for c in verdict["failed"] if c["name"] == "budget"]
    assert budget["detail"] == f"tokens {INPUT + OUTPUT} over 10"
