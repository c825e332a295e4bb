"""Running the demo's agents (examples/) as faultproxy does, against the demo world in a thread, and
reading what they did: the judged episodes, their failures, their traces and the shop's own log."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.world import World, world_in_thread
from faultproxy import RunOptions, run
from faultproxy.evaluator.checks import committed_effects
from faultproxy.evaluator.traces import TracedExchange, parse_trace
from faultproxy.formats.rundir import read_run
from faultproxy.formats.trace import read_trace
from faultproxy.runner.plan import GridPoint
from faultproxy.scenarios import Scenario, load_scenario
from faultproxy.tasks.task_model import EndpointPattern
from faultproxy.tasks.tasks_file import load_tasks
from tests.support.layout import EXAMPLES

TASKS = load_tasks(EXAMPLES / "tasks.yaml")
REFUND_TASK = "refund_order_1001"  # the demo task whose refund the lost-response faults aim at
PARALLEL = (os.cpu_count() or 2) + 1  # agents are CPU-bound (mostly importing openai): more only thrashes

# The lost-refund scenario with its rules' probability at zero: the proxy records, injects nothing.
NO_FAULTS = load_scenario("response_lost", {"lambda": 0.0})
Record = dict[str, Any]  # one judged episode line of episodes.jsonl


@contextmanager
def world_for_agents(monkeypatch: pytest.MonkeyPatch, **options: Any) -> Iterator[World]:
    """The world in a thread (run() drives its own event loop), its addresses in the environment
    the runner hands each agent."""
    with world_in_thread(**options) as world:
        for name, value in world.env().items():
            if name != "SHOP_URL":  # the tasks file gives each episode its own tenant
                monkeypatch.setenv(name, value)
        yield world


def demo_agent(agent: str, *flags: str) -> list[str]:
    """The command line of examples/<agent>_agent.py."""
    return [sys.executable, str(EXAMPLES / f"{agent}_agent.py"), *flags]


def run_agent(out: Path, agent: str, task_ids: Iterable[str], *flags: str, scenario: Scenario = NO_FAULTS,
              k: int = 1, model: str | None = None) -> list[Record]:
    """Run examples/<agent>_agent.py on the tasks, k trials each; the judged episodes, by key."""
    result = run(RunOptions(scenario=scenario, tasks=TASKS.only(task_ids), out=out, k=k,
                            grid=[GridPoint(model=model)], parallel=PARALLEL, show_progress=False,
                            command=demo_agent(agent, *flags)))
    assert result.complete, result.errors  # the harness itself failed on some episode
    return sorted(read_run(out).episodes, key=lambda record: record["key"])


def failures(episodes: list[Record]) -> dict[str, Any]:
    """Each episode that did not pass: its failed checks, or why it is incomplete and the agent's last words."""
    return {r["key"]: r["verdict"]["failed"] or [r["cause"], r["log_tail"][-500:]]
            for r in episodes if r["verdict"]["status"] != "pass"}


def trace_of(out: Path, record: Record) -> list[TracedExchange]:
    return parse_trace(read_trace(out / record["trace"]))


def committed(out: Path, record: Record, endpoint: str) -> int:
    """Writes to `endpoint` ("METHOD GLOB") the shop committed, one per intent, as the evaluator reads the trace."""
    pattern = EndpointPattern.parse(endpoint)
    return sum(pattern.matches(ex.method, ex.host, ex.path) for ex in committed_effects(trace_of(out, record)))


def shop_log(world: World, tenant: str) -> list[dict]:
    """The writes the shop committed for one tenant, as the shop itself logged them."""
    with httpx.Client(trust_env=False) as http:  # directly, never through a proxy the environment names
        return http.get(world.tenant_url(tenant) + "/_log").json()["effects"]
