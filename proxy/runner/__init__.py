"""The runner: scenario x tasks x variants x grid -> episodes, each an agent behind the proxy."""

from proxy.runner.inprocess import Episode, FunctionRunResult, run_function
from proxy.runner.tasks import load_tasks, task_set_from_json

__all__ = ["Episode", "FunctionRunResult", "load_tasks", "run_function", "task_set_from_json"]
