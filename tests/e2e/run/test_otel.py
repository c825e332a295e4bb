"""OpenTelemetry export: episodes, exchanges, faults and verdicts as spans, received by a local
OTLP/HTTP collector that decodes the real protobuf (tests/support/otlp_receiver.py)."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import asyncio

import httpx
import pytest
from openai import OpenAI
from websockets.asyncio.client import connect

from examples.world import world_in_thread
from faultproxy import RunOptions, run
from faultproxy.cli.main import build_parser, main
from faultproxy.formats.errors import UsageError
from faultproxy.formats.redact import Redactor
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace, trace_path
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.otel import names as N
from faultproxy.runner.inprocess import Episode, run_function
from faultproxy.evaluator.traces.trace_parsing import parse_exchange
from faultproxy.otel import OtelExport, resolve_endpoint
from faultproxy.otel.export import FLUSH_TIMEOUT_S
from faultproxy.otel.spans import exchange_span
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import task_set_from_json
from tests.support.agent_commands import DESK_AGENT
from tests.support.desk import Desk, close_task
from tests.support.monitor import MonitorProcess
from tests.support.otlp_receiver import ReceivedSpan, receiving
from tests.support.processes import alive, wait_until
from tests.support.fixtures import scenario
from tests.support.layout import AGENTS, EXAMPLES
from tests.support.realtime import TURNS, function_calling_app
from tests.support.upstream import ServerThread, Upstream

PLANTED = "sk-planted0123456789abcdefPLANTED"  # an OpenAI-shaped key the agent sends with every model call
CLIENT, INTERNAL = 3, 1  # protobuf Span.SpanKind
STATUS_ERROR = 2


def root_and_children(spans: list[ReceivedSpan]) -> tuple[ReceivedSpan, list[ReceivedSpan]]:
    """The episode's root (whose parent, if any, is not in this export) and its children in trace order."""
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if s.parent_id not in ids]
    assert len(roots) == 1, [s.name for s in roots]
    return roots[0], sorted((s for s in spans if s is not roots[0]), key=lambda s: s.attributes[N.SEQ])


