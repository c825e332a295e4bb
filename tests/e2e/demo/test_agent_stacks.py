"""Agents built on the SDKs people use, unmodified behind `faultproxy run`, meet the bundled
scenarios' faults on the model API their SDK talks to, and their SDKs do what they do in
production:

- the OpenAI Agents SDK's default model class (Responses API): its openai client waits out a 429's
  Retry-After and retries; a streamed run whose stream fails midway (`response.failed`) raises;
- google-genai (Gemini): without retry options it raises ClientError 429 RESOURCE_EXHAUSTED to the
  agent, and ServerError 503 UNAVAILABLE when a stream fails midway.

The demo world's scripted model speaks both APIs (examples/model_dialects.py).
"""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest

from faultproxy import RunOptions, run
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.demo_world import world_for_agents
from tests.support.layout import AGENTS

PARALLEL = (os.cpu_count() or 2) + 1
# The demo's lookup task, with a wall budget that survives a loaded machine: these agents import
# heavy SDKs, and the verdict here must come from the faults, not from the clock.
TASK = """\
    env:
      SHOP_URL: "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}"
    tasks:
      - id: order_status_1002
        prompt: "What is the status of order 1002?"
        shape: lookup
        reset_url: "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_reset"
        state_url: "${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}/_state"
        expected:
          state: {orders: {"1002": {status: shipped}}}
          effects: [{method: POST, path: "*", count: 0}]
          output: {regex: "(?i)\\\\bshipped\\\\b"}
          escalate: false
        budgets: {wall_s: 600, requests: 40}
    """


def run_stack(tmp_path: Path, agent: str, flags: list[str], scenario: str, k: int,
              **params: float) -> list[tuple[dict, list[dict]]]:
    """Each judged episode, with its trace."""
    (tmp_path / "tasks.yaml").write_text(textwrap.dedent(TASK))
    out = tmp_path / "run"
    result = run(RunOptions(scenario=load_scenario(scenario, params), tasks=load_tasks(tmp_path / "tasks.yaml"),
                            out=out, k=k, parallel=PARALLEL, show_progress=False,
                            command=[sys.executable, str(AGENTS / agent), *flags]))
    assert result.complete, result.errors
    episodes = sorted(read_run(out).episodes, key=lambda record: record["key"])
    return [(record, list(read_trace(out / record["trace"]))) for record in episodes]


def model_lines(trace: list[dict], marker: str) -> list[dict]:
    return [line for line in trace if marker in line["request"]["url"]]


def fired(line: dict, rule: str) -> bool:
    return bool(line.get("fault")) and line["fault"]["rule"] == rule and line["fault"]["delivered"]


def test_the_agents_sdk_default_model_waits_out_rate_limits(monkeypatch, tmp_path):
    with world_for_agents(monkeypatch):
        episodes = run_stack(tmp_path, "agents_sdk_agent.py", [], "rate_limit", k=2, **{"lambda": 0.5})
    limited = 0
    for record, trace in episodes:
        calls = model_lines(trace, "/v1/responses")
        assert calls and len(calls) == len(model_lines(trace, "/v1/"))  # the Responses API, nothing else
        for before, after in zip(calls, calls[1:]):
            if fired(before, "model_429"):  # the openai client under the SDK retried after the wait
                limited += 1
                assert before["client"]["status"] == 429 and before["fault"]["detail"] == "429 openai"
                assert after["started"] - before["started"] >= 0.9
        streak = len(calls) - max((i + 1 for i, line in enumerate(calls) if not fired(line, "model_429")), default=0)
        if streak:  # three 429s for one turn: the client's two retries are spent, RateLimitError ends the run
            assert streak == 3 and "RateLimitError" in record["log_tail"]
            assert record["verdict"]["status"] == "fail" and record["exit_code"] == 1
        else:
            assert record["verdict"]["status"] == "pass", record["verdict"]
    assert limited  # the faults reached the agent: a run without any would prove nothing


def test_a_streamed_agents_sdk_run_raises_on_response_failed(monkeypatch, tmp_path):
    with world_for_agents(monkeypatch):
        [(record, trace)] = run_stack(tmp_path, "agents_sdk_agent.py", ["--stream"], "server_error", k=1,
                                      **{"lambda": 1.0})
    [call] = model_lines(trace, "/v1/responses")
    assert fired(call, "model_stream_error")
    events = [text for _, text in call["client"]["sse"]]
    assert events[0].startswith("event: response.created") and events[-1].startswith("event: response.failed")
    assert record["verdict"]["status"] == "fail" and record["exit_code"] == 1
    assert "server_error" in record["log_tail"]


@pytest.mark.parametrize("flags", [[], ["--stream"]], ids=["json", "streamed"])
def test_google_genai_raises_resource_exhausted_to_the_agent(monkeypatch, tmp_path, flags):
    with world_for_agents(monkeypatch):
        episodes = run_stack(tmp_path, "gemini_agent.py", flags, "rate_limit", k=2, **{"lambda": 0.5})
    limited = 0
    for record, trace in episodes:
        calls = model_lines(trace, "/models/")
        assert all(":streamGenerateContent" in line["request"]["url"] for line in calls) == bool(flags)
        faulted = [line for line in calls if fired(line, "model_429")]
        if faulted:  # no retries in google-genai unless asked: the first 429 ends the agent
            limited += 1
            assert faulted[0] is calls[-1] and faulted[0]["client"]["status"] == 429
            assert record["verdict"]["status"] == "fail" and record["exit_code"] == 1
            assert "429 RESOURCE_EXHAUSTED" in record["log_tail"]
        else:
            assert record["verdict"]["status"] == "pass", record["verdict"]
    assert limited
