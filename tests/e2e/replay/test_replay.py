"""The demo world's failure, frozen and replayed with every upstream stopped.

The naive agent's response_lost refund episode (it refunds twice) is frozen from a live run;
then the shop and the model server stop, their ports are watched, and the episode replays to
the same verdict 10 times out of 10 without a connection leaving the proxy. The careful agent,
replayed against the naive agent's recording, passes.
"""

from __future__ import annotations

import sys
from urllib.parse import urlsplit

import pytest

from faultproxy.formats.rundir import read_run
from faultproxy import RunOptions, run
from faultproxy.cli.main import main as faultproxy_main
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay_proxy import ReplayOptions
from faultproxy.runner.replay_agents import Replayer
from faultproxy.scenarios import load_scenario
from tests.support.demo_world import REFUND_TASK, TASKS, demo_agent, world_for_agents
from tests.support.layout import EXAMPLES
from tests.support.ports import PortWatch
from tests.support.verdicts import check

@pytest.fixture(scope="module")
def frozen(tmp_path_factory):
    """Run the naive agent live, freeze its failing episode, stop the world; yields what replay needs."""
    folder = tmp_path_factory.mktemp("replay-demo")
    with pytest.MonkeyPatch.context() as mp:
        with world_for_agents(mp) as world:
            run(RunOptions(scenario=load_scenario("response_lost"), tasks=TASKS.only([REFUND_TASK]),
                           out=folder / "run", k=1, command=demo_agent("naive"), show_progress=False))
            frozen = freeze(folder / "run", folder / "store", failing=True, env={"OPENAI_BASE_URL": None})
        # The world is stopped here: the shop and the model server no longer listen.
    [record] = read_run(folder / "run").episodes
    ports = [urlsplit(world.shop_url).port, urlsplit(world.model_url).port]
    return {"record": record, "frozen": frozen, "entry": har.read_entry(frozen[0].path), "ports": ports,
            "env": {"OPENAI_API_KEY": "replay-needs-no-key"}}


def test_the_live_naive_episode_failed_and_was_frozen(frozen):
    record, entry = frozen["record"], frozen["entry"]
    assert record["verdict"]["status"] == "fail"
    assert {c["name"] for c in record["verdict"]["failed"]} == {"end_state", "effects", "idempotency",
                                                                    "claimed_success"}
    assert entry.expect == "fail" and entry.expect_failed == ["effects", "idempotency", "claimed_success"]
    assert [d.ident for d in entry.fired] == [("write_lost", 1)]
    # enough to reach the same URLs again (the world names its model for the Gemini SDK too)
    assert set(entry.env) == {"SHOP_ROOT", "OPENAI_BASE_URL", "GOOGLE_GEMINI_BASE_URL"}
    assert len(entry.exchanges) == record["stats"]["exchanges"] == 6
    lost = next(e for e in entry.exchanges if e.fault)
    assert lost.status == 201 and lost.client["outcome"] == "reset"  # the upstream's answer, not the client's


def test_frozen_failure_replays_to_the_same_verdict_10_of_10_with_nothing_leaving(frozen, tmp_path):
    entry = frozen["entry"]
    options = ReplayOptions(env=frozen["env"], out=tmp_path / "out", parallel=3)
    with PortWatch(frozen["ports"]) as watch, Replayer(options, [entry]) as replayer:
        results = replayer.replay_all([entry], demo_agent("naive"), repeat=10)
    assert watch.sockets, "could not watch the stopped servers' ports"
    assert watch.accepted == 0  # no connection reached where the shop and the model were
    assert [r.blocked for r in results] == [[]] * 10  # and the proxy never even tried one
    assert [(r.status, sorted(r.failed), len(r.diverged)) for r in results] == [("fail", ["claimed_success", "effects",
                                                                                          "idempotency"], 0)] * 10
    assert all(r.meets_expectation for r in results)
    assert all(not r.unserved and {s["how"] for s in r.served} == {"exact"} for r in results)
    assert {r.verdict["checks"][0]["name"] for r in results} and all(
        check(r.verdict, "end_state")["passed"] is None for r in results)


def test_careful_agent_passes_against_the_naive_agents_frozen_failure(frozen, tmp_path):
    entry = frozen["entry"]
    with PortWatch(frozen["ports"]) as watch, \
            Replayer(ReplayOptions(env=frozen["env"], out=tmp_path / "out"), [entry]) as replayer:
        result = replayer.replay(entry, demo_agent("careful"))
    assert watch.accepted == 0 and not result.blocked and not result.diverged
    assert result.status == "pass", result.verdict["failed"]
    assert result.record["output"]["answer"] and not result.record["output"]["escalate"]
    # It re-read the order before refunding: served again from the recording (a read may repeat) ...
    assert "repeat" in {s["how"] for s in result.served}
    # ... met the same lost response, and retried under the same idempotency key: one refund.
    assert result.verdict["faults"] == [{"seq": 5, "rule": "write_lost", "type": "response_lost", "delivered": True}]
    assert not result.meets_expectation and "no longer reproduces" in result.explain()


def test_replay_takes_an_agent_command_that_holds_its_own_double_dash(frozen, tmp_path):
    """`faultproxy replay STORE -- python agent.py -- server ...`: everything after the first `--`
    is the agent's, verbatim, as `faultproxy run` takes it (an MCP client given its server command)."""
    report = tmp_path / "replay.json"
    # The naive agent behind a launcher that insists on getting the `--` and what follows whole.
    launcher = ("import runpy, sys; assert sys.argv[1:] == ['--', 'server', '--port', '1'], sys.argv; "
                f"sys.argv[1:] = []; sys.path.insert(0, {str(EXAMPLES)!r}); "
                f"runpy.run_path({str(EXAMPLES / 'naive_agent.py')!r}, run_name='__main__')")
    command = [sys.executable, "-c", launcher, "--", "server", "--port", "1"]
    status = faultproxy_main(["replay", str(frozen["frozen"][0].path), "--env", "OPENAI_API_KEY=replay-needs-no-key",
                              "--out", str(tmp_path / "out"), "--json", str(report), "--", *command])
    assert status == 0  # the entry failed again, as it expects
    assert report.exists()