def dead_port() -> int:
    """A loopback port nothing listens on."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_run_exports_one_trace_per_episode_with_verdict_model_tool_and_fault_spans(tmp_path, monkeypatch, capsys):
    receiver, collector = receiving()
    out = tmp_path / "run"
    with collector, world_in_thread() as world:
        monkeypatch.setenv("SHOP_ROOT", world.shop_url)
        monkeypatch.setenv("OPENAI_BASE_URL", world.model_url)
        monkeypatch.setenv("OPENAI_API_KEY", PLANTED)
        code = main(["run", "--scenario", "response_lost", "--tasks", str(EXAMPLES / "tasks.yaml"),
                     "--only", "refund_order_1001", "--out", str(out), "--secret-env", "OPENAI_API_KEY",
                     "--otlp", collector.url, "--otlp-content", "--", sys.executable,
                     str(EXAMPLES / "naive_agent.py"), "--stream"])
        assert code == 0
        printed = capsys.readouterr().out
        record = read_run(out).episodes[0]
        trace = list(read_trace(out / record["trace"]))
        (spans,) = receiver.traces().values()  # one episode, one trace
        assert f"otlp: {len(spans)} spans of 1 episodes to {collector.url}/v1/traces, 0 dropped" in printed
        (logged,) = [json.loads(line) for line in (out / "faultproxy.log").read_text().splitlines()
                     if '"otlp_export"' in line]  # and the run directory's log keeps the count
        assert (logged["spans"], logged["dropped"]) == (len(spans), 0)

        root, children = root_and_children(spans)
        verdict = record["verdict"]
        assert root.name == f"episode {record['key']}" and root.kind == INTERNAL
        assert root.resource[N.SERVICE_NAME_KEY] == "faultproxy"
        assert root.scope_schema_url == N.SCHEMA_URL
        assert root.attributes[N.VERDICT] == verdict["status"] == "fail"  # the naive agent refunds twice
        assert root.attributes[N.FAILED_CHECKS] == [c["name"] for c in verdict["failed"]]
        assert root.attributes[N.SEVERITY] == "high" and root.status_code == STATUS_ERROR
        assert root.attributes[N.SCENARIO] == "response_lost" and root.attributes[N.MODE] == "run"
        assert "naive_agent.py --stream" in root.attributes[N.COMMAND]
        assert [(e[0], e[2][N.CHECK_NAME]) for e in root.events] == [(N.FINDING_EVENT, c["name"])
                                                                     for c in verdict["failed"]]
        # One child per exchange, at the proxy's times, in one trace under the root.
        assert [s.attributes[N.SEQ] for s in children] == [line["seq"] for line in trace]
        for span, line in zip(children, trace, strict=True):
            assert span.parent_id == root.span_id and span.kind == CLIENT
            assert abs(span.start_ns - line["started"] * 1e9) < 2_000
            assert abs(span.end_ns - span.start_ns - line["duration_s"] * 1e9) < 2_000
            assert root.start_ns <= span.start_ns and span.end_ns <= root.end_ns

        models = [s for s in children if N.OPERATION in s.attributes]
        assert models and all(s.name == "chat demo-large" for s in models)
        for span in models:
            a = span.attributes
            assert (a[N.PROVIDER], a[N.REQUEST_MODEL], a[N.REQUEST_STREAM]) == ("openai", "demo-large", True)
            assert a[N.RESPONSE_ID].startswith("chatcmpl-") and a[N.RESPONSE_FINISH_REASONS]
            assert 0 < a[N.TIME_TO_FIRST_CHUNK] <= (span.end_ns - span.start_ns) / 1e9
            assert "Refund order 1001" in a[N.INPUT_MESSAGES]  # --otlp-content
        usage = verdict["usage"]["demo-large"]
        assert sum(s.attributes[N.USAGE_OUTPUT] for s in models) == usage["output"]
        assert sum(s.attributes[N.USAGE_INPUT] for s in models) == usage["input"]

        lost = [s for s in children if s.events]
        assert len(lost) == 1 and lost[0].name == "POST /t/{episode}/orders/{id}/refund"
        (event,) = lost[0].events
        assert event[0] == N.FAULT_EVENT and event[1] == lost[0].start_ns
        assert event[2][N.FAULT_TYPE] == "response_lost" and event[2][N.FAULT_DELIVERED] is True
        assert event[2][N.FAULT_RULE] == "write_lost"
        assert lost[0].attributes[N.ERROR_TYPE] == "reset" and lost[0].status_code == STATUS_ERROR
        assert lost[0].attributes[N.URL_FULL].startswith(world.shop_url)
        assert not any(PLANTED.encode() in body for body in receiver.raw)

        # The finished run again, afterwards, to the collector the environment names: the same spans.
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", collector.url)
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "Authorization=Basic cGs6c2s=,x-langfuse-ingestion-version=4")
        assert main(["export-otel", str(out)]) == 0
        assert receiver.headers[-1]["Authorization"] == "Basic cGs6c2s="

        again = [t for t in receiver.traces().values() if t[0].trace_id != root.trace_id]
        assert len(again) == 1 and len(again[0]) == len(spans)
        assert root_and_children(again[0])[0].attributes[N.MODE] == "export"

        # Frozen and replayed with --otlp: the replayed episode is a trace of its own, judged the same.
        assert main(["freeze", str(out), "--to", str(tmp_path / "store")]) == 0
        assert main(["replay", str(tmp_path / "store"), "--otlp", collector.url, "--", sys.executable,
                     str(EXAMPLES / "naive_agent.py"), "--stream"]) == 0
        roots = [root_and_children(spans)[0] for spans in receiver.traces().values()]
        (replayed,) = [r for r in roots if r.attributes[N.MODE] == "replay"]
        assert replayed.attributes[N.VERDICT] == "fail" and replayed.attributes[N.REPLAY_OF]
        assert "idempotency" in replayed.attributes[N.FAILED_CHECKS]  # replay has no end state to check


SCENARIO = """\
name: otel_mcp
description: the first MCP tool call of each episode fails with a JSON-RPC error
seed: 3
params: {}
rules:
  - name: first_call_busy
    match: {method: POST, path: "*/mcp", body: {method: tools/call}}
    when: {probability: 1.0, calls: [1]}
    fault: {type: jsonrpc_error, code: -32001, message: busy}
