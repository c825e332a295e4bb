"""`faultproxy monitor` with real clients (the openai SDK, httpx, requests) through a running
monitor process, one episode-delimiting rule per test: live episodes judged online, SIGTERM,
sampling, kill -9 and restart, and a monitored failure frozen and replayed with no upstream."""

from __future__ import annotations

import asyncio
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest
import requests
from aiohttp import web

from faultproxy import build_report, freeze, replay
from tests.support.monitor import MonitorProcess, SESSION, episodes
from tests.support.processes import logged_episodes, wait_until
from tests.support.upstream import ServerThread, Upstream
from tests.support.verdicts import failed_checks

POLICY = """\
irreversible: ["POST */refund"]
forbidden: ["GET */encoded/*"]
max_retries: 2
budgets: {cost: 0.01}
prices: {m: {input_per_mtok: 1, output_per_mtok: 1}, pricey: {input_per_mtok: 1000, output_per_mtok: 1000}}
"""


@pytest.fixture
def policy(tmp_path: Path) -> Path:
    path = tmp_path / "policy.yaml"
    path.write_text(POLICY)
    return path


@pytest.fixture
def world() -> Iterator[tuple[Upstream, ServerThread, threading.Event]]:
    """The test upstream, plus POST /hold (answers once the event is set), a refund route that
    always fails and a model that always says it is done."""
    upstream, release = Upstream(), threading.Event()
    app = upstream.app()

    async def hold(request: web.Request) -> web.Response:
        while not release.is_set():
            await asyncio.sleep(0.05)
        return web.json_response({"held": True})

    async def broken(request: web.Request) -> web.Response:
        return web.json_response({"error": "payments unavailable"}, status=500)

    async def done(request: web.Request) -> web.Response:
        message = {"role": "assistant", "content": "Done: the refund has been processed."}
        return web.json_response({"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
                                  "choices": [{"index": 0, "message": message, "finish_reason": "stop"}]})

    app.router.add_post("/hold", hold)
    app.router.add_post("/broken/{id}/refund", broken)
    app.router.add_post("/done/v1/chat/completions", done)
    with ServerThread(app) as server:
        yield upstream, server, release
        release.set()


def chat(base: str, proxy: str, headers: dict[str, str], model: str = "m") -> str:
    client = openai.OpenAI(base_url=f"{base}/v1", api_key="sk-test", max_retries=0, default_headers=headers,
                           http_client=httpx.Client(proxy=proxy))
    with client:
        answer = client.chat.completions.create(model=model, messages=[{"role": "user", "content": "hi"}])
    return answer.choices[0].message.content


def test_header_sessions_are_judged_live_and_a_monitored_failure_replays_with_no_network(
        tmp_path: Path, policy: Path) -> None:
    out = tmp_path / "run"
    upstream = Upstream()
    with ServerThread(upstream.app()) as server:
        monitor = MonitorProcess(out, "--episode-by", f"header:{SESSION}", "--idle-s", "0.3", policy=policy)
        proxies = {"http": monitor.proxy()}
        assert chat(server.url, monitor.proxy(), {SESSION: "clean"}) == "Hello from the scripted model."
        assert requests.post(f"{server.url}/items/1/refund", headers={SESSION: "clean"}, proxies=proxies).ok
        with httpx.Client(proxy=monitor.proxy(), headers={SESSION: "double"}) as client:
            assert [client.post(f"{server.url}/items/2/refund").status_code for _ in range(2)] == [200, 200]
        assert requests.get(f"{server.url}/encoded/gzip", headers={SESSION: "forbidden"}, proxies=proxies).ok
        chat(server.url, monitor.proxy(), {SESSION: "costly"}, model="pricey")  # 16 tokens at 1,000 per million
        logged = {record["monitor"]["id"]: record for record in monitor.wait_logged(4)}
        assert monitor.stop() == 0
    assert upstream.commits["refund 2"] == 2  # the monitor injected nothing
    assert logged["clean"]["verdict"]["status"] == "pass" and logged["clean"]["stats"]["exchanges"] == 2
    assert failed_checks(logged["double"]["verdict"]) == {"idempotency": "high", "effects": "high"}
    assert failed_checks(logged["forbidden"]["verdict"]) == {"policy": "high"}
    assert failed_checks(logged["costly"]["verdict"]) == {"budget": "medium"}
    assert "cost 0.016 over 0.01" in logged["costly"]["verdict"]["failed"][0]["detail"]
    assert {r["monitor"]["rule"] for r in logged.values()} == {"header:x-session-id"}

    report = build_report(out)  # the usual commands' library calls, on the monitor's directory unchanged
    assert report["planned"] == report["run"]["logged"] == 4 and report["run"]["status"]["not_run"] == 0
    assert len(report["causes"]["clusters"]) == 3
    entry = next(f.path for f in freeze(out, tmp_path / "store", representatives=True) if "idempotency" in f.expect_failed)
    agent = tmp_path / "agent.py"  # the same client code, now with its upstream gone
    agent.write_text(f"import requests\nfor _ in range(2):\n    requests.post({server.url!r} + '/items/2/refund')\n")
    [result] = replay(entry, [sys.executable, str(agent)])
    assert result.meets_expectation, result.explain()
    assert set(result.failed) == {"idempotency", "effects"} and result.blocked == [] and not result.diverged


