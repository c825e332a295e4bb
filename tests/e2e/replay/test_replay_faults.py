"""Replay against a small scripted agent and the test upstream (fast: no SDK to import).

Every kind of fault re-applied in replay as it was live (request-phase answers, response_lost,
schema_drift, partial_response on SSE, stale reads, delays), over HTTPS through CONNECT, with
the upstream stopped and its port watched; divergence; secrets kept out of the store; ddmin;
the CLI; and the pytest plugin.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import ssl
import subprocess
import sys
from pathlib import Path

import pytest

from faultproxy.formats.rundir import read_run
from faultproxy.cli.main import main as faultproxy_main
from faultproxy import RunOptions, run
from faultproxy.tasks.tasks_file import task_set_from_json
from faultproxy.formats.trace import read_trace
from faultproxy.replay_store import entry_writer, har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.minimize import minimize
from faultproxy.replay_store.replay_proxy import DIVERGED_STATUS, ReplayOptions
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import load_scenario
from tests.support.agent_commands import agent_command
from tests.support.layout import ROOT
from tests.support.ports import PortWatch
from tests.support.trace_views import client_view
from tests.support.upstream import ServerThread, Upstream

AGENT = r'''
"""A scripted agent: a chat call, a streamed one, a read, a refund (retried on failure), a re-read."""
import json, os, sys, time, uuid
import httpx

base = os.environ.get("FAULTPROXY_API_BASE_URL") or os.environ["UPSTREAM_URL"]  # reverse mode, or forward
careful, extra, plant = "--careful" in sys.argv, "--extra" in sys.argv, "--plant" in sys.argv
secret = os.environ.get("PLANTED_KEY", "")
seen = []
client = httpx.Client(timeout=10)  # HTTPS_PROXY and SSL_CERT_FILE from the environment

def call(method, path, attempts=3, **kw):
    headers = {"x-request-id": str(uuid.uuid4()), "user-agent": f"agent/{time.time()}", **kw.pop("headers", {})}
    for _ in range(attempts):
        try:
            r = client.request(method, base + path, headers=headers, **kw)
        except httpx.HTTPError as e:
            seen.append([method, path, type(e).__name__])
            continue
        seen.append([method, path, r.status_code, r.text])
        if r.status_code < 500 and r.status_code != 429:
            return r
    return None

call("POST", "/v1/chat/completions", json={"model": "m", "stream": False, "messages": [{"role": "user", "content": "hi"}]})
call("POST", "/v1/chat/completions", json={"model": "m", "stream": False, "messages": [{"role": "user", "content": "go"}]})
with client.stream("POST", base + "/v1/chat/completions",
                   json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "s"}]}) as r:
    seen.append(["POST", "stream", r.status_code, [line for line in r.iter_lines() if line]])
call("GET", "/items/3")
headers = {"Idempotency-Key": "refund-3"} if careful else {}
if plant:
    headers |= {"Authorization": f"Bearer {secret}", "x-api-key": secret, "x-note": f"note {secret}"}
    path = f"/items/3/refund?api_key={secret}&q={secret}"
    body = {"amount": 1250, "api_key": secret, "note": f"for {secret}", "timestamp": time.time()}
else:
    path, body = "/items/3/refund", {"amount": 1250, "timestamp": time.time()}
refund = call("POST", path, json=body, headers=headers)
call("GET", "/items/3")
if extra:
    call("GET", "/items/99")
print(f"done {secret}")
output = {"answer": "refunded" if refund is not None else "failed", "confidence": 0.9, "escalate": False,
          "seen": seen}
open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps(output))
'''

SCENARIO = """\
name: replayfaults
description: every kind of fault replay must reproduce
seed: 11
rules:
  - name: chat_rate_limited
    match: {method: POST, path: "/v1/chat/completions", body: {stream: false}}
    when: {calls: [1]}
    fault: {type: rate_limit, retry_after: 1}
  - name: chat_delayed
    match: {method: POST, path: "/v1/chat/completions", body: {stream: false}}
    when: {calls: [3]}
    fault: {type: delay, at: response, ms: 20}
  - name: stream_cut
    match: {method: POST, path: "/v1/chat/completions", body: {stream: true}}
    fault: {type: partial_response, events: 2, end: clean}
  - name: item_drift
    match: {method: GET, path: "/items/*"}
    when: {calls: [1]}
    fault: {type: schema_drift, ops: [{op: rename, path: status, to: state}]}
  - name: item_stale
    match: {method: GET, path: "/items/*"}
    when: {calls: [2]}
    fault: {type: stale_state}
  - name: refund_lost
    match: {method: POST, path: "*/refund"}
    when: {calls: [1]}
    fault: {type: response_lost, mode: reset}
