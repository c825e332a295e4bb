"""The runner: scenario x tasks x variants x grid -> episodes, each an agent behind the proxy.

This front door names what the layers above it (the command line, the public API, the pytest
plugins) and users (ProcessCluster, a local Dask cluster) may import; its modules are its own
(pyproject.toml's protected contract). Each name is imported from its module on first use
(evaluator/front_door.py), so `from faultproxy.runner import GridPoint` loads the plan, not the run
loop and the proxy behind it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from faultproxy.evaluator.front_door import front_door

if TYPE_CHECKING:
    from faultproxy.runner.chat import CHAT_HELP, chat_mode
    from faultproxy.runner.cluster import ProcessCluster
    from faultproxy.runner.inprocess import Episode, FunctionRunResult, run_function
    from faultproxy.runner.plan import GridPoint
    from faultproxy.runner.replay_agents import Replayer, replay, replay_function
    from faultproxy.runner.rewrites import MODEL_TEMPLATE
    from faultproxy.runner.run_loop import resume_command, run
    from faultproxy.runner.run_options import RunOptions, RunResult, parse_pairs, reverse_variables
    from faultproxy.runner.secrets import run_redactor
    from faultproxy.runner.sequential_runs import run_until_decided, sequential_options
    from faultproxy.runner.sweep_runs import plan_grid, rule_params, sweep
    from faultproxy.runner.variants import load_variant_function

__all__, __getattr__, __dir__ = front_door(__name__, __file__)