"""


def shop_agent(world):
    """A function agent: one streamed model call, then the same MCP tool call twice (the first is faulted)."""
    def agent(episode: Episode) -> bool:
        with httpx.Client(proxy=episode.proxy_url, verify=str(episode.ca_bundle), timeout=10) as http:
            model = OpenAI(base_url=world.model_url, api_key=PLANTED, http_client=http, max_retries=0)
            with model.chat.completions.create(model="demo-large", stream=True,
                                               messages=[{"role": "user", "content": episode.prompt}]) as stream:
                list(stream)
            answers = [http.post(f"{world.tenant_url(episode.key)}/mcp", json={
                "jsonrpc": "2.0", "id": call, "method": "tools/call",
                "params": {"name": "get_order", "arguments": {"order_id": "1002"}}}).json() for call in (1, 2)]
        return "error" in answers[0] and answers[1]["result"]["isError"] is False
    return agent


def verdicts(run_dir: Path) -> dict[str, tuple[str, list[str]]]:
    return {e["key"]: (e["verdict"]["status"], [c["name"] for c in e["verdict"]["failed"]])
            for e in read_run(run_dir).episodes}


def test_mcp_spans_replayed_episodes_and_a_dead_collector_that_changes_nothing(tmp_path):
    (tmp_path / "s.yaml").write_text(SCENARIO)
    scenario = load_scenario(tmp_path / "s.yaml")
    tasks = task_set_from_json([{"id": "status_1002", "prompt": "What is the status of order 1002?"}])
    receiver, collector = receiving()
    with collector, world_in_thread() as world:
        agent = shop_agent(world)
        export = OtelExport(f"{collector.url}/v1/traces")
        run_function(agent, tasks, k=2, scenario=scenario, out=tmp_path / "live", export=export)
        summary = export.close()
        assert (summary.episodes, summary.dropped) == (2, 0) and summary.delivered == summary.spans == 8
        traces = receiver.traces()
        assert len(traces) == 2
        for spans in traces.values():
            root, (chat, busy, ok) = root_and_children(spans)
            assert root.attributes[N.VERDICT] == "pass" and root.status_code != STATUS_ERROR
            assert chat.name == "chat demo-large" and chat.attributes[N.REQUEST_STREAM] is True
            for call, request_id in ((busy, "1"), (ok, "2")):
                a = call.attributes
                assert call.name == "tools/call get_order" and call.kind == CLIENT
                assert (a[N.MCP_METHOD], a[N.TOOL_NAME], a[N.OPERATION]) == ("tools/call", "get_order", "execute_tool")
                assert (a[N.JSONRPC_REQUEST_ID], a[N.NETWORK_TRANSPORT]) == (request_id, "tcp")
            assert busy.attributes[N.ERROR_TYPE] == busy.attributes[N.RPC_STATUS] == "-32001"
            assert [(e[0], e[2][N.FAULT_TYPE]) for e in busy.events] == [(N.FAULT_EVENT, "jsonrpc_error")]
            assert N.ERROR_TYPE not in ok.attributes and not ok.events

        # Replayed from the store, the episode is exported again, with what it replays.
        store = tmp_path / "store"
        freeze(tmp_path / "live", store)
        entries = har.read_entries(store)
        replay_export = OtelExport(f"{collector.url}/v1/traces")
        with Replayer(ReplayOptions(), entries, replay_export) as replayer:
            results = replayer.replay_all(entries, agent=agent)
        assert replay_export.close().dropped == 0 and all(r.status == "pass" for r in results)
        roots = [root_and_children(spans)[0] for spans in receiver.traces().values()]
        replayed = [r for r in roots if N.REPLAY_OF in r.attributes]
        assert len(roots) == 4 and len(replayed) == 2 and all(r.attributes[N.VERDICT] == "pass" for r in replayed)
        assert {r.attributes[N.SCENARIO] for r in replayed} == {"otel_mcp"}

        # The collector dies mid-run. The export runs in a process of its own; the first episode's
        # spans arrive, the second's are counted dropped, closing costs at most the flush time, and
        # the run judges the same.
        dying_receiver, dying = receiving()
        dying.__enter__()
        export = OtelExport(f"{dying.url}/v1/traces")
        calls = []

        def killing_agent(episode: Episode) -> bool:
            calls.append(episode.key)
            if len(calls) == 2:  # the first episode is judged: its spans reach the collector, which then dies
                assert wait_until(lambda: len(dying_receiver.spans) == 4, 60)
                assert export.sender_pid not in (None, os.getpid()) and alive(export.sender_pid)
                dying.__exit__(None, None, None)
            return agent(episode)

        run_function(killing_agent, tasks, k=2, scenario=scenario, out=tmp_path / "dying", export=export)
        started = time.monotonic()
        lost = export.close()
        assert time.monotonic() - started <= FLUSH_TIMEOUT_S + 1
        assert not alive(export.sender_pid)  # stopped with the export
    assert (lost.spans, lost.delivered, len(dying_receiver.spans)) == (8, 4, 4) and "4 dropped" in lost.line()
    assert verdicts(tmp_path / "dying") == verdicts(tmp_path / "live")


ORPHANED = """\
import sys, time
from faultproxy.otel import OtelExport
export = OtelExport(sys.argv[1])
export.export_episode({"key": "orphan", "started": time.time(), "duration_s": 0.1}, [])
assert export.ready.wait(60)
print(export.sender_pid, flush=True)
sys.stdin.read()  # until the test kills this process
"""


def test_an_exporter_whose_runner_is_killed_flushes_and_exits():
    receiver, collector = receiving()
    with collector:
        runner = subprocess.Popen([sys.executable, "-c", ORPHANED, f"{collector.url}/v1/traces"],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        pid = int(runner.stdout.readline())
        exporter = os.pidfd_open(pid)  # readable once the exporter exits, whoever reaps it
        try:
            assert pid != runner.pid
            runner.kill()
            runner.wait()
            assert select.select([exporter], [], [], FLUSH_TIMEOUT_S + 5)[0], "the exporter outlived its runner"
        finally:
            os.close(exporter)
    assert [s.name for s in receiver.spans] == ["episode orphan"]  # what it was handed still went out


STDIO_TASKS = """\
tasks:
  - id: read_counter
    prompt: "What does the counter say?"
    expected: {output: {regex: "counter: 0"}}