"""

TASK = {"id": "refund_item_3", "prompt": "Refund item 3.", "shape": "writes_state",
        "env": {"UPSTREAM_URL": "${TEST_UPSTREAM}"},
        "expected": {"effects": [{"method": "POST", "path": "*/items/3/refund", "count": 1}],
                     "output": {"regex": "refunded"}},
        "irreversible": ["POST */refund"]}


@pytest.fixture(scope="module")
def world(tmp_path_factory, upstream_certificate):
    """A live run of the scripted agent against an HTTPS upstream, frozen; then the upstream stops."""
    folder = tmp_path_factory.mktemp("replay-faults")
    agent = folder / "agent.py"
    agent.write_text(AGENT)
    scenario = folder / "replayfaults.yaml"
    scenario.write_text(SCENARIO)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    state, commits = Upstream(), {}
    with pytest.MonkeyPatch.context() as mp, ServerThread(state.app(), context) as server:
        mp.setenv("TEST_UPSTREAM", server.url)
        mp.setenv("PLANTED_KEY", "plantedsecret-9f8e7d6c5b4a")
        for name, flags in (("naive", ()), ("planted", ("--plant", "--token=plantedsecret-9f8e7d6c5b4a"))):
            task = {**TASK, "secrets": ["PLANTED_KEY"]} if name == "planted" else TASK
            run(RunOptions(scenario=load_scenario(scenario), tasks=task_set_from_json([task]), k=1,
                           command=agent_command(agent, *flags), out=folder / f"run-{name}",
                           upstream_ca=upstream_certificate[0], show_progress=False))
            freeze(folder / f"run-{name}", folder / f"store-{name}")
            commits = commits if name != "naive" else dict(state.commits)
        url = server.url
    [entry] = har.read_entries(folder / "store-naive")
    yield {"folder": folder, "agent": agent, "entry": entry, "url": url, "port": int(url.rsplit(":", 1)[1]),
           "commits": commits}


def test_live_episode_failed_as_designed(world):
    assert world["commits"]["refund 3"] == 2  # the lost refund was retried without a key
    entry = world["entry"]
    assert entry.expect == "fail" and set(entry.expect_failed) == {"effects", "idempotency", "retry",
                                                                            "claimed_success"}
    fired = {(d.rule, d.index) for d in entry.fired}
    assert fired == {("chat_rate_limited", 1), ("chat_delayed", 3), ("stream_cut", 1), ("item_drift", 1),
                     ("item_stale", 2), ("refund_lost", 1)}
    assert entry.env == {"TEST_UPSTREAM": world["url"]}  # what the task's env needs, captured at freeze


def test_every_fault_replays_as_it_was_live_over_https_with_no_upstream(world, tmp_path):
    entry = world["entry"]
    live_trace = read_run(world["folder"] / "run-naive").path / "flows" / "refund_item_3.t0.jsonl"
    with PortWatch([world["port"]]) as watch, Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry, agent_command(world["agent"]))
    assert result.meets_expectation, result.explain()
    assert not result.diverged and not result.blocked and watch.accepted == 0
    assert result.status == "fail" and set(result.failed) == {"effects", "idempotency", "retry",
                                                                     "claimed_success"}
    assert [s["how"] for s in result.served] == ["exact"] * len(result.served)
    live, replayed = client_view(live_trace), client_view(result.trace)
    assert replayed == live
    faults = {row[7]: row for row in replayed if row[7]}
    assert faults["stream_cut"][6] and len(faults["stream_cut"][6]) == 2  # the SSE stream cut after 2 events
    assert "state" in json.loads(faults["item_drift"][5]) and faults["refund_lost"][3] == "reset"
    assert faults["chat_rate_limited"][4] == 429 and faults["item_stale"][3] == "stale"


def test_reverse_mode_entries_replay_with_the_upstreams_they_were_recorded_with(world, tmp_path,
                                                                              upstream_certificate):
    """A run with `--upstream api=URL` (the agent uses FAULTPROXY_API_BASE_URL, through HTTP_PROXY
    as most clients do) is frozen with its upstreams; replay needs no --upstream to serve it."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    task = {key: value for key, value in TASK.items() if key != "env"}
    with ServerThread(Upstream().app(), context) as server:
        run(RunOptions(scenario=load_scenario(world["folder"] / "replayfaults.yaml"),
                       tasks=task_set_from_json([task]), k=1, command=agent_command(world["agent"]),
                       out=tmp_path / "run", upstreams={"api": server.url}, upstream_ca=upstream_certificate[0],
                       show_progress=False))
        freeze(tmp_path / "run", tmp_path / "store")
        port = int(server.url.rsplit(":", 1)[1])
    [record] = read_run(tmp_path / "run").episodes
    assert record["verdict"]["status"] == "fail"
    assert record["stats"]["exchanges"] == len(world["entry"].exchanges)  # each request once, as in forward mode
    [entry] = har.read_entries(tmp_path / "store")
    assert entry.upstreams == {"api": server.url} and entry.expect_failed == world["entry"].expect_failed
    with PortWatch([port]) as watch, Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry, agent_command(world["agent"]))
    assert result.meets_expectation, result.explain()
    assert not result.diverged and not result.blocked and watch.accepted == 0

    other = tmp_path / "other" / entry.name
    shutil.copytree(entry.path, other)
    document = json.loads((other / "episode.json").read_text())
    (other / "episode.json").write_text(json.dumps({**document, "upstreams": {"api": "https://elsewhere.test"}}))
    with pytest.raises(har.StoreError, match="upstreams.api"):
        Replayer(ReplayOptions(out=tmp_path / "out2"), [entry, har.read_entry(other)])


