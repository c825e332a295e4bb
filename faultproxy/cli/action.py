"""`faultproxy action`: the step of the GitHub Action (action.yml at the repository root); its
registration. The action's step runs `faultproxy action` with its inputs in INPUT_* variables (a
composite action passes them through the step's `env:`), as a runner sets GITHUB_OUTPUT,
GITHUB_STEP_SUMMARY and RUNNER_TEMP; cli/action_step.py does the work, loaded only when it runs.
cli/entry.py starts it without loading the proxy (a replay it runs loads it then).
"""

from __future__ import annotations

from typing import Any


def register(commands: Any) -> None:
    action = commands.add_parser(
        "action", help="The GitHub Action's step: run the command its INPUT_* variables name, write the summary.",
        description="Reads INPUT_COMMAND (replay | run | gate), INPUT_STORE, INPUT_AGENT, INPUT_SCENARIO, "
                    "INPUT_TASKS, INPUT_K, INPUT_BASELINE, INPUT_UNTIL_DECIDED and INPUT_RUN as action.yml passes "
                    "them; appends the Markdown summary to $GITHUB_STEP_SUMMARY and sets `verdict` and `report` "
                    "in $GITHUB_OUTPUT; exits with the command's status.")
    action.set_defaults(handler="faultproxy.cli.action_step:cmd_action")