"""


def test_a_real_stdio_mcp_episode_exports_its_tool_call_as_a_pipe_span(tmp_path, capsys):
    (tmp_path / "tasks.yaml").write_text(STDIO_TASKS)
    (tmp_path / "s.yaml").write_text(SCENARIO.replace('path: "*/mcp", ', ""))  # stdio: any server's messages
    receiver, collector = receiving()
    with collector:
        assert main(["run", "--scenario", str(tmp_path / "s.yaml"), "--tasks", str(tmp_path / "tasks.yaml"),
                     "--out", str(tmp_path / "run"), "--otlp", collector.url, "--", sys.executable,
                     str(AGENTS / "stdio_counter_agent.py"), str(tmp_path / "state")]) in (0, 1)
    (record,) = read_run(tmp_path / "run").episodes
    (line,) = [line for line in read_trace(tmp_path / "run" / record["trace"])
               if json.loads(line["request"]["body"]).get("method") == "tools/call"]
    root, children = root_and_children(receiver.spans)
    (call,) = [span for span in children if span.attributes[N.SEQ] == line["seq"]]
    assert call.name == "tools/call read_counter" and call.kind == CLIENT
    assert call.attributes[N.MCP_METHOD] == "tools/call" and call.attributes[N.TOOL_NAME] == "read_counter"
    assert call.attributes[N.JSONRPC_REQUEST_ID] == str(json.loads(line["request"]["body"])["id"])
    assert call.attributes[N.NETWORK_TRANSPORT] == "pipe" and call.attributes[N.SERVER_ADDRESS] == "counter-mcp-server"
    assert [(e[0], e[2][N.FAULT_TYPE]) for e in call.events] == [(N.FAULT_EVENT, "jsonrpc_error")]
    assert call.attributes[N.ERROR_TYPE] == "-32001" and root.attributes[N.VERDICT] == record["verdict"]["status"]


def test_monitor_exports_each_judged_episode_into_the_agents_own_trace(tmp_path):
    receiver, collector = receiving()
    trace_id, span_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    with collector, ServerThread(Upstream().app()) as server:
        monitor = MonitorProcess(tmp_path / "run", "--episode-by", "traceparent", "--idle-s", "600",
                                 "--otlp", collector.url)
        with httpx.Client(proxy=monitor.proxy(), headers={"traceparent": f"00-{trace_id}-{span_id}-01"}) as client:
            for _ in range(2):
                assert client.post(f"{server.url}/items/7/refund").status_code == 200
        assert monitor.stop() == 0  # judges the open episode, then flushes the export
    (record,) = read_run(tmp_path / "run").episodes
    (spans,) = receiver.traces().values()
    root, children = root_and_children(spans)
    assert (root.trace_id, root.parent_id) == (trace_id, span_id)  # the client's trace, under the client's span
    assert root.attributes[N.MODE] == "monitor" and root.attributes[N.VERDICT] == record["verdict"]["status"]
    assert [s.name for s in children] == ["POST /items/{id}/refund"] * 2


SECRET = "hunter2-correct-horse-battery"  # no well-known shape: only the configured value finds it


def secret_trace(now: float) -> list[dict]:
    """Trace lines as a run that did not know the secret wrote them: in a URL, a body, a stream
    (split across two events), a fault's parameters; and an MCP call over stdio."""
    chunks = [f'data: {json.dumps({"id": "c1", "model": "m", "choices": [{"delta": {"content": text}}]})}\n\n'
              for text in (f"echo {SECRET[:9]}", SECRET[9:])]
    return [
        {"seq": 1, "episode": "e1", "started": now, "duration_s": 0.5, "response_after_s": 0.1,
         "request": {"method": "POST", "url": f"http://api.test/v1/chat/completions?api_key={SECRET}",
                     "headers": [["x-note", SECRET]],
                     "body": json.dumps({"model": "m", "stream": True,
                                         "messages": [{"role": "user", "content": f"password {SECRET} ok"}]})},
         "upstream": {"status": 200, "headers": [], "body": None, "sse": [[0.01, chunks[0]], [0.02, chunks[1]]]},
         "client": {"outcome": "response", "status": 200}, "forwarded": True, "tokens": 0, "error": None,
         "fault": {"rule": "slow", "type": "delay", "params": {"note": SECRET}, "delivered": True,
                   "detail": f"held {SECRET}"}},
        {"seq": 2, "episode": "e1", "started": now + 0.6, "duration_s": 0.1,
         "request": {"method": "POST", "url": "http://shop.stdio.invalid/mcp", "headers": [],
                     "body": json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                                         "params": {"name": "refund_order", "arguments": {"order_id": "1"}}})},
         "upstream": {"status": 200, "headers": [], "body": json.dumps(
             {"jsonrpc": "2.0", "id": 7, "result": {"content": [], "isError": True}})},
         "client": {"outcome": "response", "status": 200}, "forwarded": True, "tokens": 0, "error": None,
         "fault": None},
    ]


