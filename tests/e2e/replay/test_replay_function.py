"""Function agents, frozen and replayed in this process.

A function agent refunds order 1001 of the demo shop live under response_lost (its first refund
response is lost): the naive one retries without an idempotency key and refunds twice. Its
episode is frozen, the world stops, and `replay_function` replays it with no agent start-up and
no upstream: the naive function fails again, a careful one (same key on its retry) passes.
"""

from __future__ import annotations

import json
from urllib.parse import urlsplit

import httpx
import pytest

from faultproxy import Episode, run_function
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import Replayer, replay_function
from tests.support.demo_world import REFUND_TASK, TASKS, world_for_agents
from tests.support.ports import PortWatch

seen: list[Episode] = []


def refund(episode: Episode, idempotency_key: str | None) -> dict:
    seen.append(episode)
    headers = {"idempotency-key": idempotency_key} if idempotency_key else {}
    with httpx.Client(proxy=episode.proxy_url, verify=str(episode.ca_bundle), timeout=10) as client:
        for attempt in range(3):
            try:
                response = client.post(f"{episode.env['SHOP_URL']}/orders/1001/refund", json={}, headers=headers)
            except httpx.TransportError:
                continue
            return {"answer": f"Refund {response.json()['id']} issued for order 1001."}
    return {"answer": "gave up", "escalate": True}


def naive(episode: Episode) -> dict:
    return refund(episode, None)


def careful(episode: Episode) -> dict:
    return refund(episode, f"refund-1001-{episode.key}")


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The naive function's live failure, frozen; the world is stopped when this returns."""
    folder = tmp_path_factory.mktemp("replay-function")
    seen.clear()
    with pytest.MonkeyPatch.context() as mp, world_for_agents(mp) as world:
        live = run_function(naive, TASKS.only([REFUND_TASK]), k=1, scenario="response_lost", out=folder / "run")
        freeze(folder / "run", folder / "store", failing=True, env={"OPENAI_BASE_URL": None})
    ports = [urlsplit(world.shop_url).port, urlsplit(world.model_url).port]
    return {"live": live, "path": folder / "store", "ports": ports, "live_episode": seen[-1]}


def test_a_function_agent_gets_the_tasks_env_for_its_episode(store):
    episode = store["live_episode"]
    assert episode.env["SHOP_URL"].endswith(f"/t/{episode.key}")  # its own tenant, as a subprocess would get


def test_the_naive_functions_live_failure_was_frozen(store):
    assert store["live"].per_task == {REFUND_TASK: ["fail"]}
    [entry] = har.read_entries(store["path"])
    assert entry.command[0].startswith("python-function:") and entry.command[0].endswith(".naive")
    assert entry.expect == "fail" and entry.expect_failed == ["effects", "idempotency", "claimed_success"]


def test_replay_function_reproduces_the_failure_in_process_with_nothing_leaving(store, tmp_path):
    seen.clear()
    with PortWatch(store["ports"]) as watch:
        results = replay_function(naive, store["path"], ReplayOptions(out=tmp_path / "out"))
    assert watch.sockets and watch.accepted == 0
    [result] = results
    assert (result.status, sorted(result.failed), result.diverged, result.blocked) == (
        "fail", ["claimed_success", "effects", "idempotency"], [], [])
    assert result.meets_expectation
    assert [e.key for e in seen] == [result.entry.key]  # called once, with the recorded episode's key
    assert seen[0].proxy_url != store["live_episode"].proxy_url  # through the replay proxy, not the live one


def test_the_careful_function_passes_against_the_naive_functions_recording(store, tmp_path):
    [result] = replay_function(careful, store["path"], ReplayOptions(out=tmp_path / "out"))
    assert (result.status, result.failed, result.diverged) == ("pass", [], [])
    assert not result.meets_expectation  # the entry expects the naive failure


def test_a_function_entry_replayed_without_the_function_says_how(store, tmp_path):
    [entry] = har.read_entries(store["path"])
    with Replayer(ReplayOptions(out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry)
    assert result.record["cause"] == "harness_error"
    assert "replay_function" in result.record["log_tail"] and entry.command[0].split(":", 1)[1] in result.record["log_tail"]


def test_the_replay_proxy_refuses_strangers_and_they_touch_no_recording(store, tmp_path):
    """While an entry replays, another local process tries the replay proxy: with the episode and a
    wrong token, with none, and with the right token for an episode not being replayed. Each gets
    407 and a line in _rejected.jsonl; the replay still serves recording 1 to the agent itself."""
    answers, tokens = [], ["not-the-token"]

    def stranger_first(episode: Episode) -> dict:
        url = urlsplit(episode.proxy_url)
        token = url.password
        tokens.append(token)
        shop = f"{episode.env['SHOP_URL']}/orders/1001/refund"
        for proxy in (f"http://{url.username}:not-the-token@{url.hostname}:{url.port}",
                      f"http://{url.hostname}:{url.port}",
                      f"http://{url.username}x:{token}@{url.hostname}:{url.port}"):
            with httpx.Client(proxy=proxy, verify=str(episode.ca_bundle), timeout=10) as client:
                try:
                    answers.append(client.post(shop, json={}).status_code)
                except httpx.ProxyError as error:  # refused at CONNECT (an https tool URL)
                    answers.append(407 if "407" in str(error) else str(error))
        return naive(episode)

    [result] = replay_function(stranger_first, store["path"], ReplayOptions(out=tmp_path / "out"))
    assert answers == [407, 407, 407]
    assert (result.status, sorted(result.failed), result.diverged) == (
        "fail", ["claimed_success", "effects", "idempotency"], [])
    assert result.meets_expectation and [s["recorded"] for s in result.served][0] == 1
    rejected = [json.loads(line) for line in (tmp_path / "out" / "flows" / "_rejected.jsonl").read_text().splitlines()]
    assert [r["reason"] for r in rejected] == ["wrong token", "no episode credentials", "unknown episode"]
    assert not [r for r in rejected for token in tokens if token in json.dumps(r)]  # no credentials in the log