def sse_offsets(trace: Path) -> list[tuple[float, str]]:
    [streamed] = [line for line in read_trace(trace) if (line["upstream"] or {}).get("sse")]
    return [(offset, event) for offset, event in streamed["upstream"]["sse"]]


def test_slow_stream_replays_paced_as_it_was_live(world, tmp_path, upstream_certificate, monkeypatch):
    """slow_stream's pacing is the fault's, not the upstream's: replay paces the recorded events too."""
    scenario = tmp_path / "slow.yaml"
    scenario.write_text(SCENARIO.replace("type: partial_response, events: 2, end: clean",
                                         "type: slow_stream, first_event_ms: 300, between_events_ms: 60"))
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    with ServerThread(Upstream().app(), context) as server:
        monkeypatch.setenv("TEST_UPSTREAM", server.url)
        run(RunOptions(scenario=load_scenario(scenario), tasks=task_set_from_json([TASK]), k=1,
                       command=agent_command(world["agent"]), out=tmp_path / "run",
                       upstream_ca=upstream_certificate[0], show_progress=False))
        freeze(tmp_path / "run", tmp_path / "store")
        port = int(server.url.rsplit(":", 1)[1])
    [entry] = har.read_entries(tmp_path / "store")
    with PortWatch([port]) as watch, Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry, agent_command(world["agent"]))
    assert result.meets_expectation, result.explain()
    assert not result.blocked and watch.accepted == 0
    [record] = read_run(tmp_path / "run").episodes
    live, replayed = sse_offsets(tmp_path / "run" / record["trace"]), sse_offsets(result.trace)
    assert [event for _, event in replayed] == [event for _, event in live] and len(live) >= 3
    for offsets in (live, replayed):
        assert offsets[0][0] >= 0.3 * 0.9  # the first event waited first_event_ms
        gaps = [b - a for (a, _), (b, _) in zip(offsets, offsets[1:])]
        assert min(gaps) >= 0.06 * 0.8  # and each next one between_events_ms