def test_a_secret_the_trace_kept_never_leaves_and_stdio_calls_are_pipes():
    receiver, collector = receiving()
    now = time.time()
    record = {"key": "e1", "task_id": "t", "trial": 0, "started": now, "duration_s": 1.0,
              "verdict": {"status": "fail", "cause": None,
                          "failed": [{"name": "policy", "severity": "high", "detail": f"sent {SECRET}"}]}}
    with collector:
        export = OtelExport(f"{collector.url}/v1/traces", redactor=Redactor([SECRET]), content=True,
                            attributes={N.COMMAND: f"agent --token {SECRET}"})
        assert export.export_episode(record, secret_trace(now))  # handed to the exporter process
        assert export.close().dropped == 0
    sent = b"".join(receiver.raw)
    assert SECRET.encode() not in sent and SECRET[:9].encode() + SECRET[9:].encode() not in sent
    root, (chat, tool) = root_and_children(receiver.spans)
    assert "password [REDACTED] ok" in chat.attributes[N.INPUT_MESSAGES]  # content kept, the secret masked
    assert "echo [REDACTED]" in chat.attributes[N.OUTPUT_MESSAGES]
    assert "api_key=" in chat.attributes[N.URL_FULL] and chat.attributes[N.TIME_TO_FIRST_CHUNK] == pytest.approx(0.11)
    assert chat.events[0][2][N.FAULT_DETAIL] == "held [REDACTED]"
    assert root.events[0][2][N.CHECK_DETAIL] == "sent [REDACTED]"
    assert tool.attributes[N.NETWORK_TRANSPORT] == "pipe" and tool.attributes[N.SERVER_ADDRESS] == "shop"
    assert N.URL_FULL not in tool.attributes and tool.attributes[N.ERROR_TYPE] == N.TOOL_ERROR


def test_a_stalled_collector_costs_the_flush_time_and_counts_what_it_lost():
    receiver, collector = receiving()
    receiver.hang = True
    now = time.time()
    with collector:
        export = OtelExport(f"{collector.url}/v1/traces")
        export.export_episode({"key": "e1", "started": now, "duration_s": 1.0}, secret_trace(now))
        started = time.monotonic()
        summary = export.close()
        assert time.monotonic() - started <= FLUSH_TIMEOUT_S + 1
        receiver.hang = False
    assert summary.dropped == summary.spans == 3