def test_traceparent_episodes_still_open_are_judged_on_sigterm(tmp_path: Path, policy: Path, world) -> None:
    _, server, _ = world
    out = tmp_path / "run"
    monitor = MonitorProcess(out, "--episode-by", "traceparent", "--idle-s", "600", policy=policy)
    clean, double, claims, forbidden = "4bf92f3577b34da6a3ce929d0e0e4736", "0af7651916cd43dd8448eb211c80319c", \
        "a" * 32, "b" * 32
    parent = "00-{}-00f067aa0ba902b7-01".format
    proxies = {"http": monitor.proxy()}
    chat(server.url, monitor.proxy(), {"traceparent": parent(clean)})
    for _ in range(2):
        requests.post(f"{server.url}/items/7/refund", headers={"traceparent": parent(double)}, proxies=proxies)
    assert requests.post(f"{server.url}/broken/8/refund", headers={"traceparent": parent(claims)},
                         proxies=proxies).status_code == 500
    assert chat(f"{server.url}/done", monitor.proxy(), {"traceparent": parent(claims)}).startswith("Done")
    with httpx.Client(proxy=monitor.proxy(), headers={"traceparent": parent(forbidden)}) as client:
        assert client.get(f"{server.url}/encoded/br").status_code == 200
    assert wait_until(lambda: sum(len(p.read_text().splitlines()) for p in (out / "flows").glob("*.jsonl")) == 6, 30)
    assert logged_episodes(out) == 0  # all still open
    assert monitor.stop(signal.SIGTERM) == 0
    logged = {record["monitor"]["id"]: record for record in episodes(out)}
    assert set(logged) == {clean, double, claims, forbidden}
    assert {r["monitor"]["ended"] for r in logged.values()} == {"stopped"}
    assert failed_checks(logged[forbidden]["verdict"]) == {"policy": "high"}
    assert logged[clean]["verdict"]["status"] == "pass"
    assert failed_checks(logged[double]["verdict"])["idempotency"] == "high"
    assert failed_checks(logged[claims]["verdict"]) == {"claimed_success": "high"}