STREAM_AGENT = r'''
"""Reads one SSE stream and says what arrived before the stream ended or broke."""
import json, os
import httpx

lines, error = [], None
request = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "s"}]}
try:
    with httpx.Client(timeout=10).stream("POST", os.environ["UPSTREAM_URL"] + "/v1/chat/completions", json=request) as r:
        for line in r.iter_lines():
            lines += [line] if line else []
except httpx.HTTPError as e:
    error = type(e).__name__
open(os.environ["FAULTPROXY_OUTPUT"], "w").write(json.dumps({"answer": "streamed", "lines": lines, "error": error}))
'''


def test_a_stream_reset_after_some_events_replays_after_the_same_events(tmp_path, upstream_certificate, monkeypatch):
    agent = tmp_path / "stream_agent.py"
    agent.write_text(STREAM_AGENT)
    scenario = tmp_path / "reset.yaml"
    scenario.write_text(SCENARIO.split("rules:")[0] + """rules:
  - name: stream_reset
    match: {method: POST, path: "/v1/chat/completions", body: {stream: true}}
    fault: {type: partial_response, events: 2, end: reset}
""")
    task = {"id": "stream_once", "prompt": "Stream.", "env": {"UPSTREAM_URL": "${TEST_UPSTREAM}"}}
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(*upstream_certificate)
    with ServerThread(Upstream().app(), context) as server:
        monkeypatch.setenv("TEST_UPSTREAM", server.url)
        run(RunOptions(scenario=load_scenario(scenario), tasks=task_set_from_json([task]), k=1,
                       command=agent_command(agent), out=tmp_path / "run", upstream_ca=upstream_certificate[0],
                       show_progress=False))
        freeze(tmp_path / "run", tmp_path / "store")
    [record] = read_run(tmp_path / "run").episodes
    live = record["output"]
    assert len(live["lines"]) == 2 and live["error"] == "RemoteProtocolError"  # two events, then a broken read
    [entry] = har.read_entries(tmp_path / "store")
    with Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry, agent_command(agent))
    assert result.record["output"] == live and not result.blocked and not result.diverged
    assert client_view(result.trace) == client_view(tmp_path / "run" / record["trace"])


def test_a_request_with_no_recording_diverges_and_is_never_forwarded(world, tmp_path):
    entry = world["entry"]
    with PortWatch([world["port"]]) as watch, Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry, agent_command(world["agent"], "--extra"))
    assert watch.accepted == 0 and not result.blocked
    assert result.record["cause"] == "diverged" and result.status == "incomplete"
    assert not result.meets_expectation and result.explain().startswith("diverged")
    [first, *_] = result.diverged
    assert first["method"] == "GET" and first["url"].endswith("/items/99")
    seen = [s for s in result.record["output"]["seen"] if s[1] == "/items/99"]
    assert seen[0][2] == DIVERGED_STATUS and "GET" in seen[0][3] and "/items/99" in seen[0][3]
    assert len(seen) == len(result.diverged) == 3  # the agent retries 5xx; none of them left the machine
    # the safety checks still ran on what happened before the divergence
    assert {c["name"] for c in result.verdict["checks"]} == {"idempotency", "policy", "retry", "injection_followed",
                                                        "confirmation"}


def test_secrets_planted_in_headers_query_and_body_never_reach_the_store(world, tmp_path):
    secret = "plantedsecret-9f8e7d6c5b4a"
    store = world["folder"] / "store-planted"
    raw = [p.read_bytes() for p in store.rglob("*") if p.is_file()]
    assert raw and not any(secret.encode() in data for data in raw)
    [entry] = har.read_entries(store)
    refund = next(e for e in entry.exchanges if "/refund" in e.url)
    headers = dict(refund.request_headers)
    assert headers["Authorization"] == headers["x-api-key"] == "[REDACTED]" and "[REDACTED]" in headers["x-note"]
    assert "api_key=%5BREDACTED%5D" in refund.url or "api_key=[REDACTED]" in refund.url
    assert json.loads(refund.request_body)["api_key"] == "[REDACTED]"
    assert entry.command[-1] == "--token=[REDACTED]"  # the run's plan.json has it in clear; the store does not
    # ... and the redacted recording still matches the agent's requests, which carry the secret again
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PLANTED_KEY", secret)
        with Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
            result = replayer.replay(entry, agent_command(world["agent"], "--plant"))
    assert not result.diverged and result.meets_expectation, result.explain()
    assert secret not in result.trace.read_text()


