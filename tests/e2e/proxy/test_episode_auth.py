"""Authenticated episodes: a runner's proxy takes only its own random token and only the episodes
it began; anything else gets 407 and a line in flows/_rejected.jsonl, never in an episode's trace.
Hand-run proxies stay open on loopback; any other address needs --allow-remote and --auth."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import aiohttp
import httpx
import pytest
import requests

from faultproxy import RunOptions, run
from faultproxy.cli.main import main
from faultproxy.formats.errors import UsageError
from faultproxy.formats.trace import read_trace, rejected_path, trace_path
from faultproxy.proxy.auth import new_token
from faultproxy.proxy.server import ProxyServer
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.fixtures import NOTHING
from tests.support.layout import AGENTS

INTRUDER = [sys.executable, str(AGENTS / "intruder_agent.py")]


def rejected(flows: Path) -> list[dict]:
    return list(read_trace(rejected_path(flows)))


@pytest.fixture
def guarded(make_proxy, tmp_path):
    """A proxy as a run makes it: a random token, only begun episodes."""
    proxy = make_proxy(NOTHING, trace_dir=tmp_path / "flows", token=new_token(), only_begun=True)
    proxy.begin_episode("ep-a")
    return proxy


def test_wrong_token_unknown_episode_and_no_credentials_get_407_and_stay_out_of_traces(guarded, upstream, tmp_path):
    _, server = upstream
    proxy, flows = guarded, tmp_path / "flows"
    address = f"{proxy.host}:{proxy.port}"
    assert httpx.get(f"{server.url}/items/1", proxy=proxy.proxy_url("ep-a")).status_code == 200
    assert httpx.get(f"{server.url}/items/2", proxy=f"http://ep-a:wrong-token-1234567@{address}").status_code == 407
    assert requests.get(f"{server.url}/items/3", proxies={"http": proxy.proxy_url("ep-b")}).status_code == 407
    assert httpx.get(f"{server.url}/items/4", proxy=f"http://{address}").status_code == 407
    proxy.end_episode("ep-a")
    assert httpx.get(f"{server.url}/items/5", proxy=proxy.proxy_url("ep-a")).status_code == 407  # ended

    assert [line["request"]["url"] for line in read_trace(trace_path(flows, "ep-a"))] == [f"{server.url}/items/1"]
    assert not trace_path(flows, "ep-b").exists()
    lines = rejected(flows)
    assert [(line["episode"], line["reason"]) for line in lines] == [
        ("ep-a", "wrong token"), ("ep-b", "unknown episode"), (None, "no episode credentials"),
        ("ep-a", "unknown episode")]
    assert [line["url"] for line in lines] == [f"{server.url}/items/{i}" for i in (2, 3, 4, 5)]
    text = rejected_path(flows).read_text()
    assert proxy.token not in text and "wrong-token-1234567" not in text  # tokens never reach disk


def test_a_tunnel_with_a_wrong_token_is_refused_before_it_opens(guarded, https_upstream, tmp_path):
    _, server = https_upstream
    proxy = guarded
    with httpx.Client(proxy=proxy.proxy_url("ep-a"), verify=str(proxy.ca_bundle)) as good:
        assert good.get(f"{server.url}/items/1").status_code == 200
    bad = f"http://ep-a:{'z' * 24}@{proxy.host}:{proxy.port}"
    with httpx.Client(proxy=bad, verify=str(proxy.ca_bundle)) as client, pytest.raises(httpx.ProxyError, match="407"):
        client.get(f"{server.url}/items/2")

    async def aiohttp_other_episode() -> int:
        async with aiohttp.ClientSession() as session:
            try:
                async with session.get(f"{server.url}/items/3", proxy=proxy.proxy_url("ep-b"), ssl=False) as response:
                    return response.status
            except aiohttp.ClientHttpProxyError as error:
                return error.status
    assert asyncio.run(aiohttp_other_episode()) == 407
    proxy.end_episode("ep-a")
    assert len(list(read_trace(trace_path(tmp_path / "flows", "ep-a")))) == 1
    assert [(line["method"], line["reason"]) for line in rejected(tmp_path / "flows")] == [
        ("CONNECT", "wrong token"), ("CONNECT", "unknown episode")]


def test_reverse_mode_carries_the_token_after_the_episode(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(NOTHING, trace_dir=tmp_path / "flows", upstreams={"shop": server.url},
                       token=new_token(), only_begun=True)
    proxy.begin_episode("ep-r")
    base = proxy.reverse_url("ep-r", "shop")
    assert base.endswith(f"/ep-r:{proxy.token}/shop")
    assert httpx.get(f"{base}/items/1").status_code == 200
    root = f"http://{proxy.host}:{proxy.reverse_port}"
    assert httpx.get(f"{root}/ep-r/shop/items/2").status_code == 407
    assert httpx.get(f"{root}/ep-r:{'q' * 24}/shop/items/3").status_code == 407
    assert httpx.get(f"{root}/ep-x:{proxy.token}/shop/items/4").status_code == 407
    proxy.end_episode("ep-r")
    assert len(list(read_trace(trace_path(tmp_path / "flows", "ep-r")))) == 1
    assert [line["reason"] for line in rejected(tmp_path / "flows")] == ["no token", "wrong token", "unknown episode"]


def test_a_run_refuses_an_agent_writing_into_other_episodes(tmp_path, upstream, monkeypatch):
    _, server = upstream
    monkeypatch.setenv("PROBE_UPSTREAM", server.url)
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text(json.dumps({"id": "t", "prompt": "p", "shape": "lookup"}) + "\n")
    path = tmp_path / "scenario.yaml"
    path.write_text(NOTHING)
    out = tmp_path / "run"
    run(RunOptions(scenario=load_scenario(path), tasks=load_tasks(tasks), command=INTRUDER, out=out,
                   show_progress=False))
    record = json.loads((out / "episodes.jsonl").read_text().splitlines()[-1])
    assert record["output"]["answer"] == [200, 407, 407], record
    flows = out / "flows"
    traces = [p for p in flows.glob("*.jsonl") if p != rejected_path(flows)]
    assert len(traces) == 1
    assert [line["request"]["url"] for line in read_trace(traces[0])] == [f"{server.url}/items/1"]
    assert [(line["episode"], line["reason"]) for line in rejected(flows)] == [
        (record["key"], "wrong token"), ("someone-else", "unknown episode")]


def test_the_hand_run_proxy_stays_open_on_loopback(make_proxy, upstream, tmp_path):
    _, server = upstream
    proxy = make_proxy(NOTHING, trace_dir=tmp_path / "flows")
    assert httpx.get(f"{server.url}/items/1", proxy=f"http://by-hand:anything@{proxy.host}:{proxy.port}").status_code == 200
    assert httpx.get(f"{server.url}/items/1", proxy=proxy.url).status_code == 200  # the default episode
    proxy.end_episode("by-hand")
    assert len(list(read_trace(trace_path(tmp_path / "flows", "by-hand")))) == 1
    assert httpx.get(f"{server.url}/items/1", proxy=f"http://_rejected:x@{proxy.host}:{proxy.port}").status_code == 407


@pytest.mark.parametrize(("options", "message"), [
    (["--host", "0.0.0.0"], "--host 0.0.0.0 is not loopback: anyone who reaches it could use the proxy, also to "
                            "reach this machine's loopback services; add --allow-remote and --auth"),
    (["--host", "0.0.0.0", "--allow-remote"], "--host 0.0.0.0 needs --auth: a proxy other machines reach must "
                                               "check a token"),
])
def test_a_host_beyond_loopback_needs_allow_remote_and_auth(capsys, options, message):
    assert main(["proxy", "--scenario", "rate_limit", "--port", "0", *options]) == 2
    assert capsys.readouterr().err == f"faultproxy: {message}\n"


def test_a_chosen_token_must_be_long(capsys, monkeypatch):
    monkeypatch.setenv("FAULTPROXY_TOKEN", "short")
    assert main(["proxy", "--scenario", "rate_limit", "--port", "0", "--auth"]) == 2
    assert "$FAULTPROXY_TOKEN must be at least 16" in capsys.readouterr().err


def test_the_library_refuses_a_remote_proxy_without_a_token():
    with pytest.raises(UsageError, match="needs a proxy token"):
        ProxyServer(None, host="0.0.0.0")


def test_allow_remote_with_auth_serves_only_the_token(make_proxy, upstream):
    _, server = upstream
    proxy = make_proxy(NOTHING, host="0.0.0.0", token=new_token())
    assert httpx.get(f"{server.url}/items/1", proxy=f"http://ep:{proxy.token}@127.0.0.1:{proxy.port}").status_code == 200
    assert httpx.get(f"{server.url}/items/1", proxy=f"http://ep:x@127.0.0.1:{proxy.port}").status_code == 407
