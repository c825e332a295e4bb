"""What a run is asked to do (RunOptions) and how it went (RunResult)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from faultproxy.formats.errors import UsageError
from faultproxy.runner.chat import check_user_params
from faultproxy.runner.plan import GridPoint
from faultproxy.runner.rewrites import check_rewrites
from faultproxy.scenarios import Scenario
from faultproxy.tasks.task_model import TaskSet


@dataclass
class RunOptions:
    """What `run(options)` runs: every task of `tasks`, `k` trials each, at every grid point, with
    `command` as the agent, behind a proxy that follows `scenario`; logged to the run directory `out`.

    A plain run has one grid point (optionally with a model); a sweep has one per combination of
    param levels and models (runner.sweep_runs). `parallel` episodes run at once through one proxy;
    `budget_s` caps each episode's wall time over the task's own budget. `upstreams` are
    reverse-mode upstreams (name -> URL); `base_url_env` names variables (OPENAI_BASE_URL, ...)
    the agent gets set to an upstream's reverse URL (variable -> name); `no_proxy` hosts the agent reaches directly,
    `side_channels` requests the tasks do not depend on (evaluator.judging.side_channels), `variant_function` your own honest rewording of a task's prompt, `secret_env` variables whose
    values are redacted from everything written. `rewrites` (field -> template, runner.rewrites)
    are fields the proxy sets in every model API request, resolved per grid point; a template that
    cannot be resolved at some grid point raises UsageError here, before anything runs.
    """

    scenario: Scenario
    tasks: TaskSet
    command: list[str]
    out: Path
    k: int = 1
    grid: list[GridPoint] = field(default_factory=lambda: [GridPoint()])
    parallel: int = 1
    budget_s: float | None = None
    upstreams: dict[str, str] = field(default_factory=dict)
    base_url_env: dict[str, str] = field(default_factory=dict)  # VAR -> upstream name, for --reverse VAR
    no_proxy: list[str] = field(default_factory=list)
    side_channels: list[str] = field(default_factory=list)  # --side-channel patterns (tasks.side_channel)
    variant_function: Any = None
    secret_env: list[str] = field(default_factory=list)
    insecure_upstream: bool = False
    upstream_ca: Path | None = None
    rewrites: dict[str, str] = field(default_factory=dict)  # e.g. {"reasoning_effort": "{effort}"}
    show_progress: bool = True
    executor: str = "local"  # "local" (a pool of agent processes here) or "dask" (see runner/executors.py)
    scheduler: str | None = None  # the Dask scheduler's address, tcp://HOST:PORT
    sequential: dict[str, Any] | None = None  # a sequential gate's design, sealed in plan.json (runner.sequential_runs)
    chat: str | None = None  # how the agent hears its task's user (runner.chat.CHAT_MODES); None: no conversation

    def __post_init__(self) -> None:
        check_rewrites(self.rewrites, self.grid)
        check_user_params(self.tasks, self.scenario.params, self.scenario.name)

    def faults_possible(self) -> dict[str, bool]:
        """Per grid label: could some rule fire there (a firing probability above zero)? A run where
        one could and none reached the agent tested nothing, and its report says so."""
        return {point.label: bool(self._rules_firing(point)) for point in self.grid}

    def rules_possible(self) -> list[str]:
        """The names of the rules that could fire at some grid point: one that matched nothing in
        the whole run is named in its report (evaluator.aggregate.unmatched)."""
        firing = {name for point in self.grid for name in self._rules_firing(point)}
        return [rule.name for rule in self.scenario.rules if rule.name in firing]

    def _rules_firing(self, point: GridPoint) -> list[str]:
        params = {**self.scenario.params, **dict(point.params)}
        chances = {rule.name: params.get(p) if isinstance(p := rule.when.probability, str) else p
                   for rule in self.scenario.rules}
        return [name for name, chance in chances.items() if isinstance(chance, (int, float)) and chance > 0]


@dataclass
class RunResult:
    """How a run went: `planned` episodes, `logged` in the run directory (by this call or an
    earlier one it resumed), `ran` by this call; `interrupted` when stopped early (rerun to
    resume); `counts` of verdicts (pass, fail, incomplete) over everything logged; `errors` for
    episodes the harness could not run, which are not logged and run again on resume."""

    planned: int
    logged: int
    ran: int
    interrupted: bool
    counts: Counter = field(default_factory=Counter)
    errors: list[str] = field(default_factory=list)  # episodes the harness could not run (not logged)

    @property
    def complete(self) -> bool:
        """Every planned episode is logged."""
        return self.logged == self.planned


def task_secret_names(tasks: TaskSet) -> list[str]:
    return sorted({name for task in tasks.tasks for name in task.secrets})


# Where a provider SDK goes when its base-URL variable is unset: --reverse VAR forwards there.
PROVIDER_BASE_URLS = {"OPENAI_BASE_URL": "https://api.openai.com/v1", "ANTHROPIC_BASE_URL": "https://api.anthropic.com"}


def reverse_variables(variables: Sequence[str], environ: Mapping[str, str],
                      upstreams: Mapping[str, str]) -> tuple[dict[str, str], dict[str, str]]:
    """--reverse VAR ...: (upstreams with one added per VAR, {VAR: upstream name}). VAR's upstream is
    --upstream NAME=URL when given (NAME: VAR without _BASE_URL, in lower case), else VAR's value
    here, else the provider's default URL; UsageError when there is none."""
    upstreams, names = dict(upstreams), {}
    for variable in variables:
        name = variable.lower().removesuffix("_base_url") or variable.lower()
        url = upstreams.get(name) or environ.get(variable) or PROVIDER_BASE_URLS.get(variable)
        if not url:
            raise UsageError(f"--reverse {variable}: {variable} is not set here, so where it leads is unknown; "
                             f"set it, or give --upstream {name}=URL")
        upstreams[name], names[variable] = url, name
    return upstreams, names


def parse_pairs(specs: Sequence[str], what: str, once: bool = False) -> dict[str, str]:
    """NAME=VALUE arguments of option `what` -> {NAME: VALUE}; with `once`, a NAME given twice is
    refused rather than the last one winning."""
    pairs = {}
    for spec in specs:
        name, sep, value = spec.partition("=")
        if not sep or not name:
            raise UsageError(f"{what} {spec!r} is not NAME=VALUE")
        if once and name in pairs:
            raise UsageError(f"{what} {name} is given twice")
        pairs[name] = value
    return pairs