def test_endpoint_from_flag_or_environment():
    assert resolve_endpoint("http://localhost:4318", {}) == "http://localhost:4318/v1/traces"
    assert resolve_endpoint("http://localhost:6006/v1/traces", {}) == "http://localhost:6006/v1/traces"
    langfuse = {"OTEL_EXPORTER_OTLP_ENDPOINT": "https://cloud.langfuse.test/api/public/otel"}
    assert resolve_endpoint(None, langfuse) == "https://cloud.langfuse.test/api/public/otel/v1/traces"
    both = {**langfuse, "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://collector:4318/custom"}
    assert resolve_endpoint(None, both) == "http://collector:4318/custom"  # the signal's own, as given
    assert resolve_endpoint(None, {**both, "OTEL_SDK_DISABLED": "true"}) is None
    assert resolve_endpoint(None, {}) is None
    keyed = OtelExport(f"http://user:{SECRET}@127.0.0.1:{dead_port()}/v1/traces?api_key={SECRET}")
    assert SECRET not in keyed.close().line()  # a summary never shows credentials in the URL
    with pytest.raises(UsageError, match="--otlp localhost:4318: must be an http"):
        resolve_endpoint("localhost:4318", {})


def test_export_otel_without_a_collector_is_one_line(tmp_path, capsys, monkeypatch):
    for name in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / "plan.json").write_text(json.dumps({"k": 1, "tasks": {"items": []}}))
    assert main(["export-otel", str(tmp_path)]) == 2
    assert capsys.readouterr().err == ("faultproxy: export-otel: no collector: give --otlp URL, "
                                       "or set OTEL_EXPORTER_OTLP_ENDPOINT\n")


def test_an_episode_that_cannot_be_exported_is_counted_and_the_caller_goes_on(tmp_path):
    export = OtelExport(f"http://127.0.0.1:{dead_port()}/v1/traces")
    export.export_logged(tmp_path, {"key": "e1", "trace": "../elsewhere.jsonl"})  # outside the run
    summary = export.close()
    assert (summary.unexported, summary.spans) == (1, 0)
    assert summary.line().endswith("0 dropped, 1 episodes not exported (see the log)")


def test_an_exporter_that_dies_costs_its_episodes_counted_and_nothing_else():
    export = OtelExport(f"http://127.0.0.1:{dead_port()}/v1/traces")
    export.export_episode({"key": "e1", "started": time.time()}, [])
    assert export.ready.wait(60)
    os.kill(export.sender_pid, signal.SIGKILL)
    export.export_episode({"key": "e2", "started": time.time()}, [])  # handed to an exporter that is gone
    started = time.monotonic()
    summary = export.close()
    assert time.monotonic() - started <= FLUSH_TIMEOUT_S + 1
    assert (summary.episodes, summary.lost, summary.complete) == (0, 2, False)
    assert "2 episodes dropped before their spans were built" in summary.line()


def model_line(url: str, request: dict, answer: dict | list[dict]) -> dict:
    """A model call's trace line: a JSON answer, or SSE events (a list) sent 10 ms apart."""
    upstream = {"status": 200, "headers": [], "body": json.dumps(answer)} if isinstance(answer, dict) else {
        "status": 200, "headers": [], "body": None,
        "sse": [[0.01 * (i + 1), f"data: {json.dumps(event)}\n\n"] for i, event in enumerate(answer)]}
    return {"seq": 1, "started": 1000.0, "duration_s": 1.0, "response_after_s": 0.2, "forwarded": True,
            "request": {"method": "POST", "url": url, "headers": [], "body": json.dumps(request)},
            "upstream": upstream, "client": {"outcome": "response", "status": 200}, "fault": None}


