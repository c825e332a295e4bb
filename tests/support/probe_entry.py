"""`entry_dir` (registered by tests/conftest.py): a frozen episode of the probe agent, for tests of the
replay store that read or damage one."""

from __future__ import annotations

import json

import pytest

from faultproxy import RunOptions, run
from faultproxy.replay_store import har
from faultproxy.replay_store.freeze import freeze
from faultproxy.scenarios import load_scenario
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.agent_commands import PROBE_AGENT
from tests.support.upstream import ServerThread, Upstream


@pytest.fixture(scope="module")
def entry_dir(tmp_path_factory):
    """A frozen probe-agent episode: three exchanges (two reads and a refund)."""
    folder = tmp_path_factory.mktemp("har-errors")
    (folder / "tasks.jsonl").write_text(json.dumps({"id": "t", "prompt": "ok"}) + "\n")
    with ServerThread(Upstream().app()) as server, pytest.MonkeyPatch.context() as mp:
        mp.setenv("PROBE_UPSTREAM", server.url)
        run(RunOptions(scenario=load_scenario("rate_limit", {"lambda": 0.0}), tasks=load_tasks(folder / "tasks.jsonl"),
                       command=PROBE_AGENT, out=folder / "run", show_progress=False))
    [frozen] = freeze(folder / "run", folder / "store")
    assert len(har.read_entry(frozen.path).exchanges) == 3
    return frozen.path