def test_proxy_credentials_delimit_episodes_and_sample_zero_records_nothing(
        tmp_path: Path, policy: Path, upstream) -> None:
    counter, server = upstream
    out = tmp_path / "run"
    monitor = MonitorProcess(out, "--episode-by", "auth", "--idle-s", "0.3", "--max-episodes", "2", policy=policy)

    def refunds(episode: str, times: int) -> None:
        with requests.Session() as session:
            session.proxies = {"http": monitor.proxy(episode)}
            for _ in range(times):  # a fresh connection each: credentials, not the connection, delimit
                session.post(f"{server.url}/items/3/refund", headers={"connection": "close"})

    refunds("agent-a", 1)
    refunds("agent-b", 2)
    logged = {record["monitor"]["id"]: record for record in monitor.wait_logged(2)}
    assert logged["agent-a"]["verdict"]["status"] == "pass"
    assert failed_checks(logged["agent-b"]["verdict"])["idempotency"] == "high"
    assert requests.get(f"{server.url}/encoded/gzip", proxies={"http": monitor.proxy("agent-d")}).ok
    assert wait_until(lambda: "agent-d" in {r["monitor"]["id"] for r in episodes(out)}, 30, monitor.process)
    assert failed_checks(episodes(out)[-1]["verdict"]) == {"policy": "high"}
    refunds("agent-c", 1)  # a third episode in a log capped at two: the oldest goes, with its trace
    assert wait_until(lambda: "agent-c" in {r["monitor"]["id"] for r in episodes(out)}, 30, monitor.process)
    assert monitor.stop(signal.SIGINT) == 0
    assert [r["monitor"]["id"] for r in episodes(out)] == ["agent-d", "agent-c"]
    assert not (out / logged["agent-b"]["trace"]).exists()  # the oldest went with its trace
    assert build_report(out)["run"]["logged"] == 2

    quiet = tmp_path / "unsampled"
    monitor = MonitorProcess(quiet, "--sample", "0", "--idle-s", "0.3", policy=policy)
    before = counter.commits["refund 4"]
    with httpx.Client(proxy=monitor.proxy("agent-c")) as client:
        assert client.post(f"{server.url}/items/4/refund").json()["refunded"] is True
    assert counter.commits["refund 4"] == before + 1  # passed through
    assert monitor.stop() == 0
    assert episodes(quiet) == [] and not any((quiet / "flows").glob("*.jsonl"))


def test_client_connections_after_kill_9_a_restart_judges_the_open_ones_and_keeps_the_log(
        tmp_path: Path, policy: Path, world) -> None:
    _, server, release = world
    out = tmp_path / "run"
    monitor = MonitorProcess(out, "--idle-s", "1", policy=policy)
    with requests.Session() as first:  # one keep-alive connection: one episode
        first.proxies = {"http": monitor.proxy()}
        first.post(f"{server.url}/items/5/refund")
        first.get(f"{server.url}/items/5")
    with requests.Session() as other:
        other.proxies = {"http": monitor.proxy()}
        other.get(f"{server.url}/encoded/gzip")
    before = monitor.wait_logged(2)
    assert sorted(r["verdict"]["status"] for r in before) == ["fail", "pass"]
    assert [failed_checks(r["verdict"]) for r in before if r["verdict"]["failed"]] == [{"policy": "high"}]
    second = requests.Session()
    second.proxies = {"http": monitor.proxy()}
    for _ in range(2):
        second.post(f"{server.url}/items/6/refund")
    holding = threading.Thread(target=lambda: _ignore_errors(second.post, f"{server.url}/hold"), daemon=True)
    holding.start()  # keeps the second episode open (an exchange in flight)
    trace = out / "flows"
    assert wait_until(lambda: sum(len(p.read_text().splitlines()) for p in trace.glob("*.jsonl")) == 5, 30)
    assert monitor.stop(signal.SIGKILL) == -signal.SIGKILL
    release.set()
    holding.join(10)
    second.close()
    assert episodes(out) == before  # nothing written is lost, nothing torn

    restarted = MonitorProcess(out, "--idle-s", "1", policy=policy)
    after = episodes(out)
    assert restarted.stop() == 0
    assert after[:2] == before and len(after) == 3
    recovered = after[2]
    assert recovered["monitor"]["ended"] == "recovered" and recovered["stats"]["exchanges"] == 2
    assert failed_checks(recovered["verdict"])["idempotency"] == "high"
    assert before[0]["monitor"]["rule"] == "client"


def _ignore_errors(call, *args) -> None:
    try:
        call(*args)
    except requests.RequestException:
        pass  # the monitor was killed under it