@pytest.mark.parametrize("line, expected", [
    (model_line("https://api.anthropic.com/v1/messages", {"model": "claude-x", "max_tokens": 64, "messages": []},
                {"id": "msg_1", "type": "message", "role": "assistant", "model": "claude-x-1",
                 "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
                 "usage": {"input_tokens": 10, "cache_read_input_tokens": 100, "cache_creation_input_tokens": 5,
                           "output_tokens": 7}}),
     {N.PROVIDER: "anthropic", N.REQUEST_MAX_TOKENS: 64, N.RESPONSE_ID: "msg_1", N.RESPONSE_MODEL: "claude-x-1",
      N.RESPONSE_FINISH_REASONS: ["end_turn"], N.USAGE_INPUT: 115, N.USAGE_CACHE_READ: 100,
      N.USAGE_CACHE_CREATION: 5, N.USAGE_OUTPUT: 7}),
    (model_line("https://api.anthropic.com/v1/messages", {"model": "claude-x", "stream": True, "messages": []},
                [{"type": "message_start", "message": {"id": "msg_2", "model": "claude-x-1",
                                                       "usage": {"input_tokens": 9, "output_tokens": 1}}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}},
                 {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}},
                 {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}}]),
     {N.REQUEST_STREAM: True, N.RESPONSE_ID: "msg_2", N.RESPONSE_FINISH_REASONS: ["tool_use"], N.USAGE_INPUT: 9,
      N.USAGE_OUTPUT: 12, N.TIME_TO_FIRST_CHUNK: 0.21, "text": "Hello"}),
    (model_line("https://api.openai.com/v1/responses", {"model": "gpt-x", "input": "hi", "max_output_tokens": 99},
                {"id": "resp_1", "object": "response", "status": "completed", "model": "gpt-x-2",
                 "output": [{"type": "message", "role": "assistant",
                             "content": [{"type": "output_text", "text": "ok"}]}],
                 "usage": {"input_tokens": 20, "input_tokens_details": {"cached_tokens": 4}, "output_tokens": 30,
                           "output_tokens_details": {"reasoning_tokens": 16}}}),
     {N.OPERATION: "chat", N.PROVIDER: "openai", N.REQUEST_MAX_TOKENS: 99, N.RESPONSE_FINISH_REASONS: ["completed"],
      N.USAGE_INPUT: 20, N.USAGE_CACHE_READ: 4, N.USAGE_OUTPUT: 30, N.USAGE_REASONING: 16, "text": "ok"}),
    (model_line("https://generativelanguage.googleapis.com/v1beta/models/gemini-x:streamGenerateContent?alt=sse",
                {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]},
                [{"candidates": [{"content": {"role": "model", "parts": [{"text": "Hel"}]}}], "responseId": "r1",
                  "modelVersion": "gemini-x-001"},
                 {"candidates": [{"content": {"role": "model", "parts": [{"text": "lo"}]}, "finishReason": "STOP"}],
                  "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 2, "thoughtsTokenCount": 5,
                                    "cachedContentTokenCount": 3}}]),
     {N.OPERATION: "generate_content", N.PROVIDER: "gcp.gemini", N.REQUEST_MODEL: "gemini-x", N.REQUEST_STREAM: True,
      N.RESPONSE_ID: "r1", N.RESPONSE_MODEL: "gemini-x-001", N.RESPONSE_FINISH_REASONS: ["STOP"], N.USAGE_INPUT: 8,
      N.USAGE_CACHE_READ: 3, N.USAGE_OUTPUT: 7, N.USAGE_REASONING: 5, "text": "Hello"}),  # thoughts are output
], ids=["anthropic", "anthropic-stream", "openai-responses", "gemini-stream"])
def test_each_model_api_reads_as_a_genai_span(line, expected):
    span = exchange_span(parse_exchange(line), "e1", content=True)
    text = expected.pop("text", None)
    assert span.client and span.name == f"{span.attributes[N.OPERATION]} {span.attributes[N.REQUEST_MODEL]}"
    assert {name: span.attributes.get(name) for name in expected} == expected
    if text is not None:
        (message,) = json.loads(span.attributes[N.OUTPUT_MESSAGES])
        assert message["role"] == "assistant" and "".join(p.get("content", "") for p in message["parts"]) == text


@pytest.mark.parametrize("argv", [["run", "--scenario", "s"], ["sweep", "--scenario", "s"], ["replay", "store"],
                                  ["monitor"], ["export-otel", "runs/x"]])
def test_every_command_that_judges_episodes_takes_otlp(argv):
    args = build_parser().parse_args([argv[0], "--otlp", "http://127.0.0.1:4318", "--otlp-content", *argv[1:]])
    assert (args.otlp, args.otlp_content) == ("http://127.0.0.1:4318", True)


