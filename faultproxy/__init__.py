"""faultproxy: run an AI agent behind a chaos proxy and judge what it does when the world is messy.

The public Python API; the `faultproxy` command does the same from a shell.

    scenario = faultproxy.load_scenario("rate_limit")
    tasks = faultproxy.load_tasks("tasks.yaml")
    faultproxy.run(faultproxy.RunOptions(scenario, tasks, ["python", "agent.py"], Path("runs/x"), k=8))
    report = faultproxy.build_report(Path("runs/x"))

The names load on first use (PEP 562), so `import faultproxy.formats` or `faultproxy report` does not
pay for mitmproxy, and the layers below the proxy import where mitmproxy cannot.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from faultproxy.evaluator.aggregate import build_report
    from faultproxy.evaluator.gate import evaluate_gate
    from faultproxy.formats import __version__
    from faultproxy.formats.errors import UserError
    from faultproxy.proxy.server import ProxyServer
    from faultproxy.replay_store.freeze import freeze
    from faultproxy.replay_store.replay_proxy import ReplayOptions, ReplayResult
    from faultproxy.runner import (Episode, FunctionRunResult, RunOptions, RunResult, replay, replay_function, run,
                                   run_function, sweep)
    from faultproxy.scenarios import Scenario, load_scenario
    from faultproxy.tasks.tasks_file import load_tasks, task_set_from_json
    from faultproxy.tasks.task_model import TaskSet

# Each public name and the module that defines it.
_HOMES = {
    "Episode": "faultproxy.runner",
    "FunctionRunResult": "faultproxy.runner",
    "ProxyServer": "faultproxy.proxy.server",
    "ReplayOptions": "faultproxy.replay_store.replay_proxy",
    "ReplayResult": "faultproxy.replay_store.replay_proxy",
    "RunOptions": "faultproxy.runner",
    "RunResult": "faultproxy.runner",
    "Scenario": "faultproxy.scenarios",
    "TaskSet": "faultproxy.tasks.task_model",
    "UserError": "faultproxy.formats.errors",
    "__version__": "faultproxy.formats",
    "build_report": "faultproxy.evaluator.aggregate",
    "evaluate_gate": "faultproxy.evaluator.gate",
    "freeze": "faultproxy.replay_store.freeze",
    "load_scenario": "faultproxy.scenarios",
    "load_tasks": "faultproxy.tasks.tasks_file",
    "replay": "faultproxy.runner",
    "replay_function": "faultproxy.runner",
    "run": "faultproxy.runner",
    "run_function": "faultproxy.runner",
    "sweep": "faultproxy.runner",
    "task_set_from_json": "faultproxy.tasks.tasks_file",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module 'faultproxy' has no attribute {name!r}")
    value = getattr(importlib.import_module(home), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