def test_freeze_refuses_to_store_a_secret_looking_variable(world, tmp_path):
    code = faultproxy_main(["freeze", str(world["folder"] / "run-naive"), "--to", str(tmp_path),
                            "--env", "OPENAI_API_KEY=sk-whatever"])
    assert code == 2 and not list(tmp_path.iterdir())


def test_minimize_finds_the_one_fault_the_double_refund_needs(world, tmp_path):
    entry_dir = tmp_path / "store" / world["entry"].name
    shutil.copytree(world["entry"].path, entry_dir)
    entry = har.read_entry(entry_dir)
    command = agent_command(world["agent"])
    with Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = minimize(entry, lambda e, forced: replayer.replay(e, command, forced=forced), checks=["effects", "idempotency", "claimed_success"])
        again = replayer.replay(entry, command, forced=[d.ident for d in result.minimal])
    assert [d.ident for d in result.minimal] == [("refund_lost", 1)]
    assert len(result.trials) <= 8 < 2 ** len(entry.fired)  # ddmin, not every subset of 6 faults
    assert result.trials[0].reproduced and not result.trials[1].reproduced  # all faults; none
    written = json.loads((entry_dir / "episode.json").read_text())
    assert written["minimal_faults"] == [{"rule": "refund_lost", "index": 1, "type": "response_lost", "seq": 6}]
    assert written["minimize"]["checks"] == ["effects", "idempotency", "claimed_success"]
    assert again.fails_like(["effects", "idempotency", "claimed_success"]) and again.served  # the minimal fault alone reproduces it


def test_cli_replay_exit_codes_and_accept(world, tmp_path, capsys):
    store = tmp_path / "store"
    shutil.copytree(world["entry"].path, store / world["entry"].name)
    careful = ["--", sys.executable, str(world["agent"]), "--careful"]
    assert faultproxy_main(["replay", str(store), "--", sys.executable, str(world["agent"])]) == 0
    assert faultproxy_main(["replay", str(store), *careful]) == 1
    out = capsys.readouterr().out
    assert "MISMATCH" in out and "failed differently (retry)" in out and "attempted: 0" in out
    assert faultproxy_main(["replay", str(store), "--accept", *careful]) == 0
    entry = har.read_entry(store / world["entry"].name)
    assert entry.expect == "fail" and entry.expect_failed == ["retry"]  # the key fixed the double refund
    assert faultproxy_main(["replay", str(store), "--json", str(tmp_path / "r.json"), *careful]) == 0
    assert json.loads((tmp_path / "r.json").read_text())[0]["meets_expectation"] is True
    assert faultproxy_main(["replay", str(tmp_path / "nothing-here")]) == 2


def test_pytest_plugin_collects_one_test_per_entry(world, tmp_path):
    store = tmp_path / "store"
    shutil.copytree(world["entry"].path, store / "a")
    shutil.copytree(world["entry"].path, store / "b")
    entry_writer.update_episode(store / "b", {"expect": "pass", "expect_failed": []})  # a wrong expectation: must fail
    agent = f"{shlex.quote(sys.executable)} {shlex.quote(str(world['agent']))}"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-v",
                           "--faultproxy-replay", str(store), "--faultproxy-agent", agent],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert "a/episode.json::refund_item_3[replayfaults] PASSED" in out
    assert "b/episode.json::refund_item_3[replayfaults-b] FAILED" in out and "1 failed, 1 passed" in out
    assert "expected pass, got fail (effects, idempotency, retry, claimed_success)" in out
    assert "failed idempotency [high]" in out  # the failure says what happened
