"""What replay needs from the environment: freeze stores the base URLs the run's agents used (so
an entry replays without knowing the ports it was recorded with), and a variable that is still
missing is named, in one line, before anything replays."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from examples.world import world_in_thread
from faultproxy import RunOptions, replay, run
from faultproxy.cli.main import main
from faultproxy.formats.rundir import read_run
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.runner.run_options import reverse_variables
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks, single_task
from tests.support.layout import EXAMPLES
from tests.support.upstream import ServerThread, Upstream

NAIVE = [sys.executable, str(EXAMPLES / "naive_agent.py")]


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The naive agent's failing refund, run live in the demo world, then frozen from a shell that
    has none of the world's variables (no --env given)."""
    folder = tmp_path_factory.mktemp("replay-env")
    tasks = load_tasks(EXAMPLES / "tasks.yaml")
    tasks = replace(tasks, tasks=tuple(t for t in tasks.tasks if t.id == "refund_order_1001"))
    with pytest.MonkeyPatch.context() as mp:
        with world_in_thread() as world:
            for name, value in world.env().items():
                mp.setenv(name, value)
            run(RunOptions(scenario=load_scenario("response_lost"), tasks=tasks, out=folder / "run",
                           command=NAIVE, show_progress=False))
    assert "SHOP_ROOT" not in os.environ and "OPENAI_BASE_URL" not in os.environ
    [frozen] = freeze(folder / "run", folder / "store", failing=True)
    return folder / "store", har.read_entry(frozen.path), world


def replay_cli(store: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "faultproxy", "replay", str(store), *options, "--", *NAIVE],
                          capture_output=True, text=True, timeout=180,
                          env={k: v for k, v in os.environ.items() if k not in ("SHOP_ROOT", "OPENAI_BASE_URL")})


def test_freeze_stores_the_model_base_url_the_run_used(store):
    _, entry, world = store
    model_urls = {"OPENAI_BASE_URL": world.model_url, "GOOGLE_GEMINI_BASE_URL": world.model_url.removesuffix("/v1")}
    assert entry.env == model_urls  # SHOP_ROOT was not set where freeze ran
    assert json.loads((entry.path.parent.parent / "run" / "plan.json").read_text())["base_urls"] == model_urls


def test_a_variable_the_entry_lacks_is_named_before_anything_replays(store):
    path, entry, _ = store
    result = replay_cli(path, "--env", "OPENAI_API_KEY=replay")
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"faultproxy: {entry.path / 'episode.json'}: task.env: ${{SHOP_ROOT}} is not set (needed by "
        "'${SHOP_ROOT}/t/${FAULTPROXY_EPISODE}'); the entry does not store it: give it with --env SHOP_ROOT=VALUE"]


def test_given_that_variable_the_entry_replays_without_being_told_the_model_url(store):
    path, _, world = store  # the world is stopped; OPENAI_BASE_URL comes from the entry
    result = replay_cli(path, "--env", f"SHOP_ROOT={world.shop_url}", "--env", "OPENAI_API_KEY=replay")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1/1 replay(s) as expected; upstream connections attempted: 0" in result.stdout


# An agent that ignores HTTPS_PROXY and reaches its model only through OPENAI_BASE_URL (what
# `--reverse OPENAI_BASE_URL` is for): at replay the variable must lead to the replay proxy.
PROXYLESS_AGENT = """\
import os, httpx
with httpx.Client(trust_env=False) as client:
    answer = client.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions",
                         json={"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    answer.raise_for_status()
print(answer.json()["choices"][0]["message"]["content"])
"""


def test_a_reverse_variable_leads_to_the_replay_proxy_with_the_upstream_gone(tmp_path, monkeypatch):
    agent = tmp_path / "agent.py"
    agent.write_text(PROXYLESS_AGENT)
    command = [sys.executable, str(agent)]
    with ServerThread(Upstream().app()) as server:
        monkeypatch.setenv("OPENAI_BASE_URL", f"{server.url}/v1")
        upstreams, base_url_env = reverse_variables(["OPENAI_BASE_URL"], os.environ, {})
        run(RunOptions(scenario=load_scenario("rate_limit", {"lambda": 0.0}), tasks=single_task("Say hi."), out=tmp_path / "run", command=command,
                       upstreams=upstreams, base_url_env=base_url_env, show_progress=False))
        [record] = read_run(tmp_path / "run").episodes
        [frozen] = freeze(tmp_path / "run", tmp_path / "store", episodes=[record["key"]])
    assert record["verdict"]["status"] == "pass" and record["stats"]["exchanges"] == 1
    assert har.read_entry(frozen.path).base_url_env == {"OPENAI_BASE_URL": "openai"}
    [result] = replay(frozen.path, command)  # the model server is gone: only the recording answers
    assert result.status == "pass" and result.meets_expectation, result.explain()
    assert [s["how"] for s in result.served] == ["exact"] and not result.blocked and not result.unserved


@pytest.mark.parametrize("given", ["OPENAI_API_KEY=sk-live-Zx2Cv7Bn9Mq4Wd8Lp3", "OPENAI_API_KEY"])
def test_freeze_refuses_a_secret_variable_and_says_to_pass_it_at_replay_time(store, tmp_path, capsys, given):
    """A secret-named --env would be written into the store: one line naming it, the value not
    echoed, nothing written."""
    run_dir = store[0].parent / "run"
    code = main(["freeze", str(run_dir), "--to", str(tmp_path / "store"), "--env", given])
    err = capsys.readouterr().err
    assert code == 2 and err.splitlines() == [
        "faultproxy: --env: OPENAI_API_KEY: looks like a secret, and secrets are never written into a store: "
        "pass it at replay time instead (faultproxy replay --env OPENAI_API_KEY=...)"]
    assert not (tmp_path / "store").exists()
