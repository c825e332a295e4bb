"""faultproxy: run an AI agent behind a chaos proxy and judge what it does when the world is messy.

The public Python API; the `faultproxy` command does the same from a shell.

    scenario = faultproxy.load_scenario("rate_limit")
    tasks = faultproxy.load_tasks("tasks.yaml")
    faultproxy.run(faultproxy.RunOptions(scenario, tasks, ["python", "agent.py"], Path("runs/x"), k=8))
    report = faultproxy.build_report(Path("runs/x"))
"""

from faultproxy.evaluator.gate import evaluate_gate
from faultproxy.evaluator.report import build_report
from faultproxy.formats import __version__
from faultproxy.formats.errors import UserError
from faultproxy.proxy.server import ProxyServer
from faultproxy.replay_store.freeze import freeze
from faultproxy.replay_store.replay import ReplayOptions, ReplayResult
from faultproxy.runner.inprocess import Episode, FunctionRunResult, run_function
from faultproxy.runner.options import RunOptions, RunResult
from faultproxy.runner.replay import replay, replay_function
from faultproxy.runner.run import run
from faultproxy.runner.sweep import sweep
from faultproxy.scenarios import Scenario, load_scenario
from faultproxy.tasks.loader import load_tasks, task_set_from_json
from faultproxy.tasks.model import TaskSet

__all__ = [
    "Episode",
    "FunctionRunResult",
    "ProxyServer",
    "ReplayOptions",
    "ReplayResult",
    "RunOptions",
    "RunResult",
    "Scenario",
    "TaskSet",
    "UserError",
    "__version__",
    "build_report",
    "evaluate_gate",
    "freeze",
    "load_scenario",
    "load_tasks",
    "replay",
    "replay_function",
    "run",
    "run_function",
    "sweep",
    "task_set_from_json",
]