def test_a_realtime_sessions_turns_are_chat_spans_and_its_function_calls_tool_spans(make_proxy, tmp_path):
    """A real Realtime session through the proxy: each turn a chat span of the session's model, each
    function call an execute_tool span, the faults on their messages events at the messages' times."""
    proxy = make_proxy(scenario("""
        - name: slow-call
          match: {path: "*/realtime", websocket: {from: server, body: {type: response.function_call_arguments.done}}}
          fault: {type: ws_delay, ms: 5}
          when: {calls: [1]}
        - name: slow-answer
          match: {path: "*/realtime", websocket: {from: server, body: {type: response.output_text.delta}}}
          fault: {type: ws_delay, ms: 5}
          when: {calls: [2]}
    """))

    async def session(port: int) -> None:
        async with connect(f"ws://127.0.0.1:{port}/v1/realtime?model=gpt-realtime", proxy=proxy.proxy_url("rt"),
                           open_timeout=20) as ws:
            await ws.recv()  # session.created
            for _ in TURNS:
                await ws.send(json.dumps({"type": "response.create"}))
                while (event := json.loads(await asyncio.wait_for(ws.recv(), 20)))["type"] != "response.done":
                    if event["type"] == "response.function_call_arguments.done":
                        await ws.send(json.dumps({"type": "conversation.item.create", "item": {
                            "type": "function_call_output", "call_id": event["call_id"], "output": "{}"}}))

    with ServerThread(function_calling_app()) as server:
        asyncio.run(session(server.port))
    proxy.end_episode("rt")
    receiver, collector = receiving()
    with collector:
        export = OtelExport(f"{collector.url}/v1/traces", content=True)
        export.export_episode({"key": "rt", "started": time.time() - 60, "duration_s": 60},
                              list(read_trace(trace_path(tmp_path / "flows", "rt"))))
        assert export.close().dropped == 0
    _, children = root_and_children(receiver.spans)
    chats = [s for s in children if s.name.startswith("chat")]
    tools = [s for s in children if s.name.startswith("execute_tool")]
    assert len(children) == 1 + len(chats) + len(tools)  # and the upgrade, an HTTP span
    assert [s.name for s in chats] == ["chat gpt-realtime"] * len(TURNS)
    assert all((s.kind, s.attributes[N.OPERATION], s.attributes[N.PROVIDER], s.attributes[N.REQUEST_MODEL])
               == (CLIENT, "chat", "openai", "gpt-realtime") for s in chats)
    assert [(s.name, s.kind, s.attributes[N.TOOL_NAME], s.attributes[N.TOOL_CALL_ID]) for s in tools] == [
        (f"execute_tool {name}", INTERNAL, name, f"call_{i}") for i, (name, _) in enumerate(TURNS[:3])]
    assert json.loads(tools[0].attributes[N.TOOL_CALL_ARGUMENTS]) == {"order_id": "1001"}
    faulted = [(s.name, [e[2][N.FAULT_RULE] for e in s.events]) for s in children if s.events]
    # the call's message is in the first turn too; the second delta in the last (answering) turn
    assert faulted == [("chat gpt-realtime", ["slow-call"]), ("execute_tool get_order", ["slow-call"]),
                       ("chat gpt-realtime", ["slow-answer"])]
    for span in (s for s in children if s.events):
        (event,) = span.events
        assert event[2][N.FAULT_TYPE] == "ws_delay" and event[2][N.FAULT_DELIVERED] is True
        assert span.start_ns <= event[1] <= span.end_ns  # at the message's time, within the span


def test_a_conversations_turns_are_spans_in_order_with_its_requests(tmp_path, monkeypatch):
    """A real conversation (`--chat stdio`, tests/support/desk.py's help desk): each turn an INTERNAL
    span named for its direction, between the HTTP spans of the requests the agent made for it."""
    world = Desk()
    receiver, collector = receiving()
    with ServerThread(world.app()) as server, collector:
        monkeypatch.setenv("DESK_URL", server.url)
        monkeypatch.setenv("DESK_MODE", "careful")
        export = OtelExport(f"{collector.url}/v1/traces", content=True)
        run(RunOptions(scenario=load_scenario("observe"), tasks=task_set_from_json([close_task(
            server.url, "Yes, please close it.", ["T-77"])]), command=DESK_AGENT, out=tmp_path / "run",
            chat="stdio", show_progress=False), export=export)
        assert export.close().dropped == 0
    root, children = root_and_children(receiver.spans)
    assert root.attributes[N.VERDICT] == "pass" and root.attributes[N.TURNS] == 6
    assert [(s.name, s.kind) for s in children] == [
        ("user to agent", INTERNAL), ("GET /tickets/T-77", CLIENT), ("agent to user", INTERNAL),
        ("user to agent", INTERNAL), ("POST /tickets/T-77/close", CLIENT), ("agent to user", INTERNAL),
        ("user to agent", INTERNAL), ("agent to user", INTERNAL)]
    assert children[3].attributes[N.TURN_TEXT] == "Yes, please close it."
    assert children[3].attributes[N.TURN_DIRECTION] == "user to agent"
